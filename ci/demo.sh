#!/usr/bin/env bash
# Set up, build, and show oxmr working inside libfabric: fi_info lists it,
# then libfabric's own fi_pingpong moves data between two processes over it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
bash ci/build.sh
export FI_PROVIDER_PATH="$(pwd)/build"
echo
echo "== fi_info -p oxmr -t FI_EP_RDM  (FI_PROVIDER_PATH=$FI_PROVIDER_PATH)"
fi_info -p oxmr -t FI_EP_RDM
echo
echo "== fi_pingpong over oxmr: two processes on this host, RDM endpoints"
port=$((20000 + RANDOM % 20000))
timeout 60 fi_pingpong -p oxmr -e rdm -B "$port" -I 1000 >/tmp/oxmr-demo-server.log 2>&1 &
server=$!
sleep 1
timeout 60 fi_pingpong -p oxmr -e rdm -P "$port" -I 1000 127.0.0.1
wait "$server"
echo
echo "demo: fi_pingpong completed over oxmr"
