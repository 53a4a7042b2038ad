#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/etcd/quorum.sh: never silent with etcd (issue 21). An endpoint where nothing listens:
# a progress line every few seconds naming it and why it fails. A 3-member cluster losing two
# members while the workers run, with the default timeouts: the agents stop their workers and
# exit 1 within the bound crun(1) states, with short lines naming each member once; a job
# started on that cluster says every few seconds what it tries and why it fails.
. "$(dirname "$0")/lib.sh"

# gaps FILE: the largest gap in seconds between consecutive "no member has answered" lines
# (their ISO 8601 times), and how many there are: sets GAP and LINES.
gaps() {
	local t prev="" s
	GAP=0
	LINES=0
	while read -r t; do
		s=$(date -d "$t" +%s.%N)
		LINES=$((LINES + 1))
		[ -z "$prev" ] || GAP=$(awk -v a="$prev" -v b="$s" -v g="$GAP" \
			'BEGIN { d = b - a; print (d > g ? d : g) }')
		prev=$s
	done < <(grep -a "no member has answered" "$1" | awk '{ print $2 }')
}

note "an etcd endpoint where nothing listens: a progress line every few seconds"
hold_port dead 127.0.0.1 # bound, never listening: connections are refused
"$CRUN" --nnodes 1 --rdzv-backend etcd --rdzv-endpoint "127.0.0.1:$dead" --rdzv-id dead \
	--no-python "$W" print:ok >"$T/dead.out" 2>"$T/dead.err" &
dpid=$!
track $dpid
# Promised: one every 5 s. Three lines in 60 s, and no gap over 15 s, on a loaded box.
wait_for 60 eval '[ "$(grep -ac "no member has answered" "$T/dead.err")" -ge 3 ]'
kill -TERM $dpid
wait_pid 30 $dpid
gaps "$T/dead.err"
awk -v g="$GAP" 'BEGIN { exit !(g <= 15) }' || { cat "$T/dead.err" >&2; fail "a gap of $GAP s"; }
expect_grep "no member has answered for [0-9]* s .*: 127.0.0.1:$dead refused" \
	"$T/dead.err" "the endpoint and why it fails"
note "$LINES progress lines, largest gap $GAP s; the first:"
grep -a -m1 "no member has answered" "$T/dead.err" >&2

note "two of three members killed while the workers run, default timeouts"
start_cluster 3
CONF=last_call_timeout=1 etcd_agents jq 2 1 "$W" touch:"$T/ready.%r" sleep:300000
wait_for 90 files_at_least 2 "$T/ready."
for ((i = 1; i < MEMBERS; i++)); do
	kill_member "$i"
done
t0=$(now_ms)
# crun(1): the workers are stopped and the agents exit 1 within about a minute (the store is
# lost once it has not answered for heartbeat_timeout, 30 s, each keep-alive given up after the
# 10 s quorum bound: 44 s measured alone), at most heartbeat_timeout + read_timeout +
# keep_alive_interval (95 s) when the surviving member times out rather than answering; 240 s
# for a loaded box (one run beside fanout-pdsh took over 150 s).
wait_agents 240
dt=$(($(now_ms) - t0))
expect_eq "$RCS" "1 1" "exit codes after losing the quorum"
for i in 0 1; do
	expect_grep "quorum" "$T/jq.$i.err" "node $i: no word of the quorum"
	# The message after the line's head (time, host, level); three members of 16-character
	# addresses, each once with its reason, and the watch's attempt count fit in 240.
	long=$(sed 's/^crun [^ ]* [^ ]* [a-z]*: //' "$T/jq.$i.err" | awk 'length($0) > 240')
	[ -z "$long" ] || fail "node $i: messages over 240 characters: $long"
done
grep -aq "store is gone after this node's workers finished" "$T"/jq.*.err &&
	fail "the workers were not stopped"
note "both agents exited 1 $dt ms after the quorum was lost; node 0 said:"
grep -a "quorum\|error" "$T/jq.0.err" >&2
note "a cluster without quorum at start (one member of three left): progress lines"
CONF=last_call_timeout=1 etcd_agent js 0 1 1 "$W" print:ok
jpid=${APIDS[0]}
wait_for 60 eval '[ "$(grep -ac "no member has answered" "$T/js.0.err")" -ge 3 ]'
kill -TERM "$jpid"
wait_pid 60 "$jpid"
gaps "$T/js.0.err"
awk -v g="$GAP" 'BEGIN { exit !(g <= 15) }' || { cat "$T/js.0.err" >&2; fail "a gap of $GAP s"; }
expect_grep "no member has answered for [0-9]* s .*no leader" "$T/js.0.err" \
	"the member without a leader named"
note "$LINES progress lines, largest gap $GAP s; the first:"
grep -a -m1 "no member has answered" "$T/js.0.err" >&2
echo "etcd quorum: ok"
