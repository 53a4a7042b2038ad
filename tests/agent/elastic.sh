#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/elastic.sh: --nnodes 2:3: a killed node leaves the other two to finish; a late
# node triggers a scale-up round. Neither spends the restart budget (--max-restarts 0).
. "$(dirname "$0")/lib.sh"

start_rdzvd
CONF=last_call_timeout=1,heartbeat_timeout=3,keep_alive_interval=1

# agent ID I ARGS...: start agent I (127.0.0.I+2) of job ID in the background; sets PID_<I>.
agent() {
	local id=$1 i=$2
	shift 2
	"$CRUN" --nnodes 2:3 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" \
		--rdzv-id "$id" --local-addr 127.0.0.$((i + 2)) --rdzv-conf "$CONF" --max-restarts 0 \
		"$@" >"$T/$id.$i.out" 2>"$T/$id.$i.err" &
	eval "PID_$i=$!"
	track $!
}

note "three nodes run; one is SIGKILLed; the other two re-form and finish"
for i in 0 1 2; do
	agent ek $i "$W" touch:"$T/ready.%r" exit-if-env:GROUP_WORLD_SIZE:2:0 sleep:120000
done
wait_for 60 files_at_least 6 "$T/ready."
kill -9 $PID_1
wait $PID_1 2>/dev/null
wait_pid 90 $PID_0
rc0=$RC
wait_pid 90 $PID_2
expect_eq "$rc0 $RC" "0 0" "survivors' exit codes"
cat "$T"/ek.0.err "$T"/ek.2.err >"$T/ek.err"
grep -aqi "lost\|heartbeat" "$T/ek.err" || { cat "$T/ek.err" >&2; fail "the lost node is not reported"; }

note "two nodes run; a late third arrives; all three re-form (scale-up) and finish"
rm -f "$T"/ready.*
for i in 0 1; do
	agent es $i "$W" touch:"$T/ready.%r" env exit-if-env:GROUP_WORLD_SIZE:3:0 sleep:120000
done
wait_for 60 files_at_least 4 "$T/ready."
agent es 2 "$W" touch:"$T/ready.%r" env exit-if-env:GROUP_WORLD_SIZE:3:0 sleep:120000
for i in 0 1 2; do
	eval "p=\$PID_$i"
	wait_pid 90 $p
	expect_eq $RC 0 "exit code of node $i after scale-up"
done
cat "$T"/es.*.out >"$T/es.out"
expect_eq "$(grep -ac '^\[rank[0-9]*\]:GROUP_WORLD_SIZE=3$' "$T/es.out")" 6 "workers of the 3-node round"
expect_eq "$(grep -ac '^\[rank[0-9]*\]:TORCHELASTIC_RESTART_COUNT=[1-9]' "$T/es.out")" 0 \
	"workers with a non-zero restart count after a scale-up"
note "a node cut off (SIGSTOP: its heartbeats stop): the survivors re-form and finish"
rm -f "$T"/ready.*
for i in 0 1 2; do
	agent ec $i "$W" touch:"$T/ready.%r" exit-if-env:GROUP_WORLD_SIZE:2:0 sleep:120000
done
wait_for 60 files_at_least 6 "$T/ready."
kill -STOP $PID_2
wait_pid 90 $PID_0
rc0=$RC
wait_pid 90 $PID_1
expect_eq "$rc0 $RC" "0 0" "survivors' exit codes"
kill -CONT $PID_2
wait_pid 90 $PID_2
[ $RC -ne 0 ] || fail "the cut-off node must not report success"
echo "elastic: ok"
