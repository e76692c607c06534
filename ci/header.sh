#!/usr/bin/env bash
# Regenerate include/rdma/fi_ext_oxmr.h with cbindgen; with --check, fail
# (and show the diff) when the checked-in header is stale.
set -euo pipefail
cd "$(dirname "$0")/.."
out=include/rdma/fi_ext_oxmr.h
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
cbindgen --quiet --config cbindgen.toml --crate oxmr --output "$tmp"
if [ "${1:-}" = "--check" ]; then
    if ! diff -u "$out" "$tmp"; then
        echo "ci/header.sh: $out is stale; run 'bash ci/header.sh' and commit it" >&2
        exit 1
    fi
    echo "ci/header.sh: $out is up to date"
else
    mkdir -p "$(dirname "$out")"
    cp "$tmp" "$out"
    echo "ci/header.sh: wrote $out"
fi
