#!/usr/bin/env bash
# Open MPI over oxmr: fabtests/mpi/check.c (point-to-point 0 B..4 MiB with
# every byte checked, MPI_Probe/MPI_Iprobe, MPI_Mprobe/MPI_Mrecv,
# MPI_Allreduce and MPI_Bcast) with two ranks through Open MPI's cm PML and
# ofi MTL, selecting oxmr:
#
#   1. a control run whose program corrupts one received byte on purpose
#      (OXMR_MPI_CHECK_BREAK=1): it must fail, or the checks prove nothing;
#   2. both ranks on this host (shared memory: no pull over TCP in oxmr's log);
#   3. the ranks in two network namespaces joined by a veth pair
#      (198.18.0.1/24 and 198.18.0.2/24, created here and deleted on exit,
#      also on failure): mpirun runs in the first, and its plm_rsh_agent
#      starts the other rank's daemon with `ip netns exec` in the second.
#      oxmr's log must show the large messages pulled from the peer's
#      198.18.0.x address (the TCP wire's push path);
#   4. the same with a job key (mpirun -x FI_OXMR_AUTH_KEY): passes, and
#      oxmr's log shows the connections proved it;
#   5. the ranks holding different keys: the job must fail within 60 s
#      (no hang), with oxmr's line that the peer does not hold the key.
#
# Then MPI one-sided communication, fabtests/mpi/onesided.c (MPI_Put/MPI_Get
# 1 B..4 MiB under fence, lock and lock_all, accumulates, get_accumulate,
# fetch_and_op, compare_and_swap; MPI_Win_allocate and MPI_Win_create):
#
#   6. a control run whose program corrupts one checked byte: it must fail;
#   7. Open MPI's osc pt2pt (one-sided over the cm PML, the ofi MTL and
#      oxmr's tagged messages), on this host and across the namespaces;
#   8. unless OXMR_MPI_OSC_RDMA=0: Open
#      MPI's osc rdma over btl ofi over oxmr (fi_write/fi_read/fi_atomic/
#      fi_fetch_atomic/fi_compare_atomic), on this host and across the
#      namespaces. The osc and btl frameworks' verbose output must show osc
#      rdma (never osc pt2pt) and btl ofi initialised on every rank, and
#      oxmr's log RMA and atomics arriving at targets; the control run (6)
#      is then an osc rdma run.
#
# usage: fabtests/mpi.sh <dir-containing-liboxmr-fi.so>
# Exits 0 when every run did what it must, 1 otherwise (a failed check, a
# hang: each run is bounded by `timeout`), 77 with a "skip - mpi: ..." line
# when this machine lacks what it needs (not root, no mpicc or ip).
set -euo pipefail

[ $# -eq 1 ] && [ -f "$1/liboxmr-fi.so" ] || {
	echo "usage: $0 <dir-containing-liboxmr-fi.so>" >&2
	exit 2
}
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
provdir="$(cd "$1" && pwd)"

skip() {
	echo "skip - mpi: $*"
	exit 77
}
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
for t in mpicc mpirun ip timeout; do
	command -v "$t" >/dev/null || skip "$t is missing (ci/setup.sh installs openmpi-bin, libopenmpi-dev and iproute2)"
done

tmp="$(mktemp -d)"
# shellcheck source=fabtests/netns.sh
. "$here/netns.sh"
cleanup() {
	netns_down
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

mpicc -std=gnu11 -O1 -g -Wall -Wextra -Werror -o "$tmp/check" "$here/mpi/check.c"
mpicc -std=gnu11 -O1 -g -Wall -Wextra -Werror -o "$tmp/onesided" "$here/mpi/onesided.c"

export FI_PROVIDER_PATH="$provdir" FI_PROVIDER=oxmr
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2
	--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include oxmr
	-x FI_PROVIDER_PATH -x FI_PROVIDER -x FI_LOG_LEVEL -x FI_LOG_PROV -x OXMR_MPI_CHECK_BREAK -x OXMR_OSC_SKIP)
export FI_LOG_LEVEL=debug FI_LOG_PROV=oxmr OXMR_MPI_CHECK_BREAK=0 OXMR_OSC_SKIP=
failed=0

# run <label> <expect: pass|fail> <command...>: the job's output in
# $tmp/out, oxmr's log (stderr) in $tmp/log. A passing run prints the line
# "$SUMMARY: 0 of N checks failed" (SUMMARY=check unless set).
run() {
	local label="$1" expect="$2" rc=0
	shift 2
	echo "--- mpi: $label"
	timeout -k 5 "${RUN_LIMIT:-120}" "$@" >"$tmp/out" 2>"$tmp/log" || rc=$?
	cat "$tmp/out"
	grep -a -e 'rank [0-9]: FAIL' -e '<warn>' -e 'rror' "$tmp/log" | tail -n 20 || true
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		echo "FAIL mpi: $label: no end within ${RUN_LIMIT:-120} s (a hang)"
		failed=1
		return 1
	fi
	if [ "$expect" = refused ]; then
		# (A failed inject has no op_context, fi_cq(3); Open MPI 4.1's ofi
		# MTL dereferences the context of every error entry and so may die
		# of SIGSEGV in ompi_mtl_ofi_progress. That is its end, not a
		# crash of oxmr's: a signal with a frame of oxmr's in the trace is.)
		if grep -q "liboxmr" "$tmp/log"; then
			echo "FAIL mpi: $label: a backtrace names oxmr"
			failed=1
			return 1
		fi
		if [ "$rc" -ne 0 ] && grep -q "does not hold th[a-z]* job's key" "$tmp/log"; then
			echo "ok - mpi: $label: failed as it must (exit $rc), with the line that the key differs"
			return 0
		fi
		echo "FAIL mpi: $label: exit $rc, or no log line saying the peer does not hold the key"
		failed=1
		return 1
	fi
	if [ "$expect" = fail ]; then
		if [ "$rc" -ne 0 ] && grep -aq "rank [0-9]*: FAIL" "$tmp/log"; then
			echo "ok - mpi: $label: failed as it must (exit $rc)"
			return 0
		fi
		echo "FAIL mpi: $label: a corrupted byte went unnoticed (exit $rc)"
		failed=1
		return 1
	fi
	if [ "$rc" -ne 0 ] || ! grep -q "^${SUMMARY:-check}: 0 of [1-9][0-9]* checks failed" "$tmp/out"; then
		echo "FAIL mpi: $label: exit $rc"
		failed=1
		return 1
	fi
	echo "ok - mpi: $label"
}

OXMR_MPI_CHECK_BREAK=1 run "control: a corrupted byte fails the program" fail "${mpi[@]}" "$tmp/check" || true

if run "two ranks on this host" pass "${mpi[@]}" "$tmp/check"; then
	if grep -q "pulling .* bytes from" "$tmp/log"; then
		echo "FAIL mpi: two ranks on this host: oxmr pulled data from its peer (the TCP wire's path) between processes of one host"
		failed=1
	fi
fi

# (Unique per run: two runs at once, or one left over, never collide.)
netns_up mpi
nsa="$NETNS_A"

# mpirun's remote shell and hostfile for the two namespaces.
netns_mpi_hosts "$tmp"

if run "two ranks in two network namespaces (198.18.0.1, 198.18.0.2)" pass \
	ip netns exec "$nsa" "${mpi[@]}" --hostfile "$tmp/hosts" --mca plm_rsh_agent "$tmp/agent" \
	--mca oob_tcp_if_include 198.18.0.0/24 "$tmp/check"; then
	for who in 198.18.0.1 198.18.0.2; do
		if ! grep -q "pulling 4194304 bytes from $who:" "$tmp/log"; then
			echo "FAIL mpi: two namespaces: oxmr's log shows no 4 MiB message pulled from $who (the TCP wire)"
			failed=1
		fi
	done
fi

# A job key (docs/security.md): every rank the same, given the way a user
# would, with mpirun -x.
across=(ip netns exec "$nsa" "${mpi[@]}" --hostfile "$tmp/hosts" --mca plm_rsh_agent "$tmp/agent"
	--mca oob_tcp_if_include 198.18.0.0/24)
export FI_OXMR_AUTH_KEY="fabtests/mpi.sh: this job's key, 40 bytes"
if run "two namespaces, both ranks with the job key (-x FI_OXMR_AUTH_KEY)" pass \
	"${across[@]}" -x FI_OXMR_AUTH_KEY "$tmp/check"; then
	if ! grep -q "proved the job key" "$tmp/log"; then
		echo "FAIL mpi: keyed: oxmr's log shows no connection that proved the job key"
		failed=1
	fi
	if grep -q "not authenticated" "$tmp/log"; then
		echo "FAIL mpi: keyed: oxmr says its peers are not authenticated"
		failed=1
	fi
fi
unset FI_OXMR_AUTH_KEY
# Each rank its own key: a job whose ranks cannot prove one key to each
# other fails, soon, and says why.
cat >"$tmp/own_key" <<'KEY'
#!/bin/sh
FI_OXMR_AUTH_KEY="the key of rank ${OMPI_COMM_WORLD_RANK:-?} alone, 40 bytes" exec "$@"
KEY
chmod +x "$tmp/own_key"
RUN_LIMIT=60 run "two namespaces, each rank with a key of its own" refused \
	"${across[@]}" "$tmp/own_key" "$tmp/check" || true

# --- One-sided (fabtests/mpi/onesided.c).
# osc pt2pt: MPI_Put & co. as messages of the cm PML (oxmr's tagged path).
# osc rdma: through btl ofi, which needs FI_RMA|FI_ATOMIC (oxmr offers
# both). OXMR_MPI_OSC_RDMA=0 leaves these runs out (default 1).
osc_rdma="${OXMR_MPI_OSC_RDMA:-1}"
# (osc_base_verbose 1: a line per window freed, naming the component;
# btl_base_verbose 10: whether each btl component's init succeeded, which
# for btl ofi is necessary, not sufficient: with no usable provider but a
# successful fi_getinfo it still says success. The proof is that osc rdma
# ran at all: with --mca btl self,ofi, ofi is the only btl with atomics,
# and osc rdma takes no btl without them.)
pt2pt=(--mca osc pt2pt --mca osc_base_verbose 1)
rdma=(--mca osc rdma --mca btl self,ofi --mca btl_ofi_provider_include oxmr
	--mca osc_base_verbose 1 --mca btl_base_verbose 10)
# Open MPI 4.1.4 bugs onesided.c must step around under osc rdma over btl
# ofi (OXMR_OSC_SKIP; fabtests/mpi/onesided.c says more):
#  - btl ofi turns only ADD and SWAP into fi ops and exits ("Unknown or
#    unsupported atomic op.") on the MPI_MAX of an int that osc rdma hands
#    it as a network atomic (opal/mca/btl/ofi/btl_ofi_atomics.c:17-31):
#    int_max, everywhere;
#  - ranks all on one host: MPI_Compare_and_swap on memory osc rdma keeps
#    local (an allocated window; a rank's own created one) calls the btl's
#    cswap with no endpoint or handle: SIGSEGV (fixed in 4.1.5):
#    cas_allocate and cas_create, on one host only.
skip_host=int_max,cas_allocate,cas_create
skip_across=int_max
# (Per window and rank a onesided run does 1250 fetch_and_ops and CASes,
# a flush after each: a slow path takes minutes, not seconds (libfabric's
# sockets provider under btl ofi: 114 s across the namespaces). A hang
# still ends.)
osc_limit="${RUN_LIMIT:-300}"

# osc_ok <label> <ranks> <rdma|pt2pt>: after a passing run, the frameworks'
# verbose lines say which osc component freed the windows (2 per rank),
# and for rdma that btl ofi came up on every rank and oxmr carried RMA
# (message op 4/5 WRITE, 6 READ at the target) and atomics (an op above
# 10, the ops of the wire before FI_ATOMIC) -- no silent osc pt2pt.
osc_ok() {
	local label="$1" ranks="$2" want="$3" other n ok=1
	other=pt2pt
	[ "$want" = pt2pt ] && other=rdma
	# (Open MPI's verbose lines go to stderr, with oxmr's log; counted as
	# occurrences, not lines: two ranks' lines can land on one. Each rank
	# frees two windows; at least one line per rank must be there (a
	# rank's last line can be lost when it exits), and none may name the
	# other component.)
	n=$(cat "$tmp/out" "$tmp/log" | grep -ao "$want component destroying window" | wc -l || true)
	if [ "$n" -lt "$ranks" ]; then
		echo "FAIL mpi: $label: $n window(s) freed by osc $want, want at least $ranks (two per rank)"
		ok=0
	fi
	if grep -aq "$other component destroying window" "$tmp/out" "$tmp/log"; then
		echo "FAIL mpi: $label: windows went to osc $other, not osc $want"
		ok=0
	fi
	if [ "$want" = rdma ]; then
		n=$(cat "$tmp/out" "$tmp/log" | grep -ac "init of component ofi returned success" || true)
		if [ "$n" -ne "$ranks" ]; then
			echo "FAIL mpi: $label: btl ofi came up on $n of $ranks ranks"
			ok=0
		fi
		if ! grep -aEq "message op [45] " "$tmp/log" || ! grep -aq "message op 6 " "$tmp/log"; then
			echo "FAIL mpi: $label: oxmr's log shows no RMA write and read at a target (message op 4/5, 6)"
			ok=0
		fi
		if ! grep -aEq "message op (1[1-9]|[2-9][0-9]) " "$tmp/log"; then
			echo "FAIL mpi: $label: oxmr's log shows no atomic at a target (a message op above 10)"
			ok=0
		fi
	fi
	if [ "$ok" -ne 1 ]; then
		failed=1
		return 1
	fi
	echo "ok - mpi: $label: osc $want$([ "$want" = rdma ] && echo " over btl ofi and oxmr")"
}

if [ "$osc_rdma" = 1 ]; then
	OXMR_MPI_CHECK_BREAK=1 OXMR_OSC_SKIP=$skip_host SUMMARY=onesided RUN_LIMIT=$osc_limit \
		run "control: a corrupted byte fails onesided (osc rdma)" fail "${mpi[@]}" "${rdma[@]}" "$tmp/onesided" || true
else
	OXMR_MPI_CHECK_BREAK=1 SUMMARY=onesided RUN_LIMIT=$osc_limit \
		run "control: a corrupted byte fails onesided (osc pt2pt)" fail "${mpi[@]}" "${pt2pt[@]}" "$tmp/onesided" || true
fi

label="onesided, osc pt2pt over oxmr, two ranks on this host"
if SUMMARY=onesided RUN_LIMIT=$osc_limit run "$label" pass "${mpi[@]}" "${pt2pt[@]}" "$tmp/onesided"; then
	osc_ok "$label" 2 pt2pt || true
fi
label="onesided, osc pt2pt over oxmr, two namespaces"
if SUMMARY=onesided RUN_LIMIT=$osc_limit run "$label" pass "${across[@]}" "${pt2pt[@]}" "$tmp/onesided"; then
	osc_ok "$label" 2 pt2pt || true
	for who in 198.18.0.1 198.18.0.2; do
		if ! grep -q "pulling [0-9]* bytes from $who:" "$tmp/log"; then
			echo "FAIL mpi: $label: oxmr's log shows no large message pulled from $who (the TCP wire)"
			failed=1
		fi
	done
fi
if [ "$osc_rdma" = 1 ]; then
	label="onesided, osc rdma over btl ofi over oxmr, two ranks on this host"
	if OXMR_OSC_SKIP=$skip_host SUMMARY=onesided RUN_LIMIT=$osc_limit run "$label" pass "${mpi[@]}" "${rdma[@]}" "$tmp/onesided"; then
		osc_ok "$label" 2 rdma || true
	fi
	label="onesided, osc rdma over btl ofi over oxmr, two namespaces"
	if OXMR_OSC_SKIP=$skip_across SUMMARY=onesided RUN_LIMIT=$osc_limit run "$label" pass "${across[@]}" "${rdma[@]}" "$tmp/onesided"; then
		osc_ok "$label" 2 rdma || true
	fi
else
	echo "skip - mpi: onesided over osc rdma and btl ofi (OXMR_MPI_OSC_RDMA=0)"
fi

if [ "$failed" -ne 0 ]; then
	echo "mpi: FAILED"
	exit 1
fi
echo "mpi: all runs passed"
