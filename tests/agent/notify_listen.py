#!/usr/bin/python3
# SPDX-License-Identifier: MIT
# tests/agent/notify_listen.py: what systemd does with $NOTIFY_SOCKET, for the notify tests:
# bind an AF_UNIX datagram socket at PATH ('@name' for the abstract namespace), then write each
# datagram to OUT as one line ('\n' inside a message shown as '|'), checking the sender's pid
# (SO_PASSCRED) against --pid-file's content when given, until SIGTERM.
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
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
with open(out, "a", buffering=1) as f:
    f.write("BOUND\n")
    while True:
        msg, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(12))
        pid = 0
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = struct.unpack("iII", data[:12])[0]
        f.write("%d %s\n" % (pid, msg.decode(errors="replace").replace("\n", "|")))
