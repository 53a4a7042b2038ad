#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/etcd/secure.sh: etcd's own security, end to end through crun: a member that speaks
# only TLS and wants client certificates (--rdzv-conf protocol, cacert, cert, key), and a
# member with authentication on, where the job's user may touch only /crun/<its run id>/
# (--rdzv-conf user, password_file). The workers' store reaches etcd the same way as the
# agents' (they train examples/train through it); no crun token is needed or passed on.
. "$(dirname "$0")/lib.sh"
TRAIN=$BUILD/examples/train
command -v openssl >/dev/null 2>&1 || { echo "SKIP: no openssl to make certificates"; exit 77; }

note "TLS with client certificates"
C=$T/tls
etcd_certs "$C" 127.0.0.21
ETCD_SCHEME=https
ETCD_EXTRA="--cert-file $C/server.pem --key-file $C/server.key --trusted-ca-file $C/ca.pem
	--client-cert-auth"
# The probe reaches the member with the same files (crun gets them from --rdzv-conf).
export PROBE_CACERT=$C/ca.pem PROBE_CERT=$C/client.pem PROBE_KEY=$C/client.key
start_cluster 1
# Relative paths, made absolute by crun: the workers start elsewhere.
cd "$C" || fail "cd $C"
CONF=last_call_timeout=1,protocol=https,cacert=ca.pem,cert=client.pem,key=client.key
CRUN_LOG_LEVEL=debug CRUN_STORE_TOKEN=not-for-etcd etcd_agents tls 2 1 "$TRAIN" --epochs 2
wait_agents 240
cat "$T"/tls.*.out >"$T/tls.out"
[ "$RCS" = "0 0" ] || { cat "$T"/tls.*.err >&2; fail "exit codes $RCS over TLS"; }
expect_digests 2 "$T/tls.out"
expect_grep "rendezvous through etcd at etcd+https://" "$T/tls.0.err" "the agent's endpoint"
expect_grep "CRUN_STORE_TOKEN is not used with etcd" "$T/tls.0.err" "a warning for the token"
# The KV calls go over gRPC, HTTP/2 chosen in the TLS handshake, not to the JSON gateway.
expect_grep "KV calls to .* over gRPC (HTTP/2, TLS with ALPN h2)" "$T/tls.0.err" \
	"KV calls over gRPC to an https member"
expect_eq "$(job_keys tls)" 0 "keys of job tls left in etcd"
note "the workers see the same files, and no crun token"
CRUN_STORE_TOKEN=not-for-etcd etcd_agents tlsenv 1 1 /bin/sh -c \
	'echo "CA=$CRUN_ETCD_CACERT CERT=$CRUN_ETCD_CERT KEY=$CRUN_ETCD_KEY TOKEN=${CRUN_STORE_TOKEN-unset}"'
wait_agents 60
expect_eq "$RCS" 0 "exit code of the environment job"
expect_grep "CA=$C/ca.pem CERT=$C/client.pem KEY=$C/client.key TOKEN=unset" "$T/tlsenv.0.out" \
	"the workers' TLS environment"
note "--tls-ca, --tls-cert and --tls-key are etcd's CA and client certificate (issue 21)"
CONF=last_call_timeout=1,protocol=https etcd_agents tlsflags 1 1 --tls-ca "$C/ca.pem" \
	--tls-cert "$C/client.pem" --tls-key "$C/client.key" /bin/sh -c \
	'echo "CA=$CRUN_ETCD_CACERT CERT=$CRUN_ETCD_CERT KEY=$CRUN_ETCD_KEY"'
wait_agents 60
[ "$RCS" = 0 ] || { cat "$T/tlsflags.0.err" >&2; fail "exit code $RCS with --tls-* flags"; }
expect_grep "CA=$C/ca.pem CERT=$C/client.pem KEY=$C/client.key" "$T/tlsflags.0.out" \
	"the flags' files as etcd's"
"$CRUN" --rdzv-backend etcd --rdzv-endpoint "http://$ETCD_EP" --tls-ca "$C/ca.pem" /bin/true \
	>/dev/null 2>"$T/tlshttp.err"
expect_eq $? 2 "exit code of --tls-ca with http:// members"
expect_grep "^crun: --tls-ca: the etcd members are reached over http (--rdzv-endpoint names" \
	"$T/tlshttp.err" "--tls-ca over http named, not ignored"
note "crun status over https, with the same files as --tls-*, while the job runs"
# The worker runs until the test has looked (the file go), so the job is running meanwhile.
# No scheme and no protocol=: the --tls-* files make it https, as etcdctl's (issue 21).
CONF=last_call_timeout=1 etcd_agents tlsst 1 1 --tls-ca "$C/ca.pem" \
	--tls-cert "$C/client.pem" --tls-key "$C/client.key" /bin/sh -c \
	'touch "$0.ready"; while [ ! -e "$0.go" ]; do sleep 0.05; done' "$T/tlsst"
wait_for 60 files_at_least 1 "$T/tlsst.ready"
# The agent publishes its node record from a thread of its own (agent/notify_status.c), over
# its own TLS connection: on a loaded box the worker can be up before the first record is in
# etcd, and crun status then rightly says "unknown run id" (exit 4). Ask until it says
# running (exit 0), for at most 60 s; each answer is kept, and the last one is checked.
status_https() {
	timeout -s KILL 30 "$CRUN" status --rdzv-backend etcd -e "etcd+https://$ETCD_EP" \
		--rdzv-id tlsst --tls-ca "$C/ca.pem" --tls-cert "$C/client.pem" \
		--tls-key "$C/client.key" --json >"$T/tlsst.json" 2>"$T/tlsst.status.err"
	rc=$?
	[ $rc -eq 4 ] && sleep 0.2
	[ $rc -ne 4 ]
}
wait_for 60 status_https
[ $rc -eq 0 ] || { cat "$T/tlsst.status.err" >&2; fail "crun status over https: exit $rc"; }
expect_grep '"run_id":"tlsst","state":"running"' "$T/tlsst.json" "the job's state over https"
# The same rule: no scheme with --tls-* files is https; http:// with them a usage error.
timeout -s KILL 60 "$CRUN" status --rdzv-backend etcd -e "$ETCD_EP" --rdzv-id tlsst \
	--tls-ca "$C/ca.pem" --tls-cert "$C/client.pem" --tls-key "$C/client.key" --json \
	>"$T/tlsst.bare.json" 2>"$T/tlsst.bare.err"
rc=$?
[ $rc -eq 0 ] || { cat "$T/tlsst.bare.err" >&2; fail "crun status --tls-* without a scheme: exit $rc"; }
expect_grep '"run_id":"tlsst","state":"running"' "$T/tlsst.bare.json" \
	"the job's state over https without a scheme"
timeout -s KILL 60 "$CRUN" status --rdzv-backend etcd -e "http://$ETCD_EP" --rdzv-id tlsst \
	--tls-ca "$C/ca.pem" >/dev/null 2>"$T/tlsst.http.err"
expect_eq $? 2 "exit code of crun status --tls-ca with http:// members"
expect_grep "^crun status: --tls-ca: the etcd members are reached over http (http://$ETCD_EP" \
	"$T/tlsst.http.err" "--tls-ca over http named, not ignored"
touch "$T/tlsst.go"
wait_agents 60
[ "$RCS" = 0 ] || { cat "$T/tlsst.0.err" >&2; fail "exit code $RCS of the job crun status read"; }
note "KV calls to the https member go over gRPC (HTTP/2 agreed in TLS), never the gateway"
# A TLS proxy in front of the member (tests/etcd/tls_proxy.py) logs each connection: "h2", or
# "http/1.1" and the paths asked on it. Leases, watches and auth may use the gateway; /v3/kv/
# must not appear. Each crun-store run below is one process: its connections close with it.
python3 "$SRC/tests/etcd/tls_proxy.py" "${M_ADDR[0]}" "$T/proxy.port" \
	"${M_ADDR[0]}:${M_CPORT[0]}" "$C/server.pem" "$C/server.key" "$C/ca.pem" \
	"$C/client.pem" "$C/client.key" "$T/proxy.log" 2>"$T/proxy.err" &
track $!
wait_for 20 test -s "$T/proxy.port"
PEP="etcd+https://${M_ADDR[0]}:$(cat "$T/proxy.port")"
for cmd in "set k v1" "get k" "add n 2" "cas k v1 v2" "wait-get k" "del k"; do
	# shellcheck disable=SC2086 # the command's words
	timeout -s KILL 60 "$STORE_CLI" --endpoint "$PEP" --prefix grpctls/ --tls-ca "$C/ca.pem" \
		--tls-cert "$C/client.pem" --tls-key "$C/client.key" $cmd >>"$T/proxy.cli.out" \
		2>>"$T/proxy.cli.err" || { cat "$T/proxy.cli.err" "$T/proxy.err" >&2; fail "crun-store $cmd through the proxy"; }
done
expect_eq "$(tr '\n' ' ' <"$T/proxy.cli.out")" "v1 2 v2 v2 " "what crun-store printed through the proxy"
# Every process's connections are logged once it has exited: at least one each.
logged() { [ "$(wc -l <"$T/proxy.log" 2>/dev/null || echo 0)" -ge 6 ]; }
wait_for 20 logged
if grep -q '/v3/kv/' "$T/proxy.log"; then
	cat "$T/proxy.log" >&2
	fail "a KV call to the https member went through the JSON gateway"
fi
[ "$(grep -c '^h2' "$T/proxy.log")" -ge 6 ] || { cat "$T/proxy.log" >&2; fail "fewer than 6 HTTP/2 connections for 6 runs"; }
note "proxy log: $(sort "$T/proxy.log" | uniq -c | tr '\n' ';')"
note "a proxy on the way that agrees only HTTP/1.1: the calls go through the gateway, said once"
python3 "$SRC/tests/etcd/tls_proxy.py" "${M_ADDR[0]}" "$T/proxy1.port" \
	"${M_ADDR[0]}:${M_CPORT[0]}" "$C/server.pem" "$C/server.key" "$C/ca.pem" \
	"$C/client.pem" "$C/client.key" "$T/proxy1.log" --http1-only 2>"$T/proxy1.err" &
track $!
wait_for 20 test -s "$T/proxy1.port"
timeout -s KILL 60 "$STORE_CLI" --endpoint "etcd+https://${M_ADDR[0]}:$(cat "$T/proxy1.port")" \
	--prefix grpctls/ --tls-ca "$C/ca.pem" --tls-cert "$C/client.pem" --tls-key "$C/client.key" \
	add n 3 >"$T/proxy1.out" 2>"$T/proxy1.cli.err" ||
	{ cat "$T/proxy1.cli.err" "$T/proxy1.err" >&2; fail "crun-store add through an HTTP/1.1 proxy"; }
expect_eq "$(cat "$T/proxy1.out")" 5 "the counter through an HTTP/1.1 proxy"
expect_grep "answered a gRPC call over HTTP/1.1 (no HTTP/2 in the TLS handshake)" \
	"$T/proxy1.cli.err" "the fallback to the gateway, said"
expect_eq "$(grep -c 'answered a gRPC call over HTTP/1.1' "$T/proxy1.cli.err")" 1 \
	"the fallback said once per handle"
wait_for 20 test -s "$T/proxy1.log"
expect_grep "/v3/kv/" "$T/proxy1.log" "the KV calls through the gateway"
note "without a client certificate the member refuses: crun fails at once, naming TLS"
# The member finishes the TLS handshake and then drops the connection: that is final at once
# (not retried until join_timeout, 60 s here), naming the files crun used.
t0=$(now_ms)
CONF=last_call_timeout=1,join_timeout=60,protocol=https,cacert=ca.pem \
	etcd_agents tlsno 1 1 /bin/true
wait_agents 60
dt=$(($(now_ms) - t0))
expect_eq "$RCS" 1 "exit code without a client certificate"
expect_grep "error: rendezvous tlsno: store etcd+https://$ETCD_EP" "$T/tlsno.0.err" "the error"
expect_grep "TLS failed (no client certificate.*; CA $C/ca.pem)" "$T/tlsno.0.err" \
	"TLS and the files"
[ "$dt" -lt 20000 ] || { cat "$T/tlsno.0.err" >&2; fail "no client certificate: $dt ms"; }
grep -a "error" "$T/tlsno.0.err" | head -n 2 >&2
note "a CA that did not sign the member's certificate: crun fails at once, naming TLS and it"
(cd "$C" && openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=another-ca \
	-keyout other.key -out other.pem >>openssl.log 2>&1) || fail "openssl (another CA)"
t0=$(now_ms)
CONF=last_call_timeout=1,join_timeout=60,protocol=https,cacert=other.pem
CONF=$CONF,cert=client.pem,key=client.key
etcd_agents tlsca 1 1 /bin/true
wait_agents 60
dt=$(($(now_ms) - t0))
expect_eq "$RCS" 1 "exit code with the wrong CA"
expect_grep "TLS failed (client certificate .*; CA $C/other.pem)" "$T/tlsca.0.err" \
	"TLS and the CA file"
[ "$dt" -lt 20000 ] || { cat "$T/tlsca.0.err" >&2; fail "wrong CA: $dt ms"; }
grep -a "error" "$T/tlsca.0.err" | head -n 2 >&2
note "TLS and authentication together (the production setup): KV calls over gRPC with the token"
# With client-cert-auth and authentication both on, etcd's gateway refuses every /v3/ request
# from a certificate that has a CommonName (embed/serve.go), and crun still logs in, keeps
# leases and watches there: the client's certificate for this case has none.
(cd "$C" && openssl req -newkey rsa:2048 -nodes -subj /O=crun-test -keyout nocn.key \
	-out nocn.csr >>openssl.log 2>&1 &&
	openssl x509 -req -in nocn.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
		-extfile cext -out nocn.pem >>openssl.log 2>&1) || fail "openssl (no CommonName)"
$PROBE "$URL0" auth /crun/jt/ trainer "s3cret pw" || fail "enabling authentication over TLS"
printf 's3cret pw\n' >"$T/pw"
chmod 600 "$T/pw"
CONF=last_call_timeout=1,protocol=https,cacert=ca.pem,cert=nocn.pem,key=nocn.key
CONF=$CONF,user=trainer,password_file=$T/pw
CRUN_LOG_LEVEL=debug etcd_agents jt 2 1 /bin/true
wait_agents 120
[ "$RCS" = "0 0" ] || { cat "$T"/jt.*.err >&2; fail "exit codes $RCS over TLS with a user"; }
expect_grep "KV calls to .* over gRPC (HTTP/2, TLS with ALPN h2)" "$T/jt.0.err" \
	"KV calls over gRPC to an https member with authentication"
cd / || fail "cd /"
kill_member 0
rm -rf "$ETCD_DATA/m0" # the next member starts empty: no user, no auth yet
ETCD_SCHEME=http
ETCD_EXTRA=

note "authentication: the job's user may touch /crun/ja/ only"
start_cluster 1
$PROBE "$URL0" auth /crun/ja/ trainer "s3cret pw" || fail "enabling authentication"
printf 's3cret pw\n' >"$T/pw"
chmod 600 "$T/pw"
CONF=last_call_timeout=1,user=trainer,password_file=$T/pw
CRUN_LOG_LEVEL=debug etcd_agents ja 2 1 "$TRAIN" --epochs 2
wait_agents 240
cat "$T"/ja.*.out >"$T/ja.out"
[ "$RCS" = "0 0" ] || { cat "$T"/ja.*.err >&2; fail "exit codes $RCS with a user"; }
expect_digests 2 "$T/ja.out"
# With a user, too: etcd's token goes as the gRPC metadata "token".
expect_grep "KV calls to .* over gRPC (HTTP/2, prior knowledge)" "$T/ja.0.err" \
	"KV calls over gRPC with authentication"
expect_eq "$(job_keys ja)" 0 "keys of job ja left in etcd"
note "another run id is outside the user's prefix: refused at once"
etcd_agents jb 1 1 /bin/true
wait_agents 60
expect_eq "$RCS" 1 "exit code outside the user's prefix"
# The store API carries the code (CRUN_EAUTH); the backend says etcd's own words, the key and
# the user.
expect_grep "error: rendezvous jb: .*authentication failed" "$T/jb.0.err" "the reason"
expect_grep "/crun/jb/.*etcd said: etcdserver: permission denied (etcd user trainer" \
	"$T/jb.0.err" "etcd's words, the key and the user"
grep -a "permission denied\|error" "$T/jb.0.err" | head -n 2 >&2
note "a wrong password"
printf 'wrong\n' >"$T/pw"
etcd_agents jc 1 1 /bin/true
wait_agents 60
expect_eq "$RCS" 1 "exit code with a wrong password"
expect_grep "error: rendezvous jc: store etcd://$ETCD_EP: " "$T/jc.0.err" "the reason"
grep -a "error" "$T/jc.0.err" | head -n 1 >&2
echo "etcd secure: ok"
