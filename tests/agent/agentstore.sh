#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/agentstore.sh: the agent store (docs/agent.md). A PyTorch gloo DDP job of 2
# nodes x 2 workers meets through crun's store on the master port alone (the next port is held
# by someone else) and ends with the parameters torchrun's run of the same script gives;
# --no-agent-store gives rank 0's TCPStore back; a duplicate static node rank is named.
# Skipped (77) when torch is not importable.
. "$(dirname "$0")/../lib/own_net.sh" "$@" # a network namespace of its own (root)
. "$(dirname "$0")/lib.sh"

need_torch
TORCHRUN=${CRUN_TORCHRUN:-$CRUN_SOURCE_DIR/../shared/peers/torchrun}

value_of() {
	grep -a "^\[rank[0-9]*\]:$2=" "$1" | sed "s/^\[rank[0-9]*\]:$2=//" | tr '\n' ' ' |
		sed 's/ $//'
}

# digest DIR: one line for the parameters of all four ranks.
digest() {
	cat "$1"/params.0 "$1"/params.1 "$1"/params.2 "$1"/params.3 | sha256sum | cut -d' ' -f1
}

note "static, 2 nodes x 2 workers, gloo DDP: the master port alone, the next one taken"
hold_port_pair port
# Someone else listens on master port + 1 (as on a cluster that opens only the master port);
# SO_REUSEADDR to share it with hold_ports' socket. Until the test's cleanup kills it.
python3 -c 'import signal, socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]) + 1)); s.listen(1); print("listening", flush=True)
signal.pause()' "$port" >"$T/other.out" &
track $!
wait_for 20 grep -q '^listening$' "$T/other.out"
mkdir -p "$T/crun" "$T/torchrun"
pids=()
for i in 0 1; do
	"$CRUN" --nnodes 2 --nproc-per-node 2 --node-rank $i --master-addr 127.0.0.1 \
		--master-port "$port" "$SRC/tests/agent/ddp_train.py" "$T/crun" \
		>"$T/as.$i.out" 2>"$T/as.$i.err" &
	pids+=($!)
	track $!
done
for i in 0 1; do
	wait_ok 240 ${pids[$i]} "node $i" "$T"/as.*.out "$T"/as.*.err
done
expect_grep "workers meet through the agent store: MASTER_ADDR=127.0.0.1 MASTER_PORT=$port, TORCHELASTIC_USE_AGENT_STORE=True" \
	"$T/as.0.err" "node 0 hosts the agent store on the master port"
expect_grep "hosting the rendezvous store at 127.0.0.1:$port" "$T/as.0.err" "store port"
if grep -q "master 127.0.0.1:" "$T/as.0.err"; then
	fail "the round line still names the round's own master in static mode"
fi
expect_eq "$(cat "$T"/crun/params.* | sort -u | wc -l)" 1 "distinct parameter sets under crun"

note "the same job under torchrun: the same parameters"
if ! peer_runs; then
	echo "the peer's half is skipped in this pass (CRUN_TEST_PEER=0)"
elif [ -x "$TORCHRUN" ]; then
	hold_port_pair tport
	pids=()
	for i in 0 1; do
		"$PYTHON_EXEC" "$TORCHRUN" --nnodes 2 --nproc_per_node 2 --node_rank $i \
			--master_addr 127.0.0.1 --master_port "$tport" \
			"$SRC/tests/agent/ddp_train.py" "$T/torchrun" \
			>"$T/tr.$i.out" 2>"$T/tr.$i.err" &
		pids+=($!)
		track $!
	done
	for i in 0 1; do
		wait_ok 240 ${pids[$i]} "torchrun node $i" "$T"/tr.*.err
	done
	expect_eq "$(digest "$T/crun")" "$(digest "$T/torchrun")" "crun's digest vs torchrun's"
else
	echo "no torchrun at $TORCHRUN: digest comparison skipped"
fi

note "c10d --agent-store through crun-rdzvd --tcpstore-run: the same job meets through the daemon"
"$RDZVD" --listen 127.0.0.1:0 -q --tcpstore-run asrun >"$T/rdzvd.out" 2>"$T/rdzvd.err" &
track $!
wait_for 20 test -s "$T/rdzvd.out"
ENDPOINT=$(head -n1 "$T/rdzvd.out")
mkdir -p "$T/c10d"
pids=()
for i in 0 1; do
	"$CRUN" --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" \
		--agent-store --rdzv-id asrun --local-addr 127.0.0.$((i + 2)) "$SRC/tests/agent/ddp_train.py" \
		"$T/c10d" >"$T/c.$i.out" 2>"$T/c.$i.err" &
	pids+=($!)
	track $!
done
for i in 0 1; do
	wait_ok 240 ${pids[$i]} "c10d node $i" "$T"/c.*.err
done
expect_grep "workers meet through the agent store: MASTER_ADDR=127.0.0.1 MASTER_PORT=${ENDPOINT##*:}" \
	"$T/c.1.err" "c10d agent store"
expect_eq "$(digest "$T/c10d")" "$(digest "$T/crun")" "c10d digest vs static"

note "c10d --agent-store hosted by an agent: the other node asks it and meets through it too"
hold_port_pair port
pids=()
for i in 0 1; do
	"$CRUN" --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" \
		--agent-store --rdzv-id hosted --local-addr 127.0.0.$((i + 2)) "$W" env \
		>"$T/h.$i.out" 2>"$T/h.$i.err" &
	pids+=($!)
	track $!
	[ $i -eq 0 ] && wait_for 20 grep -q "hosting the rendezvous store" "$T/h.0.err"
done
for i in 0 1; do
	wait_ok 60 ${pids[$i]} "c10d node $i" "$T"/h.*.err
done
expect_grep "joining it as a client" "$T/h.1.err" "node 1 joins the agent's store"
expect_eq "$(value_of "$T/h.1.out" TORCHELASTIC_USE_AGENT_STORE)" True "USE_AGENT_STORE (client)"
expect_eq "$(value_of "$T/h.0.out" TORCHELASTIC_USE_AGENT_STORE)" True "USE_AGENT_STORE (host)"
expect_eq "$(value_of "$T/h.1.out" MASTER_PORT)" "$port" "MASTER_PORT (client)"
expect_eq "$(value_of "$T/h.0.out" MASTER_PORT)" "$port" "MASTER_PORT (host)"

note "c10d --agent-store through a crun-rdzvd without --tcpstore-run: rank 0's TCPStore"
start_rdzvd
pids=()
for i in 0 1; do
	"$CRUN" --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" \
		--agent-store --rdzv-id plain --local-addr 127.0.0.$((i + 2)) "$W" env \
		>"$T/p.$i.out" 2>"$T/p.$i.err" &
	pids+=($!)
	track $!
done
for i in 0 1; do
	wait_ok 60 ${pids[$i]} "c10d node $i" "$T"/p.*.err
done
expect_eq "$(value_of "$T/p.1.out" TORCHELASTIC_USE_AGENT_STORE)" False "USE_AGENT_STORE"
expect_grep "does not serve PyTorch's TCPStore clients" "$T/p.1.err" "the probe's answer"

note "--no-agent-store: rank 0's TCPStore on the master port, crun's store one up"
hold_port_pair port
pids=()
for i in 0 1; do
	"$CRUN" --nnodes 2 --nproc-per-node 1 --node-rank $i --master-addr 127.0.0.1 \
		--master-port "$port" --no-agent-store "$W" env >"$T/na.$i.out" 2>"$T/na.$i.err" &
	pids+=($!)
	track $!
done
for i in 0 1; do
	wait_ok 60 ${pids[$i]} "--no-agent-store node $i" "$T"/na.*.err
done
expect_eq "$(value_of "$T/na.1.out" TORCHELASTIC_USE_AGENT_STORE)" False "USE_AGENT_STORE"
expect_eq "$(value_of "$T/na.1.out" MASTER_PORT)" "$port" "MASTER_PORT"
expect_grep "hosting the rendezvous store at 127.0.0.1:$((port + 1))" "$T/na.0.err" "store port"

note "agent store on: workers get True and the master port"
hold_port_pair port
pids=()
for i in 0 1; do
	"$CRUN" --nnodes 2 --nproc-per-node 1 --node-rank $i --master-addr 127.0.0.1 \
		--master-port "$port" "$W" env >"$T/on.$i.out" 2>"$T/on.$i.err" &
	pids+=($!)
	track $!
done
for i in 0 1; do
	wait_ok 60 ${pids[$i]} "node $i" "$T"/on.*.err
done
expect_eq "$(value_of "$T/on.1.out" TORCHELASTIC_USE_AGENT_STORE)" True "USE_AGENT_STORE"
expect_eq "$(value_of "$T/on.0.out" MASTER_PORT)" "$port" "MASTER_PORT"

note "a duplicate node rank 0 is named, not 'Address already in use'"
hold_port_pair port
"$CRUN" --nnodes 2 --nproc-per-node 1 --node-rank 0 --master-addr 127.0.0.1 \
	--master-port "$port" --rdzv-conf join_timeout=30 "$W" env >"$T/d0.out" 2>"$T/d0.err" &
first=$!
track $first
wait_for 20 grep -q "hosting the rendezvous store" "$T/d0.err"
run_crun 30 "$T/d1.out" "$T/d1.err" --nnodes 2 --nproc-per-node 1 --node-rank 0 \
	--master-addr 127.0.0.1 --master-port "$port" "$W" env
[ $RC -ne 0 ] || fail "a second node rank 0 was accepted"
expect_grep "node rank 0 is already taken by host $(hostname)" "$T/d1.err" "duplicate rank 0"
if grep -q "already in use" "$T/d1.err"; then
	fail "the duplicate still reads 'already in use'"
fi

kill -9 $first 2>/dev/null
wait $first 2>/dev/null

note "a duplicate node rank 1 is named (nodes 0 and 1 of 3 wait for node 2)"
hold_port_pair port
"$CRUN" --nnodes 3 --nproc-per-node 1 --node-rank 0 --master-addr 127.0.0.1 \
	--master-port "$port" --rdzv-conf join_timeout=30 "$W" env >"$T/e0.out" 2>"$T/e0.err" &
track $!
"$CRUN" --nnodes 3 --nproc-per-node 1 --node-rank 1 --local-addr 127.0.0.2 \
	--master-addr 127.0.0.1 --master-port "$port" --rdzv-conf join_timeout=30 "$W" env \
	>"$T/e1.out" 2>"$T/e1.err" &
track $!
wait_for 20 grep -q "hosting the rendezvous store" "$T/e0.err"
# Node 1 has claimed its rank in round 0 (static mode's run id is "none").
wait_key 20 "127.0.0.1:$port" rdzv/none/r/0/node/1
run_crun 30 "$T/e2.out" "$T/e2.err" --nnodes 3 --nproc-per-node 1 --node-rank 1 \
	--local-addr 127.0.0.3 --master-addr 127.0.0.1 --master-port "$port" "$W" env
[ $RC -ne 0 ] || fail "a second node rank 1 was accepted"
expect_grep "node rank 1 is already taken by host" "$T/e2.err" "duplicate rank 1"
# From the same host and address: the two agents' records differ only in their instance.
run_crun 30 "$T/e3.out" "$T/e3.err" --nnodes 3 --nproc-per-node 1 --node-rank 1 \
	--local-addr 127.0.0.2 --master-addr 127.0.0.1 --master-port "$port" "$W" env
[ $RC -ne 0 ] || fail "a second node rank 1 from the same address was accepted"
expect_grep "node rank 1 is already taken by another crun on this host" "$T/e3.err" \
	"duplicate rank 1, same address"
echo "agentstore: ok"
