# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# tests/lib/net.sh: network helpers the script tests share (sourced by tests/agent/lib.sh,
# tests/faults/lib.sh, tests/faults/run.sh and tests/fanout/lib.sh): a free TCP port, and the
# teardown of network namespaces and links a test made.

# free_port [ADDR]: a TCP port nothing is bound to on ADDR (127.0.0.1) now.
free_port() {
	python3 -c 'import socket, sys
s = socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])' "${1:-127.0.0.1}"
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
