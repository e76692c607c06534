#!/usr/bin/env bash
# Build liboxmr-fi.so into build/ (usable as FI_PROVIDER_PATH).
# `ci/build.sh install` also copies it into libfabric's provider directory,
# $(pkg-config --variable=libdir libfabric)/libfabric/, so that no
# FI_PROVIDER_PATH is needed.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release -p oxmr
mkdir -p build
# libfabric loads only files named lib<name>-fi.so.
install -m 0755 target/release/liboxmr.so build/liboxmr-fi.so
echo "ci/build.sh: built $(pwd)/build/liboxmr-fi.so (FI_PROVIDER_PATH=$(pwd)/build)"

if [ "${1:-}" = "install" ]; then
    dir="$(pkg-config --variable=libdir libfabric)/libfabric"
    mkdir -p "$dir"
    install -m 0755 build/liboxmr-fi.so "$dir/liboxmr-fi.so"
    echo "ci/build.sh: installed $dir/liboxmr-fi.so"
fi
