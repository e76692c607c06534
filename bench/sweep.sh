#!/usr/bin/env bash
# Latency and bandwidth across message sizes, for the picture
# (bench/plot.sh, bench/picture.sh): oxmr against libfabric's shm and tcp
# providers and Open MPI's own transports, ping-pong at every power of two
# from 1 B to 4 MiB. Writes one data file per series into <outdir>
# (default docs/img/data), tab-separated, one line per size:
#
#   bytes <TAB> usec <TAB> MB/s       (half the round trip; bytes over it)
#
#   fi-host-oxmr   fi_pingpong -e rdm -p oxmr, one host (shared-memory wire)
#   fi-host-shm    fi_pingpong -e rdm -p shm, one host
#   fi-ns-oxmr     fi_pingpong -e rdm -p oxmr, two network namespaces joined
#                  by a veth pair (FI_OXMR_WIRE=tcp)
#   fi-ns-tcp      fi_pingpong -e rdm -p tcp, the same two namespaces
#   mpi-host-oxmr  bench/mpi_pp.c sweep, Open MPI 4.1 over oxmr (pml cm,
#                  mtl ofi), one host
#   mpi-host-vader the same, Open MPI's ob1 + btl vader
#   mpi-ns-oxmr    Open MPI over oxmr, ranks in the two namespaces (TCP)
#   mpi-ns-tcp     Open MPI's ob1 + btl tcp, the two namespaces
#
# fi_pingpong's server and client are pinned to cores 0 and 1 (taskset);
# the MPI ranks run with --bind-to none (as bench/compare_mpi.sh, whose
# launch this follows). ROUNDS rounds (default 3), each running every
# series once in turn, so that a slow spell of the machine (this VM has
# them: everything 1.5-2x slower for a while) lands on every series alike
# rather than on one curve; each size's figure is the median of its rounds.
# ITERS round trips per size for fi_pingpong (default 1000; its -I),
# MPI_ITERS for mpi_pp (default 2000 up to 64 KiB, proportionally fewer
# above). A quiet machine and larger
# counts give smoother curves; the script asserts nothing. Needs root (the
# namespaces), libfabric-bin (fi_pingpong) and Open MPI (mpicc, mpirun).
# Multi-process: run it under `flock /tmp/oxmr-mp.lock` beside tests.
#
# usage: bench/sweep.sh <dir-containing-liboxmr-fi.so> [outdir]
set -euo pipefail

[ $# -ge 1 ] && [ -f "$1/liboxmr-fi.so" ] || {
	echo "usage: $0 <dir-containing-liboxmr-fi.so> [outdir]" >&2
	exit 2
}
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
provdir="$(cd "$1" && pwd)"
out="${2:-$here/../docs/img/data}"
iters="${ITERS:-1000}"
mpi_iters="${MPI_ITERS:-2000}"
rounds="${ROUNDS:-3}"
[ "$(id -u)" -eq 0 ] || { echo "$0: needs root (network namespaces)" >&2; exit 2; }
command -v fi_pingpong >/dev/null || { echo "$0: fi_pingpong missing (Debian: libfabric-bin)" >&2; exit 2; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"

tmp="$(mktemp -d)"
source "$here/../fabtests/netns.sh"
cleanup() {
	netns_down
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

netns_up sweep
nsa="$NETNS_A"
nsb="$NETNS_B"
export FI_PROVIDER_PATH="$provdir"

# tsv: fi_pingpong's client table (bytes with k/m suffixes, MB/sec in
# column 6, usec/xfer in column 7) -> bytes, usec, MB/s for powers of two.
tsv() {
	awk 'BEGIN { OFS = "\t" }
	$1 ~ /^[0-9.]+[kmg]?$/ && NF >= 8 {
		b = $1; m = 1
		if (b ~ /k$/) m = 1024; else if (b ~ /m$/) m = 1048576; else if (b ~ /g$/) m = 1073741824
		sub(/[kmg]$/, "", b); b = b * m
		p = 1; while (p < b) p *= 2
		if (b >= 1 && b <= 4194304 && p == b) print b, $7, $6
	}'
}

# pp <series> <server-prefix> <client-prefix> <server address> <provider>:
# one fi_pingpong run, the server on core 0, the client on core 1.
pp() {
	local series="$1" spre="$2" cpre="$3" addr="$4" prov="$5"
	echo "sweep: $series" >&2
	# shellcheck disable=SC2086
	$spre taskset -c 0 timeout -k 5 300 fi_pingpong -e rdm -p "$prov" -S all -I "$iters" >"$tmp/srv" 2>&1 &
	local s=$!
	sleep 1
	# shellcheck disable=SC2086
	if ! $cpre taskset -c 1 timeout -k 5 300 fi_pingpong -e rdm -p "$prov" -S all -I "$iters" "$addr" >"$tmp/cli" 2>&1; then
		echo "$0: $series: client failed:" >&2
		tail -5 "$tmp/cli" "$tmp/srv" >&2
		kill "$s" 2>/dev/null || true
		wait "$s" || true
		return 1
	fi
	wait "$s" || true
	tsv <"$tmp/cli" >>"$tmp/$series.rounds"
}

# median <series>: each size's median over the rounds, into <outdir>.
median() {
	sort -n -k1,1 -k2,2g "$tmp/$1.rounds" | awk 'BEGIN { OFS = "\t" }
	function flush() { if (n) { m = int((n + 1) / 2); print b, us[m], mb[m] } n = 0 }
	$1 != b { flush(); b = $1 }
	{ n++; us[n] = $2; mb[n] = $3 }
	END { flush() }' >"$out/$1.tsv"
}

# (MB/s is taken from the round whose latency is the median: the two
# columns stay one run's.)

# Open MPI: launched as bench/compare_mpi.sh does (fabtests/netns.sh's agent
# starts each rank in the namespace of its host's address).
mpicc -std=gnu11 -O2 -Wall -Wextra -Werror -o "$tmp/pp" "$here/mpi_pp.c"
netns_mpi_hosts "$tmp"
base=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 -x FI_PROVIDER_PATH)
oxmr=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include oxmr)
ns=(--hostfile "$tmp/hosts" --mca plm_rsh_agent "$tmp/agent" --mca oob_tcp_if_include 198.18.0.0/24)

# mpi <series> <command...>
mpi() {
	local series="$1"
	shift
	echo "sweep: $series" >&2
	if ! timeout -k 5 600 "$@" "$tmp/pp" sweep "$mpi_iters" >"$tmp/mpi" 2>"$tmp/err"; then
		echo "$0: $series failed:" >&2
		tail -5 "$tmp/err" >&2
		return 1
	fi
	awk 'BEGIN { OFS = "\t" } $1 == "pp" { print $2, $3, $4 }' "$tmp/mpi" >>"$tmp/$series.rounds"
}

for r in $(seq "$rounds"); do
	echo "sweep: round $r of $rounds" >&2
	pp fi-host-oxmr "" "" 127.0.0.1 oxmr
	pp fi-host-shm "" "" 127.0.0.1 shm
	# (Across namespaces oxmr's `auto` picks TCP anyway; said explicitly.)
	pp fi-ns-oxmr "ip netns exec $nsa env FI_OXMR_WIRE=tcp" "ip netns exec $nsb env FI_OXMR_WIRE=tcp" "$NETNS_ADDR_A" oxmr
	pp fi-ns-tcp "ip netns exec $nsa" "ip netns exec $nsb" "$NETNS_ADDR_A" tcp
	mpi mpi-host-oxmr "${base[@]}" "${oxmr[@]}"
	mpi mpi-host-vader "${base[@]}" --mca pml ob1 --mca btl self,vader
	mpi mpi-ns-oxmr ip netns exec "$nsa" "${base[@]}" "${ns[@]}" "${oxmr[@]}"
	mpi mpi-ns-tcp ip netns exec "$nsa" "${base[@]}" "${ns[@]}" --mca pml ob1 --mca btl self,tcp \
		--mca btl_tcp_if_include 198.18.0.0/24
done
for series in fi-host-oxmr fi-host-shm fi-ns-oxmr fi-ns-tcp mpi-host-oxmr mpi-host-vader mpi-ns-oxmr mpi-ns-tcp; do
	median "$series"
done

{
	echo "measured: $(date -u +%Y-%m-%dT%H:%MZ) on $(hostname), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "oxmr: $(git -C "$here/.." describe --always --dirty 2>/dev/null || echo unknown), $provdir/liboxmr-fi.so"
	echo "libfabric: $(fi_info --version 2>/dev/null | tr '\n' ' ')"
	echo "open mpi: $(mpirun --version 2>/dev/null | head -1)"
	echo "fi_pingpong -I $iters; mpi_pp sweep $mpi_iters; $rounds rounds, every series once a round, medians per size"
} >"$out/README"
echo "sweep: data in $out" >&2
