#!/usr/bin/env bash
# oxmr against libfabric's shm provider, same machine, same run, one test at
# a time: latency (fi_rdm_pingpong) at 8 B, 256 B, 4 KiB, 64 KiB and
# bandwidth for send (fi_rdm_tagged_bw) and RMA write/read (fi_rma_bw) at
# 64 KiB, 1 MiB, 16 MiB. Needs upstream fabtests built locally (not part of
# this repository): OXMR_UPSTREAM_FABTESTS=<their bin dir>. Run it on a quiet
# machine; it prints numbers and ratios, asserts nothing.
#
#   bash ci/build.sh && OXMR_UPSTREAM_FABTESTS=/path/to/fabtests/bin bash bench/compare_shm.sh
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${OXMR_UPSTREAM_FABTESTS:?set OXMR_UPSTREAM_FABTESTS to the bin dir of locally built fabtests}
export FI_PROVIDER_PATH="$(pwd)/build"
reps=${REPS:-3}

# run <prov> <test> <args...>: prints the result line's column `col` (median of reps)
run() {
    local prov=$1 col=$2 test=$3; shift 3
    local vals=()
    for _ in $(seq "$reps"); do
        timeout 120 "$bin/$test" -p "$prov" -s 127.0.0.1 "$@" >/tmp/bench-srv.log 2>&1 &
        local s=$!
        sleep 0.3
        local line
        line=$(timeout 120 "$bin/$test" -p "$prov" -s 127.0.0.1 "$@" 127.0.0.1 2>/dev/null | awk '$1 ~ /^[0-9]/ {l=$0} END {print l}')
        wait $s
        vals+=("$(awk -v c="$col" '{print $c}' <<<"$line")")
    done
    printf '%s\n' "${vals[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}

printf '%-34s %12s %12s %8s\n' "test" "oxmr" "shm" "ratio"
lat() {
    local size=$1 it=$2
    local o s
    o=$(run oxmr 6 fi_rdm_pingpong -S "$size" -I "$it")
    s=$(run shm 6 fi_rdm_pingpong -S "$size" -I "$it")
    printf '%-34s %10s us %10s us %8s\n' "latency $size B" "$o" "$s" "$(awk -v a="$o" -v b="$s" 'BEGIN{if(b>0)printf "%.2fx", a/b}')"
}
bw() {
    local name=$1 size=$2 it=$3; shift 3
    local o s
    o=$(run oxmr 5 "$@" -S "$size" -I "$it")
    s=$(run shm 5 "$@" -S "$size" -I "$it")
    printf '%-34s %9s MB/s %9s MB/s %7s\n' "$name $size B" "$o" "$s" "$(awk -v a="$o" -v b="$s" 'BEGIN{if(b>0)printf "%.2fx", a/b}')"
}
for sz in 8 256 4096 65536; do lat "$sz" 20000; done
for sz in 65536 1048576 16777216; do
    # Enough iterations that a run lasts well over 10 ms: shorter ones
    # measure start-up (first touches, first registrations) and noise.
    it=$((sz >= 16777216 ? 100 : sz >= 1048576 ? 1000 : 5000))
    bw "send (tagged_bw)" "$sz" "$it" fi_rdm_tagged_bw
    bw "RMA write" "$sz" "$it" fi_rma_bw -e rdm -o write
    bw "RMA read" "$sz" "$it" fi_rma_bw -e rdm -o read
done
echo "(latency ratio < 1 and bandwidth ratio > 1 favour oxmr; median of $reps runs)"
