#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/netns_tls.sh: crun's own store (--rdzv-backend c10d) over mutual TLS across
# network namespaces, features combined. Three namespaces on a bridge: A (.1) hosts the store
# in its agent (the endpoint is A's address), B (.2) is a client node, C (.3) runs crun-rdzvd
# with TLS for the cases that use a daemon. A and B each have a host name of their own (a UTS
# namespace). One node certificate names the three bridge addresses. Checked:
#   - the agent-hosted store in every start order (B first: it must wait for the store, not
#     fail; A first; both at once): exit 0 on both nodes, world size 2, both hosts seen;
#   - crun status --json over TLS from namespace B (hosted store) and A (crun-rdzvd) while a
#     job runs: running, both hosts named;
#   - an unprivileged user with no token and no certificate in A's namespace opening idle
#     connections, sending garbage and a bogus TLS record to the store while the job runs:
#     crun status still answers and the job ends 0 on both nodes (hosted store and crun-rdzvd);
#   - elastic (--nnodes 1:2) with --max-restarts 1, rank 0 failing its first attempt, with
#     --restart-backoff 0 and 2: one restart, both nodes back together, exit 0 0;
#   - a node SIGKILLed mid-job in a --nnodes 1:2 job: the client node (the host carries on
#     alone and ends 0), then the hosting node (the client ends, 0 or with an error naming the
#     store, but never hangs);
#   - the same user flooding the store's unix socket (mode 0666, reachable from any namespace)
#     with connections that start a TLS record, on crun-rdzvd and on A's agent store: crun
#     status over TCP from B still answers, and an elastic job with a restart ends 0 0 (the
#     store accepts a bounded number per loop turn; before, the flood held its loop in the
#     accept callback and the job failed).
# Root, netns, unshare and openssl only (else 77).
. "$(dirname "$0")/lib.sh"
. "$SRC/tests/lib/user.sh"

command -v openssl >/dev/null 2>&1 || { echo "SKIP: no openssl to make certificates"; exit 77; }
command -v unshare >/dev/null 2>&1 || { echo "SKIP: no unshare (util-linux)"; exit 77; }
TAG=nt$$
need_netns "$TAG"
user_need netns_tls python3
ATK=crunatk$$
NET=$(netns_subnet)
netns_bridge "$TAG" "$NET" crun0 "${TAG}a" "${TAG}b" "${TAG}c" ||
	{ echo "SKIP: no bridge support"; exit 77; }
user_add netns_tls
trap 'cleanup; user_del' EXIT
export GLOO_SOCKET_IFNAME=crun0
A=$NET.1
B=$NET.2
C=$NET.3
PORT=29400 # each namespace is fresh: nothing else binds there
t_start=$(now_ms)
token_file "$T/token"

# One CA; one node certificate (server and client) naming the three bridge addresses.
K=$T/tls
mkdir -p "$K"
(cd "$K" && exec >openssl.log 2>&1 && umask 077 &&
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
		-subj /CN=crun-test-ca -keyout ca.key -out ca.pem &&
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=crun-node \
		-keyout node.key -out node.csr &&
	printf 'subjectAltName=IP:%s,IP:%s,IP:%s\nextendedKeyUsage=serverAuth,clientAuth\n' \
		"$A" "$B" "$C" >ext &&
	openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
		-extfile ext -out node.pem) || { cat "$K/openssl.log" >&2; fail "openssl"; }
chmod 644 "$K/ca.pem" "$K/node.pem"
TLS=(--tls-ca "$K/ca.pem" --tls-cert "$K/node.pem" --tls-key "$K/node.key")
CONF=join_timeout=60,last_call_timeout=1,heartbeat_timeout=5,keep_alive_interval=1

# node NS ID EP ARGS...: the agent of job ID in namespace $TAG<NS>, host name node-NS, a 150 s
# limit, output in $T/ID.NS.{out,err}; sets NODE_PID (timeout's PID).
node() {
	local ns=$1 id=$2 ep=$3
	shift 3
	# shellcheck disable=SC2016 # expanded by the inner shell
	CRUN_LOG_LEVEL=debug timeout -s KILL 150 ip netns exec "$TAG$ns" unshare --uts \
		sh -c 'hostname "$0" && exec "$@"' "node-$ns" "$CRUN" --nproc-per-node 1 \
		--rdzv-backend c10d --rdzv-endpoint "$ep" --rdzv-id "$id" "${TLS[@]}" \
		--rdzv-conf "$CONF" "$@" >"$T/$id.$ns.out" 2>"$T/$id.$ns.err" &
	NODE_PID=$!
	track $NODE_PID
}

# both_ok ID PA PB WHAT: wait for both agents of job ID; fail unless both exit 0.
both_ok() {
	local rca rcb
	wait_pid 160 "$2"
	rca=$RC
	wait_pid 160 "$3"
	rcb=$RC
	if [ $rca -ne 0 ] || [ $rcb -ne 0 ]; then
		grep -h "error\|warn\|fail\|refused\|TLS\|complete\|joined" "$T/$1".?.err | tail -n 40 >&2
		fail "$1 ($4): exit codes $rca $rcb (137: killed by the 150 s limit, a hang)"
	fi
	note "$1 ($4): exit 0 0"
}

# The workers: ENV writes one line; WAITW touches $0.ready.RANK.RESTART, then waits for $0.go.
# shellcheck disable=SC2016 # expanded by the inner shell
ENV='echo "rank=$RANK world=$WORLD_SIZE restart=$TORCHELASTIC_RESTART_COUNT host=$(hostname)"'
# shellcheck disable=SC2016
WAITW='echo "restart=$TORCHELASTIC_RESTART_COUNT rank=$RANK world=$WORLD_SIZE" >>"$0.attempts"
touch "$0.ready.$RANK.$TORCHELASTIC_RESTART_COUNT"; while [ ! -e "$0.go" ]; do sleep 0.05; done'

# order ORDER ID: a 2-node job on A's agent-hosted store, its nodes started in ORDER.
order() {
	local ord=$1 id=$2 pa pb
	case $ord in
	ba)
		node b "$id" "$A:$PORT" --nnodes 2 /bin/sh -c "$ENV"
		pb=$NODE_PID
		# B is up, looking for a store that is not there yet: it must keep trying.
		wait_for 60 grep -q "rendezvous store at" "$T/$id.b.err"
		sleep 3
		exited "$pb" && { cat "$T/$id.b.err" >&2; fail "$id: node B gave up before A started"; }
		node a "$id" "$A:$PORT" --nnodes 2 /bin/sh -c "$ENV"
		pa=$NODE_PID
		;;
	ab)
		node a "$id" "$A:$PORT" --nnodes 2 /bin/sh -c "$ENV"
		pa=$NODE_PID
		wait_for 60 grep -q "hosting the rendezvous store\|rendezvous store at" "$T/$id.a.err"
		node b "$id" "$A:$PORT" --nnodes 2 /bin/sh -c "$ENV"
		pb=$NODE_PID
		;;
	both)
		node a "$id" "$A:$PORT" --nnodes 2 /bin/sh -c "$ENV"
		pa=$NODE_PID
		node b "$id" "$A:$PORT" --nnodes 2 /bin/sh -c "$ENV"
		pb=$NODE_PID
		;;
	esac
	both_ok "$id" "$pa" "$pb" "hosted store, order $ord"
	cat "$T/$id.a.out" "$T/$id.b.out" >"$T/$id.out"
	expect_eq "$(grep -c "rank=[01] world=2 restart=0 host=node-[ab]" "$T/$id.out")" 2 \
		"$id: two workers, world 2, on their own hosts"
}

# status NS EP ID: crun status --json over TLS from namespace NS lists job ID running with
# both nodes' hosts (asked again for at most 60 s while the node records arrive).
status_once() {
	timeout -s KILL 30 ip netns exec "$TAG$1" "$CRUN" status --rdzv-backend c10d -e "$2" \
		--rdzv-id "$3" "${TLS[@]}" --json >"$T/$3.json" 2>"$T/$3.status.err"
	ST_RC=$?
	[ $ST_RC -eq 0 ] && [ "$(grep -o '"node_rank"' "$T/$3.json" | wc -l)" -ge 2 ] && return 0
	sleep 0.2
	return 1
}
status() {
	local deadline=$(($(now_ms) + 60000))
	until status_once "$@" || [ "$(now_ms)" -gt $deadline ]; do :; done
	[ "$ST_RC" -eq 0 ] || { cat "$T/$3.status.err" "$T/$3.json" >&2; fail "$3: crun status exit $ST_RC"; }
	python3 - "$T/$3.json" <<'PY' || { cat "$T/$3.json" >&2; fail "$3: crun status: job and hosts"; }
import json, sys
d = json.load(open(sys.argv[1]))
assert d["state"] == "running", d
assert sorted(a["host"] for a in d["agents"]) == ["node-a", "node-b"], d
PY
	note "$3: crun status from $1: $(head -c 200 "$T/$3.json")"
}

# The attacker: tests/faults/preauth_attacker.py (modes hold, tlsflood, unixflood) run by the
# user $ATK (no token, no certificate, not root) in namespace A; the source tree is readable by
# all, as for tests/faults/preauth.sh. Its ready files go to $T/atk, its own directory ($T
# itself may be passed through, not listed).
ATTACKER=$SRC/tests/faults/preauth_attacker.py
chmod 0711 "$T" || fail "chmod 0711 $T"
install -d -m 0700 -o "$ATK" "$T/atk" || fail "making $T/atk for $ATK"
# attack MODE ENDPOINT SECONDS NAME [ARG...]: the attacker in the background (ATK_PID), output
# in $T/attack.NAME.out; its ready file $T/atk/NAME.ready once its connections are open.
attack() {
	local mode=$1 ep=$2 secs=$3 name=$4
	shift 4
	rm -f "$T/atk/$name.ready"
	timeout -s KILL 100 ip netns exec "${TAG}a" runuser -u "$ATK" -- python3 "$ATTACKER" \
		"$mode" "$ep" --seconds "$secs" --ready-file "$T/atk/$name.ready" "$@" \
		>"$T/attack.$name.out" 2>&1 &
	ATK_PID=$!
	track $ATK_PID
}

# attack_ready NAME: wait until the attacker's connections are open (its ready file).
attack_ready() {
	wait_for 30 test -e "$T/atk/$1.ready"
}

# attack_done NAME: the attacker ended by itself; what it did.
attack_done() {
	wait_pid 100 $ATK_PID
	note "$1: $(tr '\n' ' ' <"$T/attack.$1.out")"
	[ "$RC" -eq 0 ] || fail "$1: the attacker script exited $RC"
}

# watched ID EP WHERE: a 2-node job (workers wait for $T/ID.go) on the store at EP; crun
# status from WHERE, then the attacker for 8 s, then crun status again; then the workers go.
watched() {
	local id=$1 ep=$2 where=$3 pa pb
	node a "$id" "$ep" --nnodes 2 /bin/sh -c "$WAITW" "$T/$id"
	pa=$NODE_PID
	node b "$id" "$ep" --nnodes 2 /bin/sh -c "$WAITW" "$T/$id"
	pb=$NODE_PID
	wait_for 60 files_at_least 2 "$T/$id.ready."
	status "$where" "$ep" "$id"
	attack hold "$ep" 8 "$id"
	attack_ready "$id"
	status "$where" "$ep" "$id"
	attack_done "$id"
	touch "$T/$id.go"
	both_ok "$id" "$pa" "$pb" "status and attacker on $ep"
}

note "the agent-hosted store at $A:$PORT over mutual TLS, every start order"
order ba o-ba
order ab o-ab
order both o-both

note "crun status from B and an attacker in A's namespace, the store hosted by A's agent"
watched w-hosted "$A:$PORT" b

note "crun-rdzvd with TLS in namespace C: status from A, the attacker in A"
ip netns exec "${TAG}c" "$RDZVD" --listen "$C:$PORT" "${TLS[@]}" >"$T/rdzvd.out" \
	2>"$T/rdzvd.err" &
RPID=$!
track $RPID
wait_for 20 grep -q ":$PORT\$" "$T/rdzvd.out"
watched w-rdzvd "$C:$PORT" a

# elastic ID EP BACKOFF [flood]: an elastic (1:2) job with --max-restarts 1 --restart-backoff BACKOFF,
# both nodes at once (the attacker flooding the store for 8 s from the start with "flood");
# rank 0 fails its first attempt. Both must end 0 after one restart of both.
# shellcheck disable=SC2016
FLAKY='echo "restart=$TORCHELASTIC_RESTART_COUNT rank=$RANK world=$WORLD_SIZE" >>"$0"
[ "$TORCHELASTIC_RESTART_COUNT.$RANK" != 0.0 ]'
elastic() {
	local id=$1 ep=$2 pa pb
	[ -z "${4:-}" ] || attack tlsflood "$ep" 8 "$id" --conns 400
	node a "$id" "$ep" --nnodes 1:2 --max-restarts 1 --restart-backoff "$3" \
		/bin/sh -c "$FLAKY" "$T/$id.attempts"
	pa=$NODE_PID
	node b "$id" "$ep" --nnodes 1:2 --max-restarts 1 --restart-backoff "$3" \
		/bin/sh -c "$FLAKY" "$T/$id.attempts"
	pb=$NODE_PID
	both_ok "$id" "$pa" "$pb" "elastic on $ep, --restart-backoff $3${4:+, $4}"
	[ -z "${4:-}" ] || attack_done "$id"
	note "$id attempts: $(sort "$T/$id.attempts" | tr '\n' ';')"
	if grep -q "round [1-9][0-9]*: complete in .* world size 1," "$T/$id".?.err; then
		fail "$id: a round after the failure formed with one node: they did not rejoin together"
	fi
	expect_eq "$(grep -c "^restart=1 rank=[01] world=2$" "$T/$id.attempts")" 2 \
		"$id: both workers of the second attempt, restart count 1, world 2"
}

note "elastic 1:2, --max-restarts 1, rank 0 fails once: hosted store, then crun-rdzvd"
elastic el0 "$A:$PORT" 0
elastic el2 "$A:$PORT" 2
elastic el2d "$C:$PORT" 2
note "the same, hosted and on crun-rdzvd, under a flood of connections from A's namespace"
elastic el2f "$A:$PORT" 2 flood
elastic el2df "$C:$PORT" 2 flood

# killed ID VICTIM: a --nnodes 1:2 job on A's hosted store (workers wait for $T/ID.go); once
# both run, SIGKILL the agent of node VICTIM (a or b); the workers of the survivor then go.
killed() {
	local id=$1 victim=$2 agent
	node a "$id" "$A:$PORT" --nnodes 1:2 --max-restarts 3 /bin/sh -c "$WAITW" "$T/$id"
	pa=$NODE_PID
	node b "$id" "$A:$PORT" --nnodes 1:2 --max-restarts 3 /bin/sh -c "$WAITW" "$T/$id"
	pb=$NODE_PID
	wait_for 60 files_at_least 2 "$T/$id.ready."
	eval "agent=\$(pgrep -x crun -P \$p$victim)"
	[ -n "$agent" ] || fail "$id: no crun under node $victim's timeout"
	note "$id: SIGKILL to node $victim's agent ($agent)"
	kill -9 "$agent"
	KILLED_AT=$(now_ms)
}

note "--nnodes 1:2: the client node B SIGKILLed mid-job; A re-forms alone and ends 0"
killed k-b b
wait_for 60 grep -q "^restart=[0-9]* rank=0 world=1$" "$T/k-b.attempts"
note "k-b: A's workers again, alone, $(($(now_ms) - KILLED_AT)) ms after the kill"
touch "$T/k-b.go"
wait_pid 90 "$pa"
[ "$RC" -eq 0 ] || { tail -n 30 "$T/k-b.a.err" >&2; fail "k-b: the survivor A exited $RC"; }

note "--nnodes 1:2: the hosting node A SIGKILLed mid-job; B must not hang"
killed k-a a
sleep 3
touch "$T/k-a.go" # B's workers end; B must then finish without its store
wait_pid 90 "$pb"
note "k-a: B exited $RC $(($(now_ms) - KILLED_AT)) ms after the kill:" \
	"$(grep -i "store\|error" "$T/k-a.b.err" | tail -n 1 | cut -c 1-200)"
[ "$RC" -ne 137 ] || fail "k-a: B hung after its store's host died (killed by the 150 s limit)"
if [ "$RC" -ne 0 ] && ! grep -qi "store" "$T/k-a.b.err"; then
	tail -n 20 "$T/k-a.b.err" >&2
	fail "k-a: B exited $RC without naming the store"
fi

# unix_flood ID EP WHO: the elastic job of elastic() with --restart-backoff 2 on the store at
# EP (WHO: the agent of A hosts it, or crun-rdzvd), the attacker flooding the store's unix
# socket (/run/crun/store-NETNS-ADDR-PORT.sock, mode 0666: docs/security.md) for 12 s from
# namespace A. A failure is counted in BAD; the test goes on.
unix_flood() {
	local id=$1 ep=$2 who=$3 pa pb rca rcb sock rc
	# A last call long enough that B, started after the flood and the status check, always
	# joins A's round 0 (node() reads CONF). With the 1 s of the other cases A could form
	# round 0 alone, fail, and during its restart backoff B could form and finish round 1
	# alone, leaving A a closed job (exit 1, as torchrun's ERROR_CLOSED): the elastic rules,
	# not the flood, deciding the case.
	local CONF=${CONF/last_call_timeout=1,/last_call_timeout=30,}
	case $CONF in
	*last_call_timeout=30,*) ;;
	*) fail "$id: CONF ($CONF) has no last_call_timeout=1, to lengthen" ;;
	esac
	if [ "$who" = agent ]; then
		node a "$id" "$ep" --nnodes 1:2 --max-restarts 1 --restart-backoff 2 \
			/bin/sh -c "$FLAKY" "$T/$id.attempts"
		pa=$NODE_PID
	fi
	# shellcheck disable=SC2016 # expanded by eval
	wait_for 30 eval 'ls /run/crun/store-*-"${ep%:*}-${ep##*:}".sock >/dev/null 2>&1'
	sock=$(ls -t /run/crun/store-*-"${ep%:*}-${ep##*:}".sock | head -n 1)
	attack unixflood "$sock" 12 "$id" --conns 400
	attack_ready "$id"
	# Does the store still answer over TCP, from B, while its unix socket is flooded?
	# (exit 0, 3 or 4: it answered, the run running, ended or unknown; 5 or 137: no answer)
	local t0
	t0=$(now_ms)
	timeout -s KILL 30 ip netns exec "${TAG}b" "$CRUN" status --rdzv-backend c10d -e "$ep" \
		--rdzv-id "$id" "${TLS[@]}" --timeout 10 >"$T/$id.st" 2>"$T/$id.st.err"
	rc=$?
	note "$id: crun status from B over TCP during the flood: exit $rc in $(($(now_ms) - t0)) ms"
	case $rc in
	0 | 3 | 4) ;;
	*)
		cat "$T/$id.st.err" >&2
		echo "FAIL: $id: the store ($who) did not answer crun status over TCP from B within" \
			"10 s while an unprivileged user flooded its unix socket: exit $rc" >&2
		BAD="$BAD $id-status"
		;;
	esac
	if [ "$who" = rdzvd ]; then
		node a "$id" "$ep" --nnodes 1:2 --max-restarts 1 --restart-backoff 2 \
			/bin/sh -c "$FLAKY" "$T/$id.attempts"
		pa=$NODE_PID
	fi
	node b "$id" "$ep" --nnodes 1:2 --max-restarts 1 --restart-backoff 2 \
		/bin/sh -c "$FLAKY" "$T/$id.attempts"
	pb=$NODE_PID
	wait_pid 160 "$pa"
	rca=$RC
	wait_pid 160 "$pb"
	rcb=$RC
	attack_done "$id"
	if [ $rca -ne 0 ] || [ $rcb -ne 0 ]; then
		grep -h "error\|warn\|backlog\|unauthenticated" "$T/$id".?.err "$T/rdzvd.err" |
			cut -c 1-300 | tail -n 12 >&2
		echo "FAIL: $id: an unprivileged user with no token flooding the unix socket $sock of" \
			"the store ($who) made the job fail: exit codes $rca $rcb (store starved:" \
			"handshakes over TCP and the socket time out; see above)" >&2
		BAD="$BAD $id"
		return
	fi
	note "$id (unix socket flood, store: $who): exit 0 0"
}

BAD=""
note "the store's unix socket flooded by the attacker during an elastic job: crun-rdzvd"
unix_flood uf-rdzvd "$C:$PORT" rdzvd
note "the store's unix socket flooded by the attacker during an elastic job: A's agent"
unix_flood uf-agent "$A:$PORT" agent
[ -z "$BAD" ] || fail "failed cases:$BAD"
echo "netns tls: ok in $(($(now_ms) - t_start)) ms"
