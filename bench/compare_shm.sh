#!/usr/bin/env bash
# oxmr against libfabric's shm provider, same machine, same run, one test at
# a time: latency (fi_rdm_pingpong) at 8 B, 256 B, 4 KiB, 64 KiB and
# bandwidth for send (fi_rdm_tagged_bw) and RMA write/read (fi_rma_bw) at
# 64 KiB, 1 MiB, 16 MiB, each the lower of the figures the test's two
# sides print (see `once`). Each repetition runs oxmr then shm, so a slow
# spell of the machine hits both; medians of REPS (default 3). Bandwidth
# rows also show this machine's copy ceiling (bench/cma_ceiling.c:
# process_vm_readv/writev alone, the better of the two, one-way for send,
# two-way for fi_rma_bw, which writes or reads in both directions at once,
# and for reads into the very buffer the peer reads from, as fi_rma_bw -o
# read does), and the speed of memory itself (each copying process
# memcpy-ing its own buffers, as many processes at once as the row's
# copies: above it no single-copy transfer can go).
# Needs upstream fabtests built locally (not part of this repository):
# OXMR_UPSTREAM_FABTESTS=<their bin dir>, default /opt/ft117/bin (the same
# variable as bench/compare_tcp.sh, ci/test.sh and fabtests/upstream.sh).
# Server and client both use 127.0.0.1 (-s), and the client connects there.
# Run it on a quiet machine; it
# prints numbers and ratios, asserts nothing.
#
#   bash ci/build.sh && OXMR_UPSTREAM_FABTESTS=/path/to/fabtests/bin bash bench/compare_shm.sh
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${OXMR_UPSTREAM_FABTESTS:-/opt/ft117/bin}
for p in fi_rdm_pingpong fi_rdm_tagged_bw fi_rma_bw; do
    [ -x "$bin/$p" ] || { echo "$0: no $bin/$p (set OXMR_UPSTREAM_FABTESTS to upstream fabtests' bin/)" >&2; exit 2; }
done
export FI_PROVIDER_PATH="$(pwd)/build"
reps=${REPS:-3}
ceiling=$(mktemp)
srvout=$(mktemp)
trap 'rm -f "$ceiling" "$srvout"' EXIT
cc -O2 -o "$ceiling" bench/cma_ceiling.c

# once <prov> <col> <test> <args...>: the result line's column `col`, of the
# client for latency (a pingpong's two sides time the same round trips);
# for bandwidth (BOTH=1), the lower of the two sides' figures. Each side of
# a bandwidth test times its own operations, and in a two-way test
# (fi_rma_bw, where both sides post RMA) one side's can finish well before
# the other's: the side whose operations a provider serves first then
# prints a figure above what the machine moved (seen here: 13 and 8.5 GB/s
# from the two sides of one 16 MiB run). The lower figure is the
# bandwidth with both directions done, total bytes over the wall time.
once() {
    local prov=$1 col=$2 test=$3; shift 3
    local last='$1 ~ /^[0-9]/ {l=$c} END {print l}'
    timeout 120 "$bin/$test" -p "$prov" -s 127.0.0.1 "$@" >"$srvout" 2>&1 &
    local s=$!
    sleep 0.3
    local c
    c=$(timeout 120 "$bin/$test" -p "$prov" -s 127.0.0.1 "$@" 127.0.0.1 2>/dev/null | awk -v c="$col" "$last")
    wait $s
    if [ "${BOTH:-0}" = 1 ]; then
        printf '%s\n%s\n' "$c" "$(awk -v c="$col" "$last" "$srvout")" | sort -g | head -1
    else
        echo "$c"
    fi
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{if(b>0)printf "%.2fx", a/b}'; }

# pair <col> <test> <args...>: "oxmr-median shm-median paired", alternating
# runs; `paired` is the median of each repetition's oxmr/shm (the two runs
# of a repetition share the machine's spell, so it shows how often oxmr is
# ahead run for run; the ratio of the medians can differ from it).
pair() {
    local col=$1; shift
    local o=() s=() q=()
    for _ in $(seq "$reps"); do
        o+=("$(once oxmr "$col" "$@")")
        s+=("$(once shm "$col" "$@")")
        q+=("$(awk -v a="${o[-1]}" -v b="${s[-1]}" 'BEGIN{if(b>0)printf "%.4f", a/b; else print 0}')")
    done
    echo "$(printf '%s\n' "${o[@]}" | median) $(printf '%s\n' "${s[@]}" | median) $(printf '%s\n' "${q[@]}" | median)"
}
paired() { awk -v q="$1" 'BEGIN{printf "%.2fx", q}'; }

printf '%-26s %14s %14s %7s %7s %16s %14s\n' "test" "oxmr" "shm" "ratio" "paired" "copy ceiling" "memcpy"
for sz in 8 256 4096 65536; do
    # Runs of about 0.1 s or more: shorter ones measure the machine's hiccups.
    it=$((sz >= 65536 ? 20000 : 100000))
    read -r o s q < <(pair 6 fi_rdm_pingpong -S "$sz" -I "$it")
    printf '%-26s %11s us %11s us %7s %7s\n' "latency $sz B" "$o" "$s" "$(ratio "$o" "$s")" "$(paired "$q")"
done
bw() {
    local name=$1 size=$2 it=$3 way=$4; shift 4
    local o s q c r w m
    read -r o s q < <(BOTH=1 pair 5 "$@" -S "$size" -I "$it")
    r=$("$ceiling" "$size" "$way" read 0.5)
    w=$("$ceiling" "$size" "$way" write 0.5)
    m=$("$ceiling" "$size" "$way" memcpy 0.5)
    c=$(printf '%s\n%s\n' "$r" "$w" | sort -g | tail -1)
    printf '%-26s %9s MB/s %9s MB/s %7s %7s %9s MB/s %9s MB/s\n' "$name $size B" "$o" "$s" "$(ratio "$o" "$s")" "$(paired "$q")" "$c" "$m"
}
for sz in 65536 1048576 16777216; do
    # Runs of 0.2 s or more: shorter ones
    # measure start-up (first touches, first registrations) and noise.
    it=$((sz >= 16777216 ? 200 : sz >= 1048576 ? 3000 : 50000))
    bw "send (tagged_bw)" "$sz" "$it" one-way fi_rdm_tagged_bw
    bw "RMA write" "$sz" "$it" two-way fi_rma_bw -e rdm -o write
    bw "RMA read" "$sz" "$it" two-way-same fi_rma_bw -e rdm -o read
done
echo "(latency ratio < 1 and bandwidth ratio > 1 favour oxmr; medians of $reps alternating runs;"
echo " bandwidth: the lower of the two sides' figures of each run, both directions done;"
echo " ratio: of the two medians; paired: median of each repetition's oxmr/shm;"
echo " copy ceiling: process_vm_readv/writev alone, per process, one-way for send, two-way for RMA;"
echo " for reads, two-way into the buffer the peer reads from, as fi_rma_bw -o read does;"
echo " memcpy: each of as many processes copying its own buffers with memcpy, the speed of memory)"
