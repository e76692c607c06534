#!/usr/bin/env bash
# Each side's figure of an upstream fabtests bandwidth run across the veth
# pair, for oxmr builds and libfabric's tcp provider in alternating rounds.
#
# fi_rma_bw -o write is two-way: both sides write, and each prints its own
# MB/s. bench/hotpaths.sh's rma rows keep the lower of the two (the
# transfer is done when the slower direction is); this prints both, so a
# provider whose directions run apart shows it (docs/benchmarks.md, "RMA
# over TCP: the landing's rest while we send"), and the median of each
# contender's slower and faster side over the rounds.
#
#   usage: bench/sides.sh [<name>=]<dir-containing-liboxmr-fi.so>...
#   env:   REPS (rounds, default 8), SIZE (bytes, default 16777216),
#          ITERS (default 64), PROG (default fi_rma_bw), ARGS (default
#          "-o write"; ARGS= for fi_rdm_tagged_bw), TCP=0 (no tcp runs),
#          OXMR_UPSTREAM_FABTESTS (upstream fabtests' bin/, default
#          /opt/ft117/bin, built locally: see fabtests/upstream.sh)
#
# Server in the first namespace on core 0, client in the second on core 1
# (fabtests/netns.sh; needs root). Each round runs every contender once,
# in the order given, then tcp. Asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
. fabtests/netns.sh

[ "$(id -u)" -eq 0 ] || { echo "$0: needs root (network namespaces)" >&2; exit 2; }
[ $# -ge 1 ] || { echo "usage: $0 [<name>=]<dir>..." >&2; exit 2; }
ft=${OXMR_UPSTREAM_FABTESTS:-/opt/ft117/bin}
prog=${PROG:-fi_rma_bw}
args=${ARGS--o write}
reps=${REPS:-8} size=${SIZE:-16777216} iters=${ITERS:-64}
[ -x "$ft/$prog" ] || { echo "$0: no $prog in $ft (set OXMR_UPSTREAM_FABTESTS)" >&2; exit 2; }

names=() dirs=()
for a in "$@"; do
	if [[ $a == *=* ]]; then names+=("${a%%=*}") dirs+=("${a#*=}"); else names+=("$(basename "$a")") dirs+=("$a"); fi
	[ -f "${dirs[-1]}/liboxmr-fi.so" ] || { echo "$0: no liboxmr-fi.so in ${dirs[-1]}" >&2; exit 2; }
done
[ "${TCP:-1}" = 0 ] || { names+=(tcp) dirs+=(""); }

netns_up sides
tmp=$(mktemp -d)
trap 'netns_down; rm -rf "$tmp"' EXIT

port=47900
mbs() { awk '$1 ~ /^[0-9]/ {l=$5} END {print l}' "$1"; }
: >"$tmp/all"
for r in $(seq "$reps"); do
	for i in "${!names[@]}"; do
		env=(env) prov=tcp
		[ -n "${dirs[$i]}" ] && env+=(FI_PROVIDER_PATH="${dirs[$i]}") prov=oxmr
		port=$((port + 1))
		# (args unquoted on purpose: several options, or none.)
		# shellcheck disable=SC2086
		ip netns exec "$NETNS_A" "${env[@]}" timeout 120 taskset -c 0 "$ft/$prog" -p "$prov" -B "$port" \
			-s "$NETNS_ADDR_A" -S "$size" -I "$iters" -W 16 $args >"$tmp/srv" 2>&1 &
		sleep 0.3
		# shellcheck disable=SC2086
		ip netns exec "$NETNS_B" "${env[@]}" timeout 120 taskset -c 1 "$ft/$prog" -p "$prov" -B "$((port + 500))" \
			-P "$port" -s "$NETNS_ADDR_B" -S "$size" -I "$iters" -W 16 $args "$NETNS_ADDR_A" >"$tmp/cli" 2>&1 || true
		wait || true
		s=$(mbs "$tmp/srv") c=$(mbs "$tmp/cli")
		echo "round $r ${names[$i]}: server ${s:-failed} client ${c:-failed} MB/s"
		[ -n "$s" ] && [ -n "$c" ] && echo "${names[$i]} $s $c" >>"$tmp/all"
	done
done

echo "$prog $args, $size bytes, medians of $reps rounds (MB/s):"
awk '
	{ lo = ($2 < $3) ? $2 : $3; hi = ($2 < $3) ? $3 : $2; L[$1] = L[$1] " " lo; H[$1] = H[$1] " " hi; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
	function med(s,   a, k, i, j, t) {
		k = split(s, a, " ")
		for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
	}
	END { for (i = 1; i <= n; i++) printf "  %-12s slower side %8.1f   faster side %8.1f\n", order[i], med(L[order[i]]), med(H[order[i]]) }
' "$tmp/all"
