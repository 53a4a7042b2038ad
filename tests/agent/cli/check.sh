#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/cli/check.sh: crun --check (issue 21): the command line, a job file and PET_*
# variables checked together; the job as it would start printed with each value's source
# (flag, PET_ variable, FILE:LINE:COLUMN, default); exit 0 and nothing started (no store, no
# worker, no run record); a mistake anywhere is exit 2 with one line naming it.
. "$(dirname "$0")/../lib.sh"

hold_port port
printf 'nnodes: 1:2\nnproc_per_node: 2\nrdzv_backend: c10d\nrdzv_endpoint: "127.0.0.1:%s"\nmax_restarts: 3\nrdzv_id: fromfile\n' \
	"$port" >"$T/job.yaml"
PET_MAX_RESTARTS=5 timeout -s KILL 30 "$CRUN" --config "$T/job.yaml" --check --rdzv-id fromflag \
	--tee 3 --no-python "$W" touch:"$T/started" >"$T/out" 2>"$T/err"
expect_eq $? 0 "crun --check exit status"
[ ! -s "$T/err" ] || fail "crun --check wrote to stderr: $(cat "$T/err")"
row() { grep -E "^$1 +$2 +$3\$" "$T/out" >/dev/null || { cat "$T/out" >&2; fail "no row '$1 $2 $3'"; }; }
row nnodes 1:2 ".*job.yaml:1:9: nnodes"
row nproc_per_node 2 ".*job.yaml:2:17: nproc_per_node"
row rdzv_endpoint "127.0.0.1:$port" ".*job.yaml:4:16: rdzv_endpoint"
row rdzv_id fromflag "--rdzv-id"
row max_restarts 5 PET_MAX_RESTARTS
row join_timeout "600 s" default
row "  path" "$W" "command line"
row tee 3 --tee
row no-python true --no-python
sleep 0.5
[ ! -e "$T/started" ] || fail "a worker started under --check"
[ ! -e "$CRUN_STATE_DIR/runs" ] || fail "crun --check left a run record"
if timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null; then
	fail "something listens on 127.0.0.1:$port after crun --check"
fi

note "a mistake in the file, a variable or a flag: exit 2, one line naming it"
printf 'nnodes: [1]\n' >"$T/bad.yaml"
timeout -s KILL 30 "$CRUN" --config "$T/bad.yaml" --check /bin/true >"$T/out" 2>"$T/err"
expect_eq $? 2 "a bad job file under --check"
expect_eq "$(wc -l <"$T/err")" 1 "lines on stderr"
expect_grep "bad.yaml:1:9: nnodes" "$T/err" "the file's place"
[ ! -s "$T/out" ] || fail "printed a job after a mistake"
PET_NNODES=3:2 timeout -s KILL 30 "$CRUN" --check /bin/true >"$T/out" 2>"$T/err"
expect_eq $? 2 "a bad PET_NNODES under --check"
expect_grep "PET_NNODES" "$T/err" "the variable is named"
echo "check: all checks passed"
