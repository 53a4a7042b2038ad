#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/status_tls.sh: the store's configuration is one value that every connection of
# the agent borrows (issue 18), so TLS reaches all of them: `crun status` sees a TLS job, on the
# agent-hosted store and on crun-rdzvd with mutual TLS (where the run list, LIST_RUNS, names
# it too), and no store logs a refused (plain) connection from the status publisher; in static
# mode a second node rank 0 is named under TLS as without it.
. "$(dirname "$0")/lib.sh"
. "$SRC/tests/lib/tls_certs.sh"

command -v openssl >/dev/null || { echo "SKIP: no openssl command"; exit 77; }
P=$T/pki
make_tls_certs "$P" || fail "cannot make the test certificates"
unset CRUN_STORE_TLS_CA CRUN_STORE_TLS_CERT CRUN_STORE_TLS_KEY CRUN_STORE_TLS_SERVER_NAME
# The agents: certificates that serve (the agent-hosted store) and authenticate as clients.
AGENT_TLS=(--tls-ca "$P/ca.pem" --tls-cert "$P/server.pem" --tls-key "$P/server.key")
CLIENT_TLS=(--tls-ca "$P/ca.pem" --tls-cert "$P/client.pem" --tls-key "$P/client.key")
# What a store logs when a connection did not speak TLS to it, or a TLS one was refused.
REFUSAL='requires TLS\|does not speak TLS\|refused the TLS\|TLS handshake'

# job ID ENDPOINT ARGS...: two agents of run ID (PIDs in J0 J1) whose workers wait for
# $T/ID.go after touching $T/ID.RANK.
job() {
	local id=$1 ep=$2 i
	shift 2
	for i in 0 1; do
		"$CRUN" --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "$ep" --rdzv-id "$id" \
			--nproc-per-node 1 "$@" "$W" touch:"$T/$id.%r" wait-file:"$T/$id.go" \
			>"$T/$id.$i.out" 2>"$T/$id.$i.err" &
		eval "J$i=\$!"
		track $!
	done
	for i in 0 1; do
		wait_for 60 test -e "$T/$id.$i"
	done
}

# running ID ENDPOINT: crun status (with a client certificate) sees both nodes running.
running() {
	local id=$1 ep=$2
	wait_for 30 eval 'timeout -s KILL 30 "$CRUN" status --rdzv-endpoint "$ep" --rdzv-id "$id" \
		--timeout 5 "${CLIENT_TLS[@]}" >"$T/st" 2>"$T/st.err"; RC=$?; [ $RC -eq 0 ] &&
		[ "$(grep -c "^[01] .* running " "$T/st")" = 2 ]'
	[ $RC -eq 0 ] || { cat "$T/st" "$T/st.err" >&2; fail "$id: crun status exit $RC"; }
	expect_grep "^job $id: running (round 0, 2 nodes, world size 2)$" "$T/st" "$id: the job line"
}

# finish ID: release the workers; both agents exit 0.
finish() {
	local id=$1
	touch "$T/$id.go"
	wait_pid 60 $J0
	[ $RC -eq 0 ] || { cat "$T/$id.0.err" >&2; fail "$id: node 0 exited $RC"; }
	wait_pid 60 $J1
	[ $RC -eq 0 ] || { cat "$T/$id.1.err" >&2; fail "$id: node 1 exited $RC"; }
}

note "the agent-hosted store over mutual TLS: crun status sees the job, nothing is refused"
hold_port port
job hosted "127.0.0.1:$port" "${AGENT_TLS[@]}"
running hosted "127.0.0.1:$port"
finish hosted
if grep -a "$REFUSAL" "$T"/hosted.*.err >&2; then
	fail "the agent-hosted store refused a connection of the job (above)"
fi

note "crun-rdzvd over mutual TLS: crun status sees the job, the daemon refuses nothing"
"$RDZVD" --listen 127.0.0.1:0 --tls-cert "$P/server.pem" --tls-key "$P/server.key" \
	--tls-ca "$P/ca.pem" >"$T/d.out" 2>"$T/d.err" &
track $!
wait_for 20 test -s "$T/d.out"
EP=$(head -n1 "$T/d.out")
job mtls "$EP" "${CLIENT_TLS[@]}"
running mtls "$EP"
note "the run list (LIST_RUNS) over mutual TLS: the job, running, 2 nodes"
timeout -s KILL 30 "$CRUN" status --rdzv-endpoint "$EP" --timeout 5 "${CLIENT_TLS[@]}" \
	>"$T/list" 2>"$T/list.err"
RC=$?
[ $RC -eq 0 ] || { cat "$T/list" "$T/list.err" >&2; fail "the run list: exit $RC"; }
expect_grep '^mtls  *running  *2 ' "$T/list" "the run list names the job"
finish mtls
if grep -a "$REFUSAL" "$T/d.err" >&2; then
	fail "crun-rdzvd refused a connection of the job (above)"
fi

note "static mode under TLS: a second node rank 0 is named, not 'in use by another program'"
hold_port_pair port
"$CRUN" --nnodes 2 --nproc-per-node 1 --node-rank 0 --master-addr 127.0.0.1 \
	--master-port "$port" --rdzv-conf join_timeout=30 "${AGENT_TLS[@]}" "$W" env \
	>"$T/s0.out" 2>"$T/s0.err" &
track $!
wait_for 20 grep -q "hosting the rendezvous store" "$T/s0.err"
run_crun 30 "$T/s1.out" "$T/s1.err" --nnodes 2 --nproc-per-node 1 --node-rank 0 \
	--master-addr 127.0.0.1 --master-port "$port" "${AGENT_TLS[@]}" "$W" env
[ $RC -ne 0 ] || fail "a second node rank 0 was accepted under TLS"
expect_grep "node rank 0 is already taken by host $(hostname)" "$T/s1.err" \
	"duplicate rank 0 under TLS"
if grep -a "$REFUSAL" "$T/s0.err" >&2; then
	fail "the node rank 0 store refused a connection (above)"
fi
echo "ok"
