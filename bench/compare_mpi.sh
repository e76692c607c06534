#!/usr/bin/env bash
# Open MPI 4.1 over oxmr against Open MPI's own transports, in one run:
# bench/mpi_pp.c (latency at 8 B and 4 KiB, windowed bandwidth at 64 KiB,
# 1 MiB and 16 MiB, data checked) with two ranks
#
#   host: oxmr (pml cm, mtl ofi, oxmr: shared memory) vs ob1 + btl vader
#   ns:   the ranks in two network namespaces joined by a veth pair
#         (198.18.0.1/24, 198.18.0.2/24; created here, deleted on exit):
#         oxmr (its TCP wire) vs ob1 + btl tcp
#
# Each configuration runs REPS times (default 3), alternating; the table
# shows medians and oxmr's ratio (latency: oxmr / theirs, lower is better;
# bandwidth: oxmr / theirs, higher is better). Needs root (namespaces).
# With FI_OXMR_AUTH_KEY set, oxmr's ranks run with that job key.
#
# usage: bench/compare_mpi.sh <dir-containing-liboxmr-fi.so>
set -euo pipefail

[ $# -eq 1 ] && [ -f "$1/liboxmr-fi.so" ] || {
	echo "usage: $0 <dir-containing-liboxmr-fi.so>" >&2
	exit 2
}
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
provdir="$(cd "$1" && pwd)"
reps="${REPS:-3}"
[ "$(id -u)" -eq 0 ] || { echo "$0: needs root (network namespaces)" >&2; exit 2; }

tmp="$(mktemp -d)"
source "$(dirname "${BASH_SOURCE[0]}")/../fabtests/netns.sh"
cleanup() {
	netns_down
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

mpicc -std=gnu11 -O2 -Wall -Wextra -Werror -o "$tmp/pp" "$here/mpi_pp.c"

netns_up bmpi
nsa="$NETNS_A"
netns_mpi_hosts "$tmp"

export FI_PROVIDER_PATH="$provdir"
base=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 -x FI_PROVIDER_PATH)
# (A job key, when one is set: every rank gets it, as a user would give it.)
if [ -n "${FI_OXMR_AUTH_KEY:-}" ]; then
	base+=(-x FI_OXMR_AUTH_KEY)
fi
oxmr=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include oxmr)
ns=(--hostfile "$tmp/hosts" --mca plm_rsh_agent "$tmp/agent" --mca oob_tcp_if_include 198.18.0.0/24)

# one <name> <command...>: a run's lat/bw lines, as "<name> <kind> <size> <value>".
one() {
	local name="$1"
	shift
	timeout -k 5 300 "$@" "$tmp/pp" 2>"$tmp/err" | awk -v n="$name" '/^(lat|bw) /{print n, $1, $2, $3}' >>"$tmp/all" || {
		echo "$0: $name failed:" >&2
		tail -5 "$tmp/err" >&2
		exit 1
	}
}

: >"$tmp/all"
for r in $(seq "$reps"); do
	echo "round $r of $reps" >&2
	one host-oxmr "${base[@]}" "${oxmr[@]}"
	one host-vader "${base[@]}" --mca pml ob1 --mca btl self,vader
	one ns-oxmr ip netns exec "$nsa" "${base[@]}" "${ns[@]}" "${oxmr[@]}"
	one ns-tcp ip netns exec "$nsa" "${base[@]}" "${ns[@]}" --mca pml ob1 --mca btl self,tcp \
		--mca btl_tcp_if_include 198.18.0.0/24
done

# Medians, then the table.
python3 - "$tmp/all" <<'EOF'
import sys, statistics
runs = {}
for line in open(sys.argv[1]):
    name, kind, size, val = line.split()
    runs.setdefault((name, kind, int(size)), []).append(float(val))
med = {k: statistics.median(v) for k, v in runs.items()}
def row(kind, size, a, b):
    x, y = med.get((a, kind, size)), med.get((b, kind, size))
    unit = "us" if kind == "lat" else "MB/s"
    ratio = x / y if x and y else float("nan")
    lbl = f"{size // 1024} KiB" if size >= 1024 and size < 1 << 20 else (f"{size >> 20} MiB" if size >= 1 << 20 else f"{size} B")
    print(f"| {a[:-5] if a.endswith('-oxmr') else a} | {'latency' if kind == 'lat' else 'bandwidth'} {lbl} | {x:.2f} {unit} | {y:.2f} {unit} ({b}) | {ratio:.2f}x |")
print("| where | figure | oxmr | Open MPI's own | oxmr / own |")
print("|---|---|---|---|---|")
for where, other in (("host", "host-vader"), ("ns", "ns-tcp")):
    for kind, sizes in (("lat", (8, 4096)), ("bw", (65536, 1 << 20, 16 << 20))):
        for s in sizes:
            row(kind, s, f"{where}-oxmr", other)
EOF
