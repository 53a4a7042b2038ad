#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/ops/leave.sh: a node stopped by its operator (SIGTERM to its agent, as systemctl stop
# sends) is a node leaving, not a failure (issue 21). Elastic (--nnodes 1:2, --max-restarts 0):
# the other node re-forms alone without spending a restart, even when its worker then fails
# the way a broken collective makes it fail, and says the node left. Fixed size (--nnodes 2):
# the other stops at once, naming the node its operator stopped. `crun status` (store and run
# records) shows the stopped node as left, not failed.
. "$(dirname "$0")/../agent/lib.sh"

start_rdzvd
# A heartbeat timeout well past the test's own steps: the others learn of the stop from the
# leaving node, not from its silence.
CONF=last_call_timeout=1,heartbeat_timeout=30,keep_alive_interval=1,join_timeout=60

# agent ID I NNODES ARGS...: agent I (127.0.0.I+2) of job ID in the background; sets PID_<I>.
agent() {
	local id=$1 i=$2 nn=$3
	shift 3
	"$CRUN" --nnodes "$nn" --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" \
		--rdzv-id "$id" --local-addr 127.0.0.$((i + 2)) --rdzv-conf "$CONF" --max-restarts 0 \
		--no-python "$@" >"$T/$id.$i.out" 2>"$T/$id.$i.err" &
	eval "PID_$i=$!"
	track $!
}

note "elastic 1:2: SIGTERM to one agent; the other re-forms alone, no restart spent"
# Alone (world size 1) a worker finishes; in the pair it waits for "peerdown" and then fails,
# as a worker whose peer vanished mid-collective would.
for i in 0 1; do
	agent el $i 1:2 "$W" touch:"$T/ready.%r" exit-if-env:GROUP_WORLD_SIZE:1:0 \
		wait-file:"$T/peerdown" exit:1
done
wait_for 60 files_at_least 2 "$T/ready."
kill -TERM $PID_1
wait_pid 60 $PID_1
expect_eq "$RC" 143 "the stopped agent's exit code (128+SIGTERM)"
touch "$T/peerdown"
wait_pid 90 $PID_0
[ "$RC" -eq 0 ] || { cat "$T"/el.*.err >&2; fail "the remaining node exited $RC"; }
expect_grep "left: stopped by its operator (SIGTERM)" "$T/el.0.err" "the node's leaving named"
expect_grep "round 1: complete .* world size 1, .* restarts 0" "$T/el.0.err" \
	"round 1 alone, no restart spent"
! grep -aq "restart budget" "$T/el.0.err" || { cat "$T/el.0.err" >&2; fail "a restart was spent"; }

note "crun status: the stopped node left (not failed), in the table, the timeline and --json"
# left_shown WHAT ARGS...: crun status ARGS shows run el's node 1 as left and no failure.
left_shown() {
	local what=$1
	shift
	timeout -s KILL 60 "$CRUN" status --rdzv-id el --history "$@" >"$T/st" 2>"$T/st.err"
	expect_eq $? 3 "crun status of the elastic run ($what): finished"
	expect_grep "^[01]  *[^ ]*  *$PID_1  *left " "$T/st" "the stopped node's row ($what)"
	expect_grep ":$PID_1  *left (round 0" "$T/st" "the stopped node's timeline ($what)"
	! grep -aq "failed" "$T/st" || { cat "$T/st" >&2; fail "a failure shown ($what)"; }
	timeout -s KILL 60 "$CRUN" status --rdzv-id el --json "$@" >"$T/st.json" 2>"$T/st.err"
	python3 - "$T/st.json" "$PID_1" <<'PY' || fail "the stopped node in --json ($what)"
import json, sys
d = json.load(open(sys.argv[1]))
a = [x for x in d["agents"] if x["pid"] == int(sys.argv[2])][0]
assert a["state"] == "left", a
assert a["history"][-1]["state"] == "left", a
PY
}
left_shown "from the store" --rdzv-endpoint "$ENDPOINT"
left_shown "from the run records"
python3 - "$CRUN_STATE_DIR/runs/el/"*":$PID_1.json" <<'PY' || fail "the stopped node's run record"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["state"] == "cancelled" and r["left"] is True and r["last_failure"] is None, r
assert r["history"][-1]["left"] is True, r
PY

note "fixed size 2: SIGTERM to one agent; the other stops at once, naming it"
rm -f "$T"/ready.* "$T/peerdown"
for i in 0 1; do
	agent fx $i 2 "$W" touch:"$T/ready.%r" sleep:120000
done
wait_for 60 files_at_least 2 "$T/ready."
kill -TERM $PID_1
t0=$(now_ms)
wait_pid 60 $PID_1
# Bound: far below the 60 s join timeout and the 30 s heartbeat timeout it used to wait for.
wait_pid 60 $PID_0
dt=$(($(now_ms) - t0))
expect_eq "$RC" 1 "the remaining node's exit code"
expect_grep "error: rendezvous fx: node .* (node rank [01]) left: stopped by its operator (SIGTERM)" \
	"$T/fx.0.err" "the reason named"
[ "$dt" -lt 25000 ] || { cat "$T/fx.0.err" >&2; fail "the remaining node took $dt ms to stop"; }
note "the remaining node stopped $dt ms after the SIGTERM"
echo PASS
