#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/notastore.sh: an endpoint served by something that is no crun store (sshd's banner,
# an HTTP server, a silent listener, PyTorch's TCPStore) fails with "not a crun store at
# HOST:PORT (it sent ...)": at once when it sent something, within the connect timeout when not.
. "$(dirname "$0")/lib.sh"

# serve KIND: a fake service on 127.0.0.1, port 0; sets FAKE_PORT.
serve() {
	local py=python3
	[ "$1" = tcpstore ] && py=/usr/bin/python3
	# The child truncates fake.out itself, maybe after wait_for read the last fake's port.
	rm -f "$T/fake.out"
	"$py" - "$1" >"$T/fake.out" 2>"$T/fake.err" <<'PY' &
import socket, sys, threading, time
kind = sys.argv[1]
if kind == "tcpstore":
    import datetime
    import torch.distributed as dist
    s = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=120))
    print(s.port, flush=True)
    time.sleep(120)
    sys.exit(0)
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(16)
print(ls.getsockname()[1], flush=True)
def one(c):
    if kind == "banner":
        c.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n")
    elif kind == "http":
        c.recv(100)
        c.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    time.sleep(120)
while True:
    c, _ = ls.accept()
    threading.Thread(target=one, args=(c,), daemon=True).start()
PY
	FAKE=$!
	track $FAKE
	wait_for 30 test -s "$T/fake.out" || fail "the fake $1 did not start: $(cat "$T/fake.err")"
	FAKE_PORT=$(head -n1 "$T/fake.out")
}

# against KIND MAX_MS PATTERN: crun fails within MAX_MS with PATTERN on stderr.
against() {
	local t0 dt
	serve "$1"
	t0=$(now_ms)
	run_crun 60 "$T/out" "$T/err" --nnodes 2 --rdzv-backend c10d \
		--rdzv-endpoint "127.0.0.1:$FAKE_PORT" --rdzv-id notastore \
		--rdzv-conf join_timeout=4,is_host=0 "$W" print:hello
	dt=$(($(now_ms) - t0))
	kill "$FAKE" 2>/dev/null
	wait "$FAKE" 2>/dev/null
	[ "$RC" -ne 0 ] || fail "$1: crun succeeded against it"
	expect_grep "$3" "$T/err" "$1: the message"
	[ "$dt" -lt "$2" ] || { cat "$T/err" >&2; fail "$1: failed only after $dt ms"; }
	note "$1: refused after $dt ms"
}

note "sshd's banner and an HTTP error: refused at once, with what they sent"
against banner 3000 \
	"not a crun store at 127.0.0.1:[0-9]* (it sent \"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\\\\r\\\\n\")"
against http 3000 "not a crun store at 127.0.0.1:[0-9]* (it sent \"HTTP/1.1 400 Bad Request"
note "a silent listener: refused within the connect timeout (join_timeout 4 s)"
against silent 8000 "not a crun store at 127.0.0.1:[0-9]*? (it accepted the connection but sent nothing"
note "a silent listener and a longer wait: named every few seconds, not silent until the end"
serve silent
run_crun 60 "$T/out" "$T/err" --nnodes 2 --rdzv-backend c10d \
	--rdzv-endpoint "127.0.0.1:$FAKE_PORT" --rdzv-id notastore \
	--rdzv-conf join_timeout=14,is_host=0 "$W" print:hello
kill "$FAKE" 2>/dev/null
wait "$FAKE" 2>/dev/null
[ "$RC" -ne 0 ] || fail "silent, 14 s: crun succeeded against it"
n=$(grep -c "waiting for the store at 127.0.0.1:$FAKE_PORT: it accepted the connection but did not answer the handshake in" "$T/err")
[ "$n" -ge 1 ] || { cat "$T/err" >&2; fail "silent, 14 s: no progress line before the end"; }
expect_grep "not a crun store at 127.0.0.1:[0-9]*? (it accepted the connection but sent nothing in 1[0-9]\.[0-9] s" \
	"$T/err" "silent, 14 s: the final line counts the whole wait"
if /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null; then
	note "PyTorch's TCPStore"
	against tcpstore 8000 "not a crun store at 127.0.0.1:[0-9]*?"
else
	note "PyTorch's TCPStore: skipped (no torch for /usr/bin/python3)"
fi
echo "notastore: ok"
