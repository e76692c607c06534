#!/usr/bin/env bash
# Set up, build, and show oxmr working inside libfabric: fi_info loads
# liboxmr-fi.so through FI_PROVIDER_PATH and lists oxmr's endpoints.
# (Once the data path lands, this runs a real transfer.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
bash ci/build.sh
export FI_PROVIDER_PATH="$(pwd)/build"
echo
echo "== fi_info -p oxmr  (FI_PROVIDER_PATH=$FI_PROVIDER_PATH)"
fi_info -p oxmr
echo
echo "== fi_info -p oxmr -e | grep FI_OXMR"
fi_info -p oxmr -e | grep -a -A1 FI_OXMR
