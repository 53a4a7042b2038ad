#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/nossl.sh: OpenSSL is loaded only when TLS is configured (issue 23): crun,
# crun-rdzvd, crun-store and libcrun-worker do not link libssl or libcrypto, and where
# neither can be loaded (both hidden in a private mount namespace of this test) a plain job
# through crun-rdzvd and a standalone job with libcrun-worker's barrier run, while crun-rdzvd
# serving TLS and a TLS job fail at once naming the library. The loaded case is agent-tls and
# store-tls. Needs root (unshare -m) for the hidden part; skips (77) without it.
. "$(dirname "$0")/lib.sh"
. "$SRC/tests/lib/tls_certs.sh"

STORE=$BUILD/src/crun-store
HELLO=$BUILD/examples/hello
LIBW=$(ls "$BUILD"/worker_api/libcrun-worker.so 2>/dev/null)

note "no program links OpenSSL"
for b in "$CRUN" "$RDZVD" "$STORE" "$HELLO" $LIBW; do
	ldd "$b" >"$T/ldd" 2>&1 || { cat "$T/ldd" >&2; fail "ldd $b"; }
	if grep -aE "libssl|libcrypto" "$T/ldd" >&2; then
		fail "$b links OpenSSL: every start of it loads libssl/libcrypto"
	fi
done

. "$SRC/tests/lib/hide_libs.sh" # hide_libs, hidden, fails_at_once
hide_libs libssl.so.3 libcrypto.so.3
command -v openssl >/dev/null || { echo "SKIP: no openssl command"; exit 77; }
P=$T/pki
make_tls_certs "$P" || fail "cannot make the test certificates"
unset CRUN_STORE_TLS_CA CRUN_STORE_TLS_CERT CRUN_STORE_TLS_KEY CRUN_STORE_TLS_SERVER_NAME

note "OpenSSL hidden: crun-rdzvd serves a plain job, its workers meet at a barrier"
"${HIDE[@]}" "$RDZVD" --listen 127.0.0.1:0 >"$T/rdzvd.out" 2>"$T/rdzvd.err" &
track $!
wait_for 20 test -s "$T/rdzvd.out"
ENDPOINT=$(head -n1 "$T/rdzvd.out")
[ -n "$ENDPOINT" ] || { cat "$T/rdzvd.err" >&2; fail "crun-rdzvd without OpenSSL: no address"; }
hidden 90 "$CRUN" --nnodes 1 --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" --rdzv-id nossl \
	--nproc-per-node 2 "$HELLO" --barrier >"$T/job.out" 2>"$T/job.err"
RC=$?
if [ $RC -ne 0 ]; then
	cat "$T/job.err" "$T/rdzvd.err" >&2
	fail "a plain job without OpenSSL: exit $RC"
fi
expect_eq "$(grep -c 'hello from rank' "$T/job.out")" 2 "both workers ran"
expect_eq "$(hidden 30 "$STORE" --endpoint "$ENDPOINT" --timeout 10 add n 1)" 1 \
	"crun-store without OpenSSL"

note "OpenSSL hidden: a standalone job (crun's own store) runs"
hidden 90 "$CRUN" --standalone --nproc-per-node 2 "$HELLO" --barrier >"$T/sa.out" 2>"$T/sa.err"
RC=$?
[ $RC -eq 0 ] || { cat "$T/sa.err" >&2; fail "a standalone job without OpenSSL: exit $RC"; }
expect_eq "$(grep -c 'hello from rank' "$T/sa.out")" 2 "both standalone workers ran"

note "OpenSSL hidden: TLS fails at once, naming the library"
NOSSL="TLS needs OpenSSL 3: cannot load libcrypto.so.3"
fails_at_once "crun-rdzvd --tls-*" "$NOSSL" "$RDZVD" --listen 127.0.0.1:0 --tls-cert "$P/server.pem" \
	--tls-key "$P/server.key"
fails_at_once "a TLS job" "$NOSSL" "$CRUN" --standalone --nproc-per-node 1 --tls-ca "$P/ca.pem" \
	--tls-cert "$P/server.pem" --tls-key "$P/server.key" "$HELLO"
fails_at_once "a TLS client" "$NOSSL" "$STORE" --endpoint "$ENDPOINT" --timeout 5 \
	--tls-ca "$P/ca.pem" get k

# Loaded on demand, OpenSSL still initialises itself with the system configuration
# (docs/security.md): a daemon whose $OPENSSL_CONF caps the protocol at TLS 1.2 refuses 1.3,
# and one whose policy's floor is TLS 1.3 refuses 1.2 (crun's own floor, 1.2, never lowers it).
# conf_daemon NAME DIRECTIVE: crun-rdzvd serving TLS with DIRECTIVE in its OpenSSL
# configuration; sets EP.
conf_daemon() {
	printf '%s\n' "openssl_conf = openssl_init" "[openssl_init]" "ssl_conf = ssl_sect" \
		"[ssl_sect]" "system_default = system_default_sect" "[system_default_sect]" \
		"$2" >"$T/$1.cnf"
	OPENSSL_CONF=$T/$1.cnf "$RDZVD" --listen 127.0.0.1:0 --tls-cert "$P/server.pem" \
		--tls-key "$P/server.key" >"$T/$1.out" 2>"$T/$1.err" &
	track $!
	wait_for 20 test -s "$T/$1.out"
	EP=$(head -n1 "$T/$1.out")
}
# handshake VERSION: whether openssl s_client completes a handshake at that version.
handshake() {
	timeout -s KILL 20 openssl s_client -connect "$EP" -CAfile "$P/ca.pem" "$1" \
		</dev/null >"$T/s.out" 2>&1
}
note "OpenSSL loaded: the system configuration (openssl.cnf) applies"
conf_daemon max "MaxProtocol = TLSv1.2"
handshake -tls1_2 || { cat "$T/s.out" "$T/max.err" >&2; fail "TLS 1.2 refused"; }
if handshake -tls1_3; then
	cat "$T/s.out" >&2
	fail "TLS 1.3 accepted: MaxProtocol TLSv1.2 in \$OPENSSL_CONF was not applied"
fi
conf_daemon min "MinProtocol = TLSv1.3"
handshake -tls1_3 || { cat "$T/s.out" "$T/min.err" >&2; fail "TLS 1.3 refused"; }
if handshake -tls1_2; then
	cat "$T/s.out" >&2
	fail "TLS 1.2 accepted: the policy's MinProtocol TLSv1.3 was lowered"
fi
echo "PASS"
