#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/kill9.sh: SIGKILL the agent; no worker and no worker's child survives 1 s later.
# SIGKILL the guard instead: the agent names its loss at once and the job goes on.
. "$(dirname "$0")/lib.sh"

n=4
"$CRUN" --standalone --nproc-per-node $n "$W" grandchild:"$T" sleep:120000 >"$T/out" 2>"$T/err" &
agent=$!
track $agent
for ((r = 0; r < n; r++)); do
	wait_for 30 test -s "$T/pids.$r"
done
pids=$(cat "$T"/pids.*)
for p in $pids; do
	track "$p"
	alive "$p" || fail "process $p should be running before the kill"
done
guard=$(ps -o pid=,comm= --ppid $agent | awk '$2 == "crun-guard" { print $1 }')
[ -n "$guard" ] || fail "no crun-guard child of the agent"
track "$guard"
note "killing agent $agent with SIGKILL; watching $(echo $pids | wc -w) workers and children"
kill -9 $agent
wait $agent 2>/dev/null
# Not a stand-in for a condition: "nothing survives one second after the agent's SIGKILL" is
# the requirement under test, so the test waits exactly that long and then looks.
sleep 1
for p in $pids; do
	if alive "$p"; then
		ps -o pid,ppid,pgid,stat,cmd -p "$p" >&2
		fail "process $p survived the agent's SIGKILL by 1 s"
	fi
done
alive "$guard" && fail "the guard $guard outlived its work"
# The agent could not clean up after itself; the guard removed its temp dir.
[ -z "$(ls "$T" | grep '^crun-' || true)" ] || fail "temp dir left behind: $(ls "$T")"

note "killing the guard: the agent says so at once, and the job goes on"
"$CRUN" --standalone --nproc-per-node 1 "$W" sleep:120000 >"$T/out" 2>"$T/err" &
agent=$!
track $agent
wait_for 30 eval "ps -o comm= --ppid $agent | grep -qx crun-guard"
guard=$(ps -o pid=,comm= --ppid $agent | awk '$2 == "crun-guard" { print $1 }')
kill -9 "$guard"
wait_for 30 grep -aq "crun-guard (pid $guard) was killed by SIGKILL: should this agent now die" \
	"$T/err"
alive $agent || fail "the agent ended with its guard"
kill -TERM $agent
wait $agent 2>/dev/null
echo "kill9: ok"
