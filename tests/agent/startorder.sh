#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/startorder.sh: whatever order the nodes start in, every node hands its workers the
# same MASTER_ADDR, MASTER_PORT and TORCHELASTIC_USE_AGENT_STORE, and an unchanged PyTorch gloo
# DDP job succeeds (issue 18). Two "hosts" are network namespaces on a bridge, so only host A
# can host the store at its address (on loopback every agent could). Orders: the node that does
# not host the store first, the hosting node first, random; the agent store (--agent-store),
# --no-agent-store, the default (rank 0's TCPStore for torch 1.13), and crun-rdzvd
# --tcpstore-run in a third namespace as the store (also started after both nodes). Root and
# torch only (77).
. "$(dirname "$0")/lib.sh"

need_torch
TAG=so$$
need_netns "$TAG"

# Three hosts on one bridge: A (.1) hosts the store, B (.2) does not, C (.3) runs crun-rdzvd.
# One interface name in every namespace, for GLOO_SOCKET_IFNAME.
NET=$(netns_subnet)
netns_bridge "$TAG" "$NET" crun0 "${TAG}a" "${TAG}b" "${TAG}c" ||
	{ echo "no bridge support: skipping"; exit 77; }
export GLOO_SOCKET_IFNAME=crun0
A=$NET.1
B=$NET.2
C=$NET.3
PORT=29500 # each namespace is fresh: nothing else binds there
PROG=$SRC/tests/agent/ddp_order.py
# One token file for every node and the daemon, made before any of them starts.
token_file "$T/token"

# node NS ID ENDPOINT ARGS...: start one agent of job ID in namespace NS; sets NODE_PID.
node() {
	local ns=$1 id=$2 ep=$3
	shift 3
	timeout -s KILL 150 ip netns exec "$TAG$ns" "$CRUN" --nnodes 2 --nproc-per-node 1 \
		--rdzv-backend c10d --rdzv-endpoint "$ep" --rdzv-id "$id" \
		--rdzv-conf join_timeout=120 "$@" "$PROG" >"$T/$id.$ns.out" 2>"$T/$id.$ns.err" &
	NODE_PID=$!
	track $NODE_PID
}

# job ORDER ID ENDPOINT WANT_AGENT_STORE WANT_MASTER_ADDR ARGS...: run a 2-node job, its nodes
# started in ORDER (ab: A then B, ba: B then A, each once the first is up and trying the store;
# random: both at once, in a random order; late: as random, then AFTER_START), and check what
# the workers got and the outcome.
# WANT_MASTER_ADDR "" accepts either node's address (rank 0's node, whichever that is).
job() {
	local order=$1 id=$2 ep=$3 want_as=$4 want_ma=$5 first second pa pb rca rcb v
	shift 5
	case $order in
	ab) first=a second=b ;;
	ba) first=b second=a ;;
	random | late) if [ $((RANDOM % 2)) -eq 0 ]; then first=a second=b; else first=b second=a; fi ;;
	esac
	node $first "$id" "$ep" "$@"
	eval "p$first=$NODE_PID"
	if [ "$order" = ab ] || [ "$order" = ba ]; then
		# The first node is running and has decided where the store is.
		wait_for 60 grep -q "rendezvous store at" "$T/$id.$first.err"
	fi
	node $second "$id" "$ep" "$@"
	eval "p$second=$NODE_PID"
	[ -z "$AFTER_START" ] || $AFTER_START "$id"
	wait_pid 160 "$pa"
	rca=$RC
	wait_pid 160 "$pb"
	rcb=$RC
	cat "$T/$id.a.out" "$T/$id.b.out" >"$T/$id.out"
	for v in MASTER_ADDR MASTER_PORT TORCHELASTIC_USE_AGENT_STORE params; do
		sed -n "s/^\[rank[0-9]*\]:$v=//p" "$T/$id.out" | sort -u >"$T/$id.$v"
	done
	note "$id ($order: $first first): exit codes $rca $rcb; workers got" \
		"MASTER_ADDR=$(tr '\n' ' ' <"$T/$id.MASTER_ADDR")" \
		"MASTER_PORT=$(tr '\n' ' ' <"$T/$id.MASTER_PORT")" \
		"TORCHELASTIC_USE_AGENT_STORE=$(tr '\n' ' ' <"$T/$id.TORCHELASTIC_USE_AGENT_STORE")"
	if [ "$(wc -l <"$T/$id.MASTER_ADDR")" != 1 ] || [ "$(wc -l <"$T/$id.MASTER_PORT")" != 1 ] ||
		[ "$(wc -l <"$T/$id.TORCHELASTIC_USE_AGENT_STORE")" != 1 ]; then
		tail -n 20 "$T/$id".?.err >&2
		fail "$id ($order): the nodes gave their workers different bootstrap variables"
	fi
	if [ $rca -ne 0 ] || [ $rcb -ne 0 ]; then
		tail -n 20 "$T/$id".?.err "$T/$id".?.out >&2
		fail "$id ($order): the job failed (exit codes $rca $rcb)"
	fi
	expect_eq "$(cat "$T/$id.TORCHELASTIC_USE_AGENT_STORE")" "$want_as" "$id: TORCHELASTIC_USE_AGENT_STORE"
	if [ -n "$want_ma" ]; then
		expect_eq "$(cat "$T/$id.MASTER_ADDR")" "$want_ma" "$id: MASTER_ADDR"
	else
		case $(cat "$T/$id.MASTER_ADDR") in
		"$A" | "$B") ;;
		*) fail "$id: MASTER_ADDR $(cat "$T/$id.MASTER_ADDR") is neither node's address" ;;
		esac
	fi
	expect_eq "$(grep -c . "$T/$id.params")" 1 "$id: one parameter digest for both ranks"
}

export CRUN_TOKEN_FILE=$T/token
REPEAT=${STARTORDER_REPEAT:-2}
AFTER_START="" # a command run with the job's id once both of its nodes are started
n=0
for ((k = 0; k < REPEAT; k++)); do
	for order in ba ab random; do
		n=$((n + 1))
		job $order "as$n" "$A:$PORT" True "$A" --agent-store
	done
done

note "by default (torch 1.13 workers, as torchrun 1.13): rank 0's node hosts their TCPStore"
job random "df1" "$A:$PORT" False ""
expect_grep "has torch 1\.13" "$T/df1.a.err" "the workers' torch, seen and logged"

note "--no-agent-store: rank 0's node hosts the workers' TCPStore"
n=0
for order in ba ab random; do
	n=$((n + 1))
	job $order "nas$n" "$A:$PORT" False "" --no-agent-store
done

# rdzvd ID: crun-rdzvd serving run ID's TCPStore clients in namespace C; sets RPID.
rdzvd() {
	ip netns exec "${TAG}c" "$RDZVD" --listen "$C:$PORT" -q --tcpstore-run "$1" \
		>"$T/$1.rdzvd.out" 2>"$T/$1.rdzvd.err" &
	RPID=$!
	track $RPID
	wait_for 20 grep -q ":$PORT\$" "$T/$1.rdzvd.out"
}

# rdzvd_late ID: once both nodes of job ID are trying to reach the store, start it.
rdzvd_late() {
	wait_for 60 grep -q "joining the rendezvous store at" "$T/$1.a.err"
	wait_for 60 grep -q "joining the rendezvous store at" "$T/$1.b.err"
	rdzvd "$1"
}

note "crun-rdzvd --tcpstore-run in a third namespace as the store"
n=0
for order in ba ab random late; do
	n=$((n + 1))
	id=rd$n
	if [ $order = late ]; then
		# Both nodes first, the store last: neither may take "no answer yet" for "no".
		AFTER_START=rdzvd_late
	else
		rdzvd "$id"
	fi
	job $order "$id" "$C:$PORT" True "$C" --agent-store
	AFTER_START=""
	kill "$RPID"
	wait_pid 20 "$RPID"
done
note "every order agreed"
