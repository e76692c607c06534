#!/usr/bin/env bash
# The security invariants, each broken on purpose (a mutation) in a copy of
# the tree, and the suites run against it: every mutation must be caught by
# at least one Rust test and at least one C test (fabtests/). Prints, per
# mutation, the Rust tests and the C programs that failed; exits non-zero
# if any mutation is missed by either suite, or if a mutation no longer
# applies (the code it breaks has changed: update it here).
#
#   bash ci/mutations.sh            # all of them
#   bash ci/mutations.sh key-check  # one, by name
#
# Slow (a debug and a release build and both suites per mutation: about
# three minutes each on a 2-core machine), so CI does not run it. The
# copy is a git worktree of HEAD under $MUTATION_DIR (default
# /tmp/oxmr-mutations), builds share one target directory there, and the
# working tree is never touched.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=${MUTATION_DIR:-/tmp/oxmr-mutations}
mkdir -p "$work"
export CARGO_TARGET_DIR="$work/target"
tree="$work/tree"

# (The mutations themselves: ci/mutations.py.)
only=${1:-}
missed=0
summary=()
for name in $(python3 ci/mutations.py --list); do
	[ -n "$only" ] && [ "$only" != "$name" ] && continue
	echo "=== mutation $name"
	git worktree remove --force "$tree" 2>/dev/null
	rm -rf "$tree"
	# (The committed code: what the working tree holds besides is not
	# tried, so it can be edited while this runs.)
	git worktree add --detach --force "$tree" HEAD -q || exit 2
	python3 ci/mutations.py "$tree" "$name" || {
		summary+=("$name: no longer applies")
		missed=1
		continue
	}
	(cd "$tree" && git diff --stat | tail -1)
	log="$work/$name.rust.log"
	# (--no-fail-fast: every test binary runs, not just those before the
	# first failing one.)
	(cd "$tree" && timeout 900 cargo test --workspace --no-fail-fast -- --test-threads=1 >"$log" 2>&1)
	rust=$(grep -E '^test .* \.\.\. FAILED$' "$log" | sed 's/^test \(.*\) \.\.\. FAILED$/\1/' | sort -u | tr '\n' ' ')
	if grep -qE '^error\[E[0-9]+\]|could not compile' "$log"; then
		rust="(does not build: $(grep -m1 -E '^error\[E[0-9]+\]|could not compile' "$log"))"
	fi
	clog="$work/$name.c.log"
	(cd "$tree" && cargo build --release -p oxmr >"$clog" 2>&1 &&
		mkdir -p "$work/build" && install -m 0755 "$CARGO_TARGET_DIR/release/liboxmr.so" "$work/build/liboxmr-fi.so" &&
		timeout 900 bash fabtests/run.sh "$work/build" >>"$clog" 2>&1)
	# (The programs that failed, and their failed groups: "prog: N".)
	c=$( (grep -E '^FAIL [^-]' "$clog" | awk '{print $2}'
		grep -E '^FAIL - ' "$clog" | sed -E 's/^FAIL - ([^:]+: [0-9]+)\..*/group \1/') | sort -u | tr '\n' ';')
	echo "rust: ${rust:-nothing failed}"
	echo "C:    ${c:-nothing failed}"
	if [ -z "$rust" ] || [ -z "$c" ]; then
		missed=1
		summary+=("$name: MISSED (rust: ${rust:-none}; C: ${c:-none})")
	else
		summary+=("$name: caught (rust: $rust; C: $c)")
	fi
done
git worktree remove --force "$tree" 2>/dev/null
echo
echo "=== summary"
printf '%s\n' "${summary[@]}"
exit $missed
