#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/records.sh: the run record every agent leaves (agent/run_record.h) and `crun
# status` after the job and its store are gone (issue 21): a real 2-node c10d job whose store
# the first node hosts; a rank fails once and the job restarts and finishes. While it runs,
# `crun status` shows each node's history from the store; after it ended (the store gone with
# the agent) it answers from the records: finished, the failure, the restart in the history,
# exit 3; the records are private JSON files; a job stopped with SIGTERM shows as cancelled
# (exit 6); without --rdzv-id the runs recorded here are listed (as sacct does); a file in the
# records folder that is not a record is named and skipped; --log-dir gets a copy.
. "$(dirname "$0")/lib.sh"

STATE=$CRUN_STATE_DIR/runs
# w.sh: rank 1 fails (exit 3) on the first attempt once every rank has started; the others
# wait for the file "go" and finish.
cat >"$T/w.sh" <<'EOF'
#!/bin/bash
touch "$DIR/started.$RANK.$TORCHELASTIC_RESTART_COUNT"
while [ ! -e "$DIR/go" ]; do sleep 0.05; done
if [ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
	echo "rank 1 gives up" >&2
	exit 3
fi
echo "rank $RANK done"
EOF
chmod +x "$T/w.sh"
export DIR=$T

hold_port port
EP=127.0.0.1:$port
pids=()
for i in 0 1; do
	"$CRUN" --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "$EP" \
		--rdzv-id recA --max-restarts 1 --restart-backoff 0.1 --log-dir "$T/logs.$i" \
		--no-python "$T/w.sh" >"$T/n$i.out" 2>"$T/n$i.err" &
	pids+=($!)
	track $!
done

note "running: crun status shows each node's history from the store"
wait_for 60 files_at_least 2 "$T/started."
status_rc() {
	timeout -s KILL 60 "$CRUN" status --rdzv-endpoint "$EP" --rdzv-id recA "$@" \
		>"$T/st" 2>"$T/st.err"
	RC=$?
}
wait_for 30 eval 'status_rc; [ $RC -eq 0 ] && [ "$(grep -c "running (round 0, restarts 0)" "$T/st")" = 2 ]'
expect_grep '^history:$' "$T/st" "the history section while running"
touch "$T/go"
for i in 0 1; do
	wait_ok 90 "${pids[$i]}" "node $i" "$T/n$i.err"
done
cat "$T/n0.err" "$T/n1.err" >"$T/both.err"
expect_grep "(restart 1 of 1)" "$T/both.err" "the job restarted once"

note "after the job: the store is gone; crun status answers from the run records"
if timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null; then
	fail "something still serves $EP: the store should be gone with the job"
fi
status_rc --history
[ $RC -eq 3 ] || { cat "$T/st" "$T/st.err" >&2; fail "crun status exit $RC after the job, expected 3 (finished)"; }
expect_grep '^job recA: finished (round 1, 2 nodes, world size 2)$' "$T/st" "the job line"
expect_grep "^from: run records in $STATE\$" "$T/st" "the source is named"
expect_grep '^restarts: 1 spent, 0 left (max 1)$' "$T/st" "restarts"
expect_eq "$(grep -c '^[01] .* finished .* (exit 0)$' "$T/st")" 2 "both nodes finished, exit 0"
expect_grep '^last failure: rank 1 on .*, exit 3' "$T/st" "the failure"
expect_grep 'rank 1 failed, exit 3: .*rank 1 gives up' "$T/st" "the failure in the history"
grep -q 'restarting (round 0' "$T/st" || { cat "$T/st" >&2; fail "no restart in the history"; }
expect_eq "$(grep -c 'running (round 1, restarts 1)' "$T/st")" 2 "each node's second round"

note "the records: one private JSON file per node; --json carries the history"
n=$(find "$STATE/recA" -name '*.json' | wc -l)
expect_eq "$n" 2 "record files of run recA"
expect_eq "$(stat -c %a "$STATE/recA")" 700 "the run's record folder mode"
for f in "$STATE"/recA/*.json; do
	expect_eq "$(stat -c %a "$f")" 600 "mode of $f"
done
python3 - "$STATE"/recA/*.json <<'PY' || fail "the record files' content"
import json, sys
for p in sys.argv[1:]:
    d = json.load(open(p))
    assert d["version"] == 1 and d["run_id"] == "recA", d
    assert d["state"] == "finished" and d["exit_code"] == 0 and d["restarts"] == 1, d
    assert d["nodes"] == 2 and d["world_size"] == 2 and d["end_ms"] >= d["start_ms"] > 0, d
    states = [e["state"] for e in d["history"]]
    # Two rounds: a node whose worker failed restarts; one whose worker had finished waits,
    # and joins the next round when the other fails.
    rounds = sorted({e["round"] for e in d["history"] if e["state"] == "running"})
    assert states[0] == "joining" and states[-1] == "finished" and rounds == [0, 1], d["history"]
PY
status_rc --json
expect_eq $RC 3 "--json exit status after the job"
python3 - "$T/st" <<'PY' || fail "the JSON document from the records"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["state"] == "finished" and d["restarts"] == 1, d
assert d["last_failure"]["rank"] == 1 and d["last_failure"]["exit_code"] == 3, d
assert len(d["agents"]) == 2, d
for a in d["agents"]:
    assert a["exit_code"] == 0 and a["state"] == "finished", a
# The node that ran rank 1 in round 0 (node ranks may change in round 1) saw its failure.
fails = [e for a in d["agents"] for e in a["history"] if "failure" in e]
assert [(e["failure"]["rank"], e["failure"]["exit_code"]) for e in fails] == [(1, 3)], fails
PY
for i in 0 1; do
	expect_eq "$(find "$T/logs.$i" -name 'run-*.json' | wc -l)" 1 "node $i's record in its log folder"
done

note "a job stopped by SIGTERM is cancelled (exit 6)"
mkdir "$T/b"
DIR=$T/b "$CRUN" --standalone --nproc-per-node 2 --rdzv-id recB --no-python "$T/w.sh" \
	>"$T/c.out" 2>"$T/c.err" &
cpid=$!
track $cpid
wait_for 60 files_at_least 2 "$T/b/started."
kill -TERM "$cpid"
wait_pid 60 "$cpid"
expect_eq $RC 143 "the stopped agent's exit status"
timeout -s KILL 30 "$CRUN" status --json >"$T/list" 2>"$T/list.err"
expect_eq $? 0 "crun status (no run id) lists the runs"
cid=$(python3 -c 'import json,sys; r=[x for x in json.load(open(sys.argv[1])) if x["state"]=="cancelled"]; print(r[0]["run_id"] if len(r)==1 else "")' "$T/list")
[ -n "$cid" ] || { cat "$T/list" >&2; fail "the list has no single cancelled run"; }
timeout -s KILL 30 "$CRUN" status --rdzv-id "$cid" >"$T/st" 2>"$T/st.err"
expect_eq $? 6 "crun status of the cancelled run"
expect_grep "^job $cid: cancelled" "$T/st" "the cancelled job line"

note "the list, as a table; a planted non-record is named and skipped"
echo 'not json' >"$STATE/recA/planted.json"
timeout -s KILL 30 "$CRUN" status >"$T/list" 2>"$T/list.err"
expect_eq $? 0 "the list's exit status"
expect_grep '^RUN  *STATE' "$T/list" "the list's header"
expect_grep '^recA  *finished  *2  *0 ' "$T/list" "run recA in the list"
expect_grep "^$cid  *cancelled " "$T/list" "the cancelled run in the list"
expect_grep "planted.json: not a run record" "$T/list.err" "the planted file is named"

note "an unknown run: no store, no record: exit 4"
timeout -s KILL 30 "$CRUN" status --rdzv-id nosuchrun >"$T/st" 2>"$T/st.err"
expect_eq $? 4 "an unknown run id"
echo "records: all checks passed"
