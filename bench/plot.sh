#!/usr/bin/env bash
# Draws docs/img/sweep.svg from the data files of bench/sweep.sh: four
# panels, latency and bandwidth across message sizes, on one host and
# across two network namespaces (a veth pair: TCP), each with oxmr and the
# transport it is compared with under fi_pingpong and under Open MPI.
# Installs gnuplot (Debian: gnuplot-nox) with apt-get when it is missing.
#
# usage: bench/plot.sh [datadir] [out.svg]   (defaults: docs/img/data, docs/img/sweep.svg)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
data="${1:-$here/../docs/img/data}"
svg="${2:-$here/../docs/img/sweep.svg}"

if ! command -v gnuplot >/dev/null; then
	echo "plot: installing gnuplot-nox" >&2
	apt-get install -y gnuplot-nox >/dev/null || { apt-get update >/dev/null && apt-get install -y gnuplot-nox >/dev/null; }
fi
for s in fi-host-oxmr fi-host-shm fi-ns-oxmr fi-ns-tcp mpi-host-oxmr mpi-host-vader mpi-ns-oxmr mpi-ns-tcp; do
	[ -s "$data/$s.tsv" ] || { echo "plot: $data/$s.tsv missing or empty (run bench/sweep.sh)" >&2; exit 1; }
done
# The first line of the data's README (when, where) goes under the title.
when="$(head -1 "$data/README" 2>/dev/null | sed 's/"/\\"/g' || true)"
mkdir -p "$(dirname "$svg")"

gnuplot <<GP
set terminal svg size 1100,800 dynamic enhanced font "sans,12" background rgb "white"
set output "$svg"
set datafile separator "\t"
set logscale x 2
set logscale y 10
set format x "%.0s%cB"
set xtics ("1 B" 1, "16 B" 16, "256 B" 256, "4 KiB" 4096, "64 KiB" 65536, "1 MiB" 1048576)
set grid xtics ytics lc rgb "#dddddd"
set key top left font ",10" samplen 2
set style line 1 lc rgb "#d62728" lw 2 pt 7 ps 0.5
set style line 2 lc rgb "#1f77b4" lw 2 pt 5 ps 0.5
set style line 3 lc rgb "#d62728" lw 2 dt 2 pt 6 ps 0.5
set style line 4 lc rgb "#1f77b4" lw 2 dt 2 pt 4 ps 0.5
set multiplot layout 2,2 title "oxmr: ping-pong latency and bandwidth across message sizes\n{/*0.8 $when}"

set title "one host: latency (half round trip, lower is better)"
set ylabel "us"
plot "$data/fi-host-oxmr.tsv" u 1:2 w lp ls 1 t "fi\\\\_pingpong oxmr", \
     "$data/fi-host-shm.tsv" u 1:2 w lp ls 2 t "fi\\\\_pingpong shm", \
     "$data/mpi-host-oxmr.tsv" u 1:2 w lp ls 3 t "Open MPI over oxmr", \
     "$data/mpi-host-vader.tsv" u 1:2 w lp ls 4 t "Open MPI btl vader"

set title "one host: bandwidth (bytes over half round trip, higher is better)"
set ylabel "MB/s"
plot "$data/fi-host-oxmr.tsv" u 1:3 w lp ls 1 t "fi\\\\_pingpong oxmr", \
     "$data/fi-host-shm.tsv" u 1:3 w lp ls 2 t "fi\\\\_pingpong shm", \
     "$data/mpi-host-oxmr.tsv" u 1:3 w lp ls 3 t "Open MPI over oxmr", \
     "$data/mpi-host-vader.tsv" u 1:3 w lp ls 4 t "Open MPI btl vader"

set title "two network namespaces (TCP over veth): latency"
set ylabel "us"
plot "$data/fi-ns-oxmr.tsv" u 1:2 w lp ls 1 t "fi\\\\_pingpong oxmr (TCP wire)", \
     "$data/fi-ns-tcp.tsv" u 1:2 w lp ls 2 t "fi\\\\_pingpong tcp", \
     "$data/mpi-ns-oxmr.tsv" u 1:2 w lp ls 3 t "Open MPI over oxmr", \
     "$data/mpi-ns-tcp.tsv" u 1:2 w lp ls 4 t "Open MPI btl tcp"

set title "two network namespaces (TCP over veth): bandwidth"
set ylabel "MB/s"
plot "$data/fi-ns-oxmr.tsv" u 1:3 w lp ls 1 t "fi\\\\_pingpong oxmr (TCP wire)", \
     "$data/fi-ns-tcp.tsv" u 1:3 w lp ls 2 t "fi\\\\_pingpong tcp", \
     "$data/mpi-ns-oxmr.tsv" u 1:3 w lp ls 3 t "Open MPI over oxmr", \
     "$data/mpi-ns-tcp.tsv" u 1:3 w lp ls 4 t "Open MPI btl tcp"
unset multiplot
GP
echo "plot: $svg" >&2
