#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# tests/faults/preauth_attacker.py: a local user without the token against a crun store.
"""Unauthenticated attacks on a crun store, for tests/faults/preauth.sh (issue 20).

Usage: preauth_attacker.py MODE HOST:PORT [options]; prints "name value" lines.

Modes:
  flood    --conns N --seconds S [--ready-file F]: keep N connections open, reopening each
           one the store closes: a third send nothing, a third send the first bytes of a
           crun HELLO, a third the first bytes of a PyTorch TCPStore request (never complete).
  guess    --conns N --seconds S: N connections each run the handshake with a random proof,
           as fast as the store answers; prints verdicts_per_s and the median answer time.
  right    --token-file F --tries N: the handshake with the right token (or a job's key
           file, as workers get), N times one after
           another; prints the median and the longest time to the store's proof, and how many
           got in ("ok").
  bigset   --token-file F --tries N: with the right token, SET a 16 MiB value N times.
  bigframe --size N: a HELLO header declaring N bytes, then up to 1 MiB of it; prints the
           store's answer and how soon it came.
  hog      --conns N --seconds S [--ready-file F]: N TCPStore 1.x SETs of a 16 MiB value,
           15 MiB of each sent, held S seconds; prints how many the store still held.
  unixflood  --conns N --seconds S [--ready-file F] (the endpoint: the store's unix socket):
           new connections as fast as it can for S seconds, each sending the start of a TLS
           record, at most N open (the oldest closed); the ready file once N were opened.
  tlsflood the same over TCP to HOST:PORT (tests/agent/netns_tls.sh).
  hold     --seconds S [--ready-file F]: 200 idle connections, 20 sending 4 KiB of random
           bytes, one a TLS record header claiming 16 KiB then nothing, one sending a byte
           every 0.1 s (reopened when closed) for S seconds; the ready file once all are open
           (tests/agent/netns_tls.sh, against a TLS store).
"""
import argparse
import collections
import hashlib
import hmac
import os
import resource
import selectors
import socket
import struct
import sys
import time

MAGIC = 0x4352554E
OP_HELLO, OP_AUTH = 1, 14
PROOF_CLIENT = b"crun-store-v2 client proof"
PROOF_SERVER = b"crun-store-v2 server proof"


def frame(op, ident, payload):
    return struct.pack(">IBBHI", len(payload) + 8, op, 0, 0, ident) + payload


def hello(nonce, scope=b""):
    return frame(OP_HELLO, 1, struct.pack(">IHH", MAGIC, 2, 0) +
                 struct.pack(">I", len(nonce)) + nonce + struct.pack(">I", len(scope)) + scope)


def credential(path):
    """(key, scope) from a token file or a job's key file ("crun-job-key-v1 SCOPE KEYHEX FPR")."""
    text = open(path, "rb").read().strip()
    f = text.split()
    if len(f) == 4 and f[0] == b"crun-job-key-v1":
        return bytes.fromhex(f[2].decode()), f[1]
    return hmac.new(text, b"store:", hashlib.sha256).digest(), b""


def addr(text):
    host, port = text.rsplit(":", 1)
    return host, int(port)


def read_frame(s, deadline):
    buf = b""
    need = 4
    while len(buf) < need:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = s.recv(65536)
        if not chunk:
            raise EOFError("closed")
        buf += chunk
        if len(buf) >= 4:
            need = 4 + struct.unpack(">I", buf[:4])[0]
    ln, op, flags, status, ident = struct.unpack(">IBBHI", buf[:12])
    return status, buf[12:4 + ln]


def server_nonce(payload):
    # u16 version, u16 auth, bytes nonce ...
    n = struct.unpack(">I", payload[4:8])[0]
    return payload[8:8 + n]


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else -1


def handshake(ep, key, scope=b"", timeout=30.0):
    """One HELLO/AUTH with @key (None: a random proof). Returns (status, seconds from AUTH)."""
    deadline = time.monotonic() + timeout
    cn = os.urandom(32)
    with socket.create_connection(ep, timeout=timeout) as s:
        s.sendall(hello(cn, scope))
        st, p = read_frame(s, deadline)
        if st != 0:
            return st, 0.0
        sn = server_nonce(p)
        proof = (hmac.new(key, sn + cn + PROOF_CLIENT, hashlib.sha256).digest()
                 if key is not None else os.urandom(32))
        t0 = time.monotonic()
        s.sendall(frame(OP_AUTH, 2, struct.pack(">I", 32) + proof))
        st, p = read_frame(s, deadline)
        dt = time.monotonic() - t0
        if st == 0 and key is not None:
            want = hmac.new(key, sn + cn + PROOF_SERVER, hashlib.sha256).digest()
            if p[4:36] != want:
                return -1, dt
        return st, dt


def mode_right(a):
    """--tries handshakes with the right credential, each retried as crun's own client retries
    (rendezvous/store/client_tcp.c): a dropped or reset connection is tried again with backoff
    within --timeout; a refused handshake is final. Prints how many got in and how long each
    took, retries included."""
    key, scope = credential(a.token_file)
    times, ok = [], 0
    for _ in range(a.tries):
        t0 = time.monotonic()
        pause = 0.05
        while True:
            try:
                st, _ = handshake(addr(a.endpoint), key, scope, timeout=a.timeout)
                ok += st == 0
                break
            except (OSError, EOFError) as e:
                print("right: %s (retrying)" % e, file=sys.stderr)
                if time.monotonic() - t0 + pause > a.timeout:
                    break
                time.sleep(pause)
                pause = min(pause * 2, 1.0)
        times.append(time.monotonic() - t0)
    print("ok %d" % ok)
    print("median_ms %d" % (median(times) * 1000))
    print("max_ms %d" % (max(times) * 1000))


def mode_bigset(a):
    """With the right token: SET a 16 MiB value, --tries times; prints how many were stored."""
    tok = open(a.token_file, "rb").read().strip()
    key = hmac.new(tok, b"store:", hashlib.sha256).digest()
    ep = addr(a.endpoint)
    val = b"x" * (16 << 20)
    ok = 0
    for i in range(a.tries):
        try:
            deadline = time.monotonic() + a.timeout
            cn = os.urandom(32)
            with socket.create_connection(ep, timeout=a.timeout) as s:
                s.sendall(hello(cn))
                st, p = read_frame(s, deadline)
                sn = server_nonce(p)
                proof = hmac.new(key, sn + cn + PROOF_CLIENT, hashlib.sha256).digest()
                s.sendall(frame(OP_AUTH, 2, struct.pack(">I", 32) + proof))
                st, p = read_frame(s, deadline)
                if st != 0:
                    print("bigset %d: AUTH status %d" % (i, st), file=sys.stderr)
                    continue
                k = b"big/%d" % i
                s.sendall(frame(3, 3, struct.pack(">I", len(k)) + k +
                                struct.pack(">I", len(val)) + val + struct.pack(">q", 0)))
                st, p = read_frame(s, deadline)
                if st != 0:
                    print("bigset %d: SET status %d: %s" % (i, st, p.decode(errors="replace")),
                          file=sys.stderr)
                ok += st == 0
        except (OSError, EOFError) as e:
            print("bigset %d: %s" % (i, e), file=sys.stderr)
    print("stored %d" % ok)


def mode_guess(a):
    ep = addr(a.endpoint)
    sel = selectors.DefaultSelector()
    end = time.monotonic() + a.seconds
    verdicts, times = 0, []

    def start():
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(True)
        s.settimeout(5)
        try:
            s.connect(ep)
            cn = os.urandom(32)
            s.sendall(hello(cn))
            st, p = read_frame(s, time.monotonic() + 5)
            if st != 0:
                s.close()
                return
            s.sendall(frame(OP_AUTH, 2, struct.pack(">I", 32) + os.urandom(32)))
        except (OSError, EOFError):
            s.close()
            return
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, time.monotonic())

    for _ in range(a.conns):
        start()
    while time.monotonic() < end:
        for k, _ in sel.select(timeout=0.2):
            s, t0 = k.fileobj, k.data
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if len(data) >= 12:
                verdicts += 1
                times.append(time.monotonic() - t0)
            sel.unregister(s)
            s.close()
            start()
    for k in list(sel.get_map().values()):
        k.fileobj.close()
    print("verdicts %d" % verdicts)
    print("verdicts_per_s %.1f" % (verdicts / a.seconds))
    print("median_ms %d" % (median(times) * 1000))


TCPSTORE_FIRST = bytes([0]) + struct.pack("<Q", 100)  # 1.x SET, key of 100 bytes: incomplete


def mode_flood(a):
    ep = addr(a.endpoint)
    sel = selectors.DefaultSelector()
    end = time.monotonic() + a.seconds
    opened = closed = failed = 0
    kinds = [b"", hello(os.urandom(32))[:10], TCPSTORE_FIRST]
    n = 0

    def start():
        nonlocal opened, failed, n
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(ep)
        except BlockingIOError:
            pass
        except OSError:
            failed += 1
            s.close()
            return False
        sel.register(s, selectors.EVENT_WRITE, kinds[n % 3])
        n += 1
        opened += 1
        return True

    for _ in range(a.conns):
        start()
    if a.ready_file:
        open(a.ready_file, "w").close()
    while time.monotonic() < end:
        for k, ev in sel.select(timeout=0.2):
            s = k.fileobj
            if ev & selectors.EVENT_WRITE:
                try:
                    if k.data:
                        s.send(k.data)
                    sel.modify(s, selectors.EVENT_READ, b"")
                    continue
                except OSError:
                    pass
            else:
                try:
                    if s.recv(65536):
                        continue
                except BlockingIOError:
                    continue
                except OSError:
                    pass
            sel.unregister(s)
            s.close()
            closed += 1
            start()
        while len(sel.get_map()) < a.conns and time.monotonic() < end:
            if not start():
                time.sleep(0.01)
    held = len(sel.get_map())
    for k in list(sel.get_map().values()):
        k.fileobj.close()
    print("opened %d" % opened)
    print("closed_by_store %d" % closed)
    print("connect_failed %d" % failed)
    print("held_at_end %d" % held)


TLS_RECORD_START = bytes([0x16, 3, 1, 2, 0])  # a TLS handshake record of 512 bytes: incomplete


def record_flood(a, family, target):
    """Connect to @target as fast as possible until --seconds pass, each connection sending the
    start of a TLS record and junk, at most --conns held (the oldest closed): many accepts a
    second, each costing a TLS store more than it costs us. The ready file once --conns were
    opened."""
    held = collections.deque()
    end = time.monotonic() + a.seconds
    opened = failed = 0
    ready = False
    while time.monotonic() < end:
        s = None
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
            s.settimeout(2)
            s.connect(target)
            s.sendall(TLS_RECORD_START + os.urandom(100))
            held.append(s)
            opened += 1
        except OSError:
            failed += 1
            if s is not None:
                s.close()
        while len(held) > a.conns:
            held.popleft().close()
        if not ready and opened >= a.conns and a.ready_file:
            open(a.ready_file, "w").close()
            ready = True
    for s in held:
        s.close()
    print("opened %d" % opened)
    print("connect_failed %d" % failed)


def mode_unixflood(a):
    """record_flood on the store's unix socket (the endpoint is its path)."""
    record_flood(a, socket.AF_UNIX, a.endpoint)


def mode_tlsflood(a):
    """record_flood over TCP (the endpoint is HOST:PORT)."""
    record_flood(a, socket.AF_INET, addr(a.endpoint))


def mode_hold(a):
    """Connections a TLS store must keep or time out before any handshake: 200 idle, 20 that
    each send 4 KiB of random bytes, one a TLS record header claiming 16 KiB followed by 64
    bytes, and a slow sender (a byte every 0.1 s, reconnected when the store closes it) until
    --seconds pass. A connection refused or timed out (2 s) is counted, not retried."""
    ep = addr(a.endpoint)
    end = time.monotonic() + a.seconds
    held = []
    sends = refused = slow_bytes = 0

    def conn():
        nonlocal refused
        try:
            s = socket.create_connection(ep, timeout=2)
        except OSError:
            refused += 1
            return None
        held.append(s)
        return s

    def send(s, data):
        nonlocal sends
        try:
            if s:
                s.sendall(data)
                sends += 1
        except OSError:
            pass

    for _ in range(200):
        conn()
    for _ in range(20):
        send(conn(), os.urandom(4096))
    send(conn(), bytes([0x16, 3, 1, 0x40, 0]) + os.urandom(64))
    slow = conn()
    if a.ready_file:
        open(a.ready_file, "w").close()
    while time.monotonic() < end:
        try:
            if slow:
                slow.send(os.urandom(1))
                slow_bytes += 1
        except OSError:
            slow = conn()
        time.sleep(0.1)
    for s in held:
        s.close()
    print("held %d" % len(held))
    print("sends %d" % sends)
    print("slow_bytes %d" % slow_bytes)
    print("refused %d" % refused)


def mode_bigframe(a):
    """A crun HELLO header declaring --size bytes, then up to 1 MiB of it; the store's answer."""
    ep = addr(a.endpoint)
    with socket.create_connection(ep, timeout=10) as s:
        s.sendall(struct.pack(">IBBHI", a.size + 8, OP_HELLO, 0, 0, 1))
        t0 = time.monotonic()
        answer = b""
        try:
            s.sendall(b"\0" * min(a.size, 1 << 20))
        except OSError:
            pass
        try:
            st, answer = read_frame(s, t0 + 10)  # an error reply's payload: its message
            print("status %d" % st)
        except (OSError, EOFError) as e:
            print("status none (%s)" % e)
        print("answer %s" % answer.decode(errors="replace"))
        print("answer_ms %d" % ((time.monotonic() - t0) * 1000))


def mode_hog(a):
    """--conns TCPStore (1.x) SETs of a 16 MiB value, 15 MiB of it sent, then held."""
    ep = addr(a.endpoint)
    held = []
    val = 16 << 20
    chunk = b"\0" * (1 << 20)
    for _ in range(a.conns):
        try:
            s = socket.create_connection(ep, timeout=5)
            s.sendall(bytes([0]) + struct.pack("<Q", 4) + b"hog/" + struct.pack("<Q", val))
            for _ in range(15):
                s.sendall(chunk)
            held.append(s)
        except OSError:
            pass
    if a.ready_file:
        open(a.ready_file, "w").close()
    end = time.monotonic() + a.seconds
    while time.monotonic() < end:
        time.sleep(0.2)
    alive = 0
    for s in held:
        s.setblocking(False)
        try:
            alive += s.recv(1) != b""
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
        s.close()
    print("hogs_tried %d" % a.conns)
    print("hogs_sent %d" % len(held))  # the rest were closed by the store while sending
    print("hogs_alive_at_end %d" % alive)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["flood", "guess", "right", "bigframe", "hog",
                                         "bigset", "unixflood", "tlsflood", "hold"])
    ap.add_argument("endpoint")
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--ready-file")
    ap.add_argument("--token-file")
    ap.add_argument("--tries", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=10)
    ap.add_argument("--size", type=int, default=33 << 20)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # room for the flood
    {"flood": mode_flood, "guess": mode_guess, "right": mode_right,
     "bigframe": mode_bigframe, "hog": mode_hog, "bigset": mode_bigset,
     "unixflood": mode_unixflood, "tlsflood": mode_tlsflood, "hold": mode_hold}[a.mode](a)


if __name__ == "__main__":
    main()
