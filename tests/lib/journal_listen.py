#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# tests/lib/journal_listen.py SOCKET OUT: a stand-in for journald's native socket: binds the
# datagram socket SOCKET and writes every entry it receives to OUT as one JSON object a line
# (field name to value), parsed as journald parses them (https://systemd.io/JOURNAL_NATIVE_PROTOCOL/:
# "NAME=value\n", or "NAME\n" + 64-bit little-endian length + bytes + "\n"). A datagram that
# does not parse is written as {"_BAD": "<why>"} so that the test fails naming it. Runs until
# killed.
import json
import os
import socket
import struct
import sys


def parse(d):
    e, i = {}, 0
    while i < len(d):
        nl = d.find(b"\n", i)
        if nl < 0:
            raise ValueError("a field without its newline at byte %d" % i)
        line = d[i:nl]
        if b"=" in line:
            k, v = line.split(b"=", 1)
            i = nl + 1
        else:
            k = line
            if nl + 9 > len(d):
                raise ValueError("binary field %r cut short" % k)
            (n,) = struct.unpack("<Q", d[nl + 1:nl + 9])
            v = d[nl + 9:nl + 9 + n]
            if len(v) != n or d[nl + 9 + n:nl + 10 + n] != b"\n":
                raise ValueError("binary field %r: bad length %d" % (k, n))
            i = nl + 10 + n
        e[k.decode()] = v.decode("utf-8", "replace")
    return e


def main():
    path, out = sys.argv[1], sys.argv[2]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    tmp = path + ".tmp"
    s.bind(tmp)
    os.chmod(tmp, 0o666)
    os.rename(tmp, path)  # the socket appears only once it is bound: the test's ready signal
    with open(out, "a", buffering=1) as f:
        while True:
            d = s.recv(1 << 17)
            try:
                e = parse(d)
            except ValueError as err:
                e = {"_BAD": str(err)}
            f.write(json.dumps(e) + "\n")


main()
