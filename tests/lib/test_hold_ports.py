#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tests/lib/test_hold_ports.py: what the script tests rely on when they hold a port with
tests/lib/hold_ports.py (tests/lib/net.sh hold_ports), checked on this kernel:

- the ports are bound and printed ("P P+1 held" with "consecutive");
- while held, the kernel hands neither out to bind(ADDR, 0) nor to bind(0.0.0.0, 0), and a bind
  without SO_REUSEADDR is refused, so a parallel test cannot be given them;
- a connection to a held port is refused, as to a free one;
- a program that binds with SO_REUSEADDR (libuv, TCPStore, sshd, etcd) listens on it and is
  reached there, and a second such listener is refused (crun's "already served here");
- the holder dies with its parent (PR_SET_PDEATHSIG), so a killed test leaves none behind.
Every wait is bounded; exit 1 with a message on the first check that fails.
"""
import errno
import os
import socket
import subprocess
import sys
import time

HOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hold_ports.py")
ADDR = "127.0.0.1"


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def wait_until(what, cond, seconds=20):
    end = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > end:
            fail(f"timed out after {seconds} s waiting for: {what}")
        time.sleep(0.02)


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def reuse_socket():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return s


def check_held(ports):
    for p in ports:
        s = socket.socket()
        try:
            s.bind((ADDR, p))
            fail(f"port {p}: a bind without SO_REUSEADDR succeeded while held")
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                fail(f"port {p}: bind without SO_REUSEADDR: {e}, expected EADDRINUSE")
        finally:
            s.close()
        c = socket.socket()
        c.settimeout(10)
        try:
            c.connect((ADDR, p))
            fail(f"port {p}: a connection was accepted while only held")
        except ConnectionRefusedError:
            pass
        finally:
            c.close()
    # Batches of sockets kept open, so that the kernel has to hand out distinct ports.
    for addr in (ADDR, "0.0.0.0"):
        for _ in range(4):
            socks = []
            try:
                for _ in range(400):
                    s = reuse_socket() if len(socks) % 2 else socket.socket()
                    s.bind((addr, 0))
                    socks.append(s)
                    if s.getsockname()[1] in ports:
                        fail(f"bind({addr}, 0) was given held port {s.getsockname()[1]}")
            finally:
                for s in socks:
                    s.close()


def check_listen(port):
    srv = reuse_socket()
    srv.bind((ADDR, port))
    srv.listen(4)
    other = reuse_socket()
    try:
        other.bind((ADDR, port))
        other.listen(4)
        fail(f"port {port}: a second SO_REUSEADDR listener was accepted")
    except OSError as e:
        if e.errno != errno.EADDRINUSE:
            fail(f"port {port}: second listener: {e}, expected EADDRINUSE")
    finally:
        other.close()
    c = socket.create_connection((ADDR, port), timeout=10)
    srv.settimeout(10)
    conn, _ = srv.accept()
    c.sendall(b"x")
    conn.settimeout(10)
    if conn.recv(1) != b"x":
        fail(f"port {port}: no byte through the listener")
    for s in (c, conn, srv):
        s.close()


def main():
    holder = subprocess.Popen([sys.executable, HOLDER, ADDR, "2", "consecutive"],
                              stdout=subprocess.PIPE, text=True)
    try:
        line = holder.stdout.readline().split()  # hold_ports.py prints one line, then waits
        if len(line) != 3 or line[2] != "held":
            fail(f"hold_ports.py printed {line!r}, expected 'P P+1 held'")
        ports = [int(line[0]), int(line[1])]
        if ports[1] != ports[0] + 1:
            fail(f"ports {ports} are not consecutive")
        check_held(ports)
        check_listen(ports[0])
        check_held(ports[1:])  # the other one is still held
        # A bad request is an error, not a hang.
        bad = subprocess.run([sys.executable, HOLDER, ADDR, "0"], capture_output=True,
                             text=True, timeout=20)
        if bad.returncode != 1 or "N must be 1 to 16" not in bad.stderr:
            fail(f"hold_ports.py ADDR 0: exit {bad.returncode}, {bad.stderr!r}")
    finally:
        holder.kill()
        holder.wait(timeout=20)
    # The holder dies with its parent: a shell starts it in the background, as net.sh does,
    # waits for its line (printed after PR_SET_PDEATHSIG is set), and is killed.
    sh = subprocess.Popen(["bash", "-c", f'"{sys.executable}" "{HOLDER}" {ADDR} 1 & echo $!; wait'],
                          stdout=subprocess.PIPE, text=True)
    pid = int(sh.stdout.readline())
    line = sh.stdout.readline().split()
    if len(line) != 2 or line[1] != "held":
        fail(f"hold_ports.py ADDR 1 printed {line!r}, expected 'P held'")
    sh.kill()
    sh.wait(timeout=20)
    wait_until(f"holder {pid} to die with its parent", lambda: not alive(pid))
    print("hold_ports: ok")


if __name__ == "__main__":
    main()
