#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# tests/load/attacker.py: many hostile connections against one store, until told to stop.
"""Hostile store clients for the load test (tests/load/attack.sh).

Usage: attacker.py HOST:PORT --pid PID --stop-file F [--conns N] [--max-seconds S] [--ready-file F]
                   [--frame-timeout S] [--seed N] [--kinds K,K...]

Keeps N connections (default 200) open against the store at HOST:PORT, each one of the kinds
below in turn; a connection that ends is replaced by the next kind. Stops when --stop-file
exists (or after --max-seconds), closes what is left, and prints one "name value" line per
figure. Exit status 1 when a connection hung: it outlived the deadline by which the store must
have answered or closed it (the handshake deadline, 10 s, or --frame-timeout, plus a margin);
2 when the store process (--pid) is gone.

Kinds (every key lives under "attack/", away from the job's keys):
  garbage      random bytes instead of a handshake
  oversized    a handshake, then a header declaring 4 GiB
  hostile      a handshake, then well-framed requests with hostile values (negative TTL, no keys,
               bad wait mode, over-long key, too many keys, a non-number, an overflow, trailing
               bytes), deletes the keys it made, then a PING with trailing bytes (which
               closes the connection)
  truncated    a handshake, then a SET cut short; half close at once, half wait to be dropped
  slow         a handshake, then a frame one byte every 0.5 s (the frame deadline drops it)
  silent       connects and never sends (the handshake deadline closes it)
  waits        a handshake, then 300 waits without a deadline and 50 short ones; closes after 2 s
  hog          a handshake, then 2 MiB of a 16 MiB SET; closes after 1 s
"""
import argparse
import errno
import os
import random
import selectors
import socket
import struct
import sys
import time

# Protocol 2 with no nonce and no scope: a client without a token. An --insecure store
# completes the handshake with it; an authenticating store asks for AUTH and refuses the rest.
HELLO = (struct.pack(">IBBHI", 8 + 16, 1, 0, 0, 1) +
         struct.pack(">IHHII", 0x4352554E, 2, 0, 0, 0))
KINDS = ["garbage", "oversized", "hostile", "truncated", "slow", "silent", "waits", "hog"]
MARGIN = 8.0  # seconds past the store's own deadline before a connection counts as hung


def frame(op, ident, payload):
    return struct.pack(">IBBHI", len(payload) + 8, op, 0, 0, ident) + payload


def b(s):
    return struct.pack(">I", len(s)) + s


def key(rng):
    return b"attack/" + str(rng.randrange(1 << 30)).encode()


def hostile_frames(rng):
    k = key(rng)
    return [
        frame(3, 2, b(k) + b(b"v") + struct.pack(">q", -5)),  # SET negative ttl: INVALID
        frame(5, 3, struct.pack(">BqI", 0, 100, 0)),  # WAIT no keys: INVALID
        frame(5, 4, struct.pack(">BqI", 7, 100, 1) + b(k)),  # WAIT bad mode
        frame(4, 5, b(b"k" * 5000)),  # GET key over 4096: TOO_BIG
        frame(9, 6, struct.pack(">I", 5000)),  # CHECK 5000 keys: TOO_BIG
        frame(3, 7, b(k) + b(b"not a number") + struct.pack(">q", 0)),
        frame(6, 8, b(k) + struct.pack(">q", 1)),  # ADD on text: NOT_NUMBER
        frame(6, 9, b(k + b"n") + struct.pack(">q", (1 << 63) - 1)),
        frame(6, 10, b(k + b"n") + struct.pack(">q", 1)),  # overflow: OVERFLOW
        frame(12, 11, struct.pack(">I", 3) + b(k) + b(k) + struct.pack(">I", 1 << 30)),
        frame(7, 12, b(k) + b(b"x" * 100) + b(b"")),
        frame(8, 15, b(k)),  # the store keeps no key of ours
        frame(8, 16, b(k + b"n")),
        frame(2, 13, b"trailing"),  # PING with a payload: BAD_FRAME, closes
        frame(200, 14, b""),  # unknown op (if still open)
    ]


class Conn:
    def __init__(self, kind, sock, now, rng, frame_timeout):
        self.kind, self.sock, self.start = kind, sock, now
        self.out = bytearray()
        self.later = []  # (time, bytes)
        self.close_at = None  # we end it ourselves at this time
        self.rbuf = bytearray()
        self.errors = 0
        hs_deadline = 10.0
        self.deadline = now + hs_deadline + MARGIN
        if kind == "garbage":
            self.send(os.urandom(rng.randrange(1, 4096)))
        elif kind == "oversized":
            self.send(HELLO + struct.pack(">IBBHI", 0xFFFFFFF0, 3, 0, 0, 2))
        elif kind == "hostile":
            self.send(HELLO + b"".join(hostile_frames(rng)))
        elif kind == "truncated":
            f = frame(3, 2, b(key(rng)) + b(os.urandom(rng.randrange(1, 3000))) +
                      struct.pack(">q", 0))
            self.send(HELLO + f[:rng.randrange(1, len(f))])
            if rng.random() < 0.5:
                self.close_at = now + 0.2
            self.deadline = now + frame_timeout + MARGIN
        elif kind == "slow":
            f = frame(3, 2, b(key(rng)) + b(b"v" * 64) + struct.pack(">q", 0))
            self.send(HELLO)
            for i, c in enumerate(f):
                self.later.append((now + 0.5 * (i + 1), bytes([c])))
            self.deadline = now + frame_timeout + MARGIN
        elif kind == "silent":
            pass
        elif kind == "waits":
            reqs = [frame(5, 100 + i, struct.pack(">BqI", 0, -1, 1) + b(key(rng)))
                    for i in range(300)]
            reqs += [frame(5, 500 + i, struct.pack(">BqI", 1, 50, 2) + b(key(rng)) +
                           b(key(rng))) for i in range(50)]
            self.send(HELLO + b"".join(reqs))
            self.close_at = now + 2.0
        elif kind == "hog":
            self.send(HELLO + struct.pack(">IBBHI", 8 + 4 + 8 + 4 + (16 << 20) + 8, 3, 0, 0, 2) +
                      b(b"attack/hog") + struct.pack(">I", 16 << 20) + bytes(2 << 20))
            self.close_at = now + 1.0
        self.frames = {"garbage": 1, "silent": 0, "hostile": 16, "waits": 351}.get(kind, 2)

    def send(self, data):
        self.out += data


def parse_replies(c):
    while len(c.rbuf) >= 12:
        length, op, flags, status, _ = struct.unpack_from(">IBBHI", c.rbuf)
        if len(c.rbuf) < 4 + length:
            return
        if status != 0:
            c.errors += 1
        del c.rbuf[:4 + length]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("endpoint")
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--stop-file", required=True)
    ap.add_argument("--conns", type=int, default=200)
    ap.add_argument("--max-seconds", type=float, default=120)
    ap.add_argument("--frame-timeout", type=float, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset")
    ap.add_argument("--ready-file", help="created once every connection is open and has sent")
    a = ap.parse_args()
    host, port = a.endpoint.rsplit(":", 1)
    rng = random.Random(a.seed)
    kinds = a.kinds.split(",")
    sel = selectors.DefaultSelector()
    stats = {"connections": 0, "frames": 0, "bytes": 0, "error_replies": 0,
             "closed_by_store": 0, "closed_by_us": 0, "open_at_stop": 0, "hung": 0,
             "refused": 0}
    per_kind = {k: [0, 0, 0, 0] for k in KINDS}  # connections, store closed, we closed, hung
    slots = [None] * a.conns
    nxt = 0
    peak = 0
    t0 = time.monotonic()
    last_rss = 0.0

    def rss():
        try:
            with open(f"/proc/{a.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            print(f"attacker: the store (pid {a.pid}) is gone", file=sys.stderr)
            sys.exit(2)
        return 0

    def end(i, how):
        c = slots[i]
        sel.unregister(c.sock)
        c.sock.close()
        stats["frames"] += c.frames
        stats["error_replies"] += c.errors
        stats[how] += 1
        col = {"closed_by_store": 1, "closed_by_us": 2, "hung": 3}.get(how)
        if col is not None:
            per_kind[c.kind][col] += 1
        if how == "hung":
            print(f"hung: a {c.kind} connection open {time.monotonic() - c.start:.1f} s "
                  f"({c.errors} error replies)", file=sys.stderr)
        slots[i] = None

    def open_one(i, now):
        nonlocal nxt
        kind = kinds[nxt % len(kinds)]
        nxt += 1
        try:
            s = socket.create_connection((host, int(port)), timeout=5)
        except OSError:
            stats["refused"] += 1
            return
        s.setblocking(False)
        c = Conn(kind, s, now, rng, a.frame_timeout)
        slots[i] = c
        sel.register(s, selectors.EVENT_READ, i)
        stats["connections"] += 1
        per_kind[kind][0] += 1

    while True:
        now = time.monotonic()
        stopping = os.path.exists(a.stop_file) or now - t0 > a.max_seconds
        if now - last_rss >= 0.1:
            peak = max(peak, rss())
            last_rss = now
        if stopping:
            break
        for i in range(a.conns):
            if slots[i] is None:
                open_one(i, now)
            c = slots[i]
            if c is None:
                continue
            while c.later and c.later[0][0] <= now:
                c.out += c.later.pop(0)[1]
            if c.out:
                try:
                    n = c.sock.send(c.out)
                    stats["bytes"] += n
                    del c.out[:n]
                except BlockingIOError:
                    pass
                except OSError:
                    end(i, "closed_by_store")
                    continue
            if c.close_at is not None and now >= c.close_at:
                end(i, "closed_by_us")
            elif now > c.deadline:
                end(i, "hung")
        if a.ready_file and all(c is not None for c in slots) and not os.path.exists(a.ready_file):
            # Full strength: every slot holds a connection that has had its first send.
            with open(a.ready_file, "w"):
                pass
        for ev, _ in sel.select(timeout=0.01):
            i = ev.data
            c = slots[i]
            try:
                data = c.sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                end(i, "closed_by_store")
                continue
            c.rbuf += data
            parse_replies(c)
    for i in range(a.conns):
        if slots[i] is not None:
            end(i, "open_at_stop")
    secs = time.monotonic() - t0
    stats["seconds"] = round(secs, 1)
    stats["frames_per_s"] = int(stats["frames"] / secs)
    stats["connections_per_s"] = int(stats["connections"] / secs)
    stats["mib_sent"] = round(stats["bytes"] / 2**20, 1)
    stats["rss_peak_kib"] = peak
    for k, v in stats.items():
        print(k, v)
    for k, v in per_kind.items():
        print(f"kind_{k} {v[0]} opened, {v[1]} closed by the store, {v[2]} by us, {v[3]} hung")
    return 1 if stats["hung"] else 0


if __name__ == "__main__":
    sys.exit(main())
