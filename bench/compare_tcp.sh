#!/usr/bin/env bash
# oxmr's TCP wire against libfabric's tcp provider, in one run, on loopback
# and across a veth pair between two network namespaces (198.18.0.1/24,
# 198.18.0.2/24; created here, deleted on exit):
#
#   latency   fi_rdm_pingpong at 8 B and 4 KiB (usec/xfer; upstream
#             fabtests' RDM pingpong: libfabric-bin's fi_pingpong has no
#             source-address option to place it in a namespace)
#   bandwidth fi_rdm_tagged_bw and fi_rma_bw (-o write) at 64 KiB, 1 MiB
#             and 16 MiB (MB/s), and the CPU seconds (user + sys, both
#             processes) per GiB moved
#   ceiling   bench/tcp_ceiling.c at the same sizes, 1 GiB a run (no
#             warm-up of its own, so longer than fabtests' runs): what one
#             TCP connection carries with blocking send/recv and nothing
#             else, and what one and two polled connections from one
#             process carry, on the same path, pinned alike: about the
#             most a polling provider's bandwidth row can show with one or
#             with two connections per peer; and one polled connection
#             carrying as much both ways at once (duplex), as fi_rma_bw -o
#             write does (both sides write)
#
# oxmr runs with FI_OXMR_WIRE=tcp on loopback (auto would pick shared
# memory there) and with the default (auto: TCP to the other namespace)
# across the veth pair. Each figure is the median of REPS runs (default 3),
# oxmr and tcp alternating. The programs are upstream fabtests'
# (OXMR_UPSTREAM_FABTESTS, their bin/, default /opt/ft117/bin: built
# locally, never part of this repository; the same variable as
# bench/compare_shm.sh, ci/test.sh and fabtests/upstream.sh). Needs root. Server and client are pinned to cores 0 and 1
# (PIN=0: not pinned): two busy-polling processes left to the scheduler on
# a small machine share a core now and then, and a run's figure halves
# (seen here: 1.2 to 3.5 GB/s for one configuration, unpinned).
#
# LANES=N adds oxmr with FI_OXMR_TCP_LANES=N (N connections per peer for
# the data of large transfers, docs/wire-tcp.md "Lanes") to the bandwidth rows,
# in the same rounds, and prints its ratios to tcp and to oxmr's default.
#
# usage: bench/compare_tcp.sh <dir-containing-liboxmr-fi.so>
set -euo pipefail

[ $# -eq 1 ] && [ -f "$1/liboxmr-fi.so" ] || {
	echo "usage: $0 <dir-containing-liboxmr-fi.so>" >&2
	exit 2
}
provdir="$(cd "$1" && pwd)"
ft="${OXMR_UPSTREAM_FABTESTS:-/opt/ft117/bin}"
reps="${REPS:-3}"
lanes="${LANES:-}"
[ "$(id -u)" -eq 0 ] || { echo "$0: needs root (network namespaces)" >&2; exit 2; }
for p in fi_rdm_pingpong fi_rdm_tagged_bw fi_rma_bw; do
	[ -x "$ft/$p" ] || { echo "$0: no $ft/$p (set OXMR_UPSTREAM_FABTESTS to upstream fabtests' bin/)" >&2; exit 2; }
done

tmp="$(mktemp -d)"
ceiling="$tmp/tcp_ceiling"
cc -O2 -o "$ceiling" "$(dirname "${BASH_SOURCE[0]}")/tcp_ceiling.c"
source "$(dirname "${BASH_SOURCE[0]}")/../fabtests/netns.sh"
cleanup() {
	netns_down
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
netns_up btcp
nsa="$NETNS_A"
nsb="$NETNS_B"

# timed <file> <command...>: run it, append "user sys" seconds to <file>.
timed() {
	local f="$1"
	shift
	bash -c 'TIMEFORMAT="%U %S"; { time "$@" >"$0.out" 2>&1; } 2>>"$0"' "$f" "$@"
}

# pair <where> <prov> <program> <args...>: server then client; prints the
# client's last figure line; CPU of both into $tmp/cpu.
port=47000
pair() {
	local where="$1" prov="$2" prog="$3" srv cli sa ca
	shift 3
	port=$((port + 1))
	local env=(env FI_PROVIDER_PATH="$provdir") ps=() pc=()
	if [ "$prov" = oxmr-lanes ]; then
		env+=(FI_OXMR_TCP_LANES="$lanes")
		prov=oxmr
	fi
	if [ "${PIN:-1}" != 0 ] && [ "$(nproc)" -ge 2 ]; then
		ps=(taskset -c 0) pc=(taskset -c 1)
	fi
	[ "$prov" = oxmr ] && [ "$where" = lo ] && env+=(FI_OXMR_WIRE=tcp)
	if [ "$where" = lo ]; then
		srv=("${env[@]}") cli=("${env[@]}") sa=127.0.0.1 ca=127.0.0.1
	else
		srv=(ip netns exec "$nsa" "${env[@]}") cli=(ip netns exec "$nsb" "${env[@]}") sa=198.18.0.1 ca=198.18.0.2
	fi
	: >"$tmp/cpu"
	timed "$tmp/cpu" timeout 120 "${srv[@]}" "${ps[@]}" "$prog" -p "$prov" -B "$port" -s "$sa" "$@" &
	local spid=$!
	sleep 0.3
	timed "$tmp/cpu" timeout 120 "${cli[@]}" "${pc[@]}" "$prog" -p "$prov" -B "$((port + 500))" -P "$port" -s "$ca" "$@" "$sa" || true
	wait "$spid" || true
	# (The client's output: the figure line is the last one with a number first.)
	awk '$1 ~ /^[0-9]/ {l=$0} END {print l}' "$tmp/cpu.out"
}

# ceil <where> <size> <count> <k>: the ceiling's MB/s.
ceil() {
	local where="$1" srv=() cli=() sa=127.0.0.1 ps=() pc=()
	shift
	port=$((port + 1))
	if [ "${PIN:-1}" != 0 ] && [ "$(nproc)" -ge 2 ]; then
		ps=(taskset -c 0) pc=(taskset -c 1)
	fi
	if [ "$where" = veth ]; then
		srv=(ip netns exec "$nsa") cli=(ip netns exec "$nsb") sa=198.18.0.1
	fi
	timeout 120 "${srv[@]}" "${ps[@]}" "$ceiling" recv "$sa" "$port" "$@" &
	local spid=$!
	sleep 0.3
	timeout 120 "${cli[@]}" "${pc[@]}" "$ceiling" send "$sa" "$port" "$@" | awk '{print $4}' || true
	wait "$spid" || true
}

: >"$tmp/all"
for r in $(seq "$reps"); do
	echo "round $r of $reps" >&2
	for where in lo veth; do
		for prov in oxmr tcp ${lanes:+oxmr-lanes}; do
			for s in 8 4096; do
				[ "$prov" = oxmr-lanes ] && continue
				line=$(pair "$where" "$prov" "$ft/fi_rdm_pingpong" -S "$s" -I 5000)
				echo "$where $prov lat $s $(awk '{print $(NF-1)}' <<<"$line")" >>"$tmp/all"
			done
			if [ "$prov" = tcp ]; then
				for s in 65536 1048576 16777216; do
					echo "$where ceiling k1b $s $(ceil "$where" "$s" $(((1 << 30) / s)) 1 block)" >>"$tmp/all"
					echo "$where ceiling k1d $s $(ceil "$where" "$s" $(((1 << 30) / s)) 1 duplex)" >>"$tmp/all"
					for k in 1 2; do
						echo "$where ceiling k$k $s $(ceil "$where" "$s" $(((1 << 30) / s)) "$k")" >>"$tmp/all"
					done
				done
			fi
			for prog in fi_rdm_tagged_bw fi_rma_bw; do
				for s in 65536 1048576 16777216; do
					# (1 GiB a run from 1 MiB up, 256 MiB at 64 KiB: at 320
					# MiB a 16 MiB run lasted ~0.1 s and measured its
					# start, new connections' buffers growing among it.)
					it=$((s >= 16777216 ? 64 : s >= 1048576 ? 1024 : 4000))
					extra=()
					[ "$prog" = fi_rma_bw ] && extra=(-o write)
					line=$(pair "$where" "$prov" "$ft/$prog" -S "$s" -I "$it" -W 16 "${extra[@]}")
					mbs=$(awk '{print $5}' <<<"$line")
					cpu=$(awk '{u += $1; s += $2} END {print u + s}' "$tmp/cpu")
					echo "$where $prov ${prog#fi_} $s $mbs $cpu $((s * it))" >>"$tmp/all"
				done
			done
		done
	done
done

python3 - "$tmp/all" <<'EOF'
import sys, statistics
lat, bw, ceil = {}, {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    try:
        if f[1] == "ceiling":
            ceil.setdefault((f[0], f[2], int(f[3])), []).append(float(f[4]))
        elif f[2] == "lat":
            lat.setdefault((f[0], f[1], int(f[3])), []).append(float(f[4]))
        else:
            # CPU per GiB: both processes' user + sys over the bytes the client sent.
            gib = int(f[6]) / (1 << 30)
            bw.setdefault((f[0], f[1], f[2], int(f[3])), []).append((float(f[4]), float(f[5]) / gib))
    except (IndexError, ValueError):
        print("unparsed:", line.strip(), file=sys.stderr)
def mbs(runs):
    return statistics.median(v[0] for v in runs)
def size(s):
    return f"{s >> 20} MiB" if s >= 1 << 20 else (f"{s >> 10} KiB" if s >= 1024 else f"{s} B")
print("| where | figure | oxmr | tcp | oxmr / tcp |")
print("|---|---|---|---|---|")
for where in ("lo", "veth"):
    for s in (8, 4096):
        a, b = lat.get((where, "oxmr", s)), lat.get((where, "tcp", s))
        if a and b:
            x, y = statistics.median(a), statistics.median(b)
            print(f"| {where} | rdm_pingpong {size(s)} latency | {x:.2f} us | {y:.2f} us | {x / y:.2f}x |")
    for prog in ("rdm_tagged_bw", "rma_bw"):
        for s in (65536, 1 << 20, 16 << 20):
            a, b = bw.get((where, "oxmr", prog, s)), bw.get((where, "tcp", prog, s))
            if a and b:
                x, y = mbs(a), mbs(b)
                cx, cy = statistics.median(v[1] for v in a), statistics.median(v[1] for v in b)
                print(f"| {where} | {prog} {size(s)} | {x:.0f} MB/s, {cx:.2f} CPU-s/GiB | {y:.0f} MB/s, {cy:.2f} CPU-s/GiB | {x / y:.2f}x |")
if any(k[1] == "oxmr-lanes" for k in bw):
    print()
    print("| where | figure | oxmr, lanes | lanes / tcp | lanes / oxmr default |")
    print("|---|---|---|---|---|")
    for where in ("lo", "veth"):
        for prog in ("rdm_tagged_bw", "rma_bw"):
            for s in (65536, 1 << 20, 16 << 20):
                a, b, c = (bw.get((where, p, prog, s)) for p in ("oxmr-lanes", "tcp", "oxmr"))
                if a and b and c:
                    x, y, z = mbs(a), mbs(b), mbs(c)
                    cx = statistics.median(v[1] for v in a)
                    print(f"| {where} | {prog} {size(s)} | {x:.0f} MB/s, {cx:.2f} CPU-s/GiB | {x / y:.2f}x | {x / z:.2f}x |")
print()
print("| where | size | one connection, blocking | one, polled | two, polled | tcp tagged / one polled | oxmr tagged / one polled |")
print("|---|---|---|---|---|---|---|")
for where in ("lo", "veth"):
    for s in (65536, 1 << 20, 16 << 20):
        blk, one, two = (ceil.get((where, k, s)) for k in ("k1b", "k1", "k2"))
        a, b = bw.get((where, "oxmr", "rdm_tagged_bw", s)), bw.get((where, "tcp", "rdm_tagged_bw", s))
        if blk and one and two and a and b:
            cb, c1, c2 = statistics.median(blk), statistics.median(one), statistics.median(two)
            x, y = mbs(a), mbs(b)
            print(f"| {where} | {size(s)} | {cb:.0f} MB/s | {c1:.0f} MB/s | {c2:.0f} MB/s | {y / c1:.2f} | {x / c1:.2f} |")
print()
print("| where | size | one connection, both ways (each way) | tcp rma_bw / that | oxmr rma_bw / that |")
print("|---|---|---|---|---|")
for where in ("lo", "veth"):
    for s in (65536, 1 << 20, 16 << 20):
        d = ceil.get((where, "k1d", s))
        a, b = bw.get((where, "oxmr", "rma_bw", s)), bw.get((where, "tcp", "rma_bw", s))
        if d and a and b:
            cd = statistics.median(d)
            x, y = mbs(a), mbs(b)
            print(f"| {where} | {size(s)} | {cd:.0f} MB/s | {y / cd:.2f} | {x / cd:.2f} |")
EOF
