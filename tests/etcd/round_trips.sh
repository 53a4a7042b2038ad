#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/etcd/round_trips.sh: what one rendezvous round costs etcd, counted by etcd itself
# (its /metrics): N agents (tests/rdzv/rdzv_scale, one thread and one handle each) form one
# round and finish it through a one-member etcd, and the raft proposals etcd committed stay
# within a per-agent budget. The round's counters ("joined", "done") are tickets
# (rendezvous/rdzv_seats.c): one commit per agent each, whatever the number joining at once;
# counted with add (a read and a compare-and-swap retried on conflict) they cost O(N) each.
. "$(dirname "$0")/lib.sh"

N=60
BUDGET=12 # raft proposals per agent, round and finish (about 8 measured)
SCALE=$BUILD/tests/rdzv/rdzv_scale
command -v curl >/dev/null || { echo "curl is not installed (scripts/install-deps)"; exit 77; }
[ -x "$SCALE" ] || fail "$SCALE not built"
start_cluster 1

# metric NAME: etcd's counter NAME summed over its labels.
metric() {
	curl -s -m 20 -f -o "$T/m" "$URL0/metrics" || fail "scrape of $URL0/metrics failed"
	awk -v n="$1" '$1 == n || index($1, n "{") == 1 {s += $2} END {printf "%d\n", s}' "$T/m"
}

before=$(metric etcd_server_proposals_committed_total)
rpcs_before=$(metric grpc_server_handled_total)
note "$N agents form one round and finish it through etcd at $ETCD_EP"
timeout -s KILL 300 "$SCALE" --agents "$N" endpoint "etcd://$ETCD_EP" >"$T/scale.out" 2>&1 ||
	{ cat "$T/scale.out" >&2; fail "rdzv_scale failed"; }
after=$(metric etcd_server_proposals_committed_total)
rpcs_after=$(metric grpc_server_handled_total)
per=$(awk -v a="$after" -v b="$before" -v n="$N" 'BEGIN {printf "%.2f", (a - b) / n}')
rpcs=$(awk -v a="$rpcs_after" -v b="$rpcs_before" -v n="$N" 'BEGIN {printf "%.2f", (a - b) / n}')
note "$((after - before)) raft proposals for $N agents: $per per agent (budget $BUDGET);" \
	"$rpcs RPCs per agent"
awk -v p="$per" -v m="$BUDGET" 'BEGIN {exit !(p <= m)}' ||
	fail "$per raft proposals per agent for a round and its finish, more than the budget of $BUDGET"
echo "ok: $per raft proposals per agent"
