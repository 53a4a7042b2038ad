#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/tsgen.sh: workers meeting through the agent store get a fresh TCPStore key space
# per round and per restart (issue 19; docs/agent.md, "The agent store"). Real torch 1.13
# workers (tests/agent/tsgen_worker.py) count themselves into one key; every round's count
# must be its own world size, never with an earlier round's workers in it:
#   restart: one node, --max-restarts 1, rank 1 fails attempt 0: a TCPStore with no prefix
#            (as torch 2.5+ opens it), and init_process_group(env://)'s default store (torch
#            1.13 prefixes that with the restart count: it checks the space keeps it working);
#   grow:    --nnodes 1:2 c10d --agent-store across two network namespaces on a bridge: node A
#            trains alone, node B joins, the new round (torch 1.x's keys, whose attempt prefix a
#            membership change keeps) counts 2 and finishes with equal parameter digests;
#   ended:   a job on a shared crun-rdzvd --tcpstore-run ends while another TCPStore client of
#            its round is connected: the daemon closes it (issue 20) instead of serving it on.
# Torch only (77); the grow case needs root (network namespaces), else it is skipped.
# TSGEN_CASES="store pg ended grow" (the default) picks cases, e.g. to run one against another build.
. "$(dirname "$0")/../lib/own_net.sh" "$@" # a network namespace of its own (root)
. "$(dirname "$0")/lib.sh"

need_torch
PROG=$SRC/tests/agent/tsgen_worker.py
token_file "$T/token"

# counts FILE: the distinct "joined=N world=W" lines the workers printed, one per line.
counts() {
	sed -n 's/^\[rank[0-9]*\]://p' "$1" | grep '^joined=' | sort -u
}

CASES=" ${TSGEN_CASES:-store pg ended grow} "
for mode in store pg; do
	[[ $CASES == *" $mode "* ]] || continue
	note "restart, $mode: attempt 1 counts only its own 2 workers"
	hold_port port
	run_crun 240 "$T/$mode.out" "$T/$mode.err" --nnodes 1 --nproc-per-node 2 \
		--master-addr 127.0.0.1 --master-port "$port" --max-restarts 1 "$PROG" "$mode"
	note "$mode: exit $RC; counts: $(counts "$T/$mode.out" | tr '\n' ' ')"
	expect_grep "TORCHELASTIC_USE_AGENT_STORE=True" "$T/$mode.err" "$mode: the agent store"
	expect_grep '^\[rank1\]:attempt=1 rank=1' "$T/$mode.out" "$mode: attempt 1 ran"
	expect_eq "$(counts "$T/$mode.out")" "joined=2 world=2" "$mode: every attempt's count"
	[ "$RC" -eq 0 ] || { tail -n 20 "$T/$mode.err" >&2; fail "$mode: crun exited $RC"; }
done

if [[ $CASES == *" ended "* ]]; then
	note "ended: a TCPStore client of a job over on a shared crun-rdzvd is closed"
	"$RDZVD" --listen 127.0.0.1:0 --tcpstore-run held >"$T/rdzvd.out" 2>"$T/rdzvd.err" &
	track $!
	wait_for 20 grep -q ':[0-9][0-9]*$' "$T/rdzvd.out"
	EP=$(head -n1 "$T/rdzvd.out")
	"$CRUN" --nnodes 1 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "$EP" \
		--rdzv-id held --agent-store "$PROG" hold "$T" >"$T/held.out" 2>"$T/held.err" &
	cpid=$!
	track $cpid
	wait_for 120 files_at_least 2 "$T/counted."
	# Someone else's TCPStore client of the same round (a stray worker, a debugging shell).
	"$PYTHON_EXEC" -c 'import datetime, sys, torch.distributed as dist
h, p = sys.argv[1].rsplit(":", 1)
s = dist.TCPStore(h, int(p), 1, False, datetime.timedelta(seconds=200))
print("connected", flush=True)
try:
    s.wait(["never"], datetime.timedelta(seconds=200))
except Exception as e:
    print("closed: %s" % e, flush=True)
    sys.exit(3)' "$EP" >"$T/stray.out" 2>&1 &
	spid=$!
	track $spid
	wait_for 60 grep -q '^connected$' "$T/stray.out"
	touch "$T/go"
	wait_pid 120 "$cpid"
	[ "$RC" -eq 0 ] || { tail -n 20 "$T/held.err" >&2; fail "ended: crun exited $RC"; }
	expect_eq "$(counts "$T/held.out")" "joined=2 world=2" "ended: the count"
	# The daemon notices within its 500 ms sweep; a client it does not close waits 200 s.
	wait_pid 60 "$spid"
	expect_grep "^closed: " "$T/stray.out" "ended: the stray client's wait"
	expect_grep "TCPStore key space held/tcpstore/[0-9]*/ has ended: closed 1 TCPStore" \
		"$T/rdzvd.err" "ended: the daemon's one line"
fi
if [[ $CASES != *" grow "* ]]; then
	exit 0
elif [ "$(id -u)" -ne 0 ]; then
	note "not root: the elastic case (network namespaces) is skipped"
	exit 0
fi
TAG=tg$$
NET=$(netns_subnet)
netns_bridge "$TAG" "$NET" crun0 "${TAG}a" "${TAG}b" ||
	{ note "no bridge support: elastic case skipped"; exit 0; }
export GLOO_SOCKET_IFNAME=crun0
A=$NET.1
PORT=29500 # each namespace is fresh: nothing else binds there

# node NS: start job "grow"'s agent in namespace NS; sets NODE_PID.
node() {
	timeout -s KILL 240 ip netns exec "$TAG$1" "$CRUN" --nnodes 1:2 --nproc-per-node 1 \
		--rdzv-backend c10d --rdzv-endpoint "$A:$PORT" --rdzv-id grow --agent-store \
		--rdzv-conf join_timeout=120 "$PROG" grow "$T" >"$T/grow.$1.out" 2>"$T/grow.$1.err" &
	NODE_PID=$!
	track $NODE_PID
}

note "elastic scale-up: node A trains alone, node B joins"
node a
pa=$NODE_PID
wait_for 120 test -e "$T/running.0"
node b
pb=$NODE_PID
wait_pid 240 "$pa"
rca=$RC
wait_pid 240 "$pb"
rcb=$RC
cat "$T/grow.a.out" "$T/grow.b.out" >"$T/grow.out"
note "grow: exit codes $rca $rcb; counts: $(counts "$T/grow.out" | tr '\n' ' ')"
expect_grep "TORCHELASTIC_USE_AGENT_STORE=True" "$T/grow.a.err" "grow: the agent store"
expect_eq "$(counts "$T/grow.out" | tr '\n' ' ')" "joined=1 world=1 joined=2 world=2 " \
	"grow: each round's count"
if [ "$rca" -ne 0 ] || [ "$rcb" -ne 0 ]; then
	tail -n 20 "$T"/grow.?.err >&2
	fail "grow: the job failed (exit codes $rca $rcb)"
fi
expect_eq "$(grep -c 'params=' "$T/grow.out")" 2 "grow: both ranks' digests"
expect_eq "$(sed -n 's/.*params=//p' "$T/grow.out" | sort -u | wc -l)" 1 "grow: one digest"
note "every round saw only its own keys"
