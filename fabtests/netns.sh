#!/usr/bin/env bash
# Two "hosts" on this machine, for tests that cross a network: two network
# namespaces joined by a veth pair, 198.18.0.1/24 and 198.18.0.2/24 (the
# benchmarking range, never a real network's). Source this file, then:
#
#   netns_up <tag>     creates oxmr-<tag>-<pid>-a and -b (NETNS_A, NETNS_B),
#                      first deleting those of earlier runs whose shell died
#   netns_down         deletes them (call it from an EXIT trap: also on failure)
#
# Needs root and ip (iproute2). `ip netns exec` changes only the network
# namespace: processes in both still share /dev/shm, pids and CMA, and oxmr
# picks TCP for a peer whose address is not one of its namespace's own.
NETNS_ADDR_A=198.18.0.1
NETNS_ADDR_B=198.18.0.2
# (On the veth subnet, but no host has it: a connect there gets no answer.)
NETNS_ADDR_NOBODY=198.18.0.3

netns_up() {
	local tag="$1" ns pid
	for ns in $(ip netns list | awk '{print $1}' | grep "^oxmr-$tag-[0-9]*-[ab]\$" || true); do
		pid="${ns#oxmr-"$tag"-}"
		pid="${pid%-*}"
		kill -0 "$pid" 2>/dev/null || ip netns del "$ns" 2>/dev/null || true
	done
	NETNS_A="oxmr-$tag-$$-a"
	NETNS_B="oxmr-$tag-$$-b"
	ip netns add "$NETNS_A"
	ip netns add "$NETNS_B"
	ip link add "oxm$$a" type veth peer name "oxm$$b"
	ip link set "oxm$$a" netns "$NETNS_A"
	ip link set "oxm$$b" netns "$NETNS_B"
	ip -n "$NETNS_A" addr add "$NETNS_ADDR_A/24" dev "oxm$$a"
	ip -n "$NETNS_B" addr add "$NETNS_ADDR_B/24" dev "oxm$$b"
	for ns in "$NETNS_A" "$NETNS_B"; do
		ip -n "$ns" link set lo up
	done
	ip -n "$NETNS_A" link set "oxm$$a" up
	ip -n "$NETNS_B" link set "oxm$$b" up
}

netns_down() {
	[ -n "${NETNS_A:-}" ] && ip netns del "$NETNS_A" 2>/dev/null || true
	[ -n "${NETNS_B:-}" ] && ip netns del "$NETNS_B" 2>/dev/null || true
}

# netns_mpi_hosts <dir>: after netns_up, write <dir>/agent, mpirun's remote
# shell for the two namespaces (`agent [options] <host> <command...>` runs
# the command in the namespace that owns <host>'s address), and
# <dir>/hosts, a hostfile with one slot on each (use both with
# `--hostfile <dir>/hosts --mca plm_rsh_agent <dir>/agent`).
netns_mpi_hosts() {
	local dir="$1"
	cat >"$dir/agent" <<AGENT
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host="\$1"
shift
case "\$host" in
$NETNS_ADDR_A) ns="$NETNS_A" ;;
$NETNS_ADDR_B) ns="$NETNS_B" ;;
*) echo "netns agent: no namespace for host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
AGENT
	chmod +x "$dir/agent"
	printf '%s slots=1\n%s slots=1\n' "$NETNS_ADDR_A" "$NETNS_ADDR_B" >"$dir/hosts"
}
