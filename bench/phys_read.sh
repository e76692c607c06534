#!/usr/bin/env bash
# The physical-address fallback's data path, measured: RMA read bandwidth
# from perf-ring data pages (VM_PFNMAP|VM_IO kernel memory, registered by
# physical address and served by its owner with aligned word copies through
# a bounce buffer) against ordinary registered memory of the same size, in
# one run of fabtests/unit/mr_phys.c (OXT_PHYS_BENCH=<iterations>). Prints
# numbers and ratios, asserts nothing. Needs perf_event_open (a 1 MiB ring:
# root, or perf_event_mlock_kb large enough). Run it on a quiet machine.
#
#   bash ci/build.sh && bash bench/phys_read.sh [iterations]
set -euo pipefail
cd "$(dirname "$0")/.."
iters=${1:-2000}
[ -f build/liboxmr-fi.so ] || { echo "$0: run bash ci/build.sh first" >&2; exit 1; }
exe=target/fabtests/bin/mr_phys
mkdir -p "$(dirname "$exe")"
# shellcheck disable=SC2046 # pkg-config output is a word list
gcc -std=gnu11 -O1 -g -Wall -Wextra -Werror -pthread -I fabtests/common -I include \
	$(pkg-config --cflags libfabric) -o "$exe" fabtests/unit/mr_phys.c $(pkg-config --libs libfabric)
for _ in 1 2 3; do
	FI_PROVIDER_PATH="$PWD/build" FI_PROVIDER=oxmr OXT_PHYS_BENCH="$iters" "$exe" 2>/dev/null | grep '^# bench'
done
