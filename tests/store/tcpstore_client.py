# SPDX-License-Identifier: MIT
# tests/store/tcpstore_client.py: PyTorch's own TCPStore client (and hand-made 2.x requests)
# against crun's store. Usage: tcpstore_client.py PORT MODE; MODE is one of ops, barrier N,
# alive, idle, idle_cpu SECONDS, interleaved SERVER_PID, stress N ROUNDS, ns (the namespace), v2 (the 2.x
# protocol on a raw socket), hostile KIND, refused.
import datetime
import multiprocessing
import os
import socket
import struct
import sys
import time

PORT = int(sys.argv[1])
T5 = datetime.timedelta(seconds=5)


def client(timeout=T5):
    import torch.distributed as dist  # only where needed: the raw-socket modes start faster

    return dist.TCPStore("127.0.0.1", PORT, None, False, timeout)


def ops():
    st = client()
    st.set("k", "v1")
    assert st.get("k") == b"v1"
    assert st.add("n", 5) == 5 and st.add("n", -2) == 3
    st.wait(["k", "n"])
    assert st.compare_set("k", "v1", "v2") == b"v2"
    assert st.compare_set("k", "nope", "v3") == b"v2"
    assert st.compare_set("fresh", "", "x") == b"x"
    assert st.compare_set("absent", "e", "x") == b"e"
    assert st.num_keys() == 3, st.num_keys()  # k, n, fresh: only this namespace's
    assert st.delete_key("k") is True and st.delete_key("k") is False
    st.set("bin", bytes([0, 1, 2, 255]))
    assert st.get("bin") == bytes([0, 1, 2, 255])
    try:
        st.wait(["never"], datetime.timedelta(milliseconds=300))
        raise AssertionError("wait for a missing key returned")
    except RuntimeError as e:
        assert "Timeout" in str(e), e
    assert st.get("n") == b"3"  # the connection still works after a client-side timeout
    # A wait answered by another client's write.
    other = client()
    p = multiprocessing.Process(target=lambda: (time.sleep(0.3), client().set("late", "1")))
    p.start()
    other.wait(["late"])
    p.join()
    assert other.get("late") == b"1"
    print("ops: ok")


def alive():
    st = client()
    st.set("alive", "yes")
    assert st.get("alive") == b"yes"
    print("alive: ok")


def idle():
    st = client()
    st.set("before", "1")
    time.sleep(2.5)  # past the daemon's --idle-timeout 1
    assert st.get("before") == b"1"
    print("idle: ok")


def idle_cpu(seconds):
    # PyTorch 1.x opens a second connection for callbacks and never writes to it; a store that
    # closed it after its handshake deadline left the client's callback thread spinning on
    # poll() for ever. Past that deadline (5 s): the process stays idle (a silent connection is
    # kept while it is paired with a served one from its address), and the store answers the
    # client. Silent connections with no served one beside them are closed (issue 20:
    # tests/faults/preauth.sh floods them; docs/security.md, "Before authentication").
    st = client()
    st.set("idle", "1")
    cpu = time.process_time()
    time.sleep(seconds)
    used = time.process_time() - cpu
    assert used < 1.0, "%.2f s of CPU in %d s idle" % (used, seconds)
    assert st.get("idle") == b"1"
    print("idle_cpu: ok (%.2f s of CPU in %d s)" % (used, seconds))


def stress_value(r, i):
    n = 45 + (r * 31 + i * 17) % 200
    return bytes([i, r]) + bytes((k * 131 + i * 7 + r * 13) & 0xFF for k in range(n - 2))


def stress_member(i, n, rounds, q):
    # gloo's full-mesh exchange through torch's own client: set mine, get every peer's (get
    # is WAIT then GET), checked byte for byte; then a barrier (add, set, wait).
    st = client(datetime.timedelta(seconds=60))
    for r in range(rounds):
        st.set("s/r%d/addr/%d" % (r, i), stress_value(r, i))
        for j in range(1, n):
            peer = (i + j) % n
            got = st.get("s/r%d/addr/%d" % (r, peer))
            assert got == stress_value(r, peer), "round %d: rank %d read %d bytes for rank %d" % (
                r, i, len(got), peer)
        if st.add("s/r%d/count" % r, 1) == n:
            st.set("s/r%d/done" % r, "1")
        st.wait(["s/r%d/done" % r])
    q.put(i)


def stress(n, rounds):
    client()  # import torch once, before the fork
    q = multiprocessing.Queue()
    ps = [multiprocessing.Process(target=stress_member, args=(i, n, rounds, q)) for i in range(n)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(120)
        assert p.exitcode == 0, p.exitcode
    assert sorted(q.get() for _ in range(n)) == list(range(n))
    print("stress %d x %d rounds: ok" % (n, rounds))


def barrier_member(i, n, q):
    st = client(datetime.timedelta(seconds=30))
    if st.add("arrived", 1) == n:
        st.set("go", "1")
    st.wait(["go"])
    q.put(i)


def barrier(n):
    import torch.distributed  # noqa: F401  once, before the fork: n imports at once on a loaded
    # 2-core box took 37 s, past the join's bound, while the barrier itself took 0.5 s

    q = multiprocessing.Queue()
    ps = [multiprocessing.Process(target=barrier_member, args=(i, n, q)) for i in range(n)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(60)
        assert p.exitcode == 0, p.exitcode
    assert sorted(q.get() for _ in range(n)) == list(range(n))
    print("barrier %d: ok" % n)


def ns():
    # The crun side (crun-store) set rdzv/r1/secret and r1/other: neither is visible here.
    st = client()
    for key in ("rdzv/r1/secret", "r1/other", "/rdzv/r1/secret"):
        try:
            st.wait([key], datetime.timedelta(milliseconds=200))
            raise AssertionError("%s is visible to a TCPStore client" % key)
        except RuntimeError:
            pass
    st.set("mine", "m")
    print("ns: ok")


# ---- the 2.x protocol, encoded as PyTorch 2.x's client does (TCPStore.cpp, SendBuffer) ----

Q = dict(VALIDATE=0, SET=1, COMPARE_SET=2, GET=3, ADD=4, CHECK=5, WAIT=6, GETNUMKEYS=7,
         DELETE_KEY=8, APPEND=9, MULTI_GET=10, MULTI_SET=11, CANCEL_WAIT=12, PING=13,
         QUEUE_PUSH=14, QUEUE_POP=15, QUEUE_LEN=16)


def s(b):
    b = b.encode() if isinstance(b, str) else b
    return struct.pack("<Q", len(b)) + b


def recv(sock, n):
    out = b""
    while len(out) < n:
        d = sock.recv(n - len(out))
        assert d, "connection closed"
        out += d
    return out


def vec(sock):
    return recv(sock, struct.unpack("<Q", recv(sock, 8))[0])


def i64(sock):
    return struct.unpack("<q", recv(sock, 8))[0]


def v2():
    c = socket.create_connection(("127.0.0.1", PORT))
    q = lambda name, *args: c.sendall(bytes([Q[name]]) + b"".join(args))
    q("VALIDATE", struct.pack("<I", 0x3C85F7CE))
    q("PING", struct.pack("<I", 0xABCD1234))
    assert struct.unpack("<I", recv(c, 4))[0] == 0xABCD1234
    q("SET", s("/k"), s("v"))
    q("WAIT", struct.pack("<Q", 1), s("/k"))
    assert recv(c, 1) == b"\x00"  # STOP_WAITING
    q("GET", s("/k"))
    assert vec(c) == b"v"
    q("ADD", s("/v2n"), struct.pack("<q", 7))
    assert i64(c) == 7
    q("CHECK", struct.pack("<Q", 2), s("/k"), s("/v2n"))
    assert recv(c, 1) == b"\x00"  # READY
    q("CHECK", struct.pack("<Q", 1), s("/none"))
    assert recv(c, 1) == b"\x01"  # NOT_READY
    q("COMPARE_SET", s("/k"), s("v"), s("w"))
    assert vec(c) == b"w"
    q("APPEND", s("/k"), s("x"))
    q("GET", s("/k"))
    assert vec(c) == b"wx"
    q("MULTI_SET", struct.pack("<q", 2), s("/a"), s("1"), s("/b"), s("2"))
    q("MULTI_GET", struct.pack("<Q", 2), s("/a"), s("/b"))
    assert vec(c) == b"1" and vec(c) == b"2"
    q("WAIT", struct.pack("<Q", 1), s("/never"))
    time.sleep(0.2)
    q("CANCEL_WAIT")
    assert recv(c, 1) == b"\x01"  # WAIT_CANCELED
    q("QUEUE_PUSH", s("/q"), s("one"))
    q("QUEUE_PUSH", s("/q"), s("two"))
    q("QUEUE_LEN", s("/q"))
    assert i64(c) == 2
    q("QUEUE_POP", s("/q"))
    assert vec(c) == b"one"
    q("QUEUE_POP", s("/q"))
    assert vec(c) == b"two"
    q("QUEUE_LEN", s("/q"))
    assert i64(c) == 0
    q("GETNUMKEYS")
    n = i64(c)
    q("DELETE_KEY", s("/k"))
    assert i64(c) == 1
    q("GETNUMKEYS")
    assert i64(c) == n - 1
    # A wait answered by a 1.x client's write: both versions share the namespace.
    q("WAIT", struct.pack("<Q", 1), s("/from-v1"))
    client().set("from-v1", "1")
    assert recv(c, 1) == b"\x00"
    print("v2: ok")


def hostile(kind):
    c = socket.create_connection(("127.0.0.1", PORT))
    if kind == "unknown":
        c.sendall(bytes([6]))  # 1.x GETNUMKEYS, then query 9, which 1.x does not have
        i64(c)
        c.sendall(bytes([9]))
    elif kind == "oversized":
        c.sendall(bytes([0]) + struct.pack("<Q", 5000))
    elif kind == "truncated":
        c.sendall(bytes([0]) + s("/half") + struct.pack("<Q", 100) + b"only some")
        c.close()
        return
    elif kind == "watch":
        c.sendall(bytes([7]) + s("/k"))
    c.settimeout(5)
    assert c.recv(1) == b"", "the server did not close"
    print("hostile %s: closed" % kind)


def sockets_of(pid):
    """How many sockets process pid holds (its /proc/PID/fd)."""
    n = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            n += os.readlink("/proc/%d/fd/%s" % (pid, fd)).startswith("socket:")
        except FileNotFoundError:
            pass
    return n


def interleaved(server_pid):
    # Two PyTorch 1.x clients starting together, by hand: the main sockets of A and B, then
    # their callback sockets (which never send), all accepted before either main's first
    # request is read. A main socket not yet read is not a silent one: pairing it as the
    # callback of the other left both callback sockets unpaired, closed at the handshake
    # deadline (5 s), and torch 1.x's callback thread then spun a core. Both must be kept.
    before = sockets_of(server_pid)
    a1, b1, a2, b2 = [socket.create_connection(("127.0.0.1", PORT)) for _ in range(4)]
    deadline = time.monotonic() + 10
    while sockets_of(server_pid) < before + 4:  # all four accepted, in this order
        assert time.monotonic() < deadline, "the store did not accept 4 connections in 10 s"
        time.sleep(0.01)
    for c in (a1, b1):
        c.sendall(bytes([6]))  # 1.x GETNUMKEYS
        i64(c)
    time.sleep(7)  # past the deadline and the sweep after it
    for name, c in (("A", a2), ("B", b2)):
        c.setblocking(False)
        try:
            data = c.recv(1, socket.MSG_PEEK)
            raise AssertionError("%s's silent socket was closed (read %r)" % (name, data))
        except BlockingIOError:
            pass
    for c in (a1, b1):
        c.sendall(bytes([6]))
        i64(c)
    print("interleaved: ok (both silent sockets kept)")


def refused():
    c = socket.create_connection(("127.0.0.1", PORT))
    c.sendall(bytes([6]))
    c.settimeout(5)
    assert c.recv(1) == b"", "not refused"
    print("refused: ok")


if __name__ == "__main__":
    mode = sys.argv[2]
    if mode == "ops":
        ops()
    elif mode == "barrier":
        barrier(int(sys.argv[3]))
    elif mode == "idle":
        idle()
    elif mode == "interleaved":
        interleaved(int(sys.argv[3]))
    elif mode == "stress":
        stress(int(sys.argv[3]), int(sys.argv[4]))
    elif mode == "idle_cpu":
        idle_cpu(int(sys.argv[3]))
    elif mode == "alive":
        alive()
    elif mode == "ns":
        ns()
    elif mode == "v2":
        v2()
    elif mode == "hostile":
        hostile(sys.argv[3])
    elif mode == "refused":
        refused()
