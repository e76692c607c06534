#!/usr/bin/env bash
# MPI one-sided communication over oxmr against Open MPI's own, in one run:
# fabtests/mpi/onesided.c's timing mode (OXMR_OSC_BENCH=1: rank 0 against
# rank 1 through an MPI_Win_create window, passive target, MPI_Win_lock_all;
# 8 B MPI_Put and MPI_Get latency with a flush after each, 1 MiB MPI_Put
# bandwidth with a flush after every 4, MPI_Fetch_and_op latency) with two
# ranks, in three configurations
#
#   rdma-oxmr   osc rdma over btl ofi over oxmr (fi_write/fi_read/
#               fi_fetch_atomic), pml cm + mtl ofi over oxmr for the rest:
#               needs oxmr with FI_ATOMIC (without it btl ofi finds no
#               provider; the column then says "n/a")
#   pt2pt-oxmr  osc pt2pt over pml cm + mtl ofi over oxmr (one-sided as
#               tagged messages)
#   own         Open MPI's own one-sided over pml ob1: on one host osc rdma
#               over btl vader; across the namespaces osc pt2pt over btl
#               tcp. (Open MPI 4.1.4's osc rdma cannot run over btl tcp:
#               btl tcp has no atomics, and osc rdma takes no btl without
#               them; its MPI_Win_create fails.)
#
# host: both ranks on this host (oxmr: shared memory); ns: the ranks in two
# network namespaces joined by a veth pair (198.18.0.1/24, 198.18.0.2/24;
# created here, deleted on exit; oxmr: its TCP wire). Each configuration
# runs REPS times (default 3), alternating; the table shows medians and the
# ratios (latency: lower is better; bandwidth: higher is better). Needs
# root (namespaces). OXMR_OSC_ITERS sets the latency iterations (default
# 2000). Not part of CI: it prints numbers and asserts nothing.
#
# usage: bench/mpi_osc.sh <dir-containing-liboxmr-fi.so>
set -euo pipefail

[ $# -eq 1 ] && [ -f "$1/liboxmr-fi.so" ] || {
	echo "usage: $0 <dir-containing-liboxmr-fi.so>" >&2
	exit 2
}
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
provdir="$(cd "$1" && pwd)"
reps="${REPS:-3}"
[ "$(id -u)" -eq 0 ] || { echo "$0: needs root (namespaces)" >&2; exit 2; }

tmp="$(mktemp -d)"
source "$here/../fabtests/netns.sh"
cleanup() {
	netns_down
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

mpicc -std=gnu11 -O2 -Wall -Wextra -Werror -o "$tmp/onesided" "$here/../fabtests/mpi/onesided.c"

netns_up bosc
nsa="$NETNS_A"
netns_mpi_hosts "$tmp"

export FI_PROVIDER_PATH="$provdir" OXMR_OSC_BENCH=1 OXMR_OSC_ITERS="${OXMR_OSC_ITERS:-2000}"
base=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2
	-x FI_PROVIDER_PATH -x OXMR_OSC_BENCH -x OXMR_OSC_ITERS)
cm=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include oxmr)
rdma_oxmr=("${cm[@]}" --mca osc rdma --mca btl self,ofi --mca btl_ofi_provider_include oxmr)
pt2pt_oxmr=("${cm[@]}" --mca osc pt2pt)
ns=(ip netns exec "$nsa" "${base[@]}" --hostfile "$tmp/hosts" --mca plm_rsh_agent "$tmp/agent"
	--mca oob_tcp_if_include 198.18.0.0/24)

# one <name> <command...>: a run's "osc" lines, as "<name> <what> <value>".
# A configuration that fails once is left out of later rounds (n/a).
declare -A dead=()
one() {
	local name="$1"
	shift
	[ -n "${dead[$name]:-}" ] && return 0
	if ! timeout -k 5 300 "$@" "$tmp/onesided" >"$tmp/out" 2>"$tmp/err"; then
		echo "$0: $name failed (left out from here on):" >&2
		grep -av '^\s*$' "$tmp/err" | grep -v '^\[.*\] \*\*\*' | tail -4 >&2
		dead[$name]=1
		return 0
	fi
	awk -v n="$name" '/^osc /{print n, $2, $3}' "$tmp/out" >>"$tmp/all"
}

: >"$tmp/all"
for r in $(seq "$reps"); do
	echo "round $r of $reps" >&2
	one host-rdma-oxmr "${base[@]}" "${rdma_oxmr[@]}"
	one host-pt2pt-oxmr "${base[@]}" "${pt2pt_oxmr[@]}"
	one host-own "${base[@]}" --mca pml ob1 --mca btl self,vader --mca osc rdma
	one ns-rdma-oxmr "${ns[@]}" "${rdma_oxmr[@]}"
	one ns-pt2pt-oxmr "${ns[@]}" "${pt2pt_oxmr[@]}"
	one ns-own "${ns[@]}" --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include 198.18.0.0/24 --mca osc pt2pt
done

# Medians, then the table.
python3 - "$tmp/all" <<'EOF'
import sys, statistics
runs = {}
for line in open(sys.argv[1]):
    name, what, val = line.split()
    runs.setdefault((name, what), []).append(float(val))
med = {k: statistics.median(v) for k, v in runs.items()}
rows = (("put_lat_8B", "put 8 B latency", "us"), ("get_lat_8B", "get 8 B latency", "us"),
        ("put_bw_1MiB", "put 1 MiB bandwidth", "MB/s"), ("fop_lat", "fetch_and_op latency", "us"))
own = {"host": "osc rdma, btl vader", "ns": "osc pt2pt, btl tcp"}
def fmt(x, unit):
    return "n/a" if x is None else f"{x:.2f} {unit}"
def ratio(x, y):
    return "n/a" if x is None or y is None or y == 0 else f"{x / y:.2f}x"
print("| where | figure | rdma-oxmr | pt2pt-oxmr | own | rdma-oxmr / own | pt2pt-oxmr / own | rdma-oxmr / pt2pt-oxmr |")
print("|---|---|---|---|---|---|---|---|")
for where in ("host", "ns"):
    for what, label, unit in rows:
        a, p, o = (med.get((f"{where}-{c}", what)) for c in ("rdma-oxmr", "pt2pt-oxmr", "own"))
        print(f"| {where} | {label} | {fmt(a, unit)} | {fmt(p, unit)} | {fmt(o, unit)} ({own[where]}) "
              f"| {ratio(a, o)} | {ratio(p, o)} | {ratio(a, p)} |")
print("(latency ratios: lower is better; bandwidth ratios: higher is better; medians of the rounds)")
EOF
