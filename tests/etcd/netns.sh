#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/etcd/netns.sh: etcd rendezvous across network namespaces, end to end. Three namespaces
# on a bridge: C runs one etcd member that speaks only https and wants client certificates
# (served at C's bridge address), A and B are the two nodes, each with a host name of its own
# (a UTS namespace). Checked, over --tls-ca/--tls-cert/--tls-key and etcd+https://:
#   - an unchanged PyTorch gloo DDP job (tests/agent/ddp_order.py) in every start order (A first,
#     once it waits in the round; B first; both at once): exit 0 on both nodes, one
#     MASTER_ADDR/MASTER_PORT for both, one parameter digest;
#   - crun status from namespace A while a job runs: running, both nodes' hosts named;
#   - elastic (--nnodes 1:2) with --max-restarts 1: rank 0 fails its first attempt, the job
#     restarts once and ends 0 on both nodes, the second attempt's workers see restart count 1
#     and world size 2 (--restart-backoff 0, then 2 s: the node whose workers had finished
#     waits the backoff too, and the two meet in the next round);
#   - no key of any run left under /crun/<id>/ afterwards.
# Root, netns, etcd and torch only (else 77).
# shellcheck source=tests/etcd/lib.sh
. "$(dirname "$0")/lib.sh" # tests/agent/lib.sh's helpers, ETCD, PROBE, ETCD_DATA, etcd skips
command -v openssl >/dev/null 2>&1 || { echo "SKIP: no openssl to make certificates"; exit 77; }
command -v unshare >/dev/null 2>&1 || { echo "SKIP: no unshare (util-linux)"; exit 77; }
need_torch
TAG=en$$
need_netns "$TAG"
NET=$(netns_subnet)
netns_bridge "$TAG" "$NET" crun0 "${TAG}a" "${TAG}b" "${TAG}c" ||
	{ echo "SKIP: no bridge support"; exit 77; }
export GLOO_SOCKET_IFNAME=crun0 # one interface name in every namespace
A=$NET.1
B=$NET.2
C=$NET.3
EP=etcd+https://$C:2379
t_start=$(now_ms)

# The member's certificate names C's address; the client's is the nodes' and the probe's.
K=$T/tls
etcd_certs "$K" "$C"
TLS=(--tls-ca "$K/ca.pem" --tls-cert "$K/client.pem" --tls-key "$K/client.key")
export PROBE_CACERT=$K/ca.pem PROBE_CERT=$K/client.pem PROBE_KEY=$K/client.key

note "etcd in namespace C at https://$C:2379 (client certificates required)"
ip netns exec "${TAG}c" "$ETCD" --name m0 --data-dir "$ETCD_DATA/m0" \
	--listen-client-urls "https://$C:2379" --advertise-client-urls "https://$C:2379" \
	--listen-peer-urls "http://$C:2380" --initial-advertise-peer-urls "http://$C:2380" \
	--initial-cluster "m0=http://$C:2380" --initial-cluster-state new \
	--initial-cluster-token "crun-test-$$" --logger zap --log-level warn --log-outputs stderr \
	--cert-file "$K/server.pem" --key-file "$K/server.key" --trusted-ca-file "$K/ca.pem" \
	--client-cert-auth >"$T/etcd.log" 2>&1 &
track $!
# tests/etcd/lib.sh's member table, so that its job_keys asks this member, from namespace A.
# shellcheck disable=SC2034 # read by tests/etcd/lib.sh
MEMBERS=1 M_ADDR[0]=$C M_CPORT[0]=2379 M_PID[0]=$! ETCD_SCHEME=https
PROBE="ip netns exec ${TAG}a $PROBE"
wait_for 60 member_healthy 0
expect_eq "$($PROBE "$(member_url 0)" keys)" 0 "keys in the new member"

# node NS ID ARGS...: start the agent of job ID in namespace $TAG<NS> with host name node-NS
# and a 150 s limit, output in $T/ID.NS.{out,err}; sets NODE_PID.
node() {
	local ns=$1 id=$2
	shift 2
	# shellcheck disable=SC2016 # expanded by the inner shell
	CRUN_LOG_LEVEL=debug timeout -s KILL 150 ip netns exec "$TAG$ns" unshare --uts \
		sh -c 'hostname "$0" && exec "$@"' "node-$ns" "$CRUN" --nproc-per-node 1 \
		--rdzv-backend etcd --rdzv-endpoint "$EP" --rdzv-id "$id" "${TLS[@]}" \
		--rdzv-conf join_timeout=120,last_call_timeout=1 "$@" \
		>"$T/$id.$ns.out" 2>"$T/$id.$ns.err" &
	NODE_PID=$!
	track $NODE_PID
}

# wait_both PA PB: wait for both agents of a job; their exit codes in RCA and RCB.
wait_both() {
	wait_pid 160 "$1"
	RCA=$RC
	wait_pid 160 "$2"
	RCB=$RC
}

# done_ok ID WHAT: both agents of job ID exited 0 (wait_both) and no key of the run is left.
done_ok() {
	if [ "$RCA" -ne 0 ] || [ "$RCB" -ne 0 ]; then
		tail -n 25 "$T/$1".?.err "$T/$1".?.out >&2
		fail "$1 ($2): exit codes $RCA $RCB"
	fi
	expect_eq "$(job_keys "$1" 2>&1)" 0 "$1: keys left under /crun/$1/"
}

# ddp ORDER ID: the DDP job ID, its nodes started in ORDER (ab, ba, both), checked.
ddp() {
	local order=$1 id=$2 pa pb v t0
	t0=$(now_ms)
	# The first node of ab and ba is running and waits in the round before the second starts.
	case $order in
	ab | both) node a "$id" --nnodes 2 "$SRC/tests/agent/ddp_order.py" && pa=$NODE_PID ;;
	ba) node b "$id" --nnodes 2 "$SRC/tests/agent/ddp_order.py" && pb=$NODE_PID ;;
	esac
	case $order in
	ab) wait_for 60 grep -q "round [0-9]*: joined at position" "$T/$id.a.err" ;;
	ba) wait_for 60 grep -q "round [0-9]*: joined at position" "$T/$id.b.err" ;;
	esac
	case $order in
	ab | both) node b "$id" --nnodes 2 "$SRC/tests/agent/ddp_order.py" && pb=$NODE_PID ;;
	ba) node a "$id" --nnodes 2 "$SRC/tests/agent/ddp_order.py" && pa=$NODE_PID ;;
	esac
	wait_both "$pa" "$pb"
	done_ok "$id" "$order"
	cat "$T/$id.a.out" "$T/$id.b.out" >"$T/$id.out"
	for v in MASTER_ADDR MASTER_PORT params; do
		sed -n "s/^\[rank[0-9]*\]:$v=//p" "$T/$id.out" | sort -u >"$T/$id.$v"
	done
	note "$id ($order): exit 0 0 in $(($(now_ms) - t0)) ms; workers got" \
		"MASTER_ADDR=$(paste -sd' ' "$T/$id.MASTER_ADDR")" \
		"MASTER_PORT=$(paste -sd' ' "$T/$id.MASTER_PORT")"
	expect_eq "$(grep -c "^\[rank[01]\]:MASTER_ADDR=" "$T/$id.out")" 2 "$id: ranks reporting"
	expect_eq "$(wc -l <"$T/$id.MASTER_ADDR")$(wc -l <"$T/$id.MASTER_PORT")" 11 \
		"$id: one MASTER_ADDR and one MASTER_PORT for both nodes"
	case $(cat "$T/$id.MASTER_ADDR") in
	"$A" | "$B") ;;
	*) fail "$id: MASTER_ADDR $(cat "$T/$id.MASTER_ADDR") is neither node's address" ;;
	esac
	expect_eq "$(grep -c . "$T/$id.params")" 1 "$id: one parameter digest for both ranks"
	expect_grep "rendezvous through etcd at $EP" "$T/$id.a.err" "$id: node A's endpoint"
}

note "PyTorch gloo DDP in every start order"
ddp ab d-ab
ddp ba d-ba
ddp both d-both

note "crun status over https from namespace A while a job runs"
# shellcheck disable=SC2016 # expanded by the inner shell
WAITW='touch "$0.ready.$RANK"; while [ ! -e "$0.go" ]; do sleep 0.05; done'
node a st --nnodes 2 /bin/sh -c "$WAITW" "$T/st"
pa=$NODE_PID
node b st --nnodes 2 /bin/sh -c "$WAITW" "$T/st"
pb=$NODE_PID
wait_for 60 files_at_least 2 "$T/st.ready."
# Each agent publishes its node record from a thread of its own over its own connection (see
# secure.sh): until the first is in etcd crun status says "unknown run id" (exit 4), and until
# the second is, it lists one node. Either is asked again, for at most 60 s; the last answer
# is checked.
status_https() {
	timeout -s KILL 30 ip netns exec "${TAG}a" "$CRUN" status --rdzv-backend etcd -e "$EP" \
		--rdzv-id st "${TLS[@]}" --json >"$T/st.json" 2>"$T/st.status.err"
	rc=$?
	nodes=$(grep -o '"node_rank"' "$T/st.json" | wc -l)
	if [ $rc -eq 4 ] || { [ $rc -eq 0 ] && [ "$nodes" -lt 2 ]; }; then
		sleep 0.2
		return 1
	fi
}
wait_for 60 status_https
[ "$rc" -eq 0 ] || { cat "$T/st.status.err" "$T/st.json" >&2; fail "crun status: exit $rc"; }
python3 - "$T/st.json" <<'PY' || { cat "$T/st.json" >&2; fail "crun status: job and hosts"; }
import json, sys
d = json.load(open(sys.argv[1]))
assert d["run_id"] == "st" and d["state"] == "running", d
assert sorted(a["host"] for a in d["agents"]) == ["node-a", "node-b"], d
PY
note "crun status: $(head -c 300 "$T/st.json")"
touch "$T/st.go"
wait_both "$pa" "$pb"
done_ok st status

# elastic ID BACKOFF: the elastic (1:2) job ID with --max-restarts 1 --restart-backoff BACKOFF,
# both nodes started at once; rank 0 fails its first attempt, every other attempt exits 0
# (each writes a line). The job must end 0 on both nodes after one restart of both.
# shellcheck disable=SC2016 # expanded by the inner shell
FLAKY='echo "restart=$TORCHELASTIC_RESTART_COUNT rank=$RANK world=$WORLD_SIZE" >>"$0"
[ "$TORCHELASTIC_RESTART_COUNT.$RANK" != 0.0 ]'
elastic() {
	local id=$1 pa pb
	node a "$id" --nnodes 1:2 --max-restarts 1 --restart-backoff "$2" /bin/sh -c "$FLAKY" \
		"$T/$id.attempts"
	pa=$NODE_PID
	node b "$id" --nnodes 1:2 --max-restarts 1 --restart-backoff "$2" /bin/sh -c "$FLAKY" \
		"$T/$id.attempts"
	pb=$NODE_PID
	wait_both "$pa" "$pb"
	note "$id attempts: $(sort "$T/$id.attempts" | tr '\n' ';')"
	# A round after the failure that formed with one node: the node whose workers had finished
	# rejoined without the other (before agent/agent.c's on_waiting() waited the backoff).
	if grep -q "round [1-9][0-9]*: complete in .* world size 1," "$T/$id".?.err; then
		grep -h "marked failed\|restarting in\|next round\|joined at\|: complete\|closed to" \
			"$T/$id".?.err | cut -c 12- >&2
		fail "$id (--restart-backoff $2, exit codes $RCA $RCB): a round after the failure" \
			"formed with one node: the nodes did not rejoin together"
	fi
	done_ok "$id" "elastic, --restart-backoff $2"
	expect_grep "^restart=0 rank=0 " "$T/$id.attempts" "$id: rank 0's failing first attempt"
	expect_eq "$(grep -c "^restart=1 rank=[01] world=2$" "$T/$id.attempts")" 2 \
		"$id: both workers of the second attempt, restart count 1, world 2"
	expect_eq "$(grep -c "^restart=[^01]" "$T/$id.attempts")" 0 "$id: attempts past restart 1"
}

note "elastic 1:2 with --max-restarts 1, restarting at once: rank 0 fails its first attempt"
elastic el0 0
expect_eq "$($PROBE "$(member_url 0)" keys /crun/ 2>&1)" 0 "keys under /crun/ after every job"

# With a restart backoff (the default 1 s; 2 s here, longer than last_call_timeout=1) every
# node waits it after a failure, "so nodes rejoin about together" (docs/reliability.md), the
# node whose workers had already finished included. It used to rejoin at once: the job being
# elastic, it closed the next round alone and ended the job, and the failing node was refused
# ("job is closed to new nodes", exit 1) or, once the job's keys were deleted, ran the job
# again alone (found by this test; tests/agent/backoff.sh checks the same on one machine).
note "elastic 1:2 with --max-restarts 1 and a 2 s restart backoff"
elastic el2 2
echo "etcd netns: ok in $(($(now_ms) - t_start)) ms"
