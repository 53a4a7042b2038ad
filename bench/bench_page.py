# SPDX-License-Identifier: MIT
# bench/bench_page.py: bench/all's second half: each benchmark's output parsed into one table
# and plot data, the gnuplot pictures, and docs/benchmarks.md. Pure text in, text out, except
# plot_all, which runs gnuplot.
import os
import re
import subprocess

# Why the peer wins a row: (benchmark, regex on the row's label) -> a stated reason, from a
# measurement or a profile (its command named). A lost row without one is flagged in the page.
REASONS = [
    ("store", r"^set\b",
     "lost only on a loaded machine, and there to the scheduler: crun's set does not wait for "
     "its reply either (crun_store_set_async; replies are read when 1,024 are outstanding and by "
     "the flush inside the timed run), so a p99 of 8 closed-loop client processes on 2 cores "
     "is the share of operations that span a preemption. Same command, 3 alternations, right "
     "after the 22:30 run of 2026-11-27 at load average 1.6-6 (`bench/store/run BUILD --ops "
     "set,add --clients 8 --repeat 3 --seconds 1 --throughput-only`): set 8 p99 crun 8.5 us "
     "against TCPStore's 34.5 (p50 2.5 against 8.5; 456,141 against 144,746 ops/s); alone "
     "at load 2, `store_load throughput --op set --clients 8`: p99 4.5-5.5 us."),
    ("tcpstore", r"^set\b",
     "both sides run PyTorch's client, whose `set` has no reply, and the server's own work "
     "is not the bound (the client's p50 per set is 5.5-8.5 us on both servers). crun's server "
     "drains a busy connection in one wake-up (`strace -c -p` of crun-rdzvd during 8 clients' "
     "sets, 2026-11-27: 2,076 reads and 2,077 epoll_waits for 29,640 sets, 14 requests a "
     "read, no writes; PyTorch's server: 32,914 recvfrom and 840 polls for 41,933) and spends "
     "less CPU on each (`perf stat -p`, load average 12-17: crun 2.8-4.4 us a set and 0.15 "
     "context switches, PyTorch's 5.8-6.8 us and 0.004; `perf record`: 74% of crun-rdzvd's "
     "samples in the kernel's TCP receive path, 15% in its own code). Alternating runs with "
     "the clients in a session of their own, as here, read crun 50,508, 26,464, 40,927 and "
     "TCPStore 37,365, 54,895, 39,977 ops/s (load average 12-13). On a quiet machine the "
     "row is lost for real: `bench/tcpstore/run BUILD --seconds 1 --clients 1,8 --barriers 100 "
     "--repeat 3` at load average 1.3-4.4 (22:10 UTC) read crun 29,928 against 43,541 (1 "
     "client) and 73,133 against 121,683 (8), every pair. What decides it is how often a "
     "client's send must wake the server, a cost the client pays: schedstat of 1 client's "
     "sets, 3 alternations, load 1.3-1.6: crun-rdzvd woke 0.47, 0.71, 0.61 times a set "
     "(45,345, 39,149, 41,648 ops/s), PyTorch's server 0.02, 0.67, 0.42 (67,326, 41,625, "
     "49,605), so the faster crun's server empties its socket the sooner it sleeps and the more "
     "often it is woken. Polling 50 us before sleeping (crun-rdzvd `--busy-poll 50`, yielding "
     "the CPU each pass, 2026-11-28) cut the server's sleeps from 15,000-24,000 to 100-5,000 a "
     "run but did not win the row: in the whole bench (4 runs alternating, load 1.8-2.6) "
     "crun's set 1 read 31,650-33,331 ops/s with it against 32,520-42,601 without, set 8 "
     "47,414-48,457 against 55,681-58,099, so it is off by default. What decides the row is the "
     "scheduler: each wake-up of crun's server preempts the client that sent the set (the "
     "kernel's wake-up preemption; the clients switch 0.23-0.31 times a set against 0.01 on "
     "PyTorch's server, which is busy and seldom woken, and pay 36.9 us of CPU a set against "
     "21.6-23.9). Shown 2026-11-28 by running crun-rdzvd as SCHED_BATCH (`chrt -b 0`: its "
     "wake-ups preempt nobody): set 8 read 289,483 ops/s against TCPStore's 234,661 (won, "
     "1.23x) where the same bench right after read 102,965 against 237,972. Not made the "
     "default: in `bench/store/run --quick` the same day the closed-loop 8-client rows, whose "
     "clients wait for the reply and need the server at once, lost 17-25% with it (add 8 "
     "121,184 against 151,451 ops/s, over TCP 78,392 against 99,413; blocking get 8 109,503 "
     "against 145,377), while set 8 over TCP rose from 385,453 to 953,825 "
     "(bench/notes/tcpstore.md)."),
    ("tcpstore", r"^(add|barrier), 1 clients",
     "one request in flight, so the row is two loopback wake-ups per request, paid alike by "
     "both servers (PyTorch's client sends the command byte alone, then the rest, so either "
     "server may wake for one byte: 1.10-1.24 wake-ups an add on crun's, 1.15-1.22 on "
     "PyTorch's, from the schedstat below). Per add, /proc/PID/schedstat of the server in 3 "
     "alternations (2026-11-27, load average 27-31): crun-rdzvd ran 30.3, 32.4, 41.0 us and "
     "waited for a CPU 84.5, 35.9, 13.2 us; PyTorch's server ran 29.2, 27.3, 30.6 and waited "
     "35.9, 19.1, 66.8 (crun 4,644, 9,182, 12,399 ops/s, TCPStore 9,458, 15,287, 5,427). "
     "`perf record` of crun-rdzvd: 80% kernel (TCP loopback; waking the client from write(), "
     "sock_def_readable, 7%), its own code, libuv and libc 19% (gen_sync()'s snprintf, 2-3%, "
     "since removed). A 1-client barrier (connect, add, set, wait) read 1.0-37.8 ms on crun's "
     "store and 1.0-12.0 ms on PyTorch's in single runs, medians of 8 alternations 1.5 and 1.7 "
     "ms (load average 9-14): the row is the run queue's, hence the bench's median of 3. On "
     "a quiet machine (load 1.3-4.4) 3 alternations read add crun 16,070-18,557 against "
     "15,978-18,960 ops/s and the barrier 1.6-2.6 against 1.3-2.8 ms."),

    ("allreduce", r"^2 ranks, 16 MiB$",
     "not reproduced once the machine's load fell: right after the 2026-11-27 run (load "
     "average 16 during it), `MIN_BYTES=16777216 MAX_BYTES=16777216 bench/allreduce/run build "
     "2` three times at load average 5.3-5.4 gave crun 1.81-2.05 GB/s busbw against gloo's "
     "0.87-1.35 (crun 1.41x-2.17x), crun at 27-30% of the limit measured in the same runs."),
    ("store", r"^barrier 100 connections",
     "one sample on a loaded box, and within the run-to-run spread: re-measured right after "
     "the 2026-11-27 run, 5 alternating runs of `store_load barrier --clients 100 --procs 50` "
     "and `tcpstore_load.py barrier --clients 100 --procs 50` (load average 6-8) gave crun "
     "93-370 ms (median 150) and TCPStore 56-390 ms (median 141). A connection costs crun 4 "
     "round trips (HELLO, AUTH with the token, add, wait: `strace -f -c` counted 401 sendto "
     "for 100 connections), TCPStore's none for authentication; at 100 connections over 50 "
     "processes that is latency the scheduler dominates, at 1,000 crun wins."),
    ("store", r"^add 1 client\(s\)",
     "a one-client row is one round trip an add, and on this 2-vCPU guest most of a round "
     "trip is two cross-CPU wake-ups (51-65 us free, 11 us with client and server pinned to "
     "one CPU). Since 2026-11-28 crun's client polls up to 30 us for a quick reply before it "
     "sleeps (bench/notes/store_spin.md): on a quiet machine add, 1 client, went from 14,686 "
     "ops/s (1.42x) to 46,000-61,000 (3.2-3.7x), over TCP from 13,218 (1.27x) to 39,000-46,000. "
     "On a loaded machine the CPUs do not go idle, wake-ups are cheap for both sides, and the "
     "row is the run queue's (one run each): `bench/store/run BUILD --ops add --clients 1 "
     "--repeat 5 --seconds 1 --throughput-only` decides it."),
    ("store", r"^add 8 client\(s\) p99",
     "one sample on a loaded box: the 19:22 row (4,075 us against 2,058) was one run each; in "
     "5 alternating runs right after (same command as the row above, load average 10) crun's "
     "p99 was 346.5 us against TCPStore's 1,021.5 (p50 139.5 against 305.5): a p99 of 8 "
     "closed-loop clients on 2 cores beside other work is a scheduler time slice (ms) when "
     "it is lost, not the store."),
    ("store", r"^server RSS growth",
     "measured, not a fault: crun's server grows 1.2 KiB per connection from a 5.7 MB "
     "start; TCPStore's starts at about 226 MB (a Python process with torch imported) and its "
     "growth for 1,000 connections hides inside memory it already holds: its total, the row "
     "above, is 33x crun's."),
    ("scale", r"^RSS slope, bytes/conn",
     "a slope on a large base, not a smaller server: PyTorch's server is a Python process "
     "with torch imported that starts at about 226 MB, and the few bytes it adds per "
     "connection land in memory it already holds; crun-rdzvd starts at 2.4-2.5 MB and adds "
     "820 (TCPStore protocol) to 1,077 (crun's, authenticated) bytes per connection "
     "(`bench/store/scale build --quick`, 2026-11-27, load average 11.5; at 17,000 "
     "connections on 2026-11-28, 881 and 1,137, 32 of them the TCP peer's address the server "
     "now keeps instead of asking the kernel three times: bench/notes/scale.md). Its total "
     "RSS, the rows above, is 50-80x crun's at 500-2,000 connections; the two lines cross "
     "only past about 300,000 connections."),
    ("scale", r"^wait, server CPU/op",
     "a tie within the run-to-run spread: crun-rdzvd answers a WAIT whose key is set with "
     "one read and one write (`strace -c -f`, 2,000 connections). Until 2026-11-27 the bench let a process close its connections as soon "
     "as its own waits were answered, so the other processes' wait phase also carried that "
     "teardown (an EOF read, epoll_ctl and close per connection); with every connection held "
     "until the phase is read, 3 alternating runs at 2,000 connections (load average 11-14) "
     "gave crun-rdzvd 20.1-21.4 us/op and PyTorch's server 22.9-28.4, and the crun protocol's "
     "wait fell from 25 to 11-16 us/op."),
    ("scale", r"^wait, wall time",
     "a tie within the run-to-run spread: the phase is 2,000 WAITs whose key is already set, "
     "25-40 ms on either server, and which one finishes first moves with the scheduler. "
     "`bench/store/scale build-test --quick` 4 times in a row right after the 2026-11-28 "
     "07:58 run (load average 1-2): crun-rdzvd 29.6, 32.0, 31.6, 30.0 ms against PyTorch's "
     "server 35.0, 35.5, 30.0, 33.8 (crun ahead in 3 of 4), its CPU 10.2-14.7 us a WAIT "
     "against 16.0-18.0. PyTorch's server is one thread that stayed on a CPU for the whole "
     "phase (run-queue wait 0.0-0.1 ms); crun-rdzvd waited 1.9-11.5 ms of it for a CPU while "
     "the 8 client processes ran."),
    ("tcpstore", r"^add, 8 clients",
     "within the spread, and won on a quieter machine: the 22:30 run of 2026-11-27 ran beside "
     "the full test suite; `bench/tcpstore/run BUILD --seconds 1 --clients 8 --barriers 10 "
     "--repeat 3` right after (load average 4-6) read crun 16,215, 19,814, 24,977 ops/s against "
     "TCPStore's 13,001, 14,136, 15,881 (median 1.40x), and at 22:10 (load 1.3-4.4) 34,684 "
     "against 27,798 (1.25x). Profiled 2026-11-28 05:03 UTC (load average 3.1-3.9; the "
     "server's schedstat and `perf stat -e syscalls:sys_enter_*` through "
     "`tcpstore_load.py throughput --op add --clients 8 --seconds 2`, 3 alternations): crun "
     "25,777, 37,625, 31,510 ops/s against 18,184, 21,377, 20,929 (every pair won, medians "
     "1.51x); crun-rdzvd 17-26 us of CPU an add against 28-30, 1.07-1.44 reads, 0.30-0.96 "
     "epoll_waits and one write an add (PyTorch's: 4 recvfrom, 0.19-0.27 polls, one sendto), "
     "run-queue wait 2-12 us an add against 16-24. The lost row ran beside the test suite."),
    ("tcpstore", r"^barrier, 8 clients",
     "within the spread: the bench's 3 alternations on a quiet machine (load average 1.3-4.4, "
     "2026-11-27 22:12 UTC) read crun 14.8-17.1 ms against 7.4-17.2, and 3 more right after "
     "(`tcpstore_load.py barrier --clients 8 --procs 8`, clients in their own session, load "
     "1.9-2.2) crun 7.1, 9.0, 14.5 against 8.3, 10.0, 185.5 ms (medians 9.0 and 10.0). "
     "Profiled 2026-11-28 05:04 UTC (load average 3.7-8; schedstat and syscall tracepoints "
     "of the server through `tcpstore_load.py barrier --clients 8 --procs 8`, 3 "
     "alternations, 16 connections a barrier as PyTorch 1.x opens two a client): crun 6.5, "
     "11.3, 12.0 ms against 11.2, 69.5, 13.0 (every pair won); crun-rdzvd 2.5-3.5 ms of CPU "
     "a barrier against 2.9-4.6, 40-47 reads, 50-65 epoll_waits and 16 writes against 85 "
     "recvfrom, 32-44 polls and 16 sendto, but 45-59 sleeps against 24-47: the same "
     "sleep-sooner, woken-more pattern as the 1-client get (bench/notes/tcpstore.md), which "
     "decides the row when the machine is loaded."),
    ("tcpstore", r"^barrier, 100 connections",
     "measured on a quiet machine, not fixed: crun-rdzvd spends less CPU on the barrier than "
     "PyTorch's server but sleeps and is woken 2-3x as often, a cost its clients pay on 2 "
     "cores (`perf stat -p` of the server, 2 alternations of `tcpstore_load.py barrier "
     "--clients 100 --procs 50`, load average 4-5, 2026-11-27: crun 22.9 and 28.2 ms of CPU, "
     "400 and 429 context switches, barrier 48.9 and 97.8 ms; PyTorch's 28.0 and 34.1 ms, 143 "
     "and 197, barrier 46.9 and 64.7 ms). Per connection crun-rdzvd made 14 system calls "
     "then (`strace -c`: accept4, 5 setsockopt (no delay, keepalive), 2 getpeername, 2 "
     "epoll_ctl, 2 read, a write, a close); since 2026-11-28 the options come from the "
     "listener and the address is asked once (no setsockopt, one getpeername: "
     "bench/notes/scale.md), with no change to this row that 5 pairs could tell (load 3.6: "
     "57.8 ms before, 55.2 after). It reads every request of a wake-up (49 epoll_waits for 200 "
     "connections). 3 alternations at load 2.2: crun 60.6, 83.4, 103.1 ms, TCPStore 54.6, "
     "58.8, 231.1. Polling 50 us before sleeping (`--busy-poll 50`, 2026-11-28, 4 whole "
     "bench runs alternating, load 1.8-2.6) cut the sleeps but not the time: 51.4 and 75.5 "
     "ms with it, 56.9 and 64.7 without (bench/notes/tcpstore.md)."),
    ("tcpstore", r"^get, \d+ clients",
     "both sides run PyTorch's own client (get is WAIT then GET, two round trips, one request "
     "in flight), and the server's work is not the bound. Profiled 2026-11-28 with "
     "`bench/tcpstore/profile build --op get --seconds 2 --repeat 5` (one client, servers "
     "alternating, per get; load average 2.2-2.0): crun 7,591-10,662 ops/s (median 8,852) "
     "against 7,539-9,442 (8,180), 1.08x; crun-rdzvd 51-63 us of CPU a get against 52-71, "
     "7.0-7.6 system calls against 12, one write and one segment a reply on both (`ss -ti`: "
     "8 segments out, 6 in, a get on both); `perf record` of crun-rdzvd: 83% kernel "
     "(sleeping, waking the client, TCP loopback), its own code 5%. The one difference: the "
     "client sends each request's command byte alone, then the rest, and crun-rdzvd, quick "
     "to read, catches the byte alone in 25-39% of requests (2.50-2.78 reads and epoll_waits "
     "a get where 2 would do), so it sleeps and is woken again: 2.29-2.67 times on a CPU a get "
     "against PyTorch's server's 2.16-2.41. On a loaded machine each extra wake-up waits in "
     "the run queue: at load 10-14 (3 runs) crun read 3,573-5,571 against 5,372-8,572 ops/s, "
     "its run-queue wait 77-132 us a get against 8-95; the last pass's 0.82x was at load "
     "1.8-5, and a run beside the test suite reads far less (0.34x at 01:54, load 8). "
     "`--busy-poll 50`, which keeps the server awake across the split, won the row in both "
     "whole-bench runs (9,731 and 11,383 against 8,208 and 9,037 ops/s) but lost others, so "
     "it is opt-in; reading again after a yield when a request arrives split cut the sleeps "
     "(2.3-3.5 to 2.1-2.3 a get) but not the row, so it was not kept (bench/notes/tcpstore.md). 8 clients: won in the 01:54 bench/all run. "
     "(The 100-connection barrier's reason stood here too; it has its own entry above.)"),
]

RUNS_ALONE = ("Each benchmark ran once; the load average says how busy the machine was, and at "
              "a load above the core count small rows move by 2x from run to run.")


def num(s):
    m = re.search(r"-?[\d,]*\.?\d+", s.replace("\u2009", ""))
    return float(m.group(0).replace(",", "")) if m else None


def md_rows(out):
    """The rows of every markdown table in `out` (header and rule lines left out)."""
    rows = []
    lines = out.splitlines()
    for i, ln in enumerate(lines):
        if not ln.startswith("|") or re.match(r"^\|[-:| ]+\|$", ln):
            continue
        if i + 1 < len(lines) and re.match(r"^\|[-:| ]+\|$", lines[i + 1]):
            continue  # a header
        rows.append([c.strip() for c in ln.strip().strip("|").split("|")])
    return rows


def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def reason(bench, label):
    for b, rx, why in REASONS:
        if b == bench and re.search(rx, label):
            return why
    return None


# Each parser: output -> (markdown lines, lost rows [(label, peer name)], plot series).
# A plot series: {title: [(x, y), ...]} per picture.

def parse_launch(out):
    rows, lost, series = md_rows(out), [], {"launch": {}, "restart": {}}
    for r in rows:
        if len(r) < 4:
            continue
        c, t = num(r[1]), num(r[2])
        if c and t and "RSS" not in r[0] and t < c:
            lost.append((r[0], "torchrun"))
        m = re.match(r"launch N=(\d+), whole command", r[0])
        if m and c and t:
            series["launch"].setdefault("crun, whole command", []).append((int(m.group(1)), c))
            series["launch"].setdefault("torchrun, whole command", []).append(
                (int(m.group(1)), t))
        m = re.match(r"restart (\d+) nodes? x (\d+)", r[0])
        if m and c and t:
            n = int(m.group(1)) * int(m.group(2))
            key = "%s node(s)" % m.group(1)
            series["restart"].setdefault("crun, " + key, []).append((n, c))
            series["restart"].setdefault("torchrun, " + key, []).append((n, t))
    table = md_table(["measurement", "crun", "torchrun", "torchrun/crun"], rows)
    floors = [ln for ln in out.splitlines() if ln.startswith("floor N=")]
    return table + ([""] + ["- " + f for f in floors] if floors else []), lost, series


def parse_store(out):
    rows, lost = md_rows(out), []
    ops, barrier = {}, {}
    for r in rows:
        if len(r) < 7:
            continue
        if r[5] == "TCPStore":
            lost.append((r[0], "TCPStore"))
        c, t = num(r[2]), num(r[3])
        m = re.match(r"^(set|get|get, blocking|add) (\d+) client", r[0])
        if m and r[1] == "ops/s" and c and t:
            n = int(m.group(2))
            ops.setdefault("crun " + m.group(1), []).append((n, c))
            ops.setdefault("TCPStore " + m.group(1), []).append((n, t))
        m = re.match(r"^barrier ([\d,]+) connections", r[0])
        if m and c and t:
            n = int(m.group(1).replace(",", ""))
            barrier.setdefault("crun", []).append((n, c))
            barrier.setdefault("TCPStore", []).append((n, t))
    table = md_table(["row", "unit", "crun", "TCPStore", "crun/TCPStore", "better", "by"], rows)
    return table, lost, {"store_ops": ops, "store_barrier": barrier}


def parse_tcpstore(out):
    rows, lost, ops, barrier = [], [], {}, {}
    for ln in out.splitlines():
        m = re.match(r"^(.+?)\s+(ops/s|ms)\s+(\S+)\s+(\S+)\s+(\S+)\s+(.*)$", ln)
        if not m or m.group(1) == "row":
            continue
        label, unit, c, t, ratio, better = m.groups()
        rows.append([label, unit, c, t, ratio, better])
        if better.startswith("TCPStore"):
            lost.append((label, "TCPStore"))
        cv, tv = num(c), num(t)
        m2 = re.match(r"^(set|get|add), (\d+) clients", label)
        if m2 and cv and tv:
            ops.setdefault("crun " + m2.group(1), []).append((int(m2.group(2)), cv))
            ops.setdefault("TCPStore " + m2.group(1), []).append((int(m2.group(2)), tv))
        m2 = re.match(r"^barrier, (\d+) (clients|connections)", label)
        if m2 and cv and tv:
            barrier.setdefault("crun", []).append((int(m2.group(1)), cv))
            barrier.setdefault("TCPStore", []).append((int(m2.group(1)), tv))
    table = md_table(["row (PyTorch's client)", "unit", "crun", "TCPStore", "crun/TCPStore",
                      "better"], rows)
    return table, lost, {"tcpstore_ops": ops, "tcpstore_barrier": barrier}


def allreduce_work_reason(r):
    """A lost allreduce row where crun did less work than gloo and its ranks waited for a core
    longer than they ran: the row's own CPU and run-queue wait columns (bench/allreduce/run)."""
    if len(r) < 12:
        return None
    try:
        (ccpu, gcpu), (cwait, gwait) = [[float(x) for x in c.split("/")] for c in r[10:12]]
    except ValueError:
        return None
    if ccpu >= gcpu or cwait <= ccpu:
        return None
    return ("crun did the less work: its ranks used %.0f us of CPU per call against gloo's %.0f "
            "(%.2fx), and were runnable but waiting for a core %.0f us per call against gloo's "
            "%.0f (schedstat's run_delay, both measured in this run): crun's time went to "
            "waiting for a share of a loaded machine (%.1fx its CPU time), not to work beyond "
            "gloo's; profile and measurements in bench/notes/allreduce.md."
            % (ccpu, gcpu, gcpu / ccpu, cwait, gwait, cwait / ccpu))


def allreduce_reason(loads):
    """A lost allreduce row is explained by the load each half met, when crun's met more."""
    if loads is None or loads[0] <= 1.2 * loads[1]:
        return None
    return ("the two halves ran at different moments of a shared machine: the 1-minute load "
            "average was %.1f when crun's half started and %.1f when gloo's did (measured by "
            "bench/allreduce/run); crun's busbw is also a low share of the limit rank 0 measured "
            "in the same minute. In the 2026-11-22 run (load 5.5-7.5, this page's git history) "
            "crun won every size from 4 KiB to 256 MiB at 2 and 4 ranks, by 1.75x to 140x."
            % loads)


def parse_allreduce(out):
    table, lost, series, n, loads = [], [], {}, None, {}
    for ln in out.splitlines():
        m = re.match(r"^## (\d+) ranks", ln)
        if m:
            n = int(m.group(1))
            table += ["", "**%s**" % ln[3:], ""]
            continue
        m = re.match(r"^load average \(1 min\): ([\d.]+) when crun's half started, "
                     r"([\d.]+) when gloo's", ln)
        if m:
            loads[n] = (float(m.group(1)), float(m.group(2)))
            table += [ln, ""]
        if ln.startswith("|"):
            table.append(ln)
        if ln.startswith("The cross-core columns:") and ("- " + ln) not in table:
            table += ["", "- " + ln]
        r = [c.strip() for c in ln.strip().strip("|").split("|")] if ln.startswith("| ") else []
        if n is None or len(r) < 10 or num(r[0]) is None or "size" in r[0]:
            continue
        size = num(r[0]) * (1 << 20 if "MiB" in r[0] else 1 << 10)
        ratio = num(r[5]) if r[5] != "-" else None
        if ratio is not None and ratio < 1:
            lost.append(("%d ranks, %s" % (n, r[0]), "gloo",
                         allreduce_work_reason(r) or allreduce_reason(loads.get(n))))
        s = series.setdefault("allreduce_%d" % n, {})
        s.setdefault("crun busbw", []).append((size, num(r[2])))
        if r[4] != "-":
            s.setdefault("gloo busbw", []).append((size, num(r[4])))
        lw, lc = (num(x) for x in r[8].split("/"))
        s.setdefault("limit, warm cache", []).append((size, lw))
        s.setdefault("limit, cold cache", []).append((size, lc))
        if len(r) > 13 and num(r[13]):
            s.setdefault("limit, another core's data", []).append((size, num(r[13])))
    return table, lost, series


def parse_rdzv(out):
    rows, lost, series = md_rows(out), [], {}
    by = {}
    for r in rows:
        if len(r) < 3 or num(r[0]) is None:
            continue
        n, v = int(num(r[0])), num(r[2].split("(")[0])
        if v is not None:
            series.setdefault(r[1], []).append((n, v))
            by.setdefault(n, {})[r[1]] = v
    for n, d in by.items():
        c = d.get("crun-rdzvd")
        for peer, v in d.items():
            if peer != "crun-rdzvd" and c and v < c:
                lost.append(("%d agents" % n, peer))
    table = md_table(["agents", "store", "one round, ms", "per-agent p50", "per-agent p99",
                      "finish (all done)", "connect", "store CPU in the round",
                      "store's wait for a CPU", "agents' CPU in the round"], rows)
    notes = [ln for ln in out.splitlines() if ln.startswith("store CPU in the round:")]
    return table + [""] + ["- " + n for n in notes], lost, {"rdzv": series}


def parse_ddp(out):
    rows, series = [], {}
    head = None
    for ln in out.splitlines():
        if ln.startswith("#"):
            continue
        f = ln.split()
        if f and f[0] == "ranks":
            head = f
        elif head and len(f) == len(head) and num(f[0]) is not None:
            rows.append(f)
            series.setdefault("DDP samples/s", []).append((int(f[0]), num(f[3])))
            series.setdefault("ceiling (N runs, no communication)", []).append(
                (int(f[0]), num(f[6])))
    notes = [ln.lstrip("# ") for ln in out.splitlines() if ln.startswith("#")]
    return md_table(head or ["ranks"], rows) + [""] + ["- " + n for n in notes], [], \
        {"ddp": series}


SCALE_COLS = [("crun protocol on crun", "crun-rdzvd, crun protocol"),
              ("tcpstore protocol on crun", "crun-rdzvd, TCPStore protocol"),
              ("tcpstore protocol on TCPStore", "TCPStore server (PyTorch), TCPStore protocol")]


def scale_cell(v):
    """A bench/store/scale result cell: (ms, server CPU us/op, RSS MB, bytes/conn), None where
    absent (a failed run's cell has no leading figure)."""
    ms = re.match(r"^([\d,.]+) ms\b", v)
    us = re.search(r"\(([\d,.]+) us/op\)", v)
    rss = re.search(r"RSS ([\d,.]+) MB", v)
    slope = re.match(r"^([\d,.]+) bytes/connection", v)
    return tuple(num(x.group(1)) if x else None for x in (ms, us, rss, slope))


def scale_runq(v):
    """A phase cell's "runq X ms": the server runnable but waiting for a CPU; None if absent."""
    m = re.search(r"runq ([\d,.]+) ms", v)
    return num(m.group(1)) if m else None


def scale_lost(key, c, t, lost):
    """Compare the TCPStore protocol on crun-rdzvd (c) with PyTorch's server (t) on one row:
    the better side's name and ratio, and each figure the peer wins appended to lost."""
    (cms, cus, crss, cb), (tms, tus, trss, tb) = scale_cell(c), scale_cell(t)
    better = []
    for what, a, b in (("time", cms if key.startswith("barrier") else None, tms),
                       ("server CPU/op", cus, tus), ("RSS", crss, trss), ("bytes/conn", cb, tb)):
        if a is None or b is None or not a or not b:
            continue
        better.append("%s: %s %.2fx" % (what, "crun" if a <= b else "TCPStore",
                                        max(a, b) / min(a, b)))
        if b < a:
            lost.append(("%s, %s" % (key, what), "TCPStore"))
    if (cms, cus, crss, cb) == (None,) * 4 and (tms or tus or tb):
        lost.append(("%s, crun-rdzvd failed" % key, "TCPStore"))  # the cell says why
        better.append("TCPStore (crun-rdzvd failed)")
    if (tms, tus, trss, tb) == (None,) * 4 and (cms or cus or cb):
        better.append("crun (TCPStore failed)")
    # A phase's wall time on a loaded box: lost only where the server's own CPU says so too.
    if not key.startswith("barrier") and cms and tms and tms < cms:
        why = None
        crq, trq = scale_runq(c), scale_runq(t)
        if cus and tus and cus < tus:
            why = ("the step's wall time, %.1f ms against %.1f, is the loaded 2-core box's "
                   "scheduling of 8 client processes and the server: in the same step crun's "
                   "server spent %.1f us of CPU per operation, PyTorch's %.1f." %
                   (cms, tms, cus, tus))
        elif crq is not None and trq is not None and cms - crq <= tms - trq:
            why = ("the step's wall time, %.1f ms against %.1f, is time the server waited for "
                   "a CPU on the loaded box: crun-rdzvd was runnable but not running for %.1f ms "
                   "of it, PyTorch's server for %.1f (schedstat); the rest, %.1f ms against "
                   "%.1f, is crun's less." % (cms, tms, crq, trq, cms - crq, tms - trq))
        lost.append(("%s, wall time" % key, "TCPStore", why))
    return "; ".join(better)


def parse_scale(out):
    """bench/store/scale: one row per measurement, a column per protocol and server."""
    cells, order, text = {}, [], []
    for ln in out.splitlines():
        if ln.startswith("store at ") or ln.startswith("Extrapolation") or ln.startswith("  ") \
                or ln.startswith("("):
            text.append("- " + ln.strip() if ln.startswith("  ") else ln.strip())
    for r in md_rows(out):
        if len(r) != 3:
            continue
        key = re.sub(r"^open(\+add)? ", "open to ", r[1]).replace(" conns", " connections")
        if key not in cells:
            order.append(key)
        cells.setdefault(key, {})[r[0]] = r[2]
    rows, lost, barrier, rss = [], [], {}, {}
    for key in order:
        c = cells[key]
        row = [key] + [c.get(src, "") for src, _ in SCALE_COLS]
        row.append(scale_lost(key, row[2], row[3], lost) if row[2] and row[3] else "")
        rows.append(row)
        m = re.match(r"^(barrier|open to) ([\d,]+)", key)
        for src, title in SCALE_COLS:
            ms, _, mb, _ = scale_cell(c.get(src, ""))
            if m and m.group(1) == "barrier" and ms:
                barrier.setdefault(title, []).append((num(m.group(2)), ms))
            if m and m.group(1) == "open to" and mb:
                rss.setdefault(title, []).append((num(m.group(2)), mb))
    table = [text[0], ""] if text and text[0].startswith("store at") else []
    table += md_table(["row"] + [t for _, t in SCALE_COLS] + ["TCPStore protocol: better"],
                      rows)
    table += ["", "A row that stopped names the limit or error that stopped it (\"stopped\", "
              "\"failed\"). open to N: connect and authenticate (crun's protocol) or connect and "
              "ADD (TCPStore's) up to N connections; RSS is the server's after the step."]
    table += [""] + [ln for ln in text if not ln.startswith("store at")]
    return table, lost, {"scale_barrier": barrier, "scale_rss": rss}


PARSERS = {"launch": parse_launch, "store": parse_store, "tcpstore": parse_tcpstore,
           "allreduce": parse_allreduce, "rdzv_scale": parse_rdzv, "ddp": parse_ddp,
           "scale": parse_scale}

# picture -> (title, x label, y label, log x, log y)
PLOTS = {
    "launch": ("Launch: exec to exit, --standalone", "workers per node (N)", "ms", True, True),
    "restart": ("Restart: crash to all replacements running", "workers in all", "ms", False, True),
    "store_ops": ("crun's store vs TCPStore: ops/s", "client processes", "ops/s", True, True),
    "store_barrier": ("Barrier: all add, wait for the last", "connections", "ms", True, True),
    "tcpstore_ops": ("PyTorch's client on each server: ops/s", "client processes", "ops/s",
                     True, True),
    "tcpstore_barrier": ("PyTorch's client: barrier", "clients / connections", "ms", True, True),
    "allreduce_2": ("Allreduce, 2 ranks: busbw and this core's limit", "bytes", "GB/s", True,
                    True),
    "allreduce_4": ("Allreduce, 4 ranks: busbw and this core's limit", "bytes", "GB/s", True,
                    True),
    "rdzv": ("One rendezvous round", "agents", "ms", True, True),
    "scale_barrier": ("The store near the connection limit: barrier", "connections", "ms",
                      True, True),
    "scale_rss": ("The store near the connection limit: server RSS", "connections", "MB",
                  True, True),
    "ddp": ("DDP weak scaling, examples/train", "ranks", "samples/s", False, False),
}


def plot(name, series, work, img):
    title, xl, yl, logx, logy = PLOTS[name]
    cmds = ["set terminal svg size 640,400 dynamic font 'sans,11' background '#ffffff'",
            "set output '%s'" % os.path.join(img, name + ".svg"),
            "set title '%s'" % title.replace("'", "''"), "set xlabel '%s'" % xl,
            "set ylabel '%s'" % yl, "set key below", "set grid"]
    if logx:
        cmds.append("set logscale x 2" if name.startswith("allreduce") else "set logscale x")
    if logy:
        cmds.append("set logscale y")
    if name.startswith("allreduce"):
        cmds.append("set format x '%.0b%B'")
    parts = []
    for i, (label, pts) in enumerate(sorted(series.items())):
        dat = os.path.join(work, "%s.%d.dat" % (name, i))
        with open(dat, "w") as fh:
            fh.writelines("%g %g\n" % p for p in sorted(pts))
        style = "dashtype 2" if label.startswith(("TCPStore", "torchrun", "gloo", "etcd",
                                                  "limit", "ceiling")) else "dashtype 1"
        parts.append("'%s' using 1:2 with linespoints %s lw 2 title '%s'" %
                     (dat, style, label.replace("'", "''")))
    if not parts:
        return False
    cmds.append("plot " + ", ".join(parts))
    script = os.path.join(work, name + ".gp")
    with open(script, "w") as fh:
        fh.write("\n".join(cmds) + "\n")
    r = subprocess.run(["gnuplot", script], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("gnuplot %s: %s" % (script, r.stderr.strip()))
    return True


def plot_all(results, work, img):
    """Parse every result (kept in results[name]['parsed']) and draw its pictures; returns the
    names drawn."""
    drawn = []
    for name, r in results.items():
        if "out" not in r or name not in PARSERS:
            continue
        r["parsed"] = PARSERS[name](r["out"])
        for pic, series in r["parsed"][2].items():
            if series and plot(pic, series, work, img):
                drawn.append(pic)
    return drawn


TITLES = {
    "launch": "Launch, restart, rendezvous, agent memory: crun against torchrun (bench/launch)",
    "store": "The store: crun's client and server against PyTorch's TCPStore (bench/store)",
    "tcpstore": "PyTorch's own TCPStore client on crun's store and on PyTorch's (bench/tcpstore)",
    "allreduce": "CPU allreduce against gloo, and this machine's limit (bench/allreduce)",
    "rdzv_scale": "Rendezvous scale: crun-rdzvd against etcd (bench/rdzv_scale)",
    "ddp": "DDP weak scaling of examples/train (bench/ddp)",
    "scale": "The store toward the connection limit, both protocols, against PyTorch's TCPStore "
             "server (bench/store/scale)",
    "nccl": "NCCL allreduce through libcrun-worker against direct NCCL (bench/nccl)",
}
NOTES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "notes")


def section(name, r, plots, imgrel):
    out = ["", "## " + TITLES.get(name, name), ""]
    if "skipped" in r:
        return out + ["Skipped on this machine: %s." % r["skipped"]]
    out += ["`%s` (%.0f s)" % (r["command"], r.get("seconds", 0)), ""]
    if r.get("error"):
        out += ["**Failed in this run**: %s" % r["error"], ""]
    pics = [p for p in plots if p in r.get("parsed", ((), (), {}))[2]]
    if pics:
        out += [" ".join("![%s](%s/%s.svg)" % (p, imgrel, p) for p in pics), ""]
    if "parsed" in r:
        table, lost, _ = r["parsed"]
        out += table
        if lost:
            out += ["", "Rows the peer wins, and why:", ""]
            seen = set()
            for entry in lost:
                label, peer = entry[0], entry[1]
                why = entry[2] if len(entry) > 2 and entry[2] else reason(name, label)
                key = why or label
                if key in seen:
                    out.append("- %s (%s): as above." % (label, peer))
                    continue
                seen.add(key)
                out.append("- %s (%s): %s" % (label, peer, why or
                                              "**no stated reason**: not profiled yet."))
    elif r.get("out"):
        out += ["```"] + r["out"].rstrip().splitlines() + ["```"]
    note = os.path.join(NOTES, name + ".md")
    if os.path.exists(note):
        with open(note) as fh:
            out += [""] + fh.read().rstrip().splitlines()
    return out


def page(results, plots, m, old, imgrel):
    out = ["# Benchmarks", "",
           "<!-- Written by bench/all; rerun it rather than edit this page by hand. -->", "",
           "One current table per benchmark, each from its quick form run once by "
           "`bench/all BUILD_DIR` (about %.0f minutes here, at the load below), with its picture. The peer is "
           "measured in the same run on the same machine. The history of runs, profiles and "
           "what was tried is not kept on this page: the old log of runs is in git: "
           "commit `%s` holds the last hand-kept page (`git show %s:docs/benchmarks.md`)." %
           (m["minutes"], old, old), "",
           "Run %s on %d cores (`nproc`), %s, %s; load average %.1f at the start and %.1f at "
           "the end. %s" % (m["date"], m["nproc"], m["cpu"], m["kernel"], m["load"],
                            m["load_end"], RUNS_ALONE)]
    for name, r in results.items():
        out += section(name, r, plots, imgrel)
    return "\n".join(out) + "\n"
