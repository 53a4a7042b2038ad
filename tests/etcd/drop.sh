#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/etcd/drop.sh: never silent through a firewall (issue 21). A real etcd member in a
# network namespace of this test whose client port an nft DROP rule blackholes: `crun
# --rdzv-backend etcd` and `crun status` pointed at it say, every few seconds, that the
# endpoint does not answer, and exit non-zero within their stated bound (join_timeout,
# --timeout) rather than after minutes of silence. Needs root (ip netns, nft); skips (77)
# without them.
. "$(dirname "$0")/lib.sh"

# The most a progress line may lag the one before it (crun says every 5 s; one connect
# attempt that gets no answer takes a few seconds): generous for a loaded 2-core machine.
GAP_S=20
BUDGET_S=30
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
$NSX nft add table inet "$TABLE" &&
	$NSX nft add chain inet "$TABLE" in '{ type filter hook input priority 0; }' &&
	$NSX nft add rule inet "$TABLE" in tcp dport 2379 drop ||
	{ echo "SKIP: nft refused a DROP rule in a namespace (no nf_tables?)"; exit 77; }
$NSX $PROBE "$URL" health 2>/dev/null && fail "the DROP rule lets the probe through"

# stamped OUT CMD...: run CMD, each line of its stderr written to OUT after the ms since it
# started; RC its exit status, MS how long it ran. CMD bounds itself (timeout -s KILL).
stamped() {
	local out=$1 t0 l
	shift
	t0=$(now_ms)
	{
		"$@" 2>&1 >/dev/null
		echo "exit $?"
	} | while IFS= read -r l; do
		echo "$(($(now_ms) - t0)) $l"
	done >"$out"
	MS=$(($(now_ms) - t0))
	RC=$(sed -n 's/^[0-9]* exit \([0-9]*\)$/\1/p' "$out" | tail -n1)
}

# never_silent OUT WHAT: the run in OUT exited non-zero within BUDGET_S + 30 s; at least 3
# lines name $EP and "no answer", the first within GAP_S s of the start, each within GAP_S s
# of the one before, the exit within GAP_S s of the last; its last line (the error) says "no
# answer". GAPS: the gaps in s.
never_silent() {
	local out=$1 what=$2 t prev=0 n=0 max=0
	cat "$out" >&2
	[ "${RC:-0}" -ne 0 ] || fail "$what: exit 0 with etcd unreachable"
	[ "$RC" -ne 137 ] || fail "$what: killed after $MS ms (its own bound did not end it)"
	[ "$MS" -le $(((BUDGET_S + 30) * 1000)) ] || fail "$what: ran $MS ms (bound $BUDGET_S s)"
	GAPS=""
	while read -r t _; do
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
	[ $max -le $((GAP_S * 1000)) ] || fail "$what: $max ms without a line (bound $GAP_S s)"
}

note "crun --rdzv-backend etcd, join_timeout=$BUDGET_S"
stamped "$T/crun" timeout -s KILL $((BUDGET_S + 90)) $NSX "$CRUN" --nnodes 1 --nproc-per-node 1 \
	--rdzv-backend etcd --rdzv-endpoint "$EP" --rdzv-id drop \
	--rdzv-conf "join_timeout=$BUDGET_S" /bin/true
never_silent "$T/crun" crun
note "crun: exit $RC after $MS ms, lines every$GAPS s"

note "crun status --timeout $BUDGET_S"
stamped "$T/status" timeout -s KILL $((BUDGET_S + 90)) $NSX "$CRUN" status --rdzv-backend etcd \
	-e "$EP" --rdzv-id drop --timeout "$BUDGET_S"
never_silent "$T/status" "crun status"
note "crun status: exit $RC after $MS ms, lines every$GAPS s"
exit 0
