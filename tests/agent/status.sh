#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/status.sh: `crun status` on a real 2-node job on loopback: running (table and
# JSON), after a failure (failed, with the failing rank, exit code and message), after success
# (finished), an unknown run id, a store that is not there, --watch to the end; exit statuses.
. "$(dirname "$0")/lib.sh"

start_rdzvd

# job ID ARGS...: two agents of run ID in the background (PIDs in J0 J1).
job() {
	local id=$1 i
	shift
	for i in 0 1; do
		"$CRUN" --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" --rdzv-id "$id" \
			--nproc-per-node 2 "$@" >"$T/$id.$i.out" 2>"$T/$id.$i.err" &
		eval "J$i=\$!"
		track $!
	done
}

# status ARGS...: crun status on the daemon; output in $T/st, exit status in RC.
status() {
	timeout -s KILL 60 "$CRUN" status --rdzv-endpoint "$ENDPOINT" "$@" >"$T/st" 2>"$T/st.err"
	RC=$?
}

note "running: the table names both nodes, their ranks and the round; exit 0"
job ok "$W" touch:"$T/ok.%r" wait-file:"$T/ok.go"
for r in 0 1 2 3; do
	wait_for 60 test -e "$T/ok.$r"
done
wait_for 20 eval 'status --rdzv-id ok; [ $RC -eq 0 ] && [ "$(grep -c "^[01] .* running " "$T/st")" = 2 ]'
expect_grep '^job ok: running (round 0, 2 nodes, world size 4)$' "$T/st" "the job line"
expect_grep '^restarts: 0 spent, 0 left (max 0)$' "$T/st" "the restarts line"
expect_grep '^0 .* running .* 0-1 ' "$T/st" "node rank 0 with ranks 0-1"
expect_grep '^1 .* running .* 2-3 ' "$T/st" "node rank 1 with ranks 2-3"
status --rdzv-id ok --json
expect_eq $RC 0 "--json exit status while running"
python3 - "$T/st" <<'PY' || fail "the JSON document"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["state"] == "running" and d["nodes"] == 2 and d["world_size"] == 4, d
assert sorted(a["node_rank"] for a in d["agents"]) == [0, 1], d
assert all(a["state"] == "running" and a["heartbeat_age_s"] < 30 for a in d["agents"]), d
assert d["last_failure"] is None, d
PY
note "--config: endpoint and run id from the job's file; options given win"
printf 'rdzv_backend: c10d\nrdzv_endpoint: "%s"\nrdzv_id: nosuchrun\nnproc_per_node: 2\n' \
	"$ENDPOINT" >"$T/job.yaml"
timeout -s KILL 60 "$CRUN" status --config "$T/job.yaml" --rdzv-id ok >"$T/st" 2>"$T/st.err"
RC=$?
expect_eq $RC 0 "crun status --config exit status while running"
expect_grep '^job ok: running (round 0, 2 nodes, world size 4)$' "$T/st" "the job line (--config)"
timeout -s KILL 60 "$CRUN" status --config "$T/job.yaml" >"$T/st" 2>"$T/st.err"
expect_eq $? 4 "the file's run id (nosuchrun) is unknown"
printf 'rdzv_endpoint: [1, 2]\n' >"$T/bad.yaml"
timeout -s KILL 60 "$CRUN" status --config "$T/bad.yaml" >"$T/st" 2>"$T/st.err"
expect_eq $? 2 "a bad job file is a usage error"
expect_grep "bad.yaml:1:16: rdzv_endpoint: expected a string" "$T/st.err" "the file's place"

note "--watch follows the job to its end and exits with its state (3: finished)"
timeout -s KILL 60 "$CRUN" status --rdzv-endpoint "$ENDPOINT" --rdzv-id ok --watch 0.2 \
	>"$T/watch" 2>&1 &
WP=$!
track $WP
wait_for 30 grep -q '^job ok: running' "$T/watch"
touch "$T/ok.go"
wait_pid 60 $J0
expect_eq $RC 0 "node 0's exit status"
wait_pid 60 $J1
wait_pid 60 $WP
expect_eq $RC 3 "crun status --watch's exit status at the end"
[ "$(grep -c '^job ok: ' "$T/watch")" -ge 2 ] || fail "--watch printed one snapshot"
expect_grep '^job ok: finished' "$T/watch" "the last snapshot"

note "finished: exit 3, both nodes finished"
status --rdzv-id ok
expect_eq $RC 3 "exit status of a finished job"
expect_grep '^job ok: finished' "$T/st" "the job line"
expect_eq "$(grep -c '^[01] .* finished ' "$T/st")" 2 "finished nodes"

note "failed: exit 1, the failing rank, its exit code and message"
job bad "$W" touch:"$T/bad.%r" errfile:"disk on fire" exit-if-rank:3:7 sleep:60000
wait_pid 60 $J0
wait_pid 60 $J1
status --rdzv-id bad
expect_eq $RC 1 "exit status of a failed job"
expect_grep '^job bad: failed' "$T/st" "the job line"
expect_grep '^last failure: rank 3 on .*, exit 7, at ' "$T/st" "rank and exit code"
expect_grep 'disk on fire' "$T/st" "the worker's message"
status --rdzv-id bad --json
python3 - "$T/st" <<'PY' || fail "the failed job's JSON"
import json, sys
d = json.load(open(sys.argv[1]))
f = d["last_failure"]
assert d["state"] == "failed" and f["rank"] == 3 and f["exit_code"] == 7, d
assert "disk on fire" in f["message"], d
PY

note "--json is valid JSON whatever bytes the failing worker's message held"
# Latin-1, bytes never in UTF-8, an escape sequence, DEL, a quote and a backslash (JSON-escaped
# in the error file), written raw by the worker into its error file.
job bytes "$W" errfile:$'caf\xe9 \xff\xfe \x1b[31mred\x7f \\"q\\" \\\\ end' exit-if-rank:1:9 \
	sleep:60000
wait_pid 60 $J0
wait_pid 60 $J1
status --rdzv-id bytes --json
expect_eq $RC 1 "exit status of the failed job (--json)"
python3 - "$T/st" <<'PY' || fail "the JSON of a job whose message is not UTF-8"
import json, sys
raw = open(sys.argv[1], "rb").read()
d = json.loads(raw.decode("utf-8"))  # strict: invalid UTF-8 or a raw control byte fails
f = d["last_failure"]
assert f["rank"] == 1 and f["exit_code"] == 9, d
m = f["message"]
assert "caf\ufffd \ufffd\ufffd " in m and "red\x7f" in m and ' "q" \\ end' in m, m
PY

note "a node whose workers finished waits for the other: waiting; the job is still running"
job wt "$W" exit-if-env:GROUP_RANK:0:0 wait-file:"$T/wt.go"
# Each agent publishes on its own thread: wait until both records say so, not just node 0's.
wait_for 60 eval 'status --rdzv-id wt; [ $RC -eq 0 ] && grep -q "^0 .* waiting " "$T/st" &&
	grep -q "^1 .* running " "$T/st"'
expect_grep '^1 .* running ' "$T/st" "node 1 still running"
touch "$T/wt.go"
wait_pid 60 $J0
wait_pid 60 $J1
status --rdzv-id wt
expect_eq $RC 3 "exit status once both finished"

note "unknown run id: exit 4"
status --rdzv-id never-ran
expect_eq $RC 4 "exit status for an unknown run"
expect_grep 'no agent of run "never-ran"' "$T/st" "the message"

note "authenticated: a wrong token is refused (exit 5), --insecure too"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/wrong"
chmod 600 "$T/wrong"
status --rdzv-id ok --token-file "$T/wrong"
expect_eq $RC 5 "exit status with a wrong token"
status --rdzv-id ok --insecure
expect_eq $RC 5 "exit status without a token"

note "no store there: exit 5 within --timeout; usage errors: exit 2"
t0=$(now_ms)
timeout -s KILL 30 "$CRUN" status --rdzv-endpoint 127.0.0.1:1 --rdzv-id x --timeout 1 \
	>/dev/null 2>"$T/st.err"
RC=$?
expect_eq $RC 5 "exit status with no store"
[ $(($(now_ms) - t0)) -lt 10000 ] || fail "--timeout 1 took $(($(now_ms) - t0)) ms"
"$CRUN" status --rdzv-id x >/dev/null 2>&1
expect_eq $? 4 "exit status without --rdzv-endpoint: no run record of x here (records.sh)"
"$CRUN" status --rdzv-endpoint "$ENDPOINT" --rdzv-backend file >/dev/null 2>&1
expect_eq $? 2 "exit status with a file store but no --rdzv-id (status_list.sh lists a crun store's runs)"
"$CRUN" status --rdzv-endpoint "$ENDPOINT" --rdzv-id x --watch nope >/dev/null 2>&1
expect_eq $? 2 "exit status for a bad --watch"
"$CRUN" status --help | grep -q -- '--watch' || fail "--help lists --watch"
echo "ok"
