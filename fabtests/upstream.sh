#!/usr/bin/env bash
# Run upstream libfabric fabtests (built separately from a libfabric
# checkout matching the installed library; nothing of upstream is kept in
# this repository) against oxmr.
#
#   fabtests/upstream.sh <fabtests-bin-dir> <dir-with-liboxmr-fi.so> [unit|quick|standard]
#
# An empty <fabtests-bin-dir> ("") means $OXMR_UPSTREAM_FABTESTS, else
# /opt/ft117/bin: the variable ci/test.sh and the bench/compare_*.sh
# scripts read.
#
# "unit" (default) runs the programs that need no data transfer, one at a
# time, with the arguments runfabtests.sh uses (loopback addresses; its
# unit_tests list, fi_mr_test included, without the dgram AV test), plus
# the negative getinfo tests that must exit with FI_ENODATA (61). A test's
# own "skipped because" cases (features oxmr does not offer) are counted
# on its PASS line.
# "quick" and "standard" run runfabtests.sh -t quick / -t standard with
# fabtests/test_configs/oxmr/oxmr.exclude.
# OXMR_FT_ADDR (default 127.0.0.1) is the loopback address both sides use:
# another 127/8 address (127.0.0.2) keeps a run off the ports (9228, ...) of
# another run on 127.0.0.1 at the same time.
set -uo pipefail
bin=${1:-${OXMR_UPSTREAM_FABTESTS:-/opt/ft117/bin}}
[ -d "$bin" ] || { echo "$0: no fabtests bin dir $bin (give one, or set OXMR_UPSTREAM_FABTESTS)" >&2; exit 2; }
prov=${2:?dir containing liboxmr-fi.so}
set_=${3:-unit}
export FI_PROVIDER_PATH=$prov
here=$(cd "$(dirname "$0")" && pwd)
addr=${OXMR_FT_ADDR:-127.0.0.1}

if [ "$set_" = quick ] || [ "$set_" = standard ]; then
    # v1.17's runfabtests.sh takes an exclude *file* with -f (-e takes patterns).
    # (The standard set runs every size of its pingpongs and bandwidth
    # tests: 300 s per test leaves room on a slow machine.)
    exec "$bin/runfabtests.sh" -p "$bin/" -t "$set_" -T "$([ "$set_" = quick ] && echo 120 || echo 300)" \
        -f "$here/test_configs/oxmr/oxmr.exclude" -s "$addr" -c "$addr" oxmr
fi

pass=0 fail=0
run() {
    local want=$1; shift
    printf '%-70s ' "$*"
    out=$(timeout 300 "$bin/$@" -p oxmr 2>&1); rc=$?
    if [ "$rc" = "$want" ]; then
        n=$(grep -c "skipped because" <<<"$out")
        if [ "$n" != 0 ]; then echo "PASS ($n of its cases skipped themselves)"; else echo "PASS"; fi
        pass=$((pass + 1))
    else
        echo "FAIL (exit $rc, want $want)"; echo "$out" | tail -20 | sed 's/^/    /'; fail=$((fail + 1))
    fi
}
run 0 fi_getinfo_test -s 127.0.0.1 127.0.0.1
run 0 fi_av_test -g 127.0.0.1 -n 1 -s 127.0.0.1 -e rdm
run 0 fi_dom_test -n 2
run 0 fi_eq_test
run 0 fi_cq_test
run 0 fi_mr_test
run 0 fi_cntr_test
run 61 fi_rdm g00n13s
run 61 fi_msg g00n13s
echo "upstream unit: $pass passed, $fail failed"
[ "$fail" = 0 ]
