#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tests/lib/hold_ports.py ADDR N [consecutive]: hold N TCP ports of ADDR until killed.

The fix for the free_port race (issue 18): a test used to bind port 0, close the socket and hand
the number to a program that bound it later, while another test running in parallel could take
it meanwhile. This process keeps each port bound instead, with SO_REUSEADDR and without
listening, for the whole test (tests/lib/net.sh hold_ports starts it and the test's cleanup
kills it):

- the kernel never hands a bound port out again: bind(ADDR or the wildcard, 0) of another test
  and the source ports of outgoing connections skip it;
- the program under test binds and listens on it all the same: crun and crun-rdzvd (libuv),
  PyTorch's TCPStore, sshd and etcd all set SO_REUSEADDR, and Linux lets a socket with it share
  a port with bound sockets that have it too and do not listen;
- until the program listens, a connection to the port is refused, as to a free port.

"consecutive": the ports are P, P+1, ... (crun's static mode with --no-agent-store uses the
master port and the next one). Prints the ports on one line ending in " held" once they are
all bound; exits with status 1 and a message on stderr when it cannot bind them. Once it has
printed its line it dies with its parent (PR_SET_PDEATHSIG), so a test killed with SIGKILL
leaves no holder behind. tests/lib/test_hold_ports.py checks all of this on the running kernel.
"""
import ctypes
import signal
import socket
import sys

PR_SET_PDEATHSIG = 1


def bind(addr, port):
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((addr, port))
    except OSError:
        s.close()
        raise
    return s


def hold(addr, n, consecutive):
    if not consecutive:
        return [bind(addr, 0) for _ in range(n)]
    for _ in range(200):
        first = bind(addr, 0)
        socks = [first]
        base = first.getsockname()[1]
        try:
            for k in range(1, n):
                if base + k > 65535:
                    raise OSError("past port 65535")
                socks.append(bind(addr, base + k))
            return socks
        except OSError:
            for s in socks:
                s.close()
    raise OSError(f"no {n} consecutive free ports on {addr} in 200 tries")


def main():
    if len(sys.argv) not in (3, 4) or (len(sys.argv) == 4 and sys.argv[3] != "consecutive"):
        sys.exit("usage: hold_ports.py ADDR N [consecutive]")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    try:
        n = int(sys.argv[2])
        if not 1 <= n <= 16:
            raise ValueError(f"N must be 1 to 16, not {n}")
        socks = hold(sys.argv[1], n, len(sys.argv) == 4)
    except (OSError, ValueError) as e:
        print(f"hold_ports.py: {sys.argv[1]}: {e}", file=sys.stderr)
        sys.exit(1)
    ports = [str(s.getsockname()[1]) for s in socks]
    print(" ".join(ports) + " held", flush=True)
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
