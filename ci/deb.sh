#!/usr/bin/env bash
# Build a Debian package of oxmr from build/liboxmr-fi.so (run ci/build.sh
# first): the provider where libfabric looks for providers,
# $(pkg-config --variable=libdir libfabric)/libfabric/liboxmr-fi.so, the
# extension header in /usr/include/rdma/, and fi_oxmr(7). It depends on the
# libfabric1 package at least as new as the headers it was built against
# (oxmr declares that API version, and an older libfabric skips it), and on
# what dpkg-shlibdeps finds for libc and libgcc.
#
# usage: ci/deb.sh [outdir]       (default: build/) -> <outdir>/oxmr_<version>-1_<arch>.deb
#
# Needs dpkg-dev (dpkg-deb, dpkg-shlibdeps) and a libfabric from a Debian
# package; for a libfabric installed elsewhere, install the provider with
# `ci/build.sh install` instead.
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-build}"
so=build/liboxmr-fi.so
[ -f "$so" ] || { echo "ci/deb.sh: no $so; run ci/build.sh first" >&2; exit 2; }
[ -f man/fi_oxmr.7 ] || { echo "ci/deb.sh: no man/fi_oxmr.7" >&2; exit 2; }

version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
arch="$(dpkg --print-architecture)"
libdir="$(pkg-config --variable=libdir libfabric)"
fabver="$(pkg-config --modversion libfabric)"
# The runtime package (libfabric1) whose library the headers describe.
runtime="$(dpkg -S "$(readlink -f "$libdir/libfabric.so.1")" 2>/dev/null | cut -d: -f1 | head -1 || true)"
if [ -z "$runtime" ]; then
	echo "ci/deb.sh: the libfabric in $libdir belongs to no Debian package, so a package cannot depend on it; install with ci/build.sh install instead" >&2
	exit 2
fi

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
install -D -m 0644 "$so" "$stage/$libdir/libfabric/liboxmr-fi.so"
install -D -m 0644 include/rdma/fi_ext_oxmr.h "$stage/usr/include/rdma/fi_ext_oxmr.h"
install -d "$stage/usr/share/man/man7"
gzip -9n <man/fi_oxmr.7 >"$stage/usr/share/man/man7/fi_oxmr.7.gz"
install -d "$stage/usr/share/doc/oxmr"
cat >"$stage/usr/share/doc/oxmr/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: oxmr

Files: *
Copyright: the oxmr developers
License: BSD-2-Clause
EOF

# Shared-library dependencies as dpkg-shlibdeps sees them, with libfabric's
# raised to the version built against.
shl="$(mktemp -d)"
mkdir -p "$shl/debian"
printf 'Source: oxmr\n\nPackage: oxmr\nArchitecture: any\n' >"$shl/debian/control"
deps="$(cd "$shl" && dpkg-shlibdeps -O -e "$OLDPWD/$so" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')"
rm -rf "$shl"
deps="$(sed -E "s/$runtime( \([^)]*\))?/$runtime (>= $fabver)/" <<<"$deps")"
grep -q "$runtime (>= $fabver)" <<<"$deps" || deps="$deps, $runtime (>= $fabver)"

size="$(du -sk "$stage" | cut -f1)"
install -d "$stage/DEBIAN"
cat >"$stage/DEBIAN/control" <<EOF
Package: oxmr
Version: $version-1
Architecture: $arch
Maintainer: oxmr developers <oxmr@localhost>
Installed-Size: $size
Depends: $deps
Section: libs
Priority: optional
Description: oxmr libfabric provider (memory registration done right)
 A libfabric provider, loaded by libfabric from its provider directory and
 selected with FI_PROVIDER=oxmr: pinned registrations with real keys and
 access checks, a lazy-deregistration cache kept honest by userfaultfd, and
 a same-host shared-memory wire. See fi_oxmr(7).
 Built against libfabric $fabver headers.
EOF

mkdir -p "$out"
deb="$out/oxmr_${version}-1_${arch}.deb"
dpkg-deb --root-owner-group --build "$stage" "$deb" >/dev/null
echo "ci/deb.sh: built $deb (Depends: $deps)"
