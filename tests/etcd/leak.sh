#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/etcd/leak.sh: jobs leave nothing behind in etcd: after each job (finished, or failed
# with its budget spent) the server's key count and lease count are back to what they were
# before any job ran, and its memory does not grow from job to job.
. "$(dirname "$0")/lib.sh"
TRAIN=$BUILD/examples/train
CONF=last_call_timeout=1,heartbeat_timeout=3,keep_alive_interval=1

start_cluster 1
base_keys=$($PROBE "$URL0" keys) || fail "probe: key count"
base_leases=$($PROBE "$URL0" leases) || fail "probe: lease count"
base_rss=$(etcd_rss_kb)
note "baseline: $base_keys keys, $base_leases leases, etcd RSS $base_rss KiB"

leases_back() { [ "$($PROBE "$URL0" leases)" -le "$base_leases" ]; }

# after_job ID: the key count is back at once; leases within their TTL (heartbeat_timeout).
after_job() {
	local keys
	keys=$($PROBE "$URL0" keys) || fail "probe: key count"
	[ "$keys" -eq "$base_keys" ] ||
		{ $PROBE "$URL0" dump >&2; fail "$1: $keys keys in etcd after the job, $base_keys before"; }
	wait_for 20 leases_back
}

note "a 2 x 2 training job (warm-up: etcd's memory settles at its working size)"
etcd_agents lk0 2 2 "$TRAIN" --epochs 2
wait_agents 240
[ "$RCS" = "0 0" ] || { cat "$T"/lk0.*.err >&2; fail "exit codes $RCS"; }
after_job lk0
$PROBE "$URL0" compact || fail "compaction"
rss1=$(etcd_rss_kb)
note "after one job: etcd RSS $rss1 KiB"

for k in 1 2 3 4; do
	etcd_agents "lk$k" 2 2 "$TRAIN" --epochs 2
	wait_agents 240
	[ "$RCS" = "0 0" ] || { cat "$T"/lk$k.*.err >&2; fail "job lk$k: exit codes $RCS"; }
	after_job "lk$k"
done

note "a job whose restart budget is spent deletes its keys too"
etcd_agents lkf 2 1 --max-restarts 1 "$W" exit-if-rank:1:3 sleep:60000
wait_agents 120
expect_eq "$RCS" "3 3" "exit codes of the failed job"
after_job lkf

$PROBE "$URL0" compact || fail "compaction"
rss5=$(etcd_rss_kb)
note "after six jobs: etcd RSS $rss5 KiB (after one: $rss1 KiB, before any: $base_rss KiB)"
# Go gives memory back lazily: allow 25% (at least 16 MiB) over the size after one job, far
# less than what keeping every job's keys, leases and watches would cost.
limit=$((rss1 + (rss1 / 4 > 16384 ? rss1 / 4 : 16384)))
[ "$rss5" -le "$limit" ] || fail "etcd RSS grew from $rss1 KiB to $rss5 KiB over five jobs"
echo "etcd leak: ok"
