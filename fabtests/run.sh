#!/usr/bin/env bash
# Build and run oxmr's own C conformance tests (fabtests/unit/*.c).
#
# usage: fabtests/run.sh <dir-containing-liboxmr-fi.so>
#
# Each unit/*.c is compiled into target/fabtests/bin/<name> and run on its
# own, one at a time, with FI_PROVIDER_PATH=<dir> FI_PROVIDER=oxmr. Prints
# PASS/FAIL per program and a summary; exits non-zero if any program fails
# to build or fails a check. Works from any directory.
set -euo pipefail

usage() {
	echo "usage: $0 <dir-containing-liboxmr-fi.so>" >&2
	exit 2
}

[ $# -eq 1 ] || usage
[ -d "$1" ] || { echo "$0: $1 is not a directory" >&2; usage; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
provdir="$(cd "$1" && pwd)"
if [ ! -f "$provdir/liboxmr-fi.so" ]; then
	echo "$0: no liboxmr-fi.so in $provdir (copy target/debug/liboxmr.so there as liboxmr-fi.so)" >&2
	exit 2
fi

bin="$root/target/fabtests/bin"
mkdir -p "$bin"

cflags="$(pkg-config --cflags libfabric)"
libs="$(pkg-config --libs libfabric)"

shopt -s nullglob
sources=("$here"/unit/*.c)
if [ ${#sources[@]} -eq 0 ]; then
	echo "$0: no tests in $here/unit" >&2
	exit 2
fi

passed=()
failed=()

for src in "${sources[@]}"; do
	name="$(basename "$src" .c)"
	exe="$bin/$name"
	# shellcheck disable=SC2086 # pkg-config output is a word list
	if ! gcc -std=gnu11 -O1 -g -Wall -Wextra -Werror -pthread \
		-I "$here/common" -I "$root/include" $cflags -o "$exe" "$src" $libs; then
		echo "FAIL $name (does not compile)"
		failed+=("$name")
		continue
	fi

	echo "=== $name"
	rc=0
	# The programs stop themselves after 60 s (alarm); timeout is a backstop.
	FI_PROVIDER_PATH="$provdir" FI_PROVIDER=oxmr \
		timeout -k 5 120 "$exe" || rc=$?
	if [ "$rc" -eq 0 ]; then
		echo "PASS $name"
		passed+=("$name")
	else
		echo "FAIL $name (exit status $rc)"
		failed+=("$name")
	fi
done

# Extra runs of programs built above, under other settings; each is its own
# PASS/FAIL (or SKIP, with the reason) line and counts in the summary.
total=${#sources[@]}
skipped=()

# extra_run <label> <program> [VAR=value ...] [wrapper command ...]
# runs: env FI_PROVIDER_PATH=... FI_PROVIDER=oxmr VAR=value ... wrapper ... \
#       timeout ... <program>
extra_run() {
	local label="$1" name="$2" rc=0
	local exe="$bin/$name"
	shift 2
	total=$((total + 1))
	# (a binary older than its source is a stale one: this build failed)
	if [ ! -x "$exe" ] || [ "$here/unit/$name.c" -nt "$exe" ]; then
		echo "FAIL $label (program $name was not built)"
		failed+=("$label")
		return
	fi
	echo "=== $label"
	env FI_PROVIDER_PATH="$provdir" FI_PROVIDER=oxmr "$@" \
		timeout -k 5 120 "$exe" || rc=$?
	if [ "$rc" -eq 0 ]; then
		echo "PASS $label"
		passed+=("$label")
	else
		echo "FAIL $label (exit status $rc)"
		failed+=("$label")
	fi
}

skip_run() {
	total=$((total + 1))
	echo "SKIP $1 ($2)"
	skipped+=("$1")
}

# The same-host data path with shared copies (both processes copy a large
# transfer, shm/jobs.rs) from 8 KiB up in 4 KiB chunks, and with them off.
extra_run "xfer[FI_OXMR_SHM_SHARE_MIN=8192,FI_OXMR_SHM_SHARE_CHUNK=4096]" xfer \
	FI_OXMR_SHM_SHARE_MIN=8192 FI_OXMR_SHM_SHARE_CHUNK=4096
extra_run "xfer[FI_OXMR_SHM_SHARE_MIN=0]" xfer FI_OXMR_SHM_SHARE_MIN=0
# Lone shared receives in jobs the receiver publishes (with a CTS), not in
# the jobs senders offer (FI_OXMR_SHM_SENDER_JOBS, on by default).
extra_run "xfer_share[FI_OXMR_SHM_SENDER_JOBS=0]" xfer_share FI_OXMR_SHM_SENDER_JOBS=0
extra_run "xfer_gone[FI_OXMR_SHM_SENDER_JOBS=0]" xfer_gone FI_OXMR_SHM_SENDER_JOBS=0
# Queued rendezvous receives of equal size each copied in a job of their
# own (not paired, docs/wire.md "Paired receives").
extra_run "xfer[FI_OXMR_SHM_PAIR_RECV=0]" xfer FI_OXMR_SHM_PAIR_RECV=0
# Queued RMA writes each copied alone (no runs copied together).
extra_run "xfer[FI_OXMR_SHM_WRITE_BATCH=0]" xfer FI_OXMR_SHM_WRITE_BATCH=0
# Registrations the cache does not hold are watched (and revoked) too.
extra_run "xfer_gone[FI_OXMR_MR_CACHE_EXPLICIT=0]" xfer_gone FI_OXMR_MR_CACHE_EXPLICIT=0
extra_run "xfer_bounce[FI_OXMR_SHM_SHARE_MIN=8192,FI_OXMR_SHM_SHARE_CHUNK=4096]" xfer_bounce \
	FI_OXMR_SHM_SHARE_MIN=8192 FI_OXMR_SHM_SHARE_CHUNK=4096

# Registration with mlock pinning, and with no pinning at all.
extra_run "mr[FI_OXMR_MR_PIN=mlock]" mr FI_OXMR_MR_PIN=mlock
extra_run "mr[FI_OXMR_MR_PIN=none]" mr FI_OXMR_MR_PIN=none
extra_run "mr_fork[FI_OXMR_MR_PIN=mlock]" mr_fork FI_OXMR_MR_PIN=mlock

# The pinned-bytes cap: from FI_OXMR_MR_MAX_PINNED (as root), then from
# RLIMIT_MEMLOCK for an unprivileged user (uid/gid 65534, no capabilities).
if [ "$(id -u)" -ne 0 ]; then
	skip_run "mr[memlock,FI_OXMR_MR_MAX_PINNED]" "needs root"
else
	extra_run "mr[memlock,FI_OXMR_MR_MAX_PINNED]" mr OXT_MR_MEMLOCK=root \
		FI_OXMR_MR_MAX_PINNED=1048576
fi
nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all)
if [ "$(id -u)" -ne 0 ]; then
	skip_run "mr[memlock,RLIMIT_MEMLOCK,uid 65534]" "needs root to switch to uid 65534"
elif ! command -v setpriv >/dev/null || ! command -v prlimit >/dev/null; then
	skip_run "mr[memlock,RLIMIT_MEMLOCK,uid 65534]" "setpriv or prlimit (util-linux) is missing"
elif ! "${nobody[@]}" test -x "$bin/mr" -a -r "$provdir/liboxmr-fi.so"; then
	skip_run "mr[memlock,RLIMIT_MEMLOCK,uid 65534]" "uid 65534 cannot run $bin/mr or read $provdir/liboxmr-fi.so"
else
	extra_run "mr[memlock,RLIMIT_MEMLOCK,uid 65534]" mr OXT_MR_MEMLOCK=user \
		"${nobody[@]}" prlimit --memlock=1048576:1048576
fi

# The registration cache (mr_cache.c): eviction by count and by size; as
# uid 65534 under RLIMIT_MEMLOCK 1 MiB, where pinning evicts unused entries;
# and the settings under which nothing is served from a cache.
extra_run "mr_cache[FI_OXMR_MR_CACHE_MAX_COUNT=4]" mr_cache FI_OXMR_MR_CACHE_MAX_COUNT=4
extra_run "mr_cache[FI_OXMR_MR_CACHE_MAX_SIZE=262144]" mr_cache FI_OXMR_MR_CACHE_MAX_SIZE=262144
if [ "$(id -u)" -ne 0 ]; then
	skip_run "mr_cache[memlock,RLIMIT_MEMLOCK,uid 65534]" "needs root to switch to uid 65534"
elif ! command -v setpriv >/dev/null || ! command -v prlimit >/dev/null; then
	skip_run "mr_cache[memlock,RLIMIT_MEMLOCK,uid 65534]" "setpriv or prlimit (util-linux) is missing"
elif ! "${nobody[@]}" test -x "$bin/mr_cache" -a -r "$provdir/liboxmr-fi.so"; then
	skip_run "mr_cache[memlock,RLIMIT_MEMLOCK,uid 65534]" "uid 65534 cannot run $bin/mr_cache or read $provdir/liboxmr-fi.so"
else
	extra_run "mr_cache[memlock,RLIMIT_MEMLOCK,uid 65534]" mr_cache OXT_MR_CACHE_MEMLOCK=user \
		"${nobody[@]}" prlimit --memlock=1048576:1048576
fi
# The physical-address fallback (mr_phys.c): the global opt-in, the pin
# modes that reach device memory by other paths, and an unprivileged user
# (no CAP_SYS_ADMIN: physical addresses hidden, the data path unchanged).
extra_run "mr_phys[FI_OXMR_MR_PHYS_FALLBACK=1]" mr_phys FI_OXMR_MR_PHYS_FALLBACK=1
extra_run "mr_phys[FI_OXMR_MR_PIN=mlock]" mr_phys FI_OXMR_MR_PIN=mlock
extra_run "mr_phys[FI_OXMR_MR_PIN=none]" mr_phys FI_OXMR_MR_PIN=none
if [ "$(id -u)" -ne 0 ]; then
	skip_run "mr_phys[uid 65534]" "needs root to switch to uid 65534"
elif ! command -v setpriv >/dev/null; then
	skip_run "mr_phys[uid 65534]" "setpriv (util-linux) is missing"
elif ! "${nobody[@]}" test -x "$bin/mr_phys" -a -r "$provdir/liboxmr-fi.so"; then
	skip_run "mr_phys[uid 65534]" "uid 65534 cannot run $bin/mr_phys or read $provdir/liboxmr-fi.so"
else
	extra_run "mr_phys[uid 65534]" mr_phys "${nobody[@]}"
fi

extra_run "mr_cache[FI_OXMR_MR_CACHE_ENABLE=0]" mr_cache FI_OXMR_MR_CACHE_ENABLE=0
extra_run "mr_cache[FI_OXMR_MR_CACHE_MONITOR=none]" mr_cache FI_OXMR_MR_CACHE_MONITOR=none
extra_run "mr_cache[FI_OXMR_MR_CACHE_EXPLICIT=0]" mr_cache FI_OXMR_MR_CACHE_EXPLICIT=0

echo
if [ ${#skipped[@]} -ne 0 ]; then
	echo "summary: ${#passed[@]} passed, ${#failed[@]} failed, ${#skipped[@]} skipped (of $total)"
	echo "skipped: ${skipped[*]}"
else
	echo "summary: ${#passed[@]} passed, ${#failed[@]} failed (of $total)"
fi
if [ ${#failed[@]} -ne 0 ]; then
	echo "failed: ${failed[*]}"
	exit 1
fi
exit 0
