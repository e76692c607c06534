#!/usr/bin/env bash
# Install what building and testing oxmr needs on Debian bookworm (as root,
# or with sudo): libfabric 1.17 headers and tools, a C compiler, libclang
# for bindgen, cbindgen for the extension header, and what the man page and
# Debian package checks use (groff, man-db, dpkg-dev), and Open MPI for
# fabtests/mpi.sh (openmpi-bin, libopenmpi-dev). Idempotent.
set -euo pipefail

need=()
for p in libfabric-dev libfabric-bin pkg-config gcc clang libclang-dev iproute2 util-linux groff-base man-db dpkg-dev openmpi-bin libopenmpi-dev; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if ((${#need[@]})); then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "ci/setup.sh: installing ${need[*]}"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need[@]}"
fi

for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c" || true
done

if ! command -v cbindgen >/dev/null 2>&1; then
    echo "ci/setup.sh: installing cbindgen"
    cargo install cbindgen --locked --version 0.29.4
fi
