#!/usr/bin/env bash
# The hot paths of issue 35, each row against its anchor, in one sitting:
#
#   pp     upstream fi_rdm_pingpong, 8 B, one host: oxmr vs libfabric's shm
#   mpi    Open MPI 4.1 ping-pong (bench/mpi_pp.c), 8 B, one host: oxmr
#          (pml cm, mtl ofi) vs Open MPI's own ob1 + btl vader; beside it
#          oxmr's tagged ping-pong (upstream fi_rdm_tagged_pingpong, what
#          the MTL asks of it): the difference is what Open MPI's cm PML
#          and ofi MTL add (the MTL does not take libfabric's shm, whose
#          info lacks FI_REMOTE_COMM, so it cannot be run over shm here)
#   self   bench/self_pp.c: an 8 B ping-pong between two endpoints of one
#          thread, so nothing crosses between cores: what a round trip
#          costs in the provider's software alone, oxmr vs shm; and the
#          same with each receive posted after its message arrived
#          (LATE=1: every message unexpected)
#   hit    a cached fi_mr_reg + fi_close (bench/mr_hit.c), 4 KiB and 2 MiB:
#          oxmr vs shm (which records the range only)
#   peers  8 B round trip over TCP with 1000 connected quiet peers / with
#          none (bench/conn_cost.c peers), and memory per peer and per
#          endpoint: oxmr vs libfabric's tcp (at 100 peers: its endpoints
#          take ~70 MB each)
#   rma    fi_rma_bw -o write over TCP, 1 and 16 MiB, loopback and a veth
#          pair between two network namespaces: oxmr vs libfabric's tcp
#
# With pp or mpi, each repetition also bounces one cache line between
# cores 0 and 1 (bench/line_pp.c), the cores the ping-pongs run on: the
# hardware's floor under them (a one-way latency is at least half of that
# round trip), printed below the table. This VM's vCPU placement moves it
# between sittings, and the ping-pong rows move with it.
#
# Medians of REPS (default 5) alternating runs: each repetition runs every
# contender of a row once, so a slow spell of the machine hits them all,
# in an order rotated one place a repetition (a contender's place in the
# order can cost it: use a multiple of the row's contenders, 2 or 3, for
# REPS to give each place to each equally).
# Latency ratios are oxmr / anchor (lower is better), bandwidth ratios
# oxmr / anchor (higher is better). Given a second build, each row shows
# both builds and B / A, measured in the same alternation: the before and
# after of a change.
#
#   bash ci/build.sh && bash bench/hotpaths.sh build [other-build-dir]
#
# ROWS="pp mpi hit peers rma" (default all) picks rows. Needs upstream
# fabtests (OXMR_UPSTREAM_FABTESTS, default /opt/ft117/bin: built locally
# from libfabric's v1.17.0 tag, never part of this repository) for pp and
# rma, Open MPI for mpi, root for rma's namespaces. Run it on a quiet
# machine (no build, no other test); it prints numbers, asserts nothing.
#
# STAT=best tabulates each contender's best repetition (the lowest
# latency or cost, the highest bandwidth) instead of the median: on a VM
# whose level moves within a sitting (bench/line_pp.c's figure jumps
# 2-4x), the medians mix levels and the best runs are the comparable
# ones. FROM=<file> tabulates a RAW file of an earlier sitting instead
# of measuring (the build arguments then only say whether there was a B:
# pass two for a two-build file).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[ $# -ge 1 ] && [ -f "$1/liboxmr-fi.so" ] || {
	echo "usage: $0 <dir-with-liboxmr-fi.so> [<second dir>]" >&2
	exit 2
}
A="$(cd "$1" && pwd)"
B=""
[ $# -ge 2 ] && { [ -f "$2/liboxmr-fi.so" ] || { echo "$0: no $2/liboxmr-fi.so" >&2; exit 2; }; B="$(cd "$2" && pwd)"; }
reps=${REPS:-5}
rows=${ROWS:-pp mpi self hit peers rma}
ft=${OXMR_UPSTREAM_FABTESTS:-/opt/ft117/bin}
tmp="$(mktemp -d)"
source "$here/../fabtests/netns.sh"
cleanup() {
	netns_down 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
has() { [[ " $rows " == *" $1 "* ]]; }
builds=(A)
[ -n "$B" ] && builds+=(B)
dir_of() { [ "$1" = A ] && echo "$A" || echo "$B"; }

# The table of $tmp/all: medians (or STAT=best), ratios, the line probe.
table() {
python3 - "$tmp/all" "${B:+B}" "${STAT:-median}" <<'EOF'
import sys, statistics
vals = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 3:
        try:
            vals.setdefault((f[0], f[1]), []).append(float(f[2]))
        except ValueError:
            pass
two = len(sys.argv) > 2 and sys.argv[2] == "B"
best = len(sys.argv) > 3 and sys.argv[3] == "best"
def med(k, c):
    v = vals.get((k, c))
    if not v:
        return None
    if best:
        # (Bandwidth rows: the highest; the rest: the lowest.)
        return max(v) if k.startswith("rma-") else min(v)
    return statistics.median(v)
def fmt(x, unit=""):
    return "-" if x is None else (f"{x:.3f}{unit}" if x < 10 else f"{x:.1f}{unit}")
def ratio(a, b):
    return "-" if a is None or not b else f"{a / b:.2f}x"
rows = [
    ("pp", "fi_rdm_pingpong 8 B, one host (us)", "shm", "<= 0.8x"),
    ("mpi", "MPI ping-pong 8 B, one host (us)", "vader", "<= 1.0x"),
    ("tagged", "fi_rdm_tagged_pingpong 8 B, one host (us): oxmr under the MTL", "vader", "-"),
    ("self", "8 B round trip in one thread, software alone (ns)", "shm", "-"),
    ("self-late", "the same, each receive posted after its message arrived (unexpected) (ns)", "shm", "-"),
    ("hit4k", "cached fi_mr_reg + fi_close, 4 KiB (ns)", "shm", "<= 1.0x"),
    ("hit2m", "cached fi_mr_reg + fi_close, 2 MiB (ns)", "shm", "<= 1.0x"),
    ("peers-ratio", "TCP 8 B round trip, K quiet peers / none", "tcp", "<= 1.1 (oxmr K=1000, tcp K=100)"),
    ("peers-rt0", "TCP 8 B round trip, no other peer (us)", "tcp", "-"),
    ("peers-mem", "bytes per connected peer, target side", "tcp", "-"),
    ("peers-ep", "bytes per endpoint (peers' process)", "tcp", "-"),
]
for where in ("lo", "veth"):
    for s, n in ((1048576, "1 MiB"), (16777216, "16 MiB")):
        rows.append((f"rma-{where}-{s}", f"fi_rma_bw -o write, TCP {where}, {n} (MB/s)", "tcp", ">= 1.0x"))
vals.setdefault(("tagged", "vader"), vals.get(("mpi", "vader"), []))
hdr = ["row", "oxmr A"] + (["oxmr B", "B/A"] if two else []) + ["anchor", "A/anchor"] + (["B/anchor"] if two else []) + ["goal"]
print("| " + " | ".join(hdr) + " |")
print("|" + "---|" * len(hdr))
for key, name, anchor, goal in rows:
    a, b, x = med(key, "oxmr-A"), med(key, "oxmr-B"), med(key, anchor)
    if a is None and x is None:
        continue
    cells = [name, fmt(a)] + ([fmt(b), ratio(b, a)] if two else []) + [f"{anchor} {fmt(x)}", ratio(a, x)] + ([ratio(b, x)] if two else []) + [goal]
    print("| " + " | ".join(cells) + " |")
m, t = med("mpi", "oxmr-A"), med("tagged", "oxmr-A")
if m is not None and t is not None:
    print(f"\nOpen MPI's cm PML + ofi MTL add {m - t:.3f} us to oxmr's own tagged ping-pong (build A, same runs).")
h = vals.get(("line", "hw"))
if h:
    print(f"\nA cache line's round trip between cores 0 and 1 (bench/line_pp.c, the hardware alone): median {statistics.median(h):.1f} ns, {min(h):.1f}-{max(h):.1f} over the repetitions; a one-way latency above cannot be below half of it.")
print(f"\n{'best' if best else 'medians'} of {max((len(v) for v in vals.values()), default=0)} alternating runs")
EOF
}

if [ -n "${FROM:-}" ]; then
	cp "$FROM" "$tmp/all" || exit 1
	table
	exit
fi

cflags=$(pkg-config --cflags --libs libfabric)
cc -O2 -o "$tmp/mr_hit" "$here/mr_hit.c" $cflags
cc -O2 -o "$tmp/conn_cost" "$here/conn_cost.c" $cflags
cc -O2 -o "$tmp/self_pp" "$here/self_pp.c" $cflags
cc -O2 -pthread -o "$tmp/line_pp" "$here/line_pp.c"
if has mpi; then
	mpicc -std=gnu11 -O2 -o "$tmp/mpi_pp" "$here/mpi_pp.c" || { echo "$0: no mpicc: mpi row skipped" >&2; rows=${rows/mpi/}; }
fi
if has pp || has rma; then
	[ -x "$ft/fi_rdm_pingpong" ] && [ -x "$ft/fi_rma_bw" ] || {
		echo "$0: no upstream fabtests in $ft (set OXMR_UPSTREAM_FABTESTS): pp and rma rows skipped" >&2
		rows=${rows/pp/}
		rows=${rows/rma/}
	}
fi
if has rma; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "$0: rma needs root (namespaces): skipped" >&2
		rows=${rows/rma/}
	else
		netns_up bhot
	fi
fi

# Results: "<row-key> <contender> <value>" lines in $tmp/all.
: >"$tmp/all"
put() { echo "$1 $2 $3" >>"$tmp/all"; }
# 1 / x to four decimals (empty for an empty or zero x: a failed run).
inv() { awk -v x="$1" 'BEGIN { if (x + 0 > 0) printf "%.4f", 1 / x }'; }

port=46000
# ft_pair <where> <prov-dir or ""> <prov> <both> <col> <prog> <args...>: the
# figure of one upstream fabtests run (server pinned to core 0, client to
# core 1); <both>=1: the lower of the two sides' figures (bandwidth).
ft_pair() {
	local where=$1 dir=$2 prov=$3 both=$4 col=$5 prog=$6
	shift 6
	port=$((port + 1))
	local env=(env) srv cli sa=127.0.0.1 ca=127.0.0.1
	[ -n "$dir" ] && env+=(FI_PROVIDER_PATH="$dir")
	[ "$prov" = oxmr ] && [ "$where" != host ] && env+=(FI_OXMR_WIRE=tcp)
	srv=("${env[@]}") cli=("${env[@]}")
	if [ "$where" = veth ]; then
		srv=(ip netns exec "$NETNS_A" "${env[@]}") cli=(ip netns exec "$NETNS_B" "${env[@]}") sa=198.18.0.1 ca=198.18.0.2
	fi
	timeout 120 "${srv[@]}" taskset -c 0 "$ft/$prog" -p "$prov" -B "$port" -s "$sa" "$@" >"$tmp/srv" 2>&1 &
	local s=$!
	sleep 0.3
	timeout 120 "${cli[@]}" taskset -c 1 "$ft/$prog" -p "$prov" -B "$((port + 500))" -P "$port" -s "$ca" "$@" "$sa" >"$tmp/cli" 2>&1
	wait $s
	local last='$1 ~ /^[0-9]/ {l=$c} END {print l}'
	if [ "$both" = 1 ]; then
		printf '%s\n%s\n' "$(awk -v c="$col" "$last" "$tmp/cli")" "$(awk -v c="$col" "$last" "$tmp/srv")" | sort -g | head -1
	else
		awk -v c="$col" "$last" "$tmp/cli"
	fi
}

mpi_lat() {
	local out
	out=$(timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe --bind-to core -np 2 "$@" "$tmp/mpi_pp" 2>/dev/null)
	awk '$1 == "lat" && $2 == 8 {print $3}' <<<"$out"
}

# The contenders of a row in round $r's order: rotated one place a round,
# so that each runs first, second, ... equally often (the place itself
# costs: in one sitting the build run second read ~7% lower in the
# loopback RMA cell whichever build it was).
rot() {
	local k=$1
	shift
	local n=$# i
	local a=("$@")
	for ((i = 0; i < n; i++)); do echo "${a[$(((i + k) % n))]}"; done
}

for r in $(seq "$reps"); do
	echo "round $r of $reps" >&2
	if has pp || has mpi; then
		put line hw "$("$tmp/line_pp" 200000 0 1 | awk '{print $(NF-1)}')"
	fi
	if has pp; then
		# (From the Mxfers/sec column, 1 / it: usec/xfer is printed with two
		# decimals, 0.01 us steps, coarser than the differences measured.)
		for b in $(rot "$r" "${builds[@]}" shm); do
			if [ "$b" = shm ]; then
				put pp shm "$(inv "$(ft_pair host "" shm 0 7 fi_rdm_pingpong -S 8 -I 100000)")"
			else
				put pp "oxmr-$b" "$(inv "$(ft_pair host "$(dir_of "$b")" oxmr 0 7 fi_rdm_pingpong -S 8 -I 100000)")"
			fi
		done
	fi
	if has mpi; then
		for b in $(rot "$r" "${builds[@]}" vader); do
			if [ "$b" = vader ]; then
				put mpi vader "$(mpi_lat --mca pml ob1 --mca btl self,vader)"
			else
				put mpi "oxmr-$b" "$(mpi_lat -x FI_PROVIDER_PATH="$(dir_of "$b")" --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include oxmr)"
			fi
		done
		if [ -x "$ft/fi_rdm_tagged_pingpong" ]; then
			for b in $(rot "$r" "${builds[@]}"); do
				put tagged "oxmr-$b" "$(ft_pair host "$(dir_of "$b")" oxmr 0 6 fi_rdm_tagged_pingpong -S 8 -I 100000)"
			done
		fi
	fi
	if has self; then
		for b in $(rot "$r" "${builds[@]}" shm); do
			if [ "$b" = shm ]; then out=$(PROV=shm taskset -c 1 "$tmp/self_pp" 200000); c=shm; else out=$(FI_PROVIDER_PATH="$(dir_of "$b")" taskset -c 1 "$tmp/self_pp" 200000); c="oxmr-$b"; fi
			put self "$c" "$(awk '{print $2}' <<<"$out")"
			if [ "$b" = shm ]; then out=$(LATE=1 PROV=shm taskset -c 1 "$tmp/self_pp" 200000); else out=$(LATE=1 FI_PROVIDER_PATH="$(dir_of "$b")" taskset -c 1 "$tmp/self_pp" 200000); fi
			put self-late "$c" "$(awk '{print $2}' <<<"$out")"
		done
	fi
	if has hit; then
		for b in $(rot "$r" "${builds[@]}" shm); do
			if [ "$b" = shm ]; then out=$("$tmp/mr_hit" shm 200000); else out=$(FI_PROVIDER_PATH="$(dir_of "$b")" "$tmp/mr_hit" oxmr 200000); fi
			c=$([ "$b" = shm ] && echo shm || echo "oxmr-$b")
			put hit4k "$c" "$(awk '$2 == 4096 {print $4}' <<<"$out")"
			put hit2m "$c" "$(awk '$2 == 2097152 {print $4}' <<<"$out")"
		done
	fi
	if has peers; then
		for b in $(rot "$r" "${builds[@]}" tcp); do
			if [ "$b" = tcp ]; then
				k=100 c=tcp env=(env PROV=tcp)
			else
				k=1000 c="oxmr-$b" env=(env FI_PROVIDER_PATH="$(dir_of "$b")")
			fi
			none=$(timeout 120 "${env[@]}" "$tmp/conn_cost" peers 0 | awk '/round trip/ {print $5}')
			out=$(timeout 300 "${env[@]}" "$tmp/conn_cost" peers "$k")
			many=$(awk '/round trip/ {print $5}' <<<"$out")
			put peers-rt0 "$c" "$none"
			put peers-rtk "$c" "$many"
			put peers-ratio "$c" "$(awk -v a="$many" -v b="$none" 'BEGIN{if(b>0)printf "%.3f", a/b}')"
			put peers-mem "$c" "$(awk '/resident per peer/ {print $3}' <<<"$out")"
			put peers-ep "$c" "$(awk '/resident per peer/ {print $(NF-6)}' <<<"$out")"
		done
	fi
	if has rma; then
		for where in lo veth; do
			for s in 1048576 16777216; do
				it=$((s >= 16777216 ? 64 : 1024))
				for b in $(rot "$r" "${builds[@]}" tcp); do
					if [ "$b" = tcp ]; then d="" p=tcp c=tcp; else d="$(dir_of "$b")" p=oxmr c="oxmr-$b"; fi
					put "rma-$where-$s" "$c" "$(ft_pair "$where" "$d" "$p" 1 5 fi_rma_bw -S "$s" -I "$it" -W 16 -o write)"
				done
			done
		done
	fi
done

# RAW=<file>: keep every repetition's figure ("<row> <contender> <value>").
[ -n "${RAW:-}" ] && cp "$tmp/all" "$RAW"
table
