#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/deadstore.sh: losing the store. A crun-rdzvd killed mid-job is reported by every
# agent as "connection refused" within seconds; workers that finish while the store is dead
# give the agent their exit status; an endpoint with nothing listening is reported early.
. "$(dirname "$0")/lib.sh"

# A loaded 2-core machine gets plenty of room; before the fix this took over 120 s and said
# "timed out".
LIMIT_MS=20000

note "crun-rdzvd killed mid-job: both agents report the refused store within seconds"
start_rdzvd
pids=()
for i in 0 1; do
	"$CRUN" --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" \
		--rdzv-id dead$$ --local-addr 127.0.0.$((i + 2)) --rdzv-conf last_call_timeout=1 \
		"$W" touch:"$T/ready.$i" sleep:120000 >"$T/k.$i.out" 2>"$T/k.$i.err" &
	pids+=($!)
	track $!
done
wait_for 60 test -e "$T/ready.0"
wait_for 60 test -e "$T/ready.1"
kill -9 $RDZVD_PID
t0=$(now_ms)
for i in 0 1; do
	wait_pid 60 ${pids[$i]}
	ms=$(($(now_ms) - t0))
	note "agent $i exited $RC after $ms ms"
	[ $RC -ne 0 ] || fail "agent $i exited 0 with its store gone"
	[ $ms -lt $LIMIT_MS ] || { cat "$T/k.$i.err" >&2; fail "agent $i took $ms ms"; }
	expect_grep "store lost: store: connection refused by $ENDPOINT" "$T/k.$i.err" \
		"agent $i names the refused store"
	if grep -q "timed out" "$T/k.$i.err"; then
		cat "$T/k.$i.err" >&2
		fail "agent $i says timed out"
	fi
done

# finished CODE: one node whose workers wait for $T/go, then exit CODE; the store is killed
# before they are let go. The agent must exit CODE, soon.
finished() {
	local code=$1 job
	rm -f "$T/go" "$T/ready.f.0"
	start_rdzvd
	"$CRUN" --nnodes 1 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" \
		--rdzv-id fin$code.$$ "$W" touch:"$T/ready.f.%r" wait-file:"$T/go" exit:$code \
		>"$T/f$code.out" 2>"$T/f$code.err" &
	job=$!
	track $job
	wait_for 60 test -e "$T/ready.f.0"
	kill -9 $RDZVD_PID
	touch "$T/go"
	t0=$(now_ms)
	wait_pid 60 $job
	ms=$(($(now_ms) - t0))
	note "workers exited $code with the store dead: the agent exited $RC after $ms ms"
	[ $RC -eq $code ] || { cat "$T/f$code.err" >&2; fail "agent exited $RC, not $code"; }
	[ $ms -lt $LIMIT_MS ] || { cat "$T/f$code.err" >&2; fail "agent took $ms ms"; }
}

note "workers that succeed while the store is dead: the agent exits 0"
finished 0
expect_grep "exiting with the workers' result (0)" "$T/f0.err" "the agent says why it exits 0"
note "workers that fail while the store is dead: the agent exits with their status"
finished 3

note "nothing listening at the endpoint: a progress line within seconds, and again after"
start_rdzvd
port=${ENDPOINT##*:}
kill -9 $RDZVD_PID
wait $RDZVD_PID 2>/dev/null
"$CRUN" --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" \
	--rdzv-conf is_host=0 --rdzv-id none$$ "$W" >"$T/n.out" 2>"$T/n.err" &
job=$!
track $job
t0=$(now_ms)
wait_for 15 grep -q "waiting for the store at 127.0.0.1:$port: connection refused (" "$T/n.err"
ms=$(($(now_ms) - t0))
note "first progress line after $ms ms"
[ $ms -lt 10000 ] || fail "the first progress line took $ms ms"
wait_for 20 eval "[ \$(grep -c 'waiting for the store at' '$T/n.err') -ge 2 ]"
expect_grep "s of 600 s)" "$T/n.err" "the line says how long of how long"
kill $job
wait_pid 30 $job
echo "deadstore: ok"
