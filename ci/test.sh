#!/usr/bin/env bash
# Everything CI checks, in order: formatting, clippy, the generated header,
# Rust tests, the release build, oxmr inside the real libfabric (fi_info),
# the man page against the variables, oxmr's own C tests under fabtests/,
# and the Debian package installed and removed. Installs what it needs
# first.
# If upstream fabtests are built locally, set OXMR_UPSTREAM_FABTESTS to their
# bin/ directory to also run the unit set (fabtests/upstream.sh); the
# bench/compare_*.sh scripts read the same variable (default there:
# /opt/ft117/bin). Here it stays opt-in: unset, no upstream test runs.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { echo; echo "=== $*"; }

step "setup"
bash ci/setup.sh

step "rustfmt"
cargo fmt --all -- --check

step "clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "generated header"
bash ci/header.sh --check

step "cargo test"
cargo test --workspace -- --test-threads=1

step "release build"
bash ci/build.sh

step "fi_info through libfabric"
export FI_PROVIDER_PATH="$(pwd)/build"
out=$(fi_info -p oxmr)
grep -q "type: FI_EP_RDM" <<<"$out" || { echo "fi_info lists no oxmr RDM endpoint" >&2; exit 1; }
grep -q "type: FI_EP_MSG" <<<"$out" || { echo "fi_info lists no oxmr MSG endpoint" >&2; exit 1; }
if grep -q "oxmr;" <<<"$out"; then echo "a utility provider layered over oxmr" >&2; exit 1; fi
# (captured first: grep -q stops reading early, and under pipefail the
# writer's SIGPIPE would fail the check)
vars=$(fi_info -p oxmr -e | tr -d '\0')
grep -q "FI_OXMR_IFACE" <<<"$vars" || { echo "fi_info -e does not list FI_OXMR_IFACE" >&2; exit 1; }
echo "fi_info: oxmr RDM and MSG entries present, variables listed"

step "man page fi_oxmr(7) against the variables oxmr defines"
bash ci/manpage.sh build

export OXMR_TEST_STRICT=1
step "oxmr C tests (fabtests/)"
bash fabtests/run.sh "$(pwd)/build"

if [ -n "${OXMR_UPSTREAM_FABTESTS:-}" ]; then
    step "upstream fabtests unit set"
    bash fabtests/upstream.sh "$OXMR_UPSTREAM_FABTESTS" "$(pwd)/build"
fi

step "Debian package: install, fi_info and man without FI_PROVIDER_PATH, remove"
if [ "$(id -u)" -eq 0 ]; then
    bash ci/deb_test.sh
else
    echo "ci/test.sh: the package install test needs root (CI runs as root); run: sudo bash ci/deb_test.sh" >&2
    exit 1
fi

echo
echo "ci/test.sh: all checks passed"
