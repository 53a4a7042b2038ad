# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# tests/faults/net_pair.sh: two "nodes", each a network namespace with a veth into a bridge in
# the root namespace (10.231.0.1 and .2). The store (crun-rdzvd) and node 0 are in namespace
# a; node 1 in b. link_down takes node 1's bridge port down: both nodes keep their address and
# route (b's link only loses its carrier), so packets are dropped, as on a pulled cable or a
# dead switch port, rather than refused locally. Sourced by case_net.sh and case_outage.sh
# after lib.sh, with CONF (--rdzv-conf) set; NNODES (default 1:2) and MAX_RESTARTS (1) too.

NS_A=$TAG-a
NS_B=$TAG-b
net_up() {
	netns_usable "$TAG" || skip "ip netns add refused (needs root / CAP_SYS_ADMIN)"
	netns_bridge "$TAG" 10.231.0 "" "$NS_A" "$NS_B" ||
		skip "no bridge support (ip link add type bridge refused)"
	# The bridge must forward (a host firewall on bridged traffic would stop it).
	start_rdzvd 10.231.0.1 "$NS_A"
	wait_for 10 ip netns exec "$NS_B" "$CSTORE" -e "$ENDPOINT" -t 1 ping
}

link_down() { ip link set "${TAG}r2" down; }
link_up() { ip link set "${TAG}r2" up; }

# node I NS ADDR: agent I in namespace NS (train on 2 workers), in the background; PID_I.
node() {
	local i=$1 ns=$2 addr=$3
	# shellcheck disable=SC2046
	FAULT_NODE=$i ip netns exec "$ns" "$CRUN" --nnodes "${NNODES:-1:2}" --nproc-per-node 2 \
		--rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" --rdzv-id net --local-addr "$addr" \
		--rdzv-conf "$CONF" --max-restarts "${MAX_RESTARTS:-1}" --restart-backoff 0.2 \
		$(train_args) \
		>"$T/n$i.out" 2>"$T/n$i.err" &
	eval "PID_$i=$!"
	track $!
}

