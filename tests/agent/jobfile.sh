#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/jobfile.sh: the job files in examples/jobs/ run for real through crun --config:
# one node training examples/train, two "nodes" on loopback addresses (the endpoint 127.0.0.7 is
# no interface's address: an agent must still host the store), hello with its logs; and a bad
# job file fails with FILE:LINE:COLUMN and exit status 2.
. "$(dirname "$0")/lib.sh"
JOBS=$SRC/examples/jobs

# The job files name their programs relative to the build directory, as their comments say.
ln -s "$BUILD/examples" "$T/examples"
cd "$T" || fail "cd $T"

note "single_node_train.yaml: two workers train to equal digests"
run_crun 120 "$T/one.out" "$T/one.err" --config "$JOBS/single_node_train.yaml"
[ "$RC" -eq 0 ] || { cat "$T/one.err" >&2; fail "exit code $RC"; }
expect_digests 2 "$T/one.out"

note "two_nodes_loopback.yaml: agents on 127.0.0.8 and .9, the store on 127.0.0.7"
# A port of 127.0.0.7 held for this run: the command line overrides the file's endpoint.
hold_port PORT 127.0.0.7
pids=()
for i in 8 9; do
	"$CRUN" --config "$JOBS/two_nodes_loopback.yaml" --rdzv-endpoint "127.0.0.7:$PORT" \
		--rdzv-id "jobfile-$PORT" --local-addr 127.0.0.$i >"$T/two.$i.out" 2>"$T/two.$i.err" &
	pids+=($!)
	track $!
done
RCS=""
for p in "${pids[@]}"; do
	wait_pid 120 "$p"
	RCS="$RCS $RC"
done
[ "$RCS" = " 0 0" ] || { cat "$T"/two.*.err >&2; fail "exit codes$RCS, expected 0 0"; }
cat "$T"/two.*.out >"$T/two.out"
expect_digests 4 "$T/two.out"
cat "$T"/two.*.err >"$T/two.err"
expect_eq "$(grep -c "hosting the rendezvous store at 127.0.0.7:$PORT" "$T/two.err")" 1 \
	"agents hosting the store"
expect_grep "store 127.0.0.7:$PORT is already served here; joining it" "$T/two.err" \
	"the other agent says which store it joined"

note "hello_logs.yaml: three workers, their environment from the file, logs under crun-logs/"
run_crun 60 "$T/hello.out" "$T/hello.err" --config "$JOBS/hello_logs.yaml"
[ "$RC" -eq 0 ] || { cat "$T/hello.err" >&2; fail "exit code $RC"; }
expect_eq "$(grep -c '^\[greeter:[0-2]\] hello from rank' "$T/hello.out")" 3 "hello lines"
expect_eq "$(find crun-logs -name stdout.log | wc -l)" 3 "stdout.log files"
# The worker exits 7 when it sees the file's variable.
run_crun 60 "$T/env.out" "$T/env.err" --config "$JOBS/hello_logs.yaml" --nproc-per-node 1 \
	"$W" "exit-if-env:CRUN_EXAMPLE_GREETING:hello from a job file:7"
expect_eq "$RC" 7 "exit status of a worker that sees the file's env"

note "a bad job file: FILE:LINE:COLUMN, the key, expected and found; exit status 2"
printf 'program: /bin/true\nnproc_per_node: 2\nmax_restarts: many\n' >"$T/bad.yaml"
run_crun 20 "$T/bad.out" "$T/bad.err" --config "$T/bad.yaml"
expect_eq "$RC" 2 "exit status of a bad job file"
expect_grep "^crun: $T/bad.yaml:3:15: max_restarts: expected an integer, found \"many\"\$" \
	"$T/bad.err" "the error line"
printf 'program: /bin/true\nnproc: 2\n' >"$T/bad.yaml"
run_crun 20 "$T/bad.out" "$T/bad.err" --config "$T/bad.yaml"
expect_eq "$RC" 2 "exit status of an unknown key"
expect_grep 'bad.yaml:2:1: unknown key "nproc" (did you mean nproc_per_node?)' "$T/bad.err" \
	"the unknown key"
echo "jobfile: ok"
