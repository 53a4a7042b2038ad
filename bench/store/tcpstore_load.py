#!/usr/bin/python3
# SPDX-License-Identifier: MIT
# bench/store/tcpstore_load.py: load generator for PyTorch's TCPStore, the peer of
# bench/store/store_load.c (same modes, same arguments, same JSON output; driven by
# bench/store/run).
#
#   tcpstore_load.py server                 start a TCPStore server on 127.0.0.1 port 0, print
#                                           "127.0.0.1:PORT", serve until stdin closes
#   tcpstore_load.py --endpoint H:P throughput --op set|get|waitget|add --clients N --seconds S
#                                           (waitget is get: TCPStore's get already waits for
#                                           the key, sending WAIT then GET)
#   tcpstore_load.py --endpoint H:P barrier --clients N --procs P [--timeout S]
#   tcpstore_load.py --endpoint H:P idle --clients N --procs P --server-pid PID
#
# torch is imported once; client processes are forked from this one, each with its own
# TCPStore client object(s) (the Python client is what torch users run).
import argparse
import json
import os
import resource
import select
import sys
import time
from datetime import timedelta

from torch.distributed import TCPStore

HIST_US = 200000


def connect(host, port, timeout_s):
    return TCPStore(host, port, None, False, timeout=timedelta(seconds=timeout_s),
                    wait_for_workers=False)


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def fork_children(n, body):
    """Fork n children running body(i, ready_w, go_r, out_w); returns (pids, ready_r, go_w,
    result pipes). Each child writes one byte to ready when ready, blocks until go closes,
    writes its JSON result to its own pipe and exits."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pids, outs = [], []
    for i in range(n):
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            os.close(go_w)
            os.close(out_r)
            code = 0
            try:
                res = body(i, ready_w, go_r)
                os.write(out_w, json.dumps(res).encode())
            except BaseException as e:  # report, never hang the parent
                sys.stderr.write(f"tcpstore_load: client {i}: {e}\n")
                code = 1
            os._exit(code)
        os.close(out_w)
        pids.append(pid)
        outs.append(out_r)
    os.close(ready_w)
    os.close(go_r)
    return pids, ready_r, go_w, outs


def gather(n, pids, ready_r, go_w, outs, on_ready=None):
    got = 0
    deadline = time.monotonic() + 300
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([ready_r], [], [], left)[0]:
            for pid in pids:
                os.kill(pid, 9)
            sys.exit("tcpstore_load: clients not ready within 300 s")
        b = os.read(ready_r, n - got)
        if not b:
            break
        got += len(b)
    if on_ready is not None:
        on_ready()
    os.close(go_w)
    results, bad = [], 0
    for fd in outs:
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
        os.close(fd)
        if chunks:
            results.append(json.loads(b"".join(chunks)))
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        if status != 0:
            bad += 1
    if bad or len(results) != n:
        sys.exit(f"tcpstore_load: {bad} client(s) failed")
    return results


def wait_go(go_r):
    os.read(go_r, 1)


def throughput(host, port, op, clients, seconds):
    def body(i, ready_w, go_r):
        st = connect(host, port, 60)
        key = f"bench/{os.getppid()}/set/{i}"
        val = b"v" * 32
        gkey = f"bench/{os.getppid()}/get"
        akey = f"bench/{os.getppid()}/add"
        if op in ("get", "waitget"):
            st.set(gkey, val)
        os.write(ready_w, b"r")
        wait_go(go_r)
        lat = []
        t0 = time.perf_counter_ns()
        begin = t0
        end = t0 + seconds * 1_000_000_000
        if op == "set":
            f = lambda: st.set(key, val)  # noqa: E731
        elif op in ("get", "waitget"):
            f = lambda: st.get(gkey)  # noqa: E731
        else:
            f = lambda: st.add(akey, 1)  # noqa: E731
        while True:
            f()
            t1 = time.perf_counter_ns()
            lat.append((t1 - t0) // 1000)
            t0 = t1
            if t1 >= end:
                break
        return {"ops": len(lat), "begin": begin, "end": t1, "lat": lat}

    res = gather(clients, *fork_children(clients, body))
    # perf_counter_ns is CLOCK_MONOTONIC on Linux: comparable across processes.
    b = min(r["begin"] for r in res)
    e = max(r["end"] for r in res)
    lat = sorted(x for r in res for x in r["lat"])
    ops = len(lat)
    return {"ops": ops, "ops_s": round(ops / ((e - b) / 1e9)),
            "p50_us": lat[int(0.50 * ops)] + 0.5, "p99_us": lat[int(0.99 * ops)] + 0.5}


def barrier(host, port, clients, procs, timeout_s):
    procs = min(procs, clients)
    tag = os.getpid()

    def body(i, ready_w, go_r):
        count = clients // procs + (1 if i < clients % procs else 0)
        os.write(ready_w, b"r")
        wait_go(go_r)
        start = time.perf_counter_ns()
        stores = []
        for _ in range(count):
            st = connect(host, port, timeout_s)
            stores.append(st)
            if st.add(f"bench/{tag}/count", 1) == clients:
                st.set(f"bench/{tag}/release", "1")
        for st in stores:
            st.wait([f"bench/{tag}/release"])
        return {"start": start, "end": time.perf_counter_ns()}

    res = gather(procs, *fork_children(procs, body))
    b = min(r["start"] for r in res)
    e = max(r["end"] for r in res)
    return {"ms": round((e - b) / 1e6, 1)}


def idle(host, port, clients, procs, server_pid):
    procs = min(procs, clients)
    base = rss_kb(server_pid)
    hold_r, hold_w = os.pipe()
    box = {}

    def body(i, ready_w, go_r):
        os.close(hold_w)
        count = clients // procs + (1 if i < clients % procs else 0)
        stores = []
        for _ in range(count):
            st = connect(host, port, 120)
            st.num_keys()
            stores.append(st)
        os.write(ready_w, b"r")
        os.read(hold_r, 1)  # held open until the parent has read the RSS
        return {}

    pids, ready_r, go_w, outs = fork_children(procs, body)
    os.close(hold_r)

    def measure():
        time.sleep(0.2)  # let the server finish accepting
        box["rss"] = rss_kb(server_pid)
        os.close(hold_w)

    gather(procs, pids, ready_r, go_w, outs, on_ready=measure)
    return {"rss_kb": box["rss"], "base_kb": base}


def server():
    st = TCPStore("127.0.0.1", 0, None, True, timeout=timedelta(seconds=300),
                  wait_for_workers=False)
    print(f"127.0.0.1:{st.port}", flush=True)
    sys.stdin.read()  # serve until the driver closes our stdin
    return 0


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["server", "throughput", "barrier", "idle"])
    p.add_argument("--endpoint")
    p.add_argument("--op", choices=["set", "get", "waitget", "add"], default="get")
    p.add_argument("--clients", type=int, default=1)
    p.add_argument("--procs", type=int, default=50)
    p.add_argument("--seconds", type=int, default=2)
    p.add_argument("--timeout", type=int, default=120)
    p.add_argument("--server-pid", type=int)
    a = p.parse_args()
    if a.mode == "server":
        return server()
    if not a.endpoint:
        sys.exit("tcpstore_load: --endpoint HOST:PORT is required")
    host, port = a.endpoint.rsplit(":", 1)
    port = int(port)
    if a.mode == "throughput":
        r = throughput(host, port, a.op, a.clients, a.seconds)
    elif a.mode == "barrier":
        r = barrier(host, port, a.clients, a.procs, a.timeout)
    else:
        r = idle(host, port, a.clients, a.procs, a.server_pid)
    print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
