# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# tests/lib/net.sh: network helpers the script tests share (sourced by tests/agent/lib.sh,
# tests/faults/lib.sh, tests/faults/run.sh and tests/fanout/lib.sh, after tests/lib/proc.sh):
# TCP ports held for the test, and the teardown of network namespaces and links a test made.

# hold_ports VAR ADDR N [consecutive]: reserve N TCP ports of ADDR for the rest of the test
# and set VAR (not a name starting with _) to them, separated by spaces ("consecutive": P,
# P+1, ...). A process of the test's own (tests/lib/hold_ports.py, tracked, so cleanup kills
# it) keeps them bound without listening: no other test can be given them, while the program
# under test, which binds with SO_REUSEADDR, listens on them as on free ports, and until it
# does a connection is refused. This replaces "bind port 0, close, hand the number over",
# which raced parallel tests (issue 18).
hold_ports() {
	local _var=$1 _addr=$2 _n=$3 _how=${4:-} _out _pid _line
	_out=$(mktemp "$T/ports.XXXXXX") || fail "mktemp for hold_ports"
	python3 "$(dirname "${BASH_SOURCE[0]}")/hold_ports.py" "$_addr" "$_n" $_how >"$_out" &
	_pid=$!
	track $_pid
	wait_for 20 ports_held "$_out" "$_pid"
	read -r _line <"$_out"
	[ "${_line% held}" != "$_line" ] || fail "could not hold $_n port(s) on $_addr (see above)"
	printf -v "$_var" '%s' "${_line% held}"
}

# ports_held FILE PID: hold_ports.py (PID) wrote its line to FILE, or gave up.
ports_held() {
	grep -q ' held$' "$1" || exited "$2"
}

# hold_port VAR [ADDR]: one port of ADDR (127.0.0.1), held as hold_ports does.
hold_port() {
	hold_ports "$1" "${2:-127.0.0.1}" 1
}

# hold_port_pair VAR [ADDR]: a port P of ADDR (127.0.0.1) with P+1 held too (crun's static
# mode with --no-agent-store uses both); VAR is set to P.
hold_port_pair() {
	local _pair
	hold_ports _pair "${2:-127.0.0.1}" 2 consecutive
	printf -v "$1" '%s' "${_pair%% *}"
}

# netns_on_bridge NS BRIDGE VETH_HOST VETH_NS ADDR/PREFIX [IFNAME]: create namespace NS and put
# it on BRIDGE through a veth pair (VETH_HOST stays here, VETH_NS moves into NS, renamed IFNAME
# when given), with lo and the link up and ADDR/PREFIX on it. Fails (through `fail`) naming the
# step that was refused. The caller records NS and VETH_HOST for netns_teardown.
netns_on_bridge() {
	local ns=$1 br=$2 vh=$3 vn=$4 addr=$5 ifname=${6:-$4}
	ip netns add "$ns" || fail "ip netns add $ns"
	ip link add "$vh" type veth peer name "$vn" || fail "ip link add veth $vh"
	ip link set "$vn" netns "$ns" || fail "moving the veth into $ns"
	ip link set "$vh" master "$br" up || fail "adding the veth to the bridge"
	ip -n "$ns" link set lo up || fail "lo up in $ns"
	if [ "$ifname" != "$vn" ]; then
		ip -n "$ns" link set "$vn" name "$ifname" || fail "renaming the veth in $ns"
	fi
	ip -n "$ns" addr add "$addr" dev "$ifname" || fail "address in $ns"
	ip -n "$ns" link set "$ifname" up || fail "link up in $ns"
}

# netns_teardown "NETNS..." "LINKS...": delete the network namespaces, each after SIGKILLing
# every process inside it (one left there would keep it alive), then the links (a veth whose
# peer went with its namespace may be gone already: errors are quiet).
netns_teardown() {
	local n p
	for n in $1; do
		for p in $(ip netns pids "$n" 2>/dev/null); do
			kill -9 "$p" 2>/dev/null
		done
		ip netns del "$n" 2>/dev/null
	done
	for n in $2; do
		ip link del "$n" 2>/dev/null
	done
}
