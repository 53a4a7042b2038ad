#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/store/client_spin.sh: the store client's reply spin (rendezvous/store/client_tcp_io.c,
# "The reply spin"; issue 23), seen under strace. A client waiting for a quick reply polls its
# socket without sleeping first (recvfrom with MSG_DONTWAIT), on the unix socket and over TCP;
# CRUN_STORE_SPIN_US=0 turns that off; a bad value is refused with a message naming the
# variable; and a client whose replies do not come within the window (each wait here lasts
# 30 ms) stops spinning by itself: of 40 waits that slept, at most 10 spun first (the back-off
# skips 1, 2, 4, ... waits after each spin that saw nothing: 6 spins for 40 waits). A client
# over TLS does not spin. Skipped without strace.
set -u
BUILD=${CRUN_BUILD_DIR:?}
SRC=${CRUN_SOURCE_DIR:?}
RDZVD=$BUILD/src/crun-rdzvd
CLIENT=$BUILD/tests/store/spin_client
PIDS=""
. "$SRC/tests/lib/proc.sh"

fail() {
	echo "FAIL: $*" >&2
	[ -f "$T/client.err" ] && tail -n 20 "$T/client.err" >&2
	[ -f "$T/rdzvd.err" ] && tail -n 20 "$T/rdzvd.err" >&2
	exit 1
}

[ -x "$CLIENT" ] || { echo "FAIL: $CLIENT not built" >&2; exit 1; }
need_strace
T=$(mktemp -d "${TMPDIR:-/tmp}/crun-spin-test.XXXXXX")
trap 'kill_tracked; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
token_file "$T/token"
export CRUN_TOKEN_FILE=$T/token CRUN_STORE_TOKEN_FILE=$T/token
unset CRUN_STORE_TOKEN CRUN_STORE_SPIN_US CRUN_STORE_UNIX_SOCKET

# traced NAME ARGS...: run the client under strace (its system calls on the store's socket),
# one file per thread ($T/NAME.trace.TID, so no call is split across lines); it must succeed.
traced() {
	local name=$1
	shift
	# LeakSanitizer (ASan builds) cannot run under ptrace; the untraced run below keeps it.
	ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
		timeout -s KILL 120 strace -ff -qq -o "$T/$name.trace" -e trace=recvfrom,poll,connect \
		"$CLIENT" "$ENDPOINT" "$T/token" "$@" >"$T/client.out" 2>"$T/client.err" ||
		fail "$name: spin_client $* failed"
}
# spins NAME: the non-blocking reads in NAME's traces (the spin's polls).
spins() { cat "$T/$1".trace.* | grep -c 'recvfrom(.*MSG_DONTWAIT'; }
# spun_sleeps NAME: the sleeps that a spin came before (non-blocking reads, then a wait in
# poll or in a blocking read), over NAME's threads.
spun_sleeps() {
	local f n=0
	for f in "$T/$1".trace.*; do
		n=$((n + $(awk '/recvfrom\(.*MSG_DONTWAIT/ { spun = 1; next }
			       /poll\(|recvfrom\(/ { if (spun) n++; spun = 0 }
			       END { print n + 0 }' "$f")))
	done
	echo $n
}

note "crun-rdzvd with a token, unix socket and TCP"
start_rdzvd

for via in unix tcp; do
	if [ $via = tcp ]; then export CRUN_STORE_UNIX_SOCKET=off; fi
	note "$via: 200 adds, each reply awaited: the client spins (a 1 ms window under strace)"
	CRUN_STORE_SPIN_US=1000 traced fast-$via fast 200
	[ $via = tcp ] || cat "$T/fast-$via".trace.* | grep -q 'connect(.*sun_path=' ||
		fail "unix: the client did not use the store's unix socket"
	n=$(spins fast-$via)
	note "$via: $n non-blocking reads for 200 replies"
	[ "$n" -ge 100 ] || fail "$via: $n non-blocking reads for 200 adds: the client did not spin"

	note "$via: CRUN_STORE_SPIN_US=0: no spin"
	CRUN_STORE_SPIN_US=0 traced off-$via fast 200
	n=$(spins off-$via)
	[ "$n" -eq 0 ] || fail "$via: $n non-blocking reads with CRUN_STORE_SPIN_US=0"

	note "$via: 40 waits of 30 ms each: spins that see nothing grow rarer"
	CRUN_STORE_SPIN_US=1000 traced slow-$via slow 40 30
	n=$(spun_sleeps slow-$via)
	note "$via: $n of the waits that slept spun first"
	[ "$n" -ge 1 ] || fail "$via: no wait spun before it slept (the first one must)"
	[ "$n" -le 10 ] || fail "$via: $n waits spun before sleeping, expected at most 10 (back-off)"
done
unset CRUN_STORE_UNIX_SOCKET

note "TLS: the client never spins (a record may arrive in pieces; the TLS library reads)"
. "$SRC/tests/lib/tls_certs.sh"
make_tls_certs "$T/pki" || fail "making the test certificates"
PLAIN_ENDPOINT=$ENDPOINT
start_rdzvd 127.0.0.1 "" --tls-cert "$T/pki/server.pem" --tls-key "$T/pki/server.key"
export CRUN_STORE_TLS_CA=$T/pki/ca.pem
CRUN_STORE_SPIN_US=1000 traced tls fast 200
unset CRUN_STORE_TLS_CA
ENDPOINT=$PLAIN_ENDPOINT
n=$(spins tls)
[ "$n" -eq 0 ] || fail "TLS: $n non-blocking reads of the socket for 200 adds (no spin expected)"
grep -c 'recvfrom\|poll(' "$T"/tls.trace.* | grep -qv ':0$' ||
	fail "TLS: the trace shows no read of the socket at all (nothing was checked)"

note "CRUN_STORE_SPIN_US=abc: refused, naming the variable"
CRUN_STORE_SPIN_US=abc timeout -s KILL 60 "$CLIENT" "$ENDPOINT" "$T/token" fast 1 >"$T/client.out" 2>"$T/client.err" &&
	fail "CRUN_STORE_SPIN_US=abc was accepted"
grep -q 'CRUN_STORE_SPIN_US=abc: expected microseconds in 0..1000' "$T/client.err" ||
	fail "CRUN_STORE_SPIN_US=abc: no message naming it: $(cat "$T/client.err")"
echo "OK"
