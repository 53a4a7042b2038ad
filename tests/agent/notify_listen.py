#!/usr/bin/python3
# SPDX-License-Identifier: MIT
# tests/agent/notify_listen.py: what systemd does with $NOTIFY_SOCKET, for the notify tests:
# bind an AF_UNIX datagram socket at PATH ('@name' for the abstract namespace), then write each
# datagram to OUT as one line ('\n' inside a message shown as '|') after its sender's pid
# (SO_PASSCRED), until SIGTERM; then what is already queued is still written (a sender's last
# message, sent just before it exited and the test ended the listener, is not lost).
import os
import signal
import socket
import struct
import sys

path, out = sys.argv[1], sys.argv[2]
addr = "\0" + path[1:] if path.startswith("@") else path
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
s.bind(addr)
stopping = False


def stop(*_):
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, stop)
s.settimeout(0.05)
with open(out, "a", buffering=1) as f:
    f.write("BOUND\n")
    while True:
        try:
            msg, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(12))
        except socket.timeout:
            if stopping:  # the queue is empty: every message sent before SIGTERM is written
                sys.exit(0)
            continue
        pid = 0
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = struct.unpack("iII", data[:12])[0]
        f.write("%d %s\n" % (pid, msg.decode(errors="replace").replace("\n", "|")))
