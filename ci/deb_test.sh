#!/usr/bin/env bash
# Install the Debian package (ci/deb.sh) on this machine and check that
# libfabric finds oxmr with no FI_PROVIDER_PATH, that man finds fi_oxmr(7),
# and that the extension header is where a C program includes it from; then
# remove the package again (so that later runs use build/ as before). Root
# only: it installs into the system.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "ci/deb_test.sh: needs root (dpkg -i)" >&2; exit 1; }

tmp="$(mktemp -d)"
cleanup() {
	dpkg -r oxmr >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT

bash ci/deb.sh "$tmp"
deb="$(ls "$tmp"/oxmr_*.deb)"
dpkg-deb --info "$deb" | sed -n 's/^ *\(Package\|Version\|Depends\):/  &/p'
# (Minimal images exclude /usr/share/man from every package: not ours.)
dpkg -i --path-include=/usr/share/man/man7/fi_oxmr.7.gz "$deb" >/dev/null
so="$(pkg-config --variable=libdir libfabric)/libfabric/liboxmr-fi.so"
[ -f "$so" ] || { echo "ci/deb_test.sh: the package did not install $so" >&2; exit 1; }

out="$(env -u FI_PROVIDER_PATH fi_info -p oxmr)"
grep -q "provider: oxmr" <<<"$out" || { echo "ci/deb_test.sh: fi_info -p oxmr lists nothing without FI_PROVIDER_PATH" >&2; exit 1; }
echo "  fi_info -p oxmr (no FI_PROVIDER_PATH): $(grep -c 'provider: oxmr' <<<"$out") entries"

page="$(man -w fi_oxmr)"
[ -n "$page" ] || { echo "ci/deb_test.sh: man -w fi_oxmr finds nothing" >&2; exit 1; }
echo "  man -w fi_oxmr: $page"

printf '#include <rdma/fabric.h>\n#include <rdma/fi_ext_oxmr.h>\nint main(void) { return OXMR_MR_PHYS_FALLBACK == 0; }\n' >"$tmp/h.c"
gcc -Wall -Werror -o "$tmp/h" "$tmp/h.c"
echo "  <rdma/fi_ext_oxmr.h> compiles from /usr/include"

dpkg -r oxmr >/dev/null
[ ! -e "$so" ] || { echo "ci/deb_test.sh: dpkg -r left $so behind" >&2; exit 1; }
echo "ci/deb_test.sh: the package installs, is found by fi_info and man, and removes cleanly"
