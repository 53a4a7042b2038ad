#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# tests/agent/partial.py: a prompt and a \r progress bar reach crun's output before their
# newline, with the rank prefix, and never share a line with another rank's output.
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stdio_lib import TMP, Crun, check_prefixed, cleanup, fail, note, program  # noqa: E402

# Each step waits for a file the test creates only once it has seen the step's output, so a
# partial line that waited for its newline would never arrive (the worker gives up after 90 s,
# the test after 30 s): no timing bound decides the result.
prog = program("bar.py", r'''
import os, sys, time
d = sys.argv[1]
rank = int(os.environ["RANK"])

def wait(name):
    for _ in range(900):
        if os.path.exists(os.path.join(d, name)):
            return
        time.sleep(0.1)
    sys.exit(9)

if rank == 0:
    print("start", flush=True)
    sys.stdout.write("prompt> ")
    sys.stdout.flush()
    wait("seen-prompt")
    sys.stdout.write("answer\n")
    for i in (10, 20):
        sys.stdout.write("\r%3d%%" % i)
        sys.stdout.flush()
        wait("seen-%d" % i)
    sys.stdout.write("\rdone\n")
    sys.stdout.flush()
    open(os.path.join(d, "rank0-done"), "w").close()
else:
    # Whole lines from another rank all along, while rank 0's lines are open.
    while not os.path.exists(os.path.join(d, "rank0-done")):
        print("chatter from rank 1", flush=True)
        time.sleep(0.05)
''')


def touch(name):
    open(os.path.join(TMP, name), "w").close()


r = Crun(["--standalone", "--nproc-per-node", "2", prog, TMP], stdin=False)
m = r.wait_for(r"\[rank0\]:start\n")
t0 = time.monotonic()
r.wait_for(r"\[rank0\]:prompt> ", start=m.end())
dt = time.monotonic() - t0
note("the prompt came %.0f ms after the line before it" % (dt * 1000))
touch("seen-prompt")
m = r.wait_for(r"\[rank0\]:(prompt> )?answer\n")
m = r.wait_for(r"\[rank0\]: 10%", start=m.end())
touch("seen-10")
r.wait_for(r"\r\[rank0\]: 20%|\[rank0\]: 20%", start=m.end())
touch("seen-20")
r.wait_for(r"\[rank0\]:done\n")
if r.finish() != 0:
    fail("exit code")
check_prefixed(r, {0, 1})
if "chatter from rank 1" not in r.text():
    fail("rank 1's lines are missing")
# The prompt came on its own, long before the worker's newline (which waited for the test).
if dt > 20:
    fail("the prompt took %.1f s" % dt)

# --log-dir files keep whole lines: the prompt and its answer are one line there.
r = Crun(["--standalone", "--nproc-per-node", "2", "--tee", "3", "--log-dir",
          os.path.join(TMP, "logs"), prog, TMP], stdin=False)
for f in ("seen-prompt", "seen-10", "seen-20", "rank0-done"):
    os.unlink(os.path.join(TMP, f))
r.wait_for(r"\[rank0\]:prompt> ")
touch("seen-prompt")
r.wait_for(r"\[rank0\]: 10%")
touch("seen-10")
r.wait_for(r"\[rank0\]: 20%")
touch("seen-20")
if r.finish() != 0:
    fail("--log-dir run: exit code")
logs = []
for root, _, files in os.walk(os.path.join(TMP, "logs")):
    logs += [os.path.join(root, f) for f in files if f == "stdout.log"]
text = "".join(open(f, newline="").read() for f in logs)
if "prompt> answer\n" not in text or "\r 10%\r 20%\rdone\n" not in text:
    fail("log files: %r" % text[:400])
note("log files hold whole lines")

cleanup()
print("partial: ok")
