#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/store/unix_socket.sh: same-host clients over the store's AF_UNIX socket (docs/security.md,
# "Same-host clients"), with real daemons and processes. A crun-rdzvd in namespace A (on a
# bridge with B): a client in A uses its socket (the server's metrics count it), a client in B
# uses TCP; a throwaway user with no token (or a wrong one) is refused on the socket as over
# TCP; the per-address cap counts socket clients; a removed socket means TCP; a killed
# daemon's stale socket is replaced (and swept by a daemon on another port) and a stopped
# one's removed; and a 2-worker crun job's
# workers (libcrun-worker) reach the agent's own store over it. Root only (77).
set -u
BUILD=${CRUN_BUILD_DIR:?}
SRC=${CRUN_SOURCE_DIR:?}
RDZVD=$BUILD/src/crun-rdzvd
STORE=$BUILD/src/crun-store
CRUN=$BUILD/src/crun
HELPER=$BUILD/tests/worker/worker_helper
TAG=ux$$
ATK=crunux$$
PIDS="" NETNS="" LINKS=""
. "$SRC/tests/lib/proc.sh"
. "$SRC/tests/lib/net.sh"
. "$SRC/tests/lib/user.sh"

fail() {
	echo "FAIL: $*" >&2
	[ -f "$T/rdzvd.err" ] && tail -n 20 "$T/rdzvd.err" >&2
	exit 1
}

user_need unix_socket ip ss curl
T=$(mktemp -d "${TMPDIR:-/tmp}/crun-unix-test.XXXXXX")
chmod 0755 "$T" # the throwaway user reads nothing here but its own directory below
cleanup() {
	# The last daemon stops cleanly (its socket removed), bounded; then everything else.
	if [ -n "${RDZVD_PID:-}" ] && kill "$RDZVD_PID" 2>/dev/null; then
		timeout 10 tail --pid="$RDZVD_PID" -f /dev/null
	fi
	kill_tracked
	netns_teardown "$NETNS" "$LINKS"
	user_del
	rm -rf "$T"
}
trap cleanup EXIT
netns_usable "$TAG" || { echo "unix_socket: skipped: no network namespaces"; exit 77; }
NET=$(netns_subnet)
netns_bridge "$TAG" "$NET" "" "${TAG}a" "${TAG}b" ||
	{ echo "unix_socket: skipped: no bridge support"; exit 77; }
user_add unix_socket
A=(ip netns exec "${TAG}a")
B=(ip netns exec "${TAG}b")
PORT=29400 # each namespace is fresh: nothing else binds there
EP=$NET.1:$PORT
token_file "$T/token"
export CRUN_TOKEN_FILE=$T/token
unset CRUN_STORE_TOKEN CRUN_STORE_TOKEN_FILE CRUN_STORE_UNIX_SOCKET

# daemon ARGS...: crun-rdzvd in A on $EP, metrics on A's loopback; waits until it listens.
daemon() {
	rm -f "$T/rdzvd.out"
	"${A[@]}" "$RDZVD" --listen "$EP" --metrics 127.0.0.1:9400 -v "$@" \
		>"$T/rdzvd.out" 2>"$T/rdzvd.err" &
	RDZVD_PID=$!
	track $RDZVD_PID
	wait_for 20 grep -q ':[0-9][0-9]*$' "$T/rdzvd.out"
}

# metric NAME: its value on the daemon's metrics page.
metric() {
	"${A[@]}" curl -s -m 20 -H "Authorization: Bearer $(cat "$T/token")" \
		http://127.0.0.1:9400/metrics | sed -n "s/^$1 //p"
}

# client NS OUT ARGS...: crun-store in namespace NS (a or b) at $EP, debug lines into OUT.
client() {
	local ns=$1 out=$2
	shift 2
	timeout -s KILL 60 ip netns exec "$TAG$ns" "$STORE" -e "$EP" -v -t 20 "$@" 2>"$out"
}

note "a client on the store's host (namespace A) uses the store's unix socket"
daemon
SOCK=$(sed -n 's/.*same-host clients also on //p' "$T/rdzvd.err")
[ -n "$SOCK" ] || fail "crun-rdzvd did not say where its unix socket is"
"${A[@]}" ss -xl | grep -qF "$SOCK" || fail "ss -xl in A does not list $SOCK"
client a "$T/a1" set k v || fail "set in A: $(cat "$T/a1")"
grep -q "connected over its unix socket $SOCK" "$T/a1" ||
	fail "the client in A did not use $SOCK: $(cat "$T/a1")"
[ "$(metric crun_store_unix_connections_accepted_total)" -ge 1 ] ||
	fail "the server counted no unix connection"

note "a client in another network namespace (B) uses TCP"
before=$(metric crun_store_unix_connections_accepted_total)
[ "$(client b "$T/b1" get k)" = v ] || fail "get in B: $(cat "$T/b1")"
grep -q "over TCP (no unix socket" "$T/b1" || fail "B's client did not say TCP: $(cat "$T/b1")"
[ "$(metric crun_store_unix_connections_accepted_total)" = "$before" ] ||
	fail "B's connection was counted as a unix one"

note "a user without the token is refused on the socket, as over TCP"
mkdir -m 0700 "$T/atk" && chown "$ATK" "$T/atk" || fail "the throwaway user's directory"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/atk/token"
chown "$ATK" "$T/atk/token" && chmod 0600 "$T/atk/token"
# atk OUT VIA ARGS...: crun-store as the user in A, VIA "" (its default) or "off" (TCP).
atk() {
	local out=$1 via=$2
	shift 2
	timeout -s KILL 60 "${A[@]}" runuser -u "$ATK" -- env CRUN_STORE_UNIX_SOCKET="$via" \
		"$STORE" -e "$EP" -v -t 10 "$@" get k >"$out" 2>&1
}
for how in "--insecure" "--token-file $T/atk/token"; do
	# shellcheck disable=SC2086 # two words
	atk "$T/atk/u" "" $how && fail "$how on the unix socket: not refused: $(cat "$T/atk/u")"
	ru=$?
	grep -q "connected over its unix socket" "$T/atk/u" ||
		fail "$how: the user did not reach the socket: $(cat "$T/atk/u")"
	# shellcheck disable=SC2086
	atk "$T/atk/t" off $how && fail "$how over TCP: not refused"
	rt=$?
	[ "$ru" = "$rt" ] || fail "$how: exit $ru on the socket, $rt over TCP"
	grep -qi "token\|auth" "$T/atk/u" || fail "$how: the refusal does not say why: $(cat "$T/atk/u")"
	grep -q "^v$" "$T/atk/u" && fail "$how: the user read the key"
done

note "the per-address cap counts socket clients as loopback"
kill "$RDZVD_PID"
wait_for 30 exited "$RDZVD_PID"
[ -e "$SOCK" ] && fail "crun-rdzvd stopped and left $SOCK behind"
daemon --max-conns-per-addr 3
for i in 1 2 3; do
	timeout -s KILL 150 "${A[@]}" "$STORE" -e "$EP" -t 120 wait never 2>"$T/hold$i" &
	track $!
done
conns_are() { [ "$(metric crun_store_connections)" = "$1" ]; }
wait_for 30 conns_are 3
client a "$T/a4" ping && fail "a 4th connection from A was let in past --max-conns-per-addr 3"
grep -q "connected over its unix socket" "$T/a4" || fail "the 4th did not come on the socket"
grep -qi "too many connections\|connections from" "$T/a4" ||
	fail "the 4th's refusal does not name the cap: $(cat "$T/a4")"

# What a killed daemon leaves: its socket and its free lock file. Any crun-rdzvd started meanwhile
# as root (a test running beside this one) may sweep them at once, as it should; the checks below
# need a stale pair, so one is put back the way a killed daemon leaves it, and the note says so.
stale_left() {
	[ -S "$SOCK" ] && [ -e "$SOCK.lock" ] && return 0
	note "the killed daemon's files were swept by another crun-rdzvd; putting a stale pair back"
	rm -f "$SOCK"
	/usr/bin/python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' \
		"$SOCK" || fail "cannot leave a stale socket at $SOCK"
	(umask 077 && : >"$SOCK.lock") || fail "cannot leave a stale lock file at $SOCK.lock"
}

note "a killed daemon's stale socket is replaced; a removed socket means TCP"
kill -9 "$RDZVD_PID"
wait_for 30 exited "$RDZVD_PID"
stale_left
daemon
client a "$T/a5" ping || fail "ping after the restart: $(cat "$T/a5")"
grep -q "connected over its unix socket $SOCK" "$T/a5" || fail "the stale socket was not replaced"
rm -f "$SOCK"
client a "$T/a6" ping || fail "ping with the socket removed: $(cat "$T/a6")"
grep -q "over TCP (no unix socket: $SOCK: No such file" "$T/a6" ||
	fail "no debug line saying TCP: $(cat "$T/a6")"
grep -qi "error\|warn" "$T/a6" && fail "the fallback logged more than a debug line"

note "what a killed daemon leaves is swept by the next one, on another port"
kill -9 "$RDZVD_PID"
wait_for 30 exited "$RDZVD_PID"
stale_left
EP=$NET.1:$((PORT + 1))
daemon
[ -e "$SOCK.lock" ] && fail "$SOCK.lock, left by a killed daemon, was not swept"

note "a 2-worker crun job: its workers reach the agent's store on its socket"
timeout -s KILL 120 env CRUN_LOG_LEVEL=debug "$CRUN" --standalone --nproc-per-node 2 \
	--no-python "$HELPER" barrier 3 >"$T/job.out" 2>"$T/job.err" ||
	{ tail -n 40 "$T/job.err"; fail "the job failed"; }
for r in 0 1; do
	grep -q "^\[rank$r\]:.*connected over its unix socket" "$T/job.err" ||
		{ tail -n 40 "$T/job.err"; fail "rank $r did not connect on the agent store's socket"; }
done
grep -q "^\[rank[0-9]*\]:.*over TCP" "$T/job.err" && fail "a worker used TCP"
echo "PASS"
