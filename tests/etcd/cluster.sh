#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/etcd/cluster.sh: jobs through a 3-member etcd cluster (each member its own 127.0.0.x):
# the member the agents talk to (listed first, and the leader) is SIGKILLed in the middle of a
# rendezvous round and again while the job runs: the job forms, runs and finishes without a
# restart. With two members killed the agents fail, within the deadline, with a clear message.
. "$(dirname "$0")/lib.sh"

# heartbeat_timeout 10 s: a node whose heartbeats did not get through while a member was down
# would be declared lost, and the test would see a second round. (An election takes 1-3 s on
# a loaded box; the margin is for a very loaded one.)
CONF=last_call_timeout=1,heartbeat_timeout=10,keep_alive_interval=1,read_timeout=5
CONF=$CONF,keep_alive_max_attempt=3

start_cluster 3

# leader_first: ETCD_EP with the current leader first (the member the agents try first);
# sets L to its index.
leader_first() {
	local i
	L=$(leader)
	ETCD_EP=${M_ADDR[$L]}:${M_CPORT[$L]}
	for ((i = 0; i < MEMBERS; i++)); do
		[ "$i" -eq "$L" ] || ETCD_EP="$ETCD_EP,${M_ADDR[$i]}:${M_CPORT[$i]}"
	done
}

# has_key ID SUFFIX: job ID has a key ending in SUFFIX (etcd's own view).
has_key() { $PROBE "$(live_url)" dump "/crun/$1/" 2>/dev/null | grep -q -- "$2\$"; }

one_attempt() { # ID: every worker ran once, in round 0, with no restart
	cat "$T/$1".*.out >"$T/$1.out"
	expect_eq "$(grep -ac ':GROUP_WORLD_SIZE=2$' "$T/$1.out")" 4 "$1: workers of the 2-node round"
	expect_eq "$(grep -ac ':TORCHELASTIC_RESTART_COUNT=0$' "$T/$1.out")" 4 "$1: first attempts"
	grep -aq "stopping the workers\|round 1" "$T/$1".*.err &&
		{ cat "$T/$1".*.err >&2; fail "$1: the member's loss was seen by the job"; }
	return 0
}

note "a member is killed in the middle of a rendezvous round"
leader_first
APIDS=()
etcd_agent jr 0 2 2 "$W" env
wait_for 60 has_key jr "r/0/node/0"
t0=$(now_ms)
kill_member "$L"
note "killed member $L (the leader, listed first) while node 0 waits for node 1"
etcd_agent jr 1 2 2 "$W" env
wait_agents 120
[ "$RCS" = "0 0" ] || { cat "$T"/jr.*.err >&2; fail "exit codes $RCS, expected 0 0"; }
note "the round formed and the job finished $(($(now_ms) - t0)) ms after the kill"
one_attempt jr
expect_eq "$(job_keys jr)" 0 "keys of job jr left in etcd"

note "the member comes back; another is killed while the job runs"
start_member "$L"
wait_for 60 all_healthy
leader_first
rm -f "$T"/ready.* "$T/go"
etcd_agents jw 2 2 "$W" env touch:"$T/ready.%r" wait-file:"$T/go" print:finished
wait_for 90 files_at_least 4 "$T/ready."
kill_member "$L"
note "killed member $L (the leader, listed first) while 4 workers run"
# Longer than heartbeat_timeout: the heartbeats must have gone through another member.
sleep 12
touch "$T/go"
wait_agents 120
[ "$RCS" = "0 0" ] || { cat "$T"/jw.*.err >&2; fail "exit codes $RCS, expected 0 0"; }
one_attempt jw
expect_eq "$(grep -ac ':finished$' "$T/jw.out")" 4 "workers that finished"
expect_eq "$(job_keys jw)" 0 "keys of job jw left in etcd"

note "two members killed while the job runs: the agents fail with a clear message"
start_member "$L"
wait_for 60 all_healthy
leader_first
rm -f "$T"/ready.*
etcd_agents jq 2 2 "$W" touch:"$T/ready.%r" sleep:120000
wait_for 90 files_at_least 4 "$T/ready."
kill_two() { # the leader and one other member
	local i
	for ((i = 0; i < MEMBERS; i++)); do
		[ "$i" -eq "$L" ] || { kill_member "$i"; break; }
	done
	kill_member "$L"
}
kill_two
t0=$(now_ms)
# keep_alive_max_attempt (3) failed keep-alives, each at most read_timeout (5 s) apart by
# keep_alive_interval (1 s): 18 s, and the workers stop at once. Bound: 60 s for a loaded box.
wait_agents 60
dt=$(($(now_ms) - t0))
expect_eq "$RCS" "1 1" "exit codes after losing the quorum"
for i in 0 1; do
	expect_grep "the store stopped answering" "$T/jq.$i.err" "node $i: no store-lost message"
	expect_grep "quorum" "$T/jq.$i.err" "node $i: no word of the quorum"
done
note "both agents exited 1 $dt ms after the quorum was lost; node 0 said:"
grep -a "quorum" "$T/jq.0.err" | head -n 1 >&2
grep -a "error:" "$T/jq.0.err" >&2

note "two members killed while a node waits in a rendezvous round"
for ((i = 0; i < MEMBERS; i++)); do
	[ -n "${M_PID[$i]}" ] || start_member "$i"
done
wait_for 60 all_healthy
leader_first
APIDS=()
CONF=$CONF,join_timeout=60 etcd_agent jn 0 2 2 "$W" env
wait_for 60 has_key jn "r/0/node/0"
kill_two
t0=$(now_ms)
# The member left loses its leader: it answers "no leader" (the backend asks with etcd's
# hasleader header, and etcd ends a watch there), and the waiting node fails on that within
# its read_timeout (5 s) and the wait's margin, not at its join_timeout (60 s). Bound: 30 s
# for a loaded box.
wait_agents 90
dt=$(($(now_ms) - t0))
expect_eq "$RCS" 1 "exit code of the waiting node after losing the quorum"
expect_grep "has no leader" "$T/jn.0.err" "no word of the lost leader"
expect_grep "error: rendezvous" "$T/jn.0.err" "no rendezvous error"
grep -aq " -1 of " "$T/jn.0.err" && { cat "$T/jn.0.err" >&2; fail "a progress line of -1 nodes"; }
[ "$dt" -lt 30000 ] || { cat "$T/jn.0.err" >&2; fail "the waiting node took $dt ms to fail"; }
note "the waiting agent exited 1 $dt ms after the quorum was lost; it said:"
grep -a "no leader" "$T/jn.0.err" | head -n 1 >&2
grep -a "error:" "$T/jn.0.err" >&2
echo "etcd cluster: ok"
