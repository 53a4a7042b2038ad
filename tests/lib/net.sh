# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# tests/lib/net.sh: network helpers the script tests share (sourced by tests/agent/lib.sh,
# tests/faults/lib.sh, tests/faults/run.sh and tests/fanout/lib.sh, after tests/lib/proc.sh):
# TCP ports held for the test, and network namespaces on a bridge: made, and torn down by name.

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

# netns_usable TAG: this process may make network namespaces (root, iproute2, CAP_SYS_ADMIN):
# a throwaway one, TAGprobe, is made and deleted. Status 1 when refused, for the caller to skip.
netns_usable() {
	ip netns add "${1}probe" 2>/dev/null || return 1
	ip netns del "${1}probe"
}

# netns_subnet: print a random 10.X.Y prefix, the /24 of one test's bridge (X from 100 to 199).
netns_subnet() {
	echo "10.$((100 + RANDOM % 100)).$((RANDOM % 250))"
}

# netns_bridge TAG NET IFNAME NS...: a bridge TAGbr and on it one namespace per NS, the I-th
# (from 1) through the veth pair TAGr<I> (here) and TAGn<I> (moved into NS and renamed IFNAME,
# unless IFNAME is ""), with the address NET.<I>/24 (netns_on_bridge); then the bridge up. Each
# name is added to NETNS or LINKS before the step that makes it, so the caller's
# netns_teardown "$NETNS" "$LINKS" removes whatever was made. Status 1, with nothing made, when
# the kernel refuses a bridge (the caller skips); any later refusal fails the test.
netns_bridge() {
	local tag=$1 net=$2 ifname=$3 i=0 ns
	shift 3
	ip link add "${tag}br" type bridge || return 1
	LINKS="${tag}br $LINKS"
	for ns in "$@"; do
		i=$((i + 1))
		NETNS="$NETNS $ns"
		LINKS="${tag}r$i $LINKS"
		netns_on_bridge "$ns" "${tag}br" "${tag}r$i" "${tag}n$i" "$net.$i/24" ${ifname:+"$ifname"}
	done
	ip link set "${tag}br" up || fail "bridge ${tag}br up"
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
