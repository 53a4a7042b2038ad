#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/store/tcpstore.sh: PyTorch's own TCPStore client against crun-rdzvd: every operation,
# a barrier, the 2.x protocol, the namespace, hostile input and refusal (docs/protocol.md,
# "TCPStore"). Skipped (77) when torch is not importable.
set -u
BUILD=${CRUN_BUILD_DIR:?}
SRC=${CRUN_SOURCE_DIR:?}
RDZVD=$BUILD/src/crun-rdzvd
STORE=$BUILD/src/crun-store
PY=${PYTHON_EXEC:-/usr/bin/python3}
CLI=$SRC/tests/store/tcpstore_client.py
T=$(mktemp -d "${TMPDIR:-/tmp}/crun-tcpstore-test.XXXXXX")
export CRUN_TOKEN_FILE=$T/token
unset CRUN_STORE_TOKEN CRUN_STORE_TOKEN_FILE
PIDS=""

cleanup() {
	local p
	for p in $PIDS; do
		kill "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	rm -rf "$T"
}
trap cleanup EXIT

fail() {
	echo "FAIL: $*" >&2
	[ -f "$T/rdzvd.err" ] && tail -20 "$T/rdzvd.err" >&2
	exit 1
}

if ! "$PY" -c 'import torch.distributed' 2>/dev/null; then
	echo "torch is not importable by $PY: skipping"
	exit 77
fi

# start ARGS...: a crun-rdzvd on a free port; sets PORT.
start() {
	"$RDZVD" --listen 127.0.0.1:0 "$@" >"$T/rdzvd.out" 2>"$T/rdzvd.err" &
	PID=$!
	PIDS="$PIDS $PID"
	for _ in $(seq 100); do
		[ -s "$T/rdzvd.out" ] && break
		sleep 0.1
	done
	PORT=$(head -n1 "$T/rdzvd.out" | sed 's/.*://')
	[ -n "$PORT" ] || fail "crun-rdzvd did not start"
}

client() {
	echo "$(date +%T.%N | cut -c1-12) tcpstore_client.py $*"
	timeout -s KILL 120 "$PY" "$CLI" "$PORT" "$@" || fail "tcpstore_client.py $* (exit $?)"
}

# log_has TEXT: the daemon logged TEXT (it logs after closing: give it a moment).
log_has() {
	for _ in $(seq 50); do
		grep -qF -- "$1" "$T/rdzvd.err" && return 0
		sleep 0.1
	done
	fail "not in the log: $1"
}

start --tcpstore-run r1
client ops
client barrier 8
# torch's own clients doing gloo's exchange, every value checked (tcpstore_stress.c does more)
client stress 8 10
client v2

# The namespace: what crun's own clients wrote is out of reach, and the other way round.
"$STORE" -e "127.0.0.1:$PORT" set rdzv/r1/secret s >/dev/null || fail "crun-store set"
"$STORE" -e "127.0.0.1:$PORT" set r1/other o >/dev/null || fail "crun-store set"
client ns
[ "$("$STORE" -e "127.0.0.1:$PORT" get r1/tcpstore//mine)" = m ] ||
	fail "the TCPStore client's key is not under r1/tcpstore/"

# Hostile input: the exact reason in the log, the connection closed, the server still serves.
client hostile unknown
log_has "(TCPStore 1.x client): unknown 1.x query type 9"
client hostile oversized
log_has "(TCPStore 1.x client): key length 5000 exceeds limit 4084"
client hostile watch
log_has "(TCPStore 1.x client): WATCH_KEY is not supported"
client hostile truncated
client alive
"$STORE" -e "127.0.0.1:$PORT" ping >/dev/null || fail "crun's own clients are not served"
kill "$PID"

# An idle TCPStore connection outlives --idle-timeout: PyTorch holds one for a whole job.
# And the handshake deadline (5 s): torch 1.x's callback connection sends nothing, and once
# the store closed it the client spun a core (issue 19); 20 s idle must cost < 1 s of CPU. It is
# kept paired with its served connection; an unpaired silent one is closed (issue 20).
start --tcpstore-run r1 --idle-timeout 1
client idle_cpu 20 &
IDLE_CPU=$!
client idle
wait "$IDLE_CPU" || fail "idle_cpu"
kill "$PID"

# Two clients' four sockets accepted before either main socket's first request is read: a main
# socket not yet read must not be paired as the other's silent one (that left both callback
# sockets unpaired, closed at the deadline, and torch 1.x spinning: CI, 2026-11-28).
start --tcpstore-run r1
client interleaved "$PID"
kill "$PID"

# Without --tcpstore-run: refused, and said so.
start
client refused
log_has "a PyTorch TCPStore 1.x client; crun-rdzvd serves them only with --tcpstore-run RUN"
echo "tcpstore: ok"
