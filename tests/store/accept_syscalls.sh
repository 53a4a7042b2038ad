#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/store/accept_syscalls.sh: what crun-rdzvd asks the kernel per TCP connection (issue 23,
# bench/notes/scale.md). Under strace, 200 authenticated connections (bench/scale_load: connect,
# HELLO/AUTH, add, wait) cost the server no setsockopt: accepted sockets inherit TCP_NODELAY and
# keepalive (60 s idle, 1 s apart, 10 probes) from the listener, which the server checks once
# on the first one (its getsockopt answers are the kernel's), and an accepted socket's keepalive
# timer runs (ss); at most one answered getpeername per connection the server accepted while
# traced (strace counts the accepts, not the load's clients; a refused call is not cached and
# may be asked again); and HELLO nonces come from a getrandom pool, not one call per handshake.
# Skipped without strace.
set -u
BUILD=${CRUN_BUILD_DIR:?}
SRC=${CRUN_SOURCE_DIR:?}
RDZVD=$BUILD/src/crun-rdzvd
LOAD=$BUILD/bench/scale_load
N=200
[ -x "$LOAD" ] || { echo "FAIL: $LOAD not built" >&2; exit 1; }
PIDS=""
. "$SRC/tests/lib/proc.sh"

fail() {
	echo "FAIL: $*" >&2
	[ -f "$T/strace.err" ] && tail -n 20 "$T/strace.err" >&2
	[ -f "$T/rdzvd.err" ] && tail -n 20 "$T/rdzvd.err" >&2
	exit 1
}

need_strace
T=$(mktemp -d "${TMPDIR:-/tmp}/crun-accept-test.XXXXXX")
trap 'kill_tracked; rm -rf "$T"' EXIT
token_file "$T/token"
export CRUN_TOKEN_FILE=$T/token CRUN_STORE_TOKEN_FILE=$T/token CRUN_STORE_UNIX_SOCKET=off
unset CRUN_STORE_TOKEN

note "crun-rdzvd on TCP only, with a token; strace attached"
start_rdzvd
strace -f -p "$RDZVD_PID" -o "$T/trace" \
	-e trace=accept,accept4,setsockopt,getsockopt,getpeername,getrandom 2>"$T/strace.err" &
STRACE_PID=$!
track $STRACE_PID
wait_for 20 grep -q attached "$T/strace.err"

note "$N connections: connect, authenticate, add, wait"
timeout -s KILL 120 "$LOAD" --endpoint "$ENDPOINT" --proto crun --server-pid "$RDZVD_PID" \
	--clients $N --procs 2 --sources 1 --timeout 100 >"$T/load.out" 2>"$T/load.err" ||
	{ cat "$T/load.err" >&2; fail "scale_load failed"; }
grep -q '"clients": '$N "$T/load.out" || fail "scale_load printed no result: $(cat "$T/load.out")"
kill -INT $STRACE_PID
wait_pid 20 $STRACE_PID

count() { grep -c "$1(" "$T/trace"; }
# Connections the server accepted while traced: the load's $N and any other made meanwhile.
accepts=$(grep -cE '^[0-9]+ +accept4?\([0-9]+, .*= [0-9]+$' "$T/trace")
sets=$(count setsockopt) rands=$(count getrandom)
peers=$(grep -c 'getpeername(.*= 0$' "$T/trace")
refused=$(grep 'getpeername(' "$T/trace" | grep -vc '= 0$')
note "per $accepts accepted connections ($N from the load): setsockopt $sets, getpeername $peers (and $refused refused), getrandom $rands"
[ "$accepts" -ge $N ] || fail "strace saw $accepts accepted connections, expected at least $N"
[ "$sets" -eq 0 ] || fail "$sets setsockopt calls for $accepts connections, expected none"
[ "$peers" -le "$accepts" ] || fail "$peers getpeername calls for $accepts connections, expected at most one each; the last calls: $(grep -E 'accept|getpeername' "$T/trace" | tail -n 6)"
[ "$rands" -le $((N / 8)) ] || fail "$rands getrandom calls for $N handshakes, expected at most $((N / 8))"
grep -q 'getsockopt([0-9]*, SOL_TCP, TCP_NODELAY, \[1\]' "$T/trace" ||
	fail "no accepted socket was seen with TCP_NODELAY set (checked once, on the first)"
grep -q 'getsockopt([0-9]*, SOL_TCP, TCP_KEEPIDLE, \[60\]' "$T/trace" ||
	fail "no accepted socket was seen with a 60 s keepalive idle time"

# The kernel's view of an accepted socket: its keepalive timer runs (inherited, not set).
if command -v ss >/dev/null; then
	note "an accepted socket's keepalive timer runs"
	port=${ENDPOINT##*:}
	exec 3<>"/dev/tcp/127.0.0.1/$port" || fail "connecting to $ENDPOINT"
	has_keepalive() {
		ss -tno state established "( sport = :$port )" | grep -q 'timer:(keepalive'
	}
	wait_for 20 has_keepalive
	exec 3>&-
fi
echo "OK"
