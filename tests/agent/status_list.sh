#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/status_list.sh: `crun status --rdzv-endpoint H:P` with no --rdzv-id lists the
# runs a shared crun-rdzvd serves (LIST_RUNS): two real jobs on one daemon, one running and one
# finished, each on its own line with its state and nodes, in the table and in --json; a client
# without the token (or with a wrong one) is refused; a file store without a run id is a usage
# error.
. "$(dirname "$0")/lib.sh"

start_rdzvd

# list ARGS...: crun status on the daemon, no run named; output in $T/st, exit status in RC.
list() {
	timeout -s KILL 60 "$CRUN" status --rdzv-endpoint "$ENDPOINT" "$@" >"$T/st" 2>"$T/st.err"
	RC=$?
}

note "two runs on one daemon: 'alive' (2 nodes, held running), 'done' (1 node, finished)"
for i in 0 1; do
	"$CRUN" --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" --rdzv-id alive \
		--nproc-per-node 1 "$W" touch:"$T/alive.%r" wait-file:"$T/alive.go" \
		>"$T/alive.$i.out" 2>"$T/alive.$i.err" &
	eval "A$i=\$!"
	track $!
done
run_crun 120 "$T/done.out" "$T/done.err" --nnodes 1 --rdzv-backend c10d \
	--rdzv-endpoint "$ENDPOINT" --rdzv-id done --nproc-per-node 1 "$W" print:hi
expect_eq $RC 0 "the finished job's exit status"
wait_for 60 test -e "$T/alive.0"
wait_for 60 test -e "$T/alive.1"

note "the table: one line per run, with its state and nodes; exit 0"
wait_for 30 eval 'list; [ $RC -eq 0 ] && grep -q "^alive  *running  *2 " "$T/st"'
cat "$T/st"
expect_grep '^RUN  *STATE  *NODES  *START  *LAST CHANGE' "$T/st" "the header"
expect_grep '^done  *finished  *1 ' "$T/st" "the finished run"
expect_eq "$(grep -c -v '^RUN ' "$T/st")" 2 "lines: one per run"

note "--json parses and says the same"
list --json
expect_eq $RC 0 "exit status of --json"
python3 -m json.tool "$T/st" >/dev/null || fail "--json is not JSON: $(cat "$T/st")"
python3 - "$T/st" <<'PY' || fail "the runs' JSON: $(cat "$T/st")"
import json, sys
d = json.load(open(sys.argv[1]))
runs = {r["run_id"]: r for r in d["runs"]}
assert d["total"] == 2 and d["not_shown"] == 0, d
assert runs["alive"]["state"] == "running" and runs["alive"]["nodes"] == 2, d
assert runs["done"]["state"] == "finished" and runs["done"]["nodes"] == 1, d
assert all(r["keys"] > 0 and r["bytes"] > 0 for r in d["runs"]), d
PY

note "authenticated like every op: no token (--insecure) or a wrong one is refused (exit 5)"
list --insecure
expect_eq $RC 5 "exit status without a token"
grep -q '^alive' "$T/st" && fail "listed runs without a token"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/wrong"
chmod 600 "$T/wrong"
list --token-file "$T/wrong"
expect_eq $RC 5 "exit status with a wrong token"

note "the running run ends: both listed as finished"
touch "$T/alive.go"
wait_pid 60 $A0
wait_pid 60 $A1
list
expect_eq $RC 0 "exit status"
expect_grep '^alive  *finished  *2 ' "$T/st" "the run that ended"
expect_grep '^done  *finished  *1 ' "$T/st" "the other"

note "usage: a file store has no list of runs"
"$CRUN" status --rdzv-endpoint "$ENDPOINT" --rdzv-backend file >/dev/null 2>"$T/st.err"
expect_eq $? 2 "exit status for a file store without --rdzv-id"
expect_grep 'needs --rdzv-id' "$T/st.err" "the message"
echo "ok"
