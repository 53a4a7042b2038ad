#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/status_scaleup.sh: run records after an elastic scale-up (issue 21). A job of
# --nnodes 1:2 starts on one node (round 0); a second node joins later and the job re-forms
# with both (round 1) and finishes. Each node's run record names the run, its rounds and its
# node; `crun status` from the records shows both nodes finished in round 1, and the first
# node's timeline both rounds.
. "$(dirname "$0")/lib.sh"

start_rdzvd
CONF=last_call_timeout=1,heartbeat_timeout=30,keep_alive_interval=1,join_timeout=60

# agent I: node I of run su in the background; sets PID_I.
agent() {
	"$CRUN" --nnodes 1:2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" \
		--rdzv-id su --rdzv-conf "$CONF" --max-restarts 0 "$W" touch:"$T/r.%r" \
		wait-file:"$T/go" >"$T/su.$1.out" 2>"$T/su.$1.err" &
	eval "PID_$1=\$!"
	track $!
}

note "round 0: one node alone"
agent 0
wait_for 60 test -e "$T/r.0"
note "a second node joins: round 1 with both (rank 1 exists only there)"
agent 1
wait_for 120 test -e "$T/r.1"
touch "$T/go"
wait_pid 120 $PID_0
expect_eq "$RC" 0 "the first node's exit status"
wait_pid 120 $PID_1
expect_eq "$RC" 0 "the second node's exit status"

note "each node's record: finished, round 1, two nodes; the first node's history has both rounds"
python3 - "$CRUN_STATE_DIR/runs/su" "$PID_0" "$PID_1" <<'PY' || fail "the run records"
import glob, json, os, sys
d, p0, p1 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
recs = {r["pid"]: r for r in (json.load(open(f)) for f in glob.glob(os.path.join(d, "*.json")))}
assert set(recs) == {p0, p1}, recs.keys()
for r in recs.values():
    assert r["run_id"] == "su" and r["state"] == "finished" and r["exit_code"] == 0, r
    assert r["round"] == 1 and r["nodes"] == 2 and r["world_size"] == 2, r
    assert r["left"] is False and r["last_failure"] is None, r
    assert r["restarts"] == 0, r
running = lambda r: [e["round"] for e in r["history"] if e["state"] == "running"]
assert running(recs[p0]) == [0, 1], recs[p0]["history"]
assert running(recs[p1]) == [1], recs[p1]["history"]
assert sorted(r["node_rank"] for r in recs.values()) == [0, 1], recs
PY

note "crun status from the records: both nodes finished in round 1, both rounds in the timeline"
timeout -s KILL 60 "$CRUN" status --rdzv-id su --history >"$T/st" 2>"$T/st.err"
expect_eq $? 3 "crun status of the finished run"
cat "$T/st"
expect_grep '^job su: finished (round 1, 2 nodes, world size 2)' "$T/st" "the job line"
expect_eq "$(grep -c "^[01]  *[^ ]*  *\($PID_0\|$PID_1\)  *finished  *1 " "$T/st")" 2 \
	"both nodes finished in round 1"
expect_grep ":$PID_0  *running (round 0" "$T/st" "round 0 in the timeline"
expect_grep ":$PID_0  *running (round 1" "$T/st" "round 1 in the timeline (first node)"
expect_grep ":$PID_1  *running (round 1" "$T/st" "round 1 in the timeline (second node)"
echo "ok"
