#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/metrics.sh: the store's Prometheus endpoint (issue 21), scraped with curl: on
# crun-rdzvd --metrics under a real 2-node job (and on the agent-hosted store, crun --metrics):
# no token -> 401, another path -> 404; with the store's token as a bearer credential the text
# format names the connections, requests by operation, the latency histogram, both agents as
# running in the run's round; the values move between scrapes; a wrong-token client shows as a
# refused handshake.
. "$(dirname "$0")/lib.sh"

command -v curl >/dev/null || { echo "curl is not installed (scripts/install-deps)"; exit 77; }
hold_port mport
rm -f "$T/rdzvd.out"
"$RDZVD" --listen 127.0.0.1:0 -q --metrics "127.0.0.1:$mport" >"$T/rdzvd.out" 2>"$T/rdzvd.err" &
track $!
wait_for 20 grep -q ':[0-9][0-9]*$' "$T/rdzvd.out"
ENDPOINT=$(head -n1 "$T/rdzvd.out")
URL=http://127.0.0.1:$mport/metrics

# scrape [CURL ARGS...]: the body in $T/m, the HTTP status in CODE.
scrape() {
	CODE=$(curl -s -m 20 -o "$T/m" -w '%{http_code}' "$@" "$URL")
}
# value NAME_WITH_LABELS: the sample's value in $T/m (empty when absent).
value() {
	awk -v k="$1" '$1 == k {print $2}' "$T/m"
}
AUTH=(-H "Authorization: Bearer $(cat "$CRUN_TOKEN_FILE")")

note "no token: 401; a wrong one: 401; another path: 404"
scrape
expect_eq "$CODE" 401 "a scrape without the token"
scrape -H "Authorization: Bearer nottheToken"
expect_eq "$CODE" 401 "a scrape with a wrong token"
CODE=$(curl -s -m 20 -o /dev/null -w '%{http_code}' "${AUTH[@]}" "http://127.0.0.1:$mport/")
expect_eq "$CODE" 404 "another path"

note "a 2-node job running through the daemon: both agents, its round, requests counted"
for i in 0 1; do
	"$CRUN" --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" \
		--rdzv-id mjob "$W" touch:"$T/started.%r" wait-file:"$T/go" \
		>"$T/n$i.out" 2>"$T/n$i.err" &
	eval "J$i=\$!"
	track $!
done
wait_for 60 files_at_least 2 "$T/started."
wait_for 30 eval 'scrape "${AUTH[@]}"; [ "$(value "crun_agents{state=\"running\"}")" = 2 ]'
expect_eq "$CODE" 200 "a scrape with the store's token"
expect_grep '^# TYPE crun_store_request_seconds histogram$' "$T/m" "the histogram's type line"
expect_eq "$(grep -c '^crun_run_round{run="mjob",agent=".*"} 0$' "$T/m")" 2 "both agents in round 0"
[ "$(value crun_store_connections)" -ge 2 ] || fail "open connections: $(value crun_store_connections)"
set1=$(value 'crun_store_requests_total{op="SET"}')
[ "${set1:-0}" -gt 0 ] || fail "no SET counted"
count1=$(value crun_store_request_seconds_count)
inf=$(value 'crun_store_request_seconds_bucket{le="+Inf"}')
expect_eq "$inf" "$count1" "the +Inf bucket holds every request"

note "a client with the wrong token: a refused handshake"
printf 'not-the-token-0123456789abcdef\n' >"$T/wrong.tok"
chmod 600 "$T/wrong.tok"
timeout -s KILL 30 "$STORE_CLI" --endpoint "$ENDPOINT" --token-file "$T/wrong.tok" get x \
	>/dev/null 2>&1 && fail "a wrong token was accepted"
wait_for 30 eval 'scrape "${AUTH[@]}"; [ "$(value "crun_store_handshakes_refused_total{reason=\"wrong_proof\"}")" -ge 1 ]'
count2=$(value crun_store_request_seconds_count)
[ "$count2" -gt "$count1" ] || fail "the request count did not move: $count1 -> $count2"
touch "$T/go"
for i in 0 1; do
	eval "wait_pid 60 \$J$i"
	expect_eq $RC 0 "node $i's exit status"
done

note "crun --metrics on the node that hosts the store"
hold_port sport
hold_port aport
"$CRUN" --nnodes 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$sport" --rdzv-id ajob \
	--metrics "127.0.0.1:$aport" "$W" touch:"$T/a.started" wait-file:"$T/a.go" \
	>"$T/a.out" 2>"$T/a.err" &
apid=$!
track $apid
wait_for 60 test -e "$T/a.started"
URL=http://127.0.0.1:$aport/metrics
wait_for 30 eval 'scrape "${AUTH[@]}"; [ "$(value "crun_agents{state=\"running\"}")" = 1 ]'
expect_grep '^crun_run_round{run="ajob",agent=".*"} 0$' "$T/m" "the agent-hosted store's run"
touch "$T/a.go"
wait_pid 60 $apid
expect_eq $RC 0 "the hosting agent's exit status"
"$CRUN" --metrics nope /bin/true >/dev/null 2>"$T/bad.err"
expect_eq $? 2 "a bad --metrics address"
expect_grep "^crun: --metrics: expected ADDR:PORT" "$T/bad.err" "the option is named"
echo "metrics: all checks passed"
