#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/faults/case_outage.sh CASE: the store goes quiet or cannot be reached (docs/reliability.md,
# "Losing the store"):
#   store-stall-35s      crun-rdzvd SIGSTOPped 35 s under a running 2-node job whose
#                        heartbeat_timeout (60 s) allows it: the job rides through
#   store-stall-join     the same while node 0 waits in the rendezvous for node 1, which
#                        comes after: the job forms and finishes (a guard: main passes it,
#                        the join's calls outlast the stall with their 60 s read_timeout)
#   partition-40s-fixed  node 1 of a fixed-size 2-node job cut off 40 s, heartbeat_timeout 20 s:
#                        node 0 fails naming node 1 well before join_timeout (600 s)
#   store-drop           an nft DROP rule for the store's port: crun, crun-store and crun status
#                        say every few seconds that there is no answer, and exit non-zero in time
#   store-unresolvable   the same for a store host name that does not resolve
#   store-refused        the same for a port where nothing listens
# Run by tests/faults/run.sh; exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"

# The ranks of both nodes run on one host: without this they would exchange gradients through
# shared memory, around the cut link.
export CRUN_COMM_SHM=0
. "$(dirname "$0")/net_pair.sh" # net_up, link_down, link_up, node

# The most a progress line may lag the one before it (the client says every 5 s; a connect
# try that gets no answer takes 3 s): generous for a loaded 2-core machine.
GAP_S=20

# all_trained: all 4 ranks of the two nodes printed their digest (they wait at the gate).
all_trained() {
	digests "$T/n0.out" "$T/n1.out"
	[ "$NDIG" -ge 4 ]
}

# wait_trained SECS: all_trained within SECS (150 epochs over TCP: seconds in a plain build, a
# minute or more under ASan on a loaded box), else fail with both agents' last lines.
wait_trained() {
	local deadline=$(($(now_ms) + $1 * 1000))
	until all_trained 2>/dev/null; do
		if [ "$(now_ms)" -ge $deadline ]; then
			tail -n 15 "$T/n0.err" "$T/n1.err" >&2
			fail "the job did not train within $1 s ($NDIG of 4 digests)"
		fi
		sleep 0.1
	done
}

# two_node_job: nodes 0 and 1 (fixed size 2, no restart allowed unless MAX_RESTARTS says)
# trained and waiting at the gate, so the job runs while the fault is injected.
two_node_job() {
	export FAULT=none FAULT_PIDDIR=$T FAULT_GATE=$T/gate
	NNODES=2
	net_up
	node 0 "$NS_A" 10.231.0.1
	node 1 "$NS_B" 10.231.0.2
	wait_trained 240
}

# hold SECS: let SECS pass (the fault's length), noting when each agent exits meanwhile
# (END_0, END_1: ms after the start, or empty).
hold() {
	local t0
	t0=$(now_ms)
	END_0=""
	END_1=""
	while [ $(($(now_ms) - t0)) -lt $(($1 * 1000)) ]; do
		[ -n "$END_0" ] || ! exited "$PID_0" || END_0=$(($(now_ms) - t0))
		[ -n "$END_1" ] || [ -z "${PID_1-}" ] || ! exited "$PID_1" ||
			END_1=$(($(now_ms) - t0))
		sleep 0.1
	done
}

store_stall() {
	local ms
	CONF=last_call_timeout=1,heartbeat_timeout=60,keep_alive_interval=2
	MAX_RESTARTS=0
	two_node_job
	kill -STOP "$RDZVD_PID"
	note "crun-rdzvd ($RDZVD_PID) stopped for 35 s; heartbeat_timeout 60 s"
	hold 35
	kill -CONT "$RDZVD_PID"
	[ -z "$END_0$END_1" ] || {
		tail -n 20 "$T/n0.err" "$T/n1.err" >&2
		fail "an agent exited during the 35 s stall (after ${END_0:--} / ${END_1:--} ms)"
	}
	# Both watches reach the store again before the workers are let go.
	wait_for 60 grep -aq "the store answers again" "$T/n0.err"
	wait_for 60 grep -aq "the store answers again" "$T/n1.err"
	touch "$FAULT_GATE"
	wait_ok 60 "$PID_0" "node 0" "$T/n0.err"
	wait_ok 60 "$PID_1" "node 1" "$T/n1.err"
	if grep -aq "restarting\|round 1\|store lost" "$T/n0.err" "$T/n1.err"; then
		tail -n 20 "$T/n0.err" "$T/n1.err" >&2
		fail "the 35 s stall made the job restart, re-form or give up"
	fi
	expect_digests 4 "$T/n0.out" "$T/n1.out"
	ms=$(grep -a "the store answers again" "$T/n0.err" | head -n1 | sed 's/.*after \([0-9]*\) s.*/\1/')
	result "rode through: both agents exit 0, no restart, no new round; node 0's watch" \
		"answered again after ${ms} s; 4 digests agree"
}

store_stall_join() {
	CONF=last_call_timeout=1,heartbeat_timeout=60,keep_alive_interval=2
	MAX_RESTARTS=0
	export FAULT=none FAULT_PIDDIR=$T FAULT_GATE=$T/gate
	NNODES=2
	PID_1=""
	net_up
	node 0 "$NS_A" 10.231.0.1
	wait_for 60 grep -aq "1 of 2 nodes joined" "$T/n0.err"
	kill -STOP "$RDZVD_PID"
	note "crun-rdzvd ($RDZVD_PID) stopped for 35 s while node 0 waits in the round"
	hold 35
	kill -CONT "$RDZVD_PID"
	[ -z "$END_0" ] || { tail -n 20 "$T/n0.err" >&2; fail "node 0 exited during the stall"; }
	node 1 "$NS_B" 10.231.0.2
	wait_trained 240
	touch "$FAULT_GATE"
	wait_ok 60 "$PID_0" "node 0" "$T/n0.err"
	wait_ok 60 "$PID_1" "node 1" "$T/n1.err"
	if grep -aq "restarting\|round 1\|store lost" "$T/n0.err" "$T/n1.err"; then
		tail -n 20 "$T/n0.err" "$T/n1.err" >&2
		fail "the stall made the job restart, re-form or give up"
	fi
	expect_digests 4 "$T/n0.out" "$T/n1.out"
	result "node 0 waited through the stall; the job formed when node 1 came; both exit 0;" \
		"no restart; 4 digests agree"
}

partition_fixed() {
	local t0 ms
	CONF=last_call_timeout=1,heartbeat_timeout=20,keep_alive_interval=2
	MAX_RESTARTS=3
	two_node_job
	link_down
	t0=$(now_ms)
	note "link of node 1 cut for 40 s (fixed-size job of 2, heartbeat_timeout 20 s)"
	hold 40
	link_up
	note "link restored; agents exited during the cut after: ${END_0:--} / ${END_1:--} ms"
	# join_timeout is the default 600 s: node 0 must not wait it out.
	wait_pid $((150 - ($(now_ms) - t0) / 1000)) "$PID_0"
	ms=${END_0:-$(($(now_ms) - t0))}
	[ $RC -ne 0 ] || fail "node 0 exited 0 without its fixed-size job's second node"
	# Group ranks follow the order of joining: node 1 is named by its address.
	expect_grep "address 10.231.0.2): heartbeat lapsed" "$T/n0.err" "node 0 names the lost node 1"
	expect_grep "did not come back within heartbeat_timeout" "$T/n0.err" \
		"node 0 says why it stops waiting"
	expect_within "$ms" 150 "node 0's failure"
	local rc0=$RC
	wait_pid 60 "$PID_1"
	[ $RC -ne 0 ] || fail "the cut-off node 1 exited 0"
	result "node 0 exit $rc0 $(secs "$ms") after the cut (join_timeout 600 s): node 1" \
		"(address 10.231.0.2) 'did not come back within heartbeat_timeout (20.0 s)';" \
		"node 1 exit $RC${END_1:+ $(secs "$END_1") after the cut}"
}

# progress OUT WHAT CAUSE FINAL BUDGET_S: the run in OUT (stamped) exited non-zero within
# BUDGET_S + 30 s, its error naming FINAL; it said "waiting for the store at WHAT: CAUSE"
# at least 3 times, the first within GAP_S s of the start, each within GAP_S s of the one
# before, and the end within GAP_S s of the last. Sets GAPS ("a b c" s).
progress() {
	local out=$1 what=$2 cause=$3 final=$4 budget=$5 t prev=0 n=0 max=0
	cat "$out" >&2
	[ "${RC:-0}" -ne 0 ] || fail "$out: exit 0 with no store"
	expect_within "$MS" $((budget + 30)) "$out's run"
	grep -aqF -- "$final" "$out" || fail "$out: the error does not say '$final'"
	GAPS=""
	while read -r t _; do
		n=$((n + 1))
		[ $((t - prev)) -le $max ] || max=$((t - prev))
		GAPS="$GAPS $(((t - prev + 500) / 1000))"
		prev=$t
	done < <(grep -aF -- "waiting for the store at $what: $cause" "$out")
	[ $n -ge 3 ] || fail "$out: $n progress lines naming '$cause' in $(secs "$MS")"
	[ $((MS - prev)) -le $max ] || max=$((MS - prev))
	[ $max -le $((GAP_S * 1000)) ] || fail "$out: $(secs $max) without a line (bound $GAP_S s)"
}

# agent_join EP BUDGET_S: a node agent of a 2-node job joining the store at EP (hosted
# elsewhere), join_timeout BUDGET_S.
agent_join() {
	timeout -s KILL $(($2 + 60)) ${NSX-} "$CRUN" --nnodes 2 --nproc-per-node 1 \
		--rdzv-backend c10d --rdzv-endpoint "$1" --rdzv-id outage \
		--rdzv-conf "join_timeout=$2,is_host=0" --no-python /bin/true
}

store_drop() {
	local ns=$TAG-c port r=""
	command -v nft >/dev/null || skip "nft is not installed (scripts/install-deps: nftables)"
	ip netns add "$ns" || skip "ip netns add refused (needs root / CAP_SYS_ADMIN)"
	NETNS="$ns"
	ip -n "$ns" link set lo up || fail "lo up in $ns"
	# The rule drops TCP: same-host clients would pass it on the store's unix socket.
	export CRUN_STORE_UNIX_SOCKET=off
	start_rdzvd 127.0.0.1 "$ns"
	port=${ENDPOINT##*:}
	NSX="ip netns exec $ns"
	$NSX nft add table inet "$TAG" &&
		$NSX nft add chain inet "$TAG" in '{ type filter hook input priority 0; }' &&
		$NSX nft add rule inet "$TAG" in tcp dport "$port" drop ||
		skip "nft refused a DROP rule in a namespace (no nf_tables?)"
	$NSX "$CSTORE" -e "$ENDPOINT" -t 1 ping 2>/dev/null && fail "the DROP rule lets pings through"
	stamped "$T/agent" agent_join "$ENDPOINT" 30
	progress "$T/agent" "$ENDPOINT" "no answer (packets dropped?)" \
		"no answer from $ENDPOINT (packets dropped?)" 30
	r="crun: exit $RC after $(secs "$MS"), lines every${GAPS} s;"
	stamped "$T/cstore" timeout -s KILL 90 $NSX "$CSTORE" -e "$ENDPOINT" -t 30 ping
	progress "$T/cstore" "$ENDPOINT" "no answer (packets dropped?)" \
		"no answer from $ENDPOINT (packets dropped?)" 30
	r="$r crun-store: $(secs "$MS");"
	stamped "$T/status" timeout -s KILL 90 $NSX "$CRUN" status -e "$ENDPOINT" --rdzv-id outage \
		--timeout 30
	progress "$T/status" "$ENDPOINT" "no answer (packets dropped?)" \
		"no answer from $ENDPOINT (packets dropped?)" 30
	result "$r crun status: $(secs "$MS"); each names 'no answer ... (packets dropped?)'"
}

store_unresolvable() {
	local ep=crun-no-such-host.invalid:29400
	stamped "$T/agent" agent_join "$ep" 20
	progress "$T/agent" "$ep" "cannot resolve crun-no-such-host.invalid" \
		"cannot resolve crun-no-such-host.invalid" 20
	result "crun: exit $RC after $(secs "$MS"), lines every${GAPS} s, naming 'cannot resolve'"
}

store_refused() {
	local port
	hold_port port
	stamped "$T/agent" agent_join "127.0.0.1:$port" 20
	progress "$T/agent" "127.0.0.1:$port" "connection refused" \
		"connection refused by 127.0.0.1:$port" 20
	result "crun: exit $RC after $(secs "$MS"), lines every${GAPS} s, naming 'connection refused'"
}

case ${1:?case} in
store-stall-35s) store_stall ;;
store-stall-join) store_stall_join ;;
partition-40s-fixed) partition_fixed ;;
store-drop) store_drop ;;
store-unresolvable) store_unresolvable ;;
store-refused) store_refused ;;
*) fail "unknown case $1" ;;
esac
exit 0
