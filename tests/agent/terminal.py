#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# tests/agent/terminal.py: under a terminal each worker stream gets a pseudo-terminal (prefixed,
# lines never merged, as wide as crun's less the prefix); with pipes workers get pipes; --tty
# forces either way; rank 0's stdin is crun's terminal, so pdb is driven from it.
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stdio_lib import Crun, check_prefixed, cleanup, fail, note, program  # noqa: E402

probe = program("probe.py", r'''
import os, shutil, sys
rank = int(os.environ["RANK"])
cols = shutil.get_terminal_size((0, 0)).columns
print("rank %d tty in=%d out=%d err=%d cols=%d" % (rank, sys.stdin.isatty(),
      sys.stdout.isatty(), sys.stderr.isatty(), cols))
for i in range(200):
    print("rank %d line %d %s" % (rank, i, "x" * 50))
    sys.stderr.write("rank %d err %d\n" % (rank, i))
''')


def ttys(run):
    got = {}
    for m in re.finditer(r"\[rank(\d)\]:rank \d tty in=(\d) out=(\d) err=(\d) cols=(\d+)",
                         run.text()):
        got[int(m.group(1))] = tuple(int(x) for x in m.group(2, 3, 4, 5))
    return got


def lines_ok(run):
    check_prefixed(run, {0, 1, 2})
    for rank in range(3):
        for what in ("line", "err"):
            n = len(re.findall(r"^\[rank%d\]:rank %d %s \d+" % (rank, rank, what),
                               run.text().replace("\r\n", "\n"), re.M))
            if n != 200:
                fail("rank %d: %d whole '%s' lines, expected 200" % (rank, n, what))


# crun on a terminal 100 columns wide: every stream of every worker is a terminal.
r = Crun(["--standalone", "--nproc-per-node", "3", probe], tty=True, cols=100)
if r.finish() != 0:
    fail("under a pty: exit code")
got = ttys(r)
want_cols = 100 - len("[rank0]:")
for rank in range(3):
    if got.get(rank) != ((1 if rank == 0 else 0), 1, 1, want_cols):
        fail("under a pty, rank %d: (stdin, stdout, stderr, cols) = %r" % (rank, got.get(rank)))
lines_ok(r)
note("under a pty: stdout and stderr are terminals of %d columns, rank 0's stdin too" %
     want_cols)

# The same with pipes: pipes as before.
r = Crun(["--standalone", "--nproc-per-node", "3", probe], stdin=False)
if r.finish() != 0:
    fail("with pipes: exit code")
if any(v[:3] != (0, 0, 0) for v in ttys(r).values()) or len(ttys(r)) != 3:
    fail("with pipes: %r" % ttys(r))
lines_ok(r)
note("with pipes: no terminals")

# --tty never under a pty, --tty always with pipes.
r = Crun(["--standalone", "--nproc-per-node", "3", "--tty", "never", probe], tty=True)
if r.finish() != 0 or any(v[1:3] != (0, 0) for v in ttys(r).values()):
    fail("--tty never: %r" % ttys(r))
r = Crun(["--standalone", "--nproc-per-node", "3", "--tty", "always", probe], stdin=False)
if r.finish() != 0 or any(v[1:] != (1, 1, 80 - len("[rank0]:")) for v in ttys(r).values()):
    fail("--tty always: %r" % ttys(r))
lines_ok(r)
# Log files (--redirects, --tee, --log-dir: the agent then writes both streams to files) keep
# pipes under auto: escape codes would land in the files.
r = Crun(["--standalone", "--nproc-per-node", "3", "--redirects", "2", probe], tty=True)
if r.finish() != 0 or any(v[1:3] != (0, 0) for v in ttys(r).values()) or len(ttys(r)) != 3:
    fail("--redirects 2 under a pty: %r" % ttys(r))
r = Crun(["--standalone", "--tty", "yes", probe], stdin=False)
if r.finish() != 2 or "--tty" not in r.text():
    fail("--tty yes: expected a usage error naming --tty")
note("--tty never / always and --redirects behave")

# Resizing crun's terminal resizes the workers' (SIGWINCH forwarded).
winch = program("winch.py", r'''
import os, shutil, signal, sys, time
got = []
signal.signal(signal.SIGWINCH, lambda *a: got.append(1))
print("ready cols=%d" % shutil.get_terminal_size().columns, flush=True)
for _ in range(600):
    if got:
        break
    time.sleep(0.05)
print("resized" if got else "no SIGWINCH", "cols=%d" % os.get_terminal_size(1).columns, flush=True)
''')
r = Crun(["--standalone", "--nproc-per-node", "2", winch], tty=True, cols=100)
r.wait_for(r"\[rank0\]:ready cols=92\n")
r.wait_for(r"\[rank1\]:ready cols=92\n")
r.resize(30, 140)
r.wait_for(r"\[rank0\]:resized cols=132\n")
r.wait_for(r"\[rank1\]:resized cols=132\n")
if r.finish() != 0:
    fail("resize: exit code")
note("resize: the workers' terminals followed crun's")

# pdb on rank 0 from crun's terminal: the prompt shows, commands typed there run.
dbg = program("dbg.py", r'''
import os
x = 41 + int(os.environ["RANK"])
breakpoint()
print("after", x)
''')
r = Crun(["--standalone", "--nproc-per-node", "2", dbg], tty=True)
r.wait_for(r"\[rank1\]:after 42\n")
m = r.wait_for(r"\[rank0\]:\(Pdb\) ")
r.send("p x + 1\n")
m = r.wait_for(r"\n\[rank0\]:42\n", start=m.end())
r.send("c\n")
r.wait_for(r"\[rank0\]:after 41\n", start=m.end())
if r.finish() != 0:
    fail("pdb under a pty: exit code")
note("pdb under a pty: ok")

cleanup()
print("terminal: ok")
