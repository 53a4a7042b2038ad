#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/etcd/drop.sh: never silent through a firewall (issue 21). A real etcd member in a
# network namespace of this test whose client port an nft DROP rule blackholes while a job
# runs on it: `crun --rdzv-backend etcd` and `crun status` pointed at it, and the running
# job's agent, say every few seconds that the endpoint does not answer, and exit non-zero
# within their stated bound (join_timeout, --timeout, heartbeat_timeout) rather than after
# minutes of silence. Needs root (ip netns, nft); skips (77) without them.
. "$(dirname "$0")/lib.sh"

# The most a progress line may lag the one before it (crun says every 5 s; one connect
# attempt that gets no answer takes a few seconds): generous for a loaded 2-core machine.
GAP_S=20
# The running job's agent says it once per failed keep-alive (given up after 10 s of silence,
# tried again keep_alive_interval, 5 s, later): 17 s apart measured.
JOB_GAP_S=60
BUDGET_S=30
HB_S=30
NS=crun-etcd-drop-$$
TABLE=crun_etcd_drop_$$
EP=127.0.0.1:2379
URL=http://$EP

command -v nft >/dev/null || { echo "SKIP: nft is not installed (nftables)"; exit 77; }
ip netns add "$NS" 2>/dev/null || { echo "SKIP: ip netns add refused (needs root)"; exit 77; }
# The namespace goes with everything in it (its etcd, its table) before the temp dirs.
trap 'netns_teardown "$NS" ""; cleanup; rm -rf "$ETCD_DATA"' EXIT
NSX="ip netns exec $NS"
ip -n "$NS" link set lo up || fail "lo up in $NS"

note "one etcd member in $NS at $EP"
$NSX "$ETCD" --name drop --data-dir "$ETCD_DATA/drop" --listen-client-urls "$URL" \
	--advertise-client-urls "$URL" --listen-peer-urls http://127.0.0.1:2380 \
	--initial-advertise-peer-urls http://127.0.0.1:2380 \
	--initial-cluster drop=http://127.0.0.1:2380 --initial-cluster-state new \
	--initial-cluster-token "crun-drop-$$" --logger zap --log-level warn \
	--log-outputs stderr >>"$T/etcd.log" 2>&1 &
track $!
wait_for 60 $NSX $PROBE "$URL" health
# A job that runs when the packets start to drop: its worker waits for the file go, which
# never comes; the agent's heartbeat (a lease keep-alive) gets no answer.
note "a running job (heartbeat_timeout=$HB_S)"
JOB_T0=$(now_ms)
stamped "$T/job" timeout -s KILL 400 $NSX "$CRUN" --nnodes 1 --nproc-per-node 1 \
	--rdzv-backend etcd --rdzv-endpoint "$EP" --rdzv-id job \
	--rdzv-conf "heartbeat_timeout=$HB_S" /bin/sh -c \
	'touch "$0.ready"; while [ ! -e "$0.go" ]; do sleep 0.05; done' "$T/job" &
track $!
wait_for 60 files_at_least 1 "$T/job.ready"
note "dropping every packet to $EP"
DROP_MS=$(($(now_ms) - JOB_T0))
$NSX nft add table inet "$TABLE" &&
	$NSX nft add chain inet "$TABLE" in '{ type filter hook input priority 0; }' &&
	$NSX nft add rule inet "$TABLE" in tcp dport 2379 drop ||
	{ echo "SKIP: nft refused a DROP rule in a namespace (no nf_tables?)"; exit 77; }
$NSX $PROBE "$URL" health 2>/dev/null && fail "the DROP rule lets the probe through"

# never_silent OUT WHAT BUDGET_S [FROM_MS [GAP]]: the run in OUT exited non-zero within
# BUDGET_S + 30 s of FROM_MS (default 0: its start); at least 3 lines name $EP and "no answer",
# the first within GAP s (default GAP_S) of FROM_MS, each within GAP s of the one before, the
# exit within GAP s of the last; its last line (the error) says "no answer". Sets RC, MS (the
# exit, ms after its start) and GAPS (s).
never_silent() {
	local out=$1 what=$2 budget=$3 from=${4:-0} gap=${5:-$GAP_S} t prev n=0 max=0
	prev=$from
	cat "$out" >&2
	RC=$(sed -n 's/^[0-9]* exit \([0-9]*\)$/\1/p' "$out" | tail -n1)
	MS=$(sed -n 's/^\([0-9]*\) exit [0-9]*$/\1/p' "$out" | tail -n1)
	[ -n "$RC" ] || fail "$what: no exit in $out"
	[ "$RC" -ne 0 ] || fail "$what: exit 0 with etcd unreachable"
	[ "$RC" -ne 137 ] || fail "$what: killed after $MS ms (its own bound did not end it)"
	[ $((MS - from)) -le $(((budget + 30) * 1000)) ] ||
		fail "$what: ran $((MS - from)) ms (bound $budget s + 30 s)"
	GAPS=""
	while read -r t _; do
		[ "$t" -ge "$from" ] || continue
		n=$((n + 1))
		[ $((t - prev)) -le $max ] || max=$((t - prev))
		GAPS="$GAPS $(((t - prev + 500) / 1000))"
		prev=$t
	done < <(grep -a -- "$EP" "$out" | grep -a -- "no answer")
	[ $n -ge 3 ] || fail "$what: $n lines naming $EP and 'no answer' in $MS ms"
	# The error it ends with says so too, not only the last attempt's cut-short timeout.
	grep -av " exit [0-9]*$" "$out" | tail -n1 | grep -aq "no answer" ||
		fail "$what: its last line does not say 'no answer'"
	[ $((MS - prev)) -le $max ] || max=$((MS - prev))
	[ $max -le $((gap * 1000)) ] || fail "$what: $max ms without a line (bound $gap s)"
}

note "crun --rdzv-backend etcd, join_timeout=$BUDGET_S"
stamped "$T/crun" timeout -s KILL $((BUDGET_S + 90)) $NSX "$CRUN" --nnodes 1 --nproc-per-node 1 \
	--rdzv-backend etcd --rdzv-endpoint "$EP" --rdzv-id drop \
	--rdzv-conf "join_timeout=$BUDGET_S" /bin/true
never_silent "$T/crun" crun "$BUDGET_S"
note "crun: exit $RC after $MS ms, lines every$GAPS s"

note "crun status --timeout $BUDGET_S"
stamped "$T/status" timeout -s KILL $((BUDGET_S + 90)) $NSX "$CRUN" status --rdzv-backend etcd \
	-e "$EP" --rdzv-id drop --timeout "$BUDGET_S"
never_silent "$T/status" "crun status" "$BUDGET_S"
note "crun status: exit $RC after $MS ms, lines every$GAPS s"

# Losing the store is bounded by heartbeat_timeout (docs/reliability.md): the agent stops the
# workers and exits 1 once its keep-alives have failed for that long (each gives up after
# 10 s of silence, not at its 60 s deadline: 195 s in all before).
note "the running job: the store lost within heartbeat_timeout + 30 s"
wait_for $((HB_S + 240)) grep -aq " exit [0-9]*$" "$T/job"
never_silent "$T/job" "the running job" "$HB_S" "$DROP_MS" "$JOB_GAP_S"
expect_grep "store lost" "$T/job" "the job's agent saying the store is lost"
# Short lines (issue 21): until the store is lost, each failed keep-alive is one warning, the
# rendezvous's "(attempt N, ...)", N one more each time, and no warning naming $EP is over 160
# characters after its head (time, host, level); the endpoints' full answers are at debug.
n=0
while IFS= read -r l; do
	msg=${l#* warning: }
	[ ${#msg} -le 160 ] || fail "the running job: a warning of ${#msg} characters: $msg"
	case $msg in *keepalive*) ;; *) continue ;; esac
	n=$((n + 1))
	case $msg in
	*"(attempt $n, "*) ;;
	*) fail "the running job: keep-alive warning $n is not attempt $n's one line: $msg" ;;
	esac
done < <(awk -v from="$DROP_MS" '$1 >= from' "$T/job" | sed '/store lost/,$d' |
	grep -a " warning: " | grep -a -- "$EP")
[ $n -ge 2 ] || fail "the running job: $n keep-alive warnings before the store was lost"
note "the running job: exit $RC $((MS - DROP_MS)) ms after the drop, lines every$GAPS s"
exit 0
