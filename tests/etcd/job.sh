#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/etcd/job.sh: jobs through one real etcd member: 2 nodes x 2 workers train
# examples/train to equal digests; the workers' store is etcd too; an elastic 2:3 job re-forms
# after a node is SIGKILLed; every job leaves no key behind.
. "$(dirname "$0")/lib.sh"
TRAIN=$BUILD/examples/train

start_cluster 1

note "2 nodes x 2 workers train examples/train through etcd"
etcd_agents jt 2 2 "$TRAIN" --epochs 4 --lr 0.1
wait_agents 240
cat "$T"/jt.*.out >"$T/jt.out"
[ "$RCS" = "0 0" ] || { cat "$T"/jt.*.err "$T/jt.out" >&2; fail "exit codes $RCS, expected 0 0"; }
expect_digests 4 "$T/jt.out"
expect_grep "rendezvous through etcd at etcd://$ETCD_EP" "$T/jt.0.err" "the agent's store"
grep -aq "hosting the rendezvous store" "$T"/jt.*.err && fail "an etcd job hosted a crun store"
expect_eq "$(job_keys jt)" 0 "keys of job jt left in etcd"

note "the workers get the etcd endpoint and the job's prefix"
etcd_agents jenv 1 2 "$W" env
wait_agents 60
expect_eq "$RCS" 0 "exit code of the env job"
expect_grep "^\[rank1\]:CRUN_STORE_ENDPOINT=etcd://$ETCD_EP\$" "$T/jenv.0.out" "CRUN_STORE_ENDPOINT"
expect_grep '^\[rank0\]:CRUN_STORE_PREFIX=jenv/jenv/attempt/0/$' "$T/jenv.0.out" "CRUN_STORE_PREFIX"
expect_eq "$(job_keys jenv)" 0 "keys of job jenv left in etcd"

note "elastic 2:3: three nodes run, one is SIGKILLed, the other two re-form and finish"
CONF=last_call_timeout=1,heartbeat_timeout=3,keep_alive_interval=1
etcd_agents ek 3 2 --nnodes 2:3 "$W" touch:"$T/ready.%r" \
	exit-if-env:GROUP_WORLD_SIZE:2:0 sleep:120000
wait_for 90 files_at_least 6 "$T/ready."
t0=$(now_ms)
kill -9 "${APIDS[1]}"
wait "${APIDS[1]}" 2>/dev/null
unset 'APIDS[1]'
wait_agents 90
expect_eq "$RCS" "0 0" "survivors' exit codes"
note "the survivors finished $(($(now_ms) - t0)) ms after the kill (heartbeat_timeout 3 s)"
cat "$T"/ek.0.err "$T"/ek.2.err >"$T/ek.err"
grep -aqi "lost\|heartbeat" "$T/ek.err" || { cat "$T/ek.err" >&2; fail "the lost node is not reported"; }
# The killed agent's heartbeat lease expires within its TTL; its keys go with the job's.
expect_eq "$(job_keys ek)" 0 "keys of job ek left in etcd"
echo "etcd job: ok"
