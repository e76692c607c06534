#!/usr/bin/env bash
# Instructions per small-message round trip, counted, not timed: the
# deterministic companion of hotpaths.sh's `self` row on a noisy machine.
#
# Runs bench/self_pp.c (two endpoints of one thread, 8 B tagged ping-pong)
# under valgrind's callgrind twice, with N and 2N round trips per run, and
# divides the difference by the extra round trips: setup, teardown and the
# first-message paths cancel out. Prints instructions per round trip for
# each oxmr build given and for libfabric's shm, the ratio to shm, and the
# functions whose own instructions per round trip differ most between the
# first and last build given (or the heaviest ones, given one build),
# and how many locked or fenced instructions (atomics, full barriers) a
# round trip executes, which an instruction count does not weigh.
#
#   bash bench/instr.sh build [other-build-dir ...]
#
# Instruction counts are not time (a stall or a cache miss costs more than
# an instruction), but they do not move with the machine's slow spells:
# two runs of one build agree to within a few instructions. Asserts
# nothing. Needs valgrind (installed here if missing) and objdump.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[ $# -ge 1 ] || { echo "usage: $0 <dir-with-liboxmr-fi.so> [...]" >&2; exit 2; }
command -v valgrind >/dev/null || { apt-get install -y -q valgrind >/dev/null || exit 1; }
n=${N:-2000}
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cc -O2 -o "$tmp/self_pp" "$here/self_pp.c" $(pkg-config --cflags --libs libfabric) || exit 1

# callgrind's total for one run: $1 label, $2 round trips, then env.
count() {
	local out="$tmp/cg.$1.$2"
	env "${@:3}" valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file="$out" "$tmp/self_pp" "$2" >/dev/null 2>"$out.log" ||
		{ echo "$0: self_pp under valgrind failed ($1): $(tail -3 "$out.log")" >&2; exit 1; }
	sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$out.log"
}
# Per-function own instructions of one run (name<TAB>count).
funcs() {
	callgrind_annotate --inclusive=no --tree=none --auto=no --threshold=100 "$1" 2>/dev/null |
		awk '/^ *[0-9,]+ +\(/ && !/PROGRAM TOTALS/ { c=$1; gsub(/,/,"",c); $1=""; $2=""; sub(/^ +/,""); sub(/ \[.*$/,""); sub(/^[^:]*:/,""); a[$0]+=c } END { for (k in a) printf "%s\t%d\n", k, a[k] }'
}
per_rt() { echo $(( ($2 - $1) / (6 * n) )); } # self_pp runs 6 timed loops of N
# Locked or fenced instructions (lock-prefixed, xchg with memory, mfence)
# one run executed: each library's disassembly says where they are,
# callgrind's per-instruction counts how often each ran. (Positions in
# a callgrind file are object-relative addresses, absolute as 0x...,
# else +N / -N from the previous line, or * for the same; the line after
# a calls= line is the call's inclusive cost, not the instruction's own.)
locked() {
	local cg=$1 o
	: >"$tmp/lockat"
	for o in $(sed -n 's/^c\?ob=([0-9]*) \(\/.*\)$/\1/p' "$cg" | sort -u); do
		[ -f "$o" ] || continue
		objdump -d --no-show-raw-insn "$o" 2>/dev/null |
			awk -v o="$o" '$1 ~ /^[0-9a-f]+:$/ { i = $0; sub(/^[^:]*:[ \t]*/, "", i); if (i ~ /^lock/ || i ~ /^mfence/ || i ~ /^xchg[a-z]* +[^,]*,.*\(/ || i ~ /^xchg[a-z]* +[^,]*\(.*,/) { a = $1; sub(/:$/, "", a); print o "\t" a } }' >>"$tmp/lockat"
	done
	awk -F'\t' 'function hex(s, i, v) { v = 0; sub(/^0x/, "", s); for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1; return v }
		NR == FNR { L[$1 SUBSEP hex($2)] = 1; next }
		/^c?ob=\(/ { id = $0; sub(/^c?ob=\(/, "", id); nm = id; sub(/\).*/, "", id); sub(/^[0-9]+\) ?/, "", nm); if (nm != "") name[id] = nm; if ($0 ~ /^ob=/) ob = id; next }
		/^calls=/ { skip = 1; next }
		/^(0x[0-9a-f]+|[-+][0-9]+|\*)( |$)/ { split($0, f, " "); p = f[1]
			if (p ~ /^0x/) at = hex(p); else if (p ~ /^\+/) at += substr(p, 2) + 0; else if (p ~ /^-/) at -= substr(p, 2) + 0
			if (skip) { skip = 0; next }
			if ((name[ob] SUBSEP at) in L) n += f[3] }
		END { print n + 0 }' "$tmp/lockat" FS=' ' "$cg"
}

shm=$(per_rt "$(count shm $n PROV=shm)" "$(count shm $((2 * n)) PROV=shm)")
echo "instructions per 8 B round trip (self_pp, two tagged injects, two receives, their completions)"
printf "  %-28s %6d\n" "libfabric shm" "$shm"
# Locked or fenced instructions per round trip, each label's two runs.
locked_rt() { echo "$(locked "$tmp/cg.$1.$n") $(locked "$tmp/cg.$1.$((2 * n))")" | awk -v d=$((6 * n)) '{ printf "%.1f", ($2 - $1) / d }'; }
locks="libfabric shm $(locked_rt shm)"
labels=()
for d in "$@"; do
	[ -f "$d/liboxmr-fi.so" ] || { echo "$0: no $d/liboxmr-fi.so" >&2; exit 2; }
	l=$(basename "$(cd "$d" && pwd)")
	labels+=("$l")
	x=$(per_rt "$(count "$l" $n FI_PROVIDER_PATH="$(cd "$d" && pwd)")" "$(count "$l" $((2 * n)) FI_PROVIDER_PATH="$(cd "$d" && pwd)")")
	printf "  %-28s %6d   %.2fx shm\n" "oxmr ($l)" "$x" "$(echo "$x / $shm" | bc -l)"
	locks="$locks, oxmr ($l) $(locked_rt "$l")"
	funcs "$tmp/cg.$l.$n" >"$tmp/f.$l.a"
	funcs "$tmp/cg.$l.$((2 * n))" >"$tmp/f.$l.b"
	join -t $'\t' -a 2 -e 0 -o 0,1.2,2.2 <(sort "$tmp/f.$l.a") <(sort "$tmp/f.$l.b") |
		awk -F'\t' -v d=$((6 * n)) '{ printf "%s\t%.1f\n", $1, ($3 - $2) / d }' | sort >"$tmp/rt.$l"
done
echo "locked or fenced instructions per round trip (each ~2 ns here, and a stall for the stores before it): $locks"
first=${labels[0]}
last=${labels[${#labels[@]}-1]}
if [ "$first" = "$last" ]; then
	echo "heaviest functions of $first, own instructions per round trip:"
	sort -t $'\t' -k2 -rn "$tmp/rt.$first" | head -25 | awk -F'\t' '{ printf "  %7.1f  %s\n", $2, substr($1, 1, 110) }'
else
	echo "functions that moved most, $first -> $last, own instructions per round trip:"
	join -t $'\t' -a 1 -a 2 -e 0 -o 0,1.2,2.2 "$tmp/rt.$first" "$tmp/rt.$last" |
		awk -F'\t' '{ d = $3 - $2; if (d < 0) a = -d; else a = d; if (a >= 2) printf "%.1f\t%7.1f %7.1f %+7.1f  %s\n", a, $2, $3, d, substr($1, 1, 100) }' |
		sort -rn | head -25 | cut -f2-
fi
