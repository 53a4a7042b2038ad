#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/notify.sh: the agent and crun-rdzvd speak systemd's notify protocol to a real
# AF_UNIX datagram socket (bound here, as systemd does): the exact READY=1 / STATUS= / STOPPING=1
# sequence, WATCHDOG=1 at half of $WATCHDOG_USEC (only for the pid $WATCHDOG_PID names), the
# variables kept from the workers, and SIGTERM within the shutdown bound.
. "$(dirname "$0")/lib.sh"

LISTEN=$SRC/tests/agent/notify_listen.py

# listen NAME [ADDR]: a notify socket at ADDR (default $T/NAME.sock); messages go to $T/NAME.msgs.
listen() {
	local name=$1 addr=${2:-$T/$1.sock}
	python3 "$LISTEN" "$addr" "$T/$name.msgs" &
	LPID=$!
	track $LPID
	wait_for 20 grep -qs "^BOUND$" "$T/$name.msgs"
	SOCK=$addr
}

# stop_listen: end the listener; keeps RC (the status of what was run before).
stop_listen() {
	local rc=$RC
	kill -TERM "$LPID"
	wait_pid 10 "$LPID"
	RC=$rc
}

# msgs NAME: the messages without watchdog pings and without the sender's pid.
msgs() {
	grep -v '^BOUND$' "$T/$1.msgs" | grep -v ' WATCHDOG=1$' | cut -d' ' -f2-
}

note "a one-node job: joining, READY=1 with the round once workers run, waiting, STOPPING=1"
listen ok
NOTIFY_SOCKET=$SOCK WATCHDOG_USEC=400000 run_crun 60 "$T/ok.out" "$T/ok.err" --standalone \
	--nproc-per-node 2 --no-python /bin/sh -c 'env > "$TMPDIR/env.$RANK"; sleep 1.2'
stop_listen
expect_eq $RC 0 "exit status"
expect_eq "$(msgs ok)" "STATUS=joining: waiting for a rendezvous round (restarts 0 of 0)
READY=1|STATUS=running: round 0, node rank 0 of 1, world size 2, restarts 0 of 0
STATUS=waiting: this node's workers finished; waiting for the other nodes (round 0)
STOPPING=1|STATUS=finished" "the notify sequence"
pings=$(grep -c ' WATCHDOG=1$' "$T/ok.msgs")
# 1.2 s of workers at one ping every 200 ms: at least 4 however loaded the machine is.
[ "$pings" -ge 4 ] || fail "WATCHDOG=1 sent $pings times in 1.2 s (want one per 200 ms)"
# Every message came from the agent itself (NotifyAccess=main), never from a worker.
others=$(grep -v '^BOUND$' "$T/ok.msgs" | cut -d' ' -f1 | sort -u | wc -l)
expect_eq "$others" 1 "distinct senders"
for r in 0 1; do
	if grep -E '^(NOTIFY_SOCKET|WATCHDOG_USEC|WATCHDOG_PID)=' "$T/env.$r"; then
		fail "worker $r inherited systemd's notify variables"
	fi
done

note "WATCHDOG_PID names another process: no pings; an abstract socket (@name) works"
listen abs "@crun-notify-test-$$"
NOTIFY_SOCKET=$SOCK WATCHDOG_USEC=100000 WATCHDOG_PID=1 run_crun 60 "$T/abs.out" "$T/abs.err" \
	--standalone "$W" sleep:600
stop_listen
expect_eq $RC 0 "exit status"
expect_eq "$(grep -c ' WATCHDOG=1$' "$T/abs.msgs")" 0 "pings for another pid's watchdog"
expect_eq "$(msgs abs | head -n2 | tail -n1 | cut -c1-20)" "READY=1|STATUS=runni" "READY=1 on @socket"

note "a failure that restarts, then one that spends the budget: restarting, then failed"

listen fail
NOTIFY_SOCKET=$SOCK run_crun 60 "$T/fail.out" "$T/fail.err" --standalone --max-restarts 1 \
	--restart-backoff 0 "$W" sleep:200 exit:3
stop_listen
expect_eq $RC 3 "exit status"
msgs fail >"$T/fail.seq"
sed -i 's/(host [^)]*)/(P)/g' "$T/fail.seq"
expect_eq "$(cat "$T/fail.seq")" "STATUS=joining: waiting for a rendezvous round (restarts 0 of 1)
READY=1|STATUS=running: round 0, node rank 0 of 1, world size 1, restarts 0 of 1
STATUS=restarting: restarts 0 of 1; last failure: rank 0 (P): exit 3
STATUS=joining: waiting for a rendezvous round (restarts 0 of 1)
STATUS=running: round 1, node rank 0 of 1, world size 1, restarts 1 of 1
STOPPING=1|STATUS=failed: rank 0 (P): exit 3" "the notify sequence of a failing job"

note "SIGTERM: STOPPING=1 at once; workers stopped within --shutdown-timeout"
listen term
NOTIFY_SOCKET=$SOCK "$CRUN" --standalone --nproc-per-node 2 --shutdown-timeout 1 "$W" \
	ignore-term touch:"$T/ready.%r" sleep:120000 >"$T/term.out" 2>"$T/term.err" &
JOB=$!
track $JOB
wait_for 30 test -e "$T/ready.0" -a -e "$T/ready.1"
wait_for 10 grep -q 'READY=1' "$T/term.msgs"
t0=$(now_ms)
kill -TERM $JOB
wait_pid 30 $JOB
ms=$(($(now_ms) - t0))
stop_listen
expect_eq $RC 143 "exit status after SIGTERM"
expect_eq "$(msgs term | tail -n1)" "STOPPING=1|STATUS=stopping" "the last message"
# Workers that ignore SIGTERM are killed 1 s later; the agent exits soon after (TimeoutStopSec
# must exceed --shutdown-timeout: docs/operations.md).
[ $ms -lt 10000 ] || fail "SIGTERM took $ms ms with --shutdown-timeout 1"
note "SIGTERM to exit: $ms ms"

note "SIGTERM while waiting to restart: STOPPING=1 and stopping, not failed"
listen back
NOTIFY_SOCKET=$SOCK "$CRUN" --standalone --max-restarts 1 --restart-backoff 60 "$W" exit:3 \
	>"$T/back.out" 2>"$T/back.err" &
JOB=$!
track $JOB
wait_for 30 grep -q 'STATUS=restarting' "$T/back.msgs"
kill -TERM $JOB
wait_pid 30 $JOB
stop_listen
expect_eq $RC 143 "exit status after SIGTERM in the backoff"
expect_eq "$(msgs back | tail -n1)" "STOPPING=1|STATUS=stopping" "the last message"

note "crun-rdzvd: READY=1 once listening, WATCHDOG=1 from its loop, STOPPING=1 on SIGTERM"
listen rdzvd
NOTIFY_SOCKET=$SOCK WATCHDOG_USEC=200000 "$RDZVD" --listen 127.0.0.1:0 >"$T/d.out" \
	2>"$T/d.err" &
DPID=$!
track $DPID
wait_for 20 grep -q 'READY=1' "$T/rdzvd.msgs"
wait_for 20 eval '[ "$(grep -c " WATCHDOG=1\$" "$T/rdzvd.msgs")" -ge 3 ]'
kill -TERM $DPID
wait_pid 20 $DPID
stop_listen
expect_eq $RC 0 "crun-rdzvd exit status"
ep=$(head -n1 "$T/d.out")
expect_eq "$(msgs rdzvd)" "READY=1|STATUS=listening on $ep (token required)
STOPPING=1|STATUS=shutting down (Terminated)" "crun-rdzvd's notify sequence"

note "no NOTIFY_SOCKET: nothing is sent and nothing breaks"
run_crun 60 "$T/none.out" "$T/none.err" --standalone "$W" exit:0
expect_eq $RC 0 "exit status without systemd"
echo "ok"
