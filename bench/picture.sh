#!/usr/bin/env bash
# One command for the README's picture: measure (bench/sweep.sh, needs
# root, fi_pingpong and Open MPI), then draw docs/img/sweep.svg
# (bench/plot.sh, gnuplot). The data files stay in docs/img/data/ beside
# it, with a README saying when, where and on which build they were taken.
# Holds /tmp/oxmr-mp.lock while it measures, so no multi-process test runs
# at the same time. Run it on a quiet machine.
#
# usage: bash bench/picture.sh <dir-containing-liboxmr-fi.so>   (e.g. build, after bash ci/build.sh)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[ $# -eq 1 ] || { echo "usage: $0 <dir-containing-liboxmr-fi.so>" >&2; exit 2; }
flock /tmp/oxmr-mp.lock bash "$here/sweep.sh" "$1" "$here/../docs/img/data"
bash "$here/plot.sh" "$here/../docs/img/data" "$here/../docs/img/sweep.svg"
