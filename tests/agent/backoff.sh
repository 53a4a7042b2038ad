#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/backoff.sh: restarts wait (--restart-backoff, doubling up to --restart-backoff-max),
# so a worker that fails at once cannot spend the budget in milliseconds. Lower bounds only: the
# machine may be loaded.
. "$(dirname "$0")/lib.sh"

# round_ms N FILE: the log time of "round N: complete" in FILE, in ms since midnight (the
# line's stamp is 2026-11-28T11:17:52.123+00:00: the hour follows the T).
round_ms() {
	grep -a " round $1: complete" "$2" | head -n1 |
		awk '{ split(substr($2, index($2, "T") + 1), t, "[:.+]")
		       printf "%d\n", ((t[1] * 60 + t[2]) * 60 + t[3]) * 1000 + t[4] }'
}

# gap_at_least A B MS FILE: round B completed at least MS after round A.
gap_at_least() {
	local a b d
	a=$(round_ms "$1" "$4")
	b=$(round_ms "$2" "$4")
	[ -n "$a" ] && [ -n "$b" ] || { cat "$4" >&2; fail "rounds $1 and $2 not both logged"; }
	d=$((b - a))
	[ $d -ge 0 ] || d=$((d + 86400000))
	[ $d -ge "$3" ] || { cat "$4" >&2; fail "round $2 came $d ms after round $1 (< $3 ms)"; }
}

note "a worker that always fails: the waits double (0.3, 0.6, 1.2 s), then the budget is spent"
t0=$(now_ms)
run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 2 --max-restarts 3 \
	--restart-backoff 0.3 --restart-backoff-max 10 "$W" exit:3
ms=$(($(now_ms) - t0))
expect_eq $RC 3 "exit status once the budget is spent"
expect_grep "restarting in 0.3 s (restart 1 of 3)" "$T/err" "first wait"
expect_grep "restarting in 0.6 s (restart 2 of 3)" "$T/err" "second wait"
expect_grep "restarting in 1.2 s (restart 3 of 3)" "$T/err" "third wait"
expect_eq "$(grep -ac 'restarting in' "$T/err")" 3 "one wait per restart, none after the last"
gap_at_least 0 1 300 "$T/err"
gap_at_least 1 2 600 "$T/err"
gap_at_least 2 3 1200 "$T/err"
[ $ms -ge 2100 ] || fail "the job took $ms ms, below the 2100 ms of waits"

note "the cap: --restart-backoff 0.2 --restart-backoff-max 0.3 waits 0.2, 0.3, 0.3 s"
run_crun 60 "$T/out" "$T/err" --standalone --max-restarts 3 --restart-backoff 0.2 \
	--restart-backoff-max 0.3 "$W" exit:5
expect_eq $RC 5 "exit status"
expect_grep "restarting in 0.2 s (restart 1 of 3)" "$T/err" "first wait"
expect_grep "restarting in 0.3 s (restart 2 of 3)" "$T/err" "capped second wait"
expect_grep "restarting in 0.3 s (restart 3 of 3)" "$T/err" "capped third wait"

note "--restart-backoff 0 restarts at once, as before"
run_crun 60 "$T/out" "$T/err" --standalone --max-restarts 2 --restart-backoff 0 "$W" exit:4
expect_eq $RC 4 "exit status"
if grep -aq "restarting in" "$T/err"; then
	fail "a wait was logged with --restart-backoff 0"
fi

note "the default waits 1 s before the first restart; PET_RESTART_BACKOFF sets it too"
run_crun 60 "$T/out" "$T/err" --standalone --max-restarts 1 "$W" exit-if-restart:0:3
expect_eq $RC 0 "exit status after one restart"
expect_grep "restarting in 1.0 s (restart 1 of 1)" "$T/err" "default first wait"
PET_RESTART_BACKOFF=0.4 run_crun 60 "$T/out" "$T/err" --standalone --max-restarts 1 \
	"$W" exit-if-restart:0:3
expect_eq $RC 0 "exit status after one restart"
expect_grep "restarting in 0.4 s (restart 1 of 1)" "$T/err" "PET_RESTART_BACKOFF"

note "a node whose workers finished waits the backoff too when another node's worker fails"
# Elastic 1:2, --max-restarts 1, a 2 s backoff. Rank 1 exits 0 at once, so its node is done and
# waits for the job's end; rank 0 fails 1.5 s later, in attempt 0 only. Both nodes must wait
# 2 s and meet in round 1: a node that rejoined at once would close round 1 alone (min 1
# reached), end the job, and leave the failed node to be refused or to run it again alone.
start_rdzvd
for i in 0 1; do
	"$CRUN" --nnodes 1:2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" \
		--rdzv-id pf --local-addr 127.0.0.$((i + 2)) --rdzv-conf last_call_timeout=1 \
		--max-restarts 1 --restart-backoff 2 "$W" exit-if-restart:1:0 exit-if-rank:1:0 \
		sleep:1500 exit:1 >"$T/pf.$i.out" 2>"$T/pf.$i.err" &
	eval "PF_$i=$!"
	track $!
done
wait_pid 90 "$PF_0"
rc0=$RC
wait_pid 90 "$PF_1"
expect_eq "$rc0 $RC" "0 0" "both nodes' exit codes"
for i in 0 1; do
	expect_grep "restarting in 2.0 s (restart 1 of 1)" "$T/pf.$i.err" "node $i waits the backoff"
	expect_grep "round 1: complete .* of 2, world size 2," "$T/pf.$i.err" \
		"node $i in round 1 with both nodes"
done
expect_eq "$(cat "$T"/pf.?.err | grep -ac ' round 2: ')" 0 "rounds after round 1"

note "a signal during the wait ends the job at once, with 128+signal"
"$CRUN" --standalone --max-restarts 1 --restart-backoff 60 "$W" exit:3 >"$T/out" 2>"$T/err" &
pid=$!
track $pid
wait_for 30 grep -aq "restarting in 60.0 s" "$T/err"
kill -TERM $pid
wait_pid 20 $pid
expect_eq $RC 143 "exit status after SIGTERM in the wait"
expect_grep "received SIGTERM while waiting to restart" "$T/err" "the signal is logged"
