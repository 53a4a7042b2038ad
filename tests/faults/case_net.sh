#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/faults/case_net.sh CASE: a network link cut between two "nodes", each a network
# namespace with a veth into a bridge in the root namespace (10.231.0.1 and .2). The store
# (crun-rdzvd) and node 0 are in namespace a; node 1 in b. The cut takes node 1's bridge port
# down: both nodes keep their address and route (b's link only loses its carrier), so packets
# are dropped, as on a pulled cable or a dead switch port, rather than refused locally.
# Run by tests/faults/run.sh; exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"

# The ranks of both nodes run on one host: without this they would exchange gradients through
# shared memory, around the cut link.
export CRUN_COMM_SHM=0

# Stated timeouts (--rdzv-conf): a node whose heartbeat is older than HB_S is lost.
HB_S=20
CONF=last_call_timeout=1,heartbeat_timeout=$HB_S,keep_alive_interval=2
. "$(dirname "$0")/net_pair.sh" # net_up, link_down, link_up, node

# reformed: node 0 has formed a round without node 1 (its 2 workers alone).
reformed() { grep -aq "world size 2" "$T/n0.err"; }

# The time crun is answerable for is bounded: the re-formation after the heartbeat timeout, and
# node 1's failure. The training that follows runs at the machine's pace (6x slower under ASan
# on a loaded box than on a quiet one): it is only waited for, within the case's own limit.
link_cut() {
	local secs=$1 t0 ms ms1
	export FAULT=none FAULT_PIDDIR=$T
	net_up
	node 0 "$NS_A" 10.231.0.1
	node 1 "$NS_B" 10.231.0.2
	wait_for 60 files_at_least 4 "$T/pid."
	wait_for 30 eval 'cat "$T"/n?.out | grep -aq "^\[rank0\]:epoch 2 "'
	link_down
	t0=$(now_ms)
	# The cut must land while the ranks train (they exchange gradients every step).
	digests "$T/n0.out" "$T/n1.out"
	[ "$NDIG" -eq 0 ] || fail "the job finished before the cut: make it train longer"
	note "link of node 1 cut for $secs s at epoch $(cat "$T"/n?.out | grep -ac '^\[rank0\]:epoch ')"
	# Hold the cut, noting when each agent exits meanwhile.
	END_0=""
	END_1=""
	REFORM=""
	while [ $(($(now_ms) - t0)) -lt $((secs * 1000)) ]; do
		[ -n "$END_0" ] || ! exited "$PID_0" || END_0=$(($(now_ms) - t0))
		[ -n "$END_1" ] || ! exited "$PID_1" || END_1=$(($(now_ms) - t0))
		[ -n "$REFORM" ] || ! reformed || REFORM=$(($(now_ms) - t0))
		sleep 0.1
	done
	link_up
	note "link restored; agents exited during the cut after: ${END_0:--} / ${END_1:--} ms"
	if [ "$secs" -lt $HB_S ]; then
		# Shorter than the heartbeat timeout: both nodes ride through; the job finishes
		# without a restart or a re-formation on every rank.
		wait_ok 140 "$PID_0" "node 0" "$T/n0.err"
		wait_ok 30 "$PID_1" "node 1" "$T/n1.err"
		ms=$(($(now_ms) - t0))
		if grep -aq "restarting\|round 1" "$T/n0.err" "$T/n1.err"; then
			tail -n 20 "$T/n0.err" "$T/n1.err" >&2
			fail "a ${secs} s cut made the job restart or re-form"
		fi
		expect_digests 4 "$T/n0.out" "$T/n1.out"
		result "rode through: no restart, no new round; both exit 0 $(secs $ms) after the cut;" \
			"4 digests agree"
		return
	fi
	# Longer than the heartbeat timeout: node 1 is declared lost; node 0 (with the store)
	# re-forms alone and finishes; node 1, back on the network, fails clearly.
	while [ -z "$REFORM" ] && ! exited "$PID_0" &&
		[ $(($(now_ms) - t0)) -lt $(((HB_S + 60) * 1000)) ]; do
		reformed && REFORM=$(($(now_ms) - t0))
		sleep 0.1
	done
	reformed || {
		tail -n 30 "$T/n0.err" >&2
		fail "node 0 did not re-form alone (no 'world size 2') $((HB_S + 60)) s after the cut"
	}
	# Formed at the latest when seen: when node 0 exited, if it ended before that.
	[ -n "$REFORM" ] || REFORM=${END_0:-$(($(now_ms) - t0))}
	expect_within "$REFORM" $((HB_S + 40)) "node 0's re-formation alone after the cut"
	wait_pid $((200 - secs)) "$PID_0"
	ms=${END_0:-$(($(now_ms) - t0))}
	[ $RC -eq 0 ] || { tail -n 30 "$T/n0.err" >&2; fail "node 0 exited $RC"; }
	expect_grep "heartbeat lapsed" "$T/n0.err" "node 0 reports node 1 lost"
	digests "$T/n0.out"
	[ "$NDIG" -eq 2 ] && [ "$(echo "$DIG" | wc -w)" -eq 1 ] ||
		fail "node 0's 2 ranks: $NDIG digests, distinct: $DIG"
	wait_pid 90 "$PID_1"
	ms1=${END_1:-$(($(now_ms) - t0))}
	[ $RC -ne 0 ] || { tail -n 30 "$T/n1.err" >&2; fail "the cut-off node 1 exited 0"; }
	expect_within $ms1 60 "node 1's exit"
	why=$(grep -a "error: rendezvous" "$T/n1.err" | head -n1 |
		sed 's/.*error: rendezvous[^:]*: //; s/ (connection lost.*//' | cut -c1-90)
	[ -n "$why" ] || fail "node 1 gave no reason"
	result "node 1 lost (heartbeat_timeout ${HB_S} s); node 0 re-formed (world 2)" \
		"$(secs "$REFORM") after the cut, exit 0 after $(secs $ms), 2 digests agree;" \
		"node 1 exit $RC after $(secs $ms1): $why"
}

case ${1:?case} in
link-cut-10s) link_cut 10 ;;
link-cut-60s) link_cut 60 ;;
*) fail "unknown case $1" ;;
esac
exit 0
