#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/rdzv/round_trips.sh: what one rendezvous round costs the store, counted by the store
# itself (crun-rdzvd --metrics): N agents (tests/rdzv/rdzv_scale) form one round and finish
# it, and the requests they sent, waits and the handshake aside, stay within the per-agent
# budget docs/rendezvous.md states ("A round", step 4). Waits are left out: how often a
# joiner is woken before the close ("min" reached, the close) depends on timing.
. "$(dirname "$0")/../agent/lib.sh"

N=50
# Requests per agent, round and finish, waits and the handshake aside: 10.08 measured (11.06
# before the join's wait brought the close value in its own reply, WAIT's ANY_GET mode).
BUDGET=10.5
SCALE=$BUILD/tests/rdzv/rdzv_scale
command -v curl >/dev/null || { echo "curl is not installed (scripts/install-deps)"; exit 77; }
[ -x "$SCALE" ] || fail "$SCALE not built"
hold_port mport
"$RDZVD" --listen 127.0.0.1:0 -q --metrics "127.0.0.1:$mport" >"$T/rdzvd.out" 2>"$T/rdzvd.err" &
track $!
wait_for 20 grep -q ':[0-9][0-9]*$' "$T/rdzvd.out"
ENDPOINT=$(head -n1 "$T/rdzvd.out")
AUTH=(-H "Authorization: Bearer $(cat "$CRUN_TOKEN_FILE")")

# requests: the store's request count so far, waits and the handshake left out.
requests() {
	curl -s -m 20 -f "${AUTH[@]}" -o "$T/m" "http://127.0.0.1:$mport/metrics" ||
		fail "scrape of http://127.0.0.1:$mport/metrics failed"
	awk '$1 ~ /^crun_store_requests_total\{op="/ && $1 !~ /"(HELLO|AUTH|WAIT)"/ {s += $2}
	     END {print s + 0}' "$T/m"
}

before=$(requests)
note "$N agents form one round and finish it through $ENDPOINT"
CRUN_STORE_TOKEN_FILE=$CRUN_TOKEN_FILE timeout -s KILL 120 "$SCALE" --agents "$N" \
	endpoint "$ENDPOINT" >"$T/scale.out" 2>&1 || { cat "$T/scale.out" >&2; fail "rdzv_scale failed"; }
after=$(requests)
grep -v '^#' "$T/m" | grep '^crun_store_requests_total' >&2
per=$(awk -v a="$after" -v b="$before" -v n="$N" 'BEGIN {printf "%.2f", (a - b) / n}')
note "$((after - before)) requests for $N agents: $per per agent (budget $BUDGET)"
awk -v p="$per" -v m="$BUDGET" 'BEGIN {exit !(p <= m)}' ||
	fail "$per requests per agent for a round and its finish, more than the budget of $BUDGET"
echo "ok: $per requests per agent"
