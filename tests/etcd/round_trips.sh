#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/etcd/round_trips.sh: what one rendezvous round costs etcd, counted by etcd itself
# (its /metrics): N agents (tests/rdzv/rdzv_scale, one thread and one handle each) form one
# round and finish it through a one-member etcd, and the raft proposals etcd committed and
# the unary requests it served stay within per-agent budgets. The round's counters
# ("joined", "done") are tickets (rendezvous/rdzv_seats.c): one commit per agent each,
# whatever the number joining at once; counted with add (a read and a compare-and-swap
# retried on conflict) they cost O(N) each. etcd's CPU per unary request bounds how fast
# 1,000 agents meet (bench/notes/rdzv_scale.md): the requests each agent sends are counted by
# method, and their sum is budgeted (watch and keep-alive streams aside).
. "$(dirname "$0")/lib.sh"

N=60
BUDGET=12 # raft proposals per agent, round and finish (about 8 measured)
# Unary requests per agent, round and finish (14.1 measured; 15.0 before a join's waits
# resumed their watch instead of reading the keys again; 17.1 before the waits returned their
# value and the worker counts and rank 0's record came in one read). A round or finish
# slower than keep_alive_interval (5 s, rendezvous/rdzv.c) adds each waiting agent a heartbeat
# (a put) and a progress read every 5 s: UNARY_SLOW each, allowed for from rdzv_scale's times.
UNARY_BUDGET=14.5
UNARY_SLOW=3
SCALE=$BUILD/tests/rdzv/rdzv_scale
command -v curl >/dev/null || { echo "curl is not installed (scripts/install-deps)"; exit 77; }
[ -x "$SCALE" ] || fail "$SCALE not built"
start_cluster 1

# scrape FILE: etcd's /metrics into FILE (once per side: the counters below read it).
scrape() {
	curl -s -m 20 -f -o "$1" "$URL0/metrics" || fail "scrape of $URL0/metrics failed"
}

# metric NAME FILE: etcd's counter NAME summed over its labels.
metric() {
	awk -v n="$1" '$1 == n || index($1, n "{") == 1 {s += $2} END {printf "%d\n", s}' "$2"
}

# by_method FILE OUT: the requests etcd handled, one "<grpc_method> <count>" line each.
by_method() {
	awk 'index($1, "grpc_server_handled_total{") == 1 {
		m = $1; sub(/.*grpc_method="/, "", m); sub(/".*/, "", m); s[m] += $2
	} END {for (m in s) printf "%s %d\n", m, s[m]}' "$1" | sort >"$2"
}

# unary FILE: the unary requests etcd served (grpc_type="unary": not the watch and lease
# keep-alive streams).
unary() {
	awk 'index($1, "grpc_server_handled_total{") == 1 && index($1, "grpc_type=\"unary\"") {
		s += $2 } END {printf "%d\n", s}' "$1"
}

scrape "$T/metrics_before"
before=$(metric etcd_server_proposals_committed_total "$T/metrics_before")
rpcs_before=$(metric grpc_server_handled_total "$T/metrics_before")
unary_before=$(unary "$T/metrics_before")
by_method "$T/metrics_before" "$T/m_before"
note "$N agents form one round and finish it through etcd at $ETCD_EP"
timeout -s KILL 300 "$SCALE" --agents "$N" endpoint "etcd://$ETCD_EP" >"$T/scale.out" 2>&1 ||
	{ cat "$T/scale.out" >&2; fail "rdzv_scale failed"; }
scrape "$T/metrics_after"
after=$(metric etcd_server_proposals_committed_total "$T/metrics_after")
rpcs_after=$(metric grpc_server_handled_total "$T/metrics_after")
unary_after=$(unary "$T/metrics_after")
by_method "$T/metrics_after" "$T/m_after"
note "requests per agent by method:" $(join -a 2 -e 0 -o 0,1.2,2.2 "$T/m_before" "$T/m_after" |
	awk -v n="$N" '$3 > $2 {printf "%s=%.2f ", $1, ($3 - $2) / n}')
per=$(awk -v a="$after" -v b="$before" -v n="$N" 'BEGIN {printf "%.2f", (a - b) / n}')
rpcs=$(awk -v a="$rpcs_after" -v b="$rpcs_before" -v n="$N" 'BEGIN {printf "%.2f", (a - b) / n}')
note "$((after - before)) raft proposals for $N agents: $per per agent (budget $BUDGET);" \
	"$rpcs RPCs per agent"
awk -v p="$per" -v m="$BUDGET" 'BEGIN {exit !(p <= m)}' ||
	fail "$per raft proposals per agent for a round and its finish, more than the budget of $BUDGET"
# rdzv_scale's "one round (...) X ms, finish (...) Y ms": whole 5 s periods past the first.
slow=$(sed -n 's/.*one round ([^)]*) \([0-9.]*\) ms, finish ([^)]*) \([0-9.]*\) ms.*/\1 \2/p' \
	"$T/scale.out" | awk '{printf "%d\n", int($1 / 5000) + int($2 / 5000)}')
[ -n "$slow" ] || { cat "$T/scale.out" >&2; fail "no round and finish times in rdzv_scale's output"; }
ubudget=$(awk -v b="$UNARY_BUDGET" -v s="$UNARY_SLOW" -v n="$slow" 'BEGIN {print b + s * n}')
unary_per=$(awk -v a="$unary_after" -v b="$unary_before" -v n="$N" 'BEGIN {printf "%.2f", (a - b) / n}')
note "$((unary_after - unary_before)) unary requests for $N agents: $unary_per per agent" \
	"(budget $ubudget: $UNARY_BUDGET + $UNARY_SLOW for each of $slow slow 5 s periods)"
awk -v p="$unary_per" -v m="$ubudget" 'BEGIN {exit !(p <= m)}' ||
	fail "$unary_per unary etcd requests per agent for a round and its finish, more than" \
		"the budget of $ubudget"
echo "ok: $per raft proposals, $unary_per unary requests per agent"
