#!/usr/bin/python3
# SPDX-License-Identifier: MIT
# bench/launch/phases.py [BUILD_DIR] [REPS] [--restart]: where `crun --standalone
# --nproc-per-node 8` spends its time, exec to exit, from its CRUN_LOG_LEVEL=debug timestamps (ms
# resolution), REPS runs (default 15): the median and minimum of each phase, and the CPU of crun
# and its workers (getrusage of the children). docs/benchmarks.md, "Where the launch time goes".
# --restart: the phases of bench/launch/run's restart row instead (rank 0 crashes once,
# --restart-backoff 0), from the crash to the last replacement's start (bench/notes/launch.md).
import datetime
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

RESTART = "--restart" in sys.argv
args = [a for a in sys.argv[1:] if a != "--restart"]
build = args[0] if len(args) > 0 else "build"
reps = int(args[1]) if len(args) > 1 else 15
crun = os.path.join(build, "src", "crun")
stamp = os.path.join(build, "bench", "stamp")
if not os.access(crun, os.X_OK) or not os.access(stamp, os.X_OK):
    sys.exit(f"bench/launch/phases.py: {crun} or {stamp} not built (ninja -C {build})")
marks = [("token", "store token:"), ("store up", "hosting the rendezvous store"),
         ("round done", "round 0: complete"), ("spawned", "workers spawned"),
         ("workers exited", "all 8 exited"), ("cleaned up", "every worker has exited"),
         ("run record", "run record:")]

def log_time(ln, t0):
    """The wall time (s) of a debug line's HH:MM:SS.mmm stamp, on the day of @t0."""
    ts = re.search(r"T(\d\d):(\d\d):(\d\d\.\d+)", ln)
    dt = datetime.datetime.fromtimestamp(t0, datetime.timezone.utc)
    return dt.replace(hour=int(ts.group(1)), minute=int(ts.group(2)), second=0,
                      microsecond=0).timestamp() + float(ts.group(3))


def restart_phases():
    rmarks = [("window + stop: all 8 exited", "all 8 exited"),
              ("report published, loop closed", "rendezvous watch stopped"),
              ("round 1 complete", "round 1: complete"),
              ("8 spawned", "attempt 1: workers spawned")]
    res = {}
    for _ in range(reps):
        d = tempfile.mkdtemp()
        env = dict(os.environ, CRUN_LOG_LEVEL="debug")
        t0 = time.time()
        p = subprocess.run([crun, "--restart-backoff", "0", "--standalone", "--nproc-per-node", "8",
                            "--max-restarts", "1", "--no-python", stamp, d, "crash-once"],
                           env=env, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"bench/launch/phases.py: crun exited {p.returncode}: {p.stderr[-400:]}")
        with open(os.path.join(d, "crash")) as fh:
            prev = crash = int(fh.read()) / 1e9
        lines = p.stderr.splitlines()
        for name, pat in rmarks:
            # the first such line after the crash
            for ln in lines:
                if pat in ln and log_time(ln, t0) >= crash - 0.001:
                    s = log_time(ln, t0)
                    res.setdefault(name, []).append((s - prev) * 1e3)
                    prev = s
                    break
        last = max(int(open(os.path.join(d, f)).read()) for f in os.listdir(d)
                   if f.startswith("re.")) / 1e9
        res.setdefault("replacements exec'd, running", []).append((last - prev) * 1e3)
        res.setdefault("crash -> all running", []).append((last - crash) * 1e3)
        shutil.rmtree(d, ignore_errors=True)
    for k, v in res.items():
        print("%-32s median %7.1f ms  min %7.1f" % (k, statistics.median(v), min(v)))
    print("load average %.1f %.1f %.1f" % os.getloadavg())
    sys.exit(0)


if RESTART:
    restart_phases()
res = {}
cpu = []
for _ in range(reps):
    d = tempfile.mkdtemp()
    env = dict(os.environ, CRUN_LOG_LEVEL="debug")
    a = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    p = subprocess.run([crun, "--standalone", "--nproc-per-node", "8", "--no-python", stamp, d, "exit"],
                       env=env, capture_output=True, text=True)
    t1 = time.time()
    b = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu.append((b.ru_utime - a.ru_utime + b.ru_stime - a.ru_stime) * 1e3)
    prev = t0
    for name, pat in marks:
        for ln in p.stderr.splitlines():
            if pat in ln:
                s = log_time(ln, t0)
                res.setdefault(name, []).append((s - prev) * 1e3)
                prev = s
                break
    shutil.rmtree(d, ignore_errors=True)
    if p.returncode != 0:
        sys.exit(f"bench/launch/phases.py: crun exited {p.returncode}: {p.stderr[-400:]}")
    res.setdefault("exit", []).append((t1 - prev) * 1e3)
    res.setdefault("whole", []).append((t1 - t0) * 1e3)
for k, v in res.items():
    print("%-16s median %7.1f ms  min %7.1f" % (k, statistics.median(v), min(v)))
print("CPU (crun + 8 workers) median %.1f ms min %.1f" % (statistics.median(cpu), min(cpu)))
print("load average %.1f %.1f %.1f" % os.getloadavg())
