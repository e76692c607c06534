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
		-I "$here/common" $cflags -o "$exe" "$src" $libs; then
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

echo
echo "summary: ${#passed[@]} passed, ${#failed[@]} failed (of ${#sources[@]})"
if [ ${#failed[@]} -ne 0 ]; then
	echo "failed: ${failed[*]}"
	exit 1
fi
exit 0
