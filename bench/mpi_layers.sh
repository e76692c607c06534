#!/usr/bin/env bash
# How much of an MPI message over oxmr is Open MPI's own, and what that
# leaves a provider if MPI over it is to match Open MPI's vader.
#
# Open MPI reaches a libfabric provider through its cm PML and ofi MTL
# (`--mca pml cm --mca mtl ofi`); its own shared-memory transport, vader,
# sits under the ob1 PML and needs no CQ. bench/mpi_self.c sends 8 bytes
# from one rank to itself (MPI_Irecv, MPI_Send, MPI_Wait): one thread,
# nothing waits on a peer. Under valgrind's callgrind, with N and 2N
# messages (setup cancels), each MPI call's instructions split into the
# provider's (oxmr's fi_trecv, fi_tinject*/fi_tsend*, fi_cq_read entry
# points, inclusive) and Open MPI's (the rest of the call). A ping-pong's
# one-way critical path holds MPI_Send and the completion half of
# MPI_Wait, not the receive posted while waiting; libfabric's shm
# provider's inject and completing read come from bench/self_pp.c (its
# `inject` and `one`), as oxmr's do for comparison.
#
# Then, timed (medians of REPS alternating runs): mpi_self over oxmr and
# over ob1's self BTL, vader's 8 B ping-pong (bench/mpi_pp.c, two ranks)
# and a cache line's round trip (bench/line_pp.c). The estimate at the
# end turns instructions into ns at the rate mpi_self over oxmr runs
# (instructions per ns): what vader's one-way latency leaves a provider
# after Open MPI's part and one line crossing. An estimate (an
# instruction is not a fixed time), printed as such. Asserts nothing.
#
#   bash bench/mpi_layers.sh <dir-with-liboxmr-fi.so>
#
# Needs valgrind and Open MPI (installed here if missing); run it on a
# quiet machine (the timed rows are two processes on cores 0 and 1).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[ $# -eq 1 ] && [ -f "$1/liboxmr-fi.so" ] || { echo "usage: $0 <dir-with-liboxmr-fi.so>" >&2; exit 2; }
dir="$(cd "$1" && pwd)"
for p in valgrind:valgrind mpicc:libopenmpi-dev mpirun:openmpi-bin; do
	command -v "${p%%:*}" >/dev/null || apt-get install -y -q "${p#*:}" >/dev/null || exit 1
done
n=${N:-5000}
reps=${REPS:-5}
tmp="$(mktemp -d)"
[ -n "${KEEP:-}" ] && echo "$0: keeping $tmp" >&2 || trap 'rm -rf "$tmp"' EXIT
mpicc -O2 -o "$tmp/mpi_self" "$here/mpi_self.c" || exit 1
mpicc -std=gnu11 -O2 -o "$tmp/mpi_pp" "$here/mpi_pp.c" || exit 1
cc -O2 -o "$tmp/self_pp" "$here/self_pp.c" $(pkg-config --cflags --libs libfabric) || exit 1
cc -O2 -pthread -o "$tmp/line_pp" "$here/line_pp.c" || exit 1

run=(mpirun --allow-run-as-root -np 1)
oxmr=(-x FI_PROVIDER_PATH="$dir" --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include oxmr)
ob1=(--mca pml ob1 --mca btl self,vader)

# callgrind's file of one run: $1 out, then the command.
cg() {
	local out=$1
	shift
	"$@" >"$out.log" 2>&1 || { echo "$0: under valgrind failed: $(tail -3 "$out.log")" >&2; exit 1; }
}
# Inclusive instructions of the functions matching $2 (an awk regex over
# callgrind_annotate's "file:function [object]" lines) in file $1. (Run
# from $tmp: from inside the source tree, callgrind_annotate splits a
# function's lines between source paths it shortens and ones it does not.)
incl() {
	cd "$tmp" && callgrind_annotate --inclusive=yes --tree=none --auto=no --threshold=100 "$1" 2>/dev/null |
		awk -v re="$2" '$0 ~ re && /\[[^]]*\]$/ { c = $1; gsub(/,/, "", c); s += c } END { print s + 0 }'
}
total() { sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$1.log"; }
# Per message: (value at 2N - value at N) / (5 runs * N).
per() { awk -v a="$1" -v b="$2" -v n="$n" 'BEGIN { printf "%.0f", (b - a) / (5 * n) }'; }

for m in $n $((2 * n)); do
	cg "$tmp/ox.$m" "${run[@]}" --bind-to none "${oxmr[@]}" valgrind --tool=callgrind --callgrind-out-file="$tmp/ox.$m" "$tmp/mpi_self" "$m"
	cg "$tmp/ob.$m" "${run[@]}" --bind-to none "${ob1[@]}" valgrind --tool=callgrind --callgrind-out-file="$tmp/ob.$m" "$tmp/mpi_self" "$m"
done
declare -A I
for f in Irecv Send Wait; do
	I[$f]=$(per "$(incl "$tmp/ox.$n" ":PMPI_$f \\[")" "$(incl "$tmp/ox.$((2 * n))" ":PMPI_$f \\[")")
done
I[recv]=$(per "$(incl "$tmp/ox.$n" ":oxmr::boundary::ep_data::tagged_recv[a-z]* \\[")" "$(incl "$tmp/ox.$((2 * n))" ":oxmr::boundary::ep_data::tagged_recv[a-z]* \\[")")
I[send]=$(per "$(incl "$tmp/ox.$n" ":oxmr::boundary::ep_data::tagged_(inject|send)[a-z]* \\[")" "$(incl "$tmp/ox.$((2 * n))" ":oxmr::boundary::ep_data::tagged_(inject|send)[a-z]* \\[")")
I[cq]=$(per "$(incl "$tmp/ox.$n" ":oxmr::boundary::cq::read[a-z_]* \\[")" "$(incl "$tmp/ox.$((2 * n))" ":oxmr::boundary::cq::read[a-z_]* \\[")")
I[all]=$(per "$(total "$tmp/ox.$n")" "$(total "$tmp/ox.$((2 * n))")")
I[ob1]=$(per "$(total "$tmp/ob.$n")" "$(total "$tmp/ob.$((2 * n))")")

# self_pp: N round trips in each of 6 loops, two messages each.
for p in shm oxmr; do
	for m in $n $((2 * n)); do
		cg "$tmp/sp.$p.$m" env PROV=$p FI_PROVIDER_PATH="$dir" valgrind --tool=callgrind --callgrind-out-file="$tmp/sp.$p.$m" "$tmp/self_pp" "$m"
	done
	for f in inject one; do
		a=$(incl "$tmp/sp.$p.$n" ":$f \\[") b=$(incl "$tmp/sp.$p.$((2 * n))" ":$f \\[")
		I[$p.$f]=$(awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { printf "%.0f", (b - a) / (12 * n) }')
	done
done

med() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
: >"$tmp/t"
for ((r = 0; r < reps; r++)); do
	echo "ox $("${run[@]}" --bind-to core "${oxmr[@]}" "$tmp/mpi_self" 200000 2>/dev/null | awk '{ print $2 }')" >>"$tmp/t"
	echo "ob $("${run[@]}" --bind-to core "${ob1[@]}" "$tmp/mpi_self" 200000 2>/dev/null | awk '{ print $2 }')" >>"$tmp/t"
	echo "vader $(timeout -k 5 120 mpirun --allow-run-as-root --bind-to core -np 2 "${ob1[@]}" "$tmp/mpi_pp" 2>/dev/null | awk '$1 == "lat" && $2 == 8 { print $3 * 1000 }')" >>"$tmp/t"
	echo "line $("$tmp/line_pp" 1000000 0 1 | awk '{ for (i = 1; i < NF; i++) if ($(i + 1) == "ns") print $i }')" >>"$tmp/t"
done
T() { awk -v k="$1" '$1 == k && $2 != "" { print $2 }' "$tmp/t" | med; }
ox=$(T ox) ob=$(T ob) vader=$(T vader) line=$(T line)

pr() { printf "  %-58s %6s\n" "$1" "$2"; }
echo "instructions per 8 B message, counted (callgrind, N=$n and $((2 * n)))"
echo " mpi_self over oxmr (pml cm, mtl ofi):"
pr "MPI_Irecv: Open MPI / oxmr's fi_trecv" "$((I[Irecv] - I[recv])) / ${I[recv]}"
pr "MPI_Send: Open MPI / oxmr's inject or send" "$((I[Send] - I[send])) / ${I[send]}"
pr "MPI_Wait: Open MPI / oxmr's fi_cq_read calls" "$((I[Wait] - I[cq])) / ${I[cq]}"
pr "the whole message (the program, libc, the loader included)" "${I[all]}"
echo " mpi_self over ob1 and its self BTL (vader's PML):"
pr "the whole message" "${I[ob1]}"
echo " bench/self_pp.c, per message: inject / the read that completes it:"
pr "libfabric shm" "${I[shm.inject]} / ${I[shm.one]}"
pr "oxmr" "${I[oxmr.inject]} / ${I[oxmr.one]}"
echo "timed, medians of $reps alternating runs (ns)"
pr "mpi_self over oxmr, per message" "$ox"
pr "mpi_self over ob1 + self BTL, per message" "$ob"
pr "vader ping-pong 8 B, one way (bench/mpi_pp.c, cores 0-1)" "$vader"
pr "a cache line's round trip, cores 0-1 (bench/line_pp.c)" "$line"
awk -v all="${I[all]}" -v ox="$ox" -v send="$((I[Send] - I[send]))" -v wait="$((I[Wait] - I[cq]))" \
	-v vader="$vader" -v line="$line" -v ps="${I[send]}" -v pc="${I[cq]}" -v si="${I[shm.inject]}" -v so="${I[shm.one]}" 'BEGIN {
	if (!(ox > 0 && vader > 0 && line > 0)) { print "estimate: a timed run failed"; exit }
	rate = all / ox
	ompi = (send + wait) / rate
	left = vader - line / 2 - ompi
	printf "estimate, at mpi_self-over-oxmr'"'"'s %.1f instructions per ns:\n", rate
	printf "  Open MPI'"'"'s part of a one-way message (MPI_Send + MPI_Wait): %d instructions, ~%.0f ns\n", send + wait, ompi
	printf "  vader'"'"'s %.0f ns - one crossing %.0f ns - that = %.0f ns, ~%.0f instructions for a provider'"'"'s inject + completing reads\n", vader, line / 2, left, left * rate
	printf "  oxmr spends %d (%.1fx that); libfabric shm %d in self_pp, before the MTL'"'"'s second, empty read\n", ps + pc, (ps + pc) / (left * rate), si + so
}'
