#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# tests/store/hog_rss.py: crun-rdzvd's RSS while N connections each leave a huge frame unfinished.
"""Measure, not a test (docs/reliability.md, "Store limits").

Usage: hog_rss.py CRUN_RDZVD [CONNS [BYTES_PER_CONN [DAEMON ARGS...]]]

Starts the daemon on 127.0.0.1:0 (--insecure: the hogs stand for clients that hold the token,
the worst case; without it they would not get past the handshake), opens CONNS connections (default 60) that each complete the
handshake, declare a SET frame of the largest legal length and send BYTES_PER_CONN bytes of it
(default 16000000), then prints the daemon's VmRSS before, while they are open, and 2 s after
they are closed, and how many the daemon dropped.
"""
import os
import select
import socket
import struct
import subprocess
import sys
import time

MAX_FRAME = 2 * (16 << 20) + (1 << 20)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def frame(op, ident, payload):
    return struct.pack(">IBBHI", len(payload) + 8, op, 0, 0, ident) + payload


def hello(sock):
    # Protocol 2 with no nonce and no scope: what a client without a token sends; the daemon
    # runs with --insecure (below), so it completes the handshake.
    sock.sendall(frame(1, 1, struct.pack(">IHHII", 0x4352554E, 2, 0, 0, 0)))
    hdr = sock.recv(12, socket.MSG_WAITALL)
    length, op, _, status, _ = struct.unpack(">IBBHI", hdr)
    sock.recv(length - 8, socket.MSG_WAITALL)
    assert op == 1 and status == 0, "handshake refused"


def main():
    rdzvd = sys.argv[1]
    conns = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 16000000
    proc = subprocess.Popen([rdzvd, "--listen", "127.0.0.1:0", "--quiet", "--insecure"] +
                            sys.argv[4:],
                            stdout=subprocess.PIPE)
    port = int(proc.stdout.readline().decode().strip().rsplit(":", 1)[1])
    time.sleep(0.2)
    base = rss_kib(proc.pid)
    socks, dropped = [], 0
    chunk = b"x" * (1 << 20)
    for _ in range(conns):
        s = socket.create_connection(("127.0.0.1", port))
        hello(s)
        s.settimeout(10)
        try:
            s.sendall(struct.pack(">IBBHI", MAX_FRAME, 3, 0, 0, 9))
            left = size - 12
            while left > 0:
                left -= s.send(chunk[:min(left, len(chunk))])
        except OSError:
            pass
        socks.append(s)
    time.sleep(1.0)
    peak = rss_kib(proc.pid)
    for s in socks:
        if select.select([s], [], [], 0)[0]:
            dropped += 1
    for s in socks:
        s.close()
    time.sleep(2.0)
    after = rss_kib(proc.pid)
    proc.terminate()
    proc.wait(timeout=20)
    print(f"conns={conns} bytes_each={size} rss_kib: baseline={base} with_hogs={peak} "
          f"after_close={after} dropped={dropped}")


if __name__ == "__main__":
    main()
