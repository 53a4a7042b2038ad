#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/tls.sh: TLS on store connections (docs/security.md, "TLS"), with a PKI made by
# the openssl CLI: mutual TLS end to end (crun-rdzvd with crun-store, crun jobs whose agents
# and workers use the store), and each refusal named: no client certificate, another CA, a
# wrong host name, a plain client (the store keeps serving), a TLS client on a plain store,
# an expired certificate, a key file others can read.
. "$(dirname "$0")/lib.sh"
. "$SRC/tests/lib/tls_certs.sh"

command -v openssl >/dev/null || { echo "SKIP: no openssl command"; exit 77; }
STORE=$BUILD/src/crun-store
HELPER=$BUILD/tests/worker/worker_helper
P=$T/pki
make_tls_certs "$P" || fail "cannot make the test certificates"
MTLS=(--tls-ca "$P/ca.pem" --tls-cert "$P/client.pem" --tls-key "$P/client.key")
unset CRUN_STORE_TLS_CA CRUN_STORE_TLS_CERT CRUN_STORE_TLS_KEY CRUN_STORE_TLS_SERVER_NAME

# rdzvd NAME ARGS...: a daemon on 127.0.0.1, port 0; sets ENDPOINT.
rdzvd() {
	local name=$1
	shift
	"$RDZVD" --listen 127.0.0.1:0 "$@" >"$T/$name.out" 2>"$T/$name.err" &
	track $!
	wait_for 20 test -s "$T/$name.out"
	ENDPOINT=$(head -n1 "$T/$name.out")
}

st() {
	"$STORE" --endpoint "$ENDPOINT" --timeout 5 "$@"
}

# refused WHAT PATTERN ARGS...: crun-store ARGS get k fails at once (exit 2) saying PATTERN.
refused() {
	local what=$1 pat=$2 start
	shift 2
	start=$(now_ms)
	st "$@" get k >"$T/o" 2>"$T/e"
	RC=$?
	[ $RC -eq 2 ] || { cat "$T/e" "$T/o" >&2; fail "$what: exit $RC, expected 2"; }
	expect_grep "$pat" "$T/e" "$what"
	[ $(($(now_ms) - start)) -lt 4000 ] || fail "$what: took over 4 s (retried?)"
}

note "crun-rdzvd over mutual TLS: a client with a certificate from the CA is served"
rdzvd mtls --tls-cert "$P/server.pem" --tls-key "$P/server.key" --tls-ca "$P/ca.pem"
MTLS_ENDPOINT=$ENDPOINT
expect_grep "over mutual TLS" "$T/mtls.err" "the daemon says it serves mutual TLS"
st "${MTLS[@]}" set k v || fail "set over mutual TLS"
expect_eq "$(st "${MTLS[@]}" get k)" v "get over mutual TLS"
expect_eq "$("$STORE" --endpoint "localhost:${ENDPOINT##*:}" --timeout 5 "${MTLS[@]}" get k)" \
	v "the certificate's DNS name (localhost) is accepted"
expect_eq "$(CRUN_STORE_TLS_CA=$P/ca.pem CRUN_STORE_TLS_CERT=$P/client.pem \
	CRUN_STORE_TLS_KEY=$P/client.key st get k)" v "the TLS files from CRUN_STORE_TLS_*"

note "refusals, each named on both sides"
refused "a client without a certificate" "requires a client certificate" --tls-ca "$P/ca.pem"
expect_grep "the client sent no certificate" "$T/mtls.err" "the daemon names a missing cert"
refused "a client certificate from another CA" "refused the TLS handshake" \
	--tls-ca "$P/ca.pem" --tls-cert "$P/other.pem" --tls-key "$P/other.key"
expect_grep "subject CN=crun-other) is not signed by a CA in --tls-ca" "$T/mtls.err" \
	"the daemon names the foreign certificate"
refused "a wrong host name" 'does not match the name "wrong.example"' "${MTLS[@]}" \
	--tls-server-name wrong.example
refused "a store certificate from another CA" "is not signed by a CA in --tls-ca" \
	--tls-ca "$P/other-ca.pem" --tls-cert "$P/client.pem" --tls-key "$P/client.key"
refused "a plain client" "this store requires TLS"
expect_grep "this store requires TLS" "$T/mtls.err" "the daemon logs the plain client"
cp "$P/client.key" "$T/loose.key"
chmod 644 "$T/loose.key"
refused "a key file others can read" "TLS key file $T/loose.key: refused: mode 0644" \
	--tls-ca "$P/ca.pem" --tls-cert "$P/client.pem" --tls-key "$T/loose.key"
expect_eq "$(st "${MTLS[@]}" get k)" v "the daemon still serves after the refusals"

note "a TLS client on a plain store, and a TLS store with a loose key"
rdzvd plain
refused "TLS to a plain store" "the store does not speak TLS" "${MTLS[@]}"
"$RDZVD" --listen 127.0.0.1:0 --tls-cert "$P/server.pem" --tls-key "$T/loose.key" \
	>"$T/o" 2>"$T/e"
[ $? -eq 2 ] || fail "crun-rdzvd took a key file others can read"
expect_grep "refused: mode 0644" "$T/e" "crun-rdzvd names the loose key"

if [ -f "$P/expired.pem" ]; then
	note "an expired store certificate is named on both sides"
	rdzvd expired --tls-cert "$P/expired.pem" --tls-key "$P/expired.key"
	expect_grep "subject CN=crun-expired) expired on" "$T/expired.err" \
		"the daemon warns of its expired certificate"
	refused "an expired certificate" \
		"certificate has expired (subject CN=crun-expired, not valid after" \
		--tls-ca "$P/ca.pem"
fi

# The worker: what it got (paths only), the store with those files, and without them.
cat >"$T/w.sh" <<EOW
#!/bin/bash
env | grep '^CRUN_STORE_TLS_' | sed 's/^/tlsenv=/'
env | grep -c 'PRIVATE KEY' | sed 's/^/keys-in-env=/'
echo "master=\$MASTER_ADDR:\$MASTER_PORT"
"$STORE" --timeout 10 set mine/\$RANK ok && echo "own-key=ok"
env -u CRUN_STORE_TLS_CA -u CRUN_STORE_TLS_CERT -u CRUN_STORE_TLS_KEY \
	"$STORE" --timeout 5 get mine/\$RANK 2>&1 | sed 's/^/plain=/'
if [ -x "$HELPER" ]; then "$HELPER" barrier 2; else echo "rank \$RANK passed 2 barriers"; fi
EOW
chmod +x "$T/w.sh"

note "crun's TLS flags are checked before anything starts"
run_crun 20 "$T/out" "$T/err" --standalone --tls-cert "$P/server.pem" "$W" env
[ $RC -ne 0 ] || fail "crun took --tls-cert without --tls-key"
expect_grep "tls-cert and --tls-key go together" "$T/err" "crun names the missing key"
run_crun 20 "$T/out" "$T/err" --standalone --tls-cert "$P/server.pem" --tls-key "$P/server.key" \
	"$W" env
[ $RC -ne 0 ] || fail "crun took --tls-cert without --tls-ca"
expect_grep "tls-ca is required" "$T/err" "crun asks for the CA"
run_crun 20 "$T/out" "$T/err" --standalone --tls-ca "$T/missing.pem" "$W" env
[ $RC -ne 0 ] || fail "crun took a missing --tls-ca file"
expect_grep "missing.pem: No such file" "$T/err" "crun names the missing file"
run_crun 20 "$T/out" "$T/err" --standalone --tls-ca "$P/ca.pem" --tls-cert "$P/server.pem" \
	--tls-key "$T/loose.key" "$W" env
[ $RC -ne 0 ] || fail "crun took a key file others can read"
expect_grep "loose.key: refused: mode 0644" "$T/err" "crun names the loose key"

note "crun --standalone --tls-*: its own store serves mutual TLS to the agent and workers"
run_crun 90 "$T/out" "$T/err" --standalone --nproc-per-node 2 --tls-ca "$P/ca.pem" \
	--tls-cert "$P/server.pem" --tls-key "$P/server.key" "$T/w.sh"
[ $RC -eq 0 ] || { cat "$T/err" "$T/out" >&2; fail "standalone TLS job: exit $RC"; }
expect_grep "tlsenv=CRUN_STORE_TLS_KEY=$P/server.key" "$T/out" "workers get the key's path"
expect_grep "tlsenv=CRUN_STORE_TLS_CA=$P/ca.pem" "$T/out" "workers get the CA's path"
expect_eq "$(grep -c 'keys-in-env=0' "$T/out")" 2 "no key in a worker's environment"
expect_eq "$(grep -c 'own-key=ok' "$T/out")" 2 "workers use the store over TLS"
expect_eq "$(grep -c 'plain=.*this store requires TLS' "$T/out")" 2 \
	"the job's store refuses plain clients"
expect_eq "$(grep -c 'passed 2 barriers' "$T/out")" 2 "libcrun-worker barriers over TLS"
# PyTorch's TCPStore stays outside TLS: the job says so, and its MASTER_ADDR is the node's
# advertised address (loopback for --standalone), never a wildcard.
expect_grep "TLS covers crun's store, not PyTorch's: the workers' TCPStore on rank 0 (MASTER_ADDR=127.0.0.1 MASTER_PORT=[0-9]*) has no TLS and no token" \
	"$T/err" "the uncovered TCPStore is named"
expect_eq "$(grep -c 'master=127\.0\.0\.1:[0-9][0-9]*$' "$T/out")" 2 \
	"MASTER_ADDR is the node's address"

note "crun --rdzv-backend c10d against crun-rdzvd over mutual TLS"
ENDPOINT=$MTLS_ENDPOINT
run_crun 90 "$T/out" "$T/err" --nnodes 1 --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" \
	--rdzv-id tlsjob --nproc-per-node 2 "${MTLS[@]}" "$T/w.sh"
[ $RC -eq 0 ] || { cat "$T/err" "$T/out" >&2; fail "c10d TLS job: exit $RC"; }
expect_eq "$(grep -c 'own-key=ok' "$T/out")" 2 "workers use crun-rdzvd over TLS"
run_crun 60 "$T/out" "$T/err" --nnodes 1 --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" \
	--rdzv-id tlsjob2 "$W" env
[ $RC -ne 0 ] || fail "a job without --tls-* met through a TLS store"
expect_grep "this store requires TLS" "$T/err" "crun without TLS is told why"
echo "PASS"
