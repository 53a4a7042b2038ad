#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/hungstore.sh: a store that stops answering while this node publishes its failure
# does not hold up the stop: the grace period still ends in SIGKILL on time.
. "$(dirname "$0")/lib.sh"

note "store frozen as a worker fails: the SIGTERM-ignoring worker is SIGKILLed after the grace"
start_rdzvd
"$CRUN" --nnodes 1 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" \
	--rdzv-id hung$$ --rdzv-conf read_timeout=90 --shutdown-timeout 1 \
	"$W" ignore-term-if-rank:1 touch:"$T/ready.%r" wait-file:"$T/go" exit-if-rank:0:3 \
	sleep:120000 >"$T/out" 2>"$T/err" &
JOB=$!
track $JOB
wait_for 30 test -e "$T/ready.0"
wait_for 30 test -e "$T/ready.1"
# Every request from here on hangs: the agent's failure report cannot complete.
kill -STOP $RDZVD_PID
touch "$T/go"
t0=$(now_ms)
# The grace is 1 s; allow a loaded machine plenty, but far less than the 90 s read timeout.
wait_for 30 grep -q "sending SIGKILL" "$T/err"
ms=$(($(now_ms) - t0))
note "SIGKILL $ms ms after the failure"
# The 1 s grace plus a few ms when it works; a stop held up by the store waits 90 s.
[ $ms -lt 5000 ] || fail "SIGKILL came $ms ms after the failure"
kill -CONT $RDZVD_PID
wait_pid 60 $JOB
expect_eq $RC 3 "exit status once the store answers again"
expect_grep "marked failed: workers failed: rank 0" "$T/err" "the failure was published"
echo "hungstore: ok"
