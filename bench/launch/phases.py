#!/usr/bin/python3
# SPDX-License-Identifier: MIT
# bench/launch/phases.py [BUILD_DIR] [REPS]: where `crun --standalone --nproc-per-node 8` spends
# its time, exec to exit, from its CRUN_LOG_LEVEL=debug timestamps (ms resolution), REPS runs
# (default 15): the median and minimum of each phase, and the CPU of crun and its workers
# (getrusage of the children). docs/benchmarks.md, "Where the launch time goes".
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

build = sys.argv[1] if len(sys.argv) > 1 else "build"
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 15
crun = os.path.join(build, "src", "crun")
stamp = os.path.join(build, "bench", "stamp")
if not os.access(crun, os.X_OK) or not os.access(stamp, os.X_OK):
    sys.exit(f"bench/launch/phases.py: {crun} or {stamp} not built (ninja -C {build})")
marks = [("token", "store token:"), ("store up", "hosting the rendezvous store"),
         ("round done", "round 0: complete"), ("spawned", "workers spawned"),
         ("workers exited", "all 8 exited"), ("cleaned up", "every worker has exited"),
         ("run record", "run record:")]
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
                ts = re.search(r"T(\d\d):(\d\d):(\d\d\.\d+)", ln)
                dt = datetime.datetime.fromtimestamp(t0, datetime.timezone.utc)
                s = dt.replace(hour=int(ts.group(1)), minute=int(ts.group(2)), second=0, microsecond=0).timestamp() + float(ts.group(3))
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
