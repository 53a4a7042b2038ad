#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# tests/agent/stdin.py: global rank 0 reads crun's stdin (input(), a pdb session), the other
# workers get /dev/null; --stdin picks another rank, all or none; a restart's rank 0 gets it.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stdio_lib import Crun, check_prefixed, cleanup, fail, note, program  # noqa: E402

ask = program("ask.py", r'''
import os, sys
rank = int(os.environ["RANK"])
if sys.stdin.isatty():
    print("stdin is a tty")
try:
    line = input("name? ")
    print("rank %d got %s" % (rank, line))
except EOFError:
    print("rank %d got EOF" % rank)
''')

# Default: rank 0 reads the agent's stdin, rank 1 sees end of file at once.
r = Crun(["--standalone", "--nproc-per-node", "2", ask])
r.wait_for(r"\[rank1\]:(name\? )?rank 1 got EOF\n")
r.wait_for(r"\[rank0\]:name\? ")  # the prompt shows before any input (a live partial line)
r.send("alice\n")
r.close_stdin()
r.wait_for(r"\[rank0\]:(name\? )?rank 0 got alice\n")
if r.finish() != 0:
    fail("default --stdin: exit code")
check_prefixed(r, {0, 1})
note("default: rank 0 read 'alice', rank 1 got EOF")

# --stdin 1: the other way round.
r = Crun(["--standalone", "--nproc-per-node", "2", "--stdin", "1", ask])
r.wait_for(r"\[rank0\]:(name\? )?rank 0 got EOF\n")
r.send("bob\n")
r.close_stdin()
r.wait_for(r"rank 1 got bob\n")
if r.finish() != 0:
    fail("--stdin 1: exit code")
note("--stdin 1: rank 1 read 'bob'")

# --stdin none: nobody reads it.
r = Crun(["--standalone", "--nproc-per-node", "2", "--stdin", "none", ask])
r.wait_for(r"rank 0 got EOF\n")
r.wait_for(r"rank 1 got EOF\n")
r.close_stdin()
if r.finish() != 0:
    fail("--stdin none: exit code")

# What each worker's fd 0 is, and PYTHONBREAKPOINT (set to 0 where there is no stdin, unless
# the user set it).
what = program("what.py", r'''
import os, stat
st = os.fstat(0)
kind = "fifo" if stat.S_ISFIFO(st.st_mode) else "chr" if stat.S_ISCHR(st.st_mode) else "other"
print("rank %s stdin=%s bp=%s" % (os.environ["RANK"], kind,
      os.environ.get("PYTHONBREAKPOINT", "unset")))
''')
r = Crun(["--standalone", "--nproc-per-node", "2", "--stdin", "all", what])
r.close_stdin()
if r.finish() != 0:
    fail("--stdin all: exit code")
for rank in (0, 1):
    r.wait_for(r"\[rank%d\]:rank %d stdin=fifo bp=unset\n" % (rank, rank))
r = Crun(["--standalone", "--nproc-per-node", "2", what])
r.close_stdin()
if r.finish() != 0:
    fail("default --stdin: exit code")
r.wait_for(r"\[rank0\]:rank 0 stdin=fifo bp=unset\n")
r.wait_for(r"\[rank1\]:rank 1 stdin=chr bp=0\n")
os.environ["PYTHONBREAKPOINT"] = "mine.hook"
r = Crun(["--standalone", "--nproc-per-node", "2", what])
del os.environ["PYTHONBREAKPOINT"]
r.close_stdin()
if r.finish() != 0:
    fail("PYTHONBREAKPOINT set: exit code")
r.wait_for(r"\[rank1\]:rank 1 stdin=chr bp=mine.hook\n")
note("--stdin all shares the pipe; PYTHONBREAKPOINT=0 only where stdin is /dev/null")

# A bad value is a usage error.
r = Crun(["--standalone", "--stdin", "first", ask], stdin=False)
if r.finish() != 2 or "--stdin" not in r.text():
    fail("--stdin first: expected a usage error naming --stdin")

# A pdb session on rank 0, driven through crun's stdin.
dbg = program("dbg.py", r'''
import os
x = 41 + int(os.environ["RANK"])
breakpoint()
print("after", x)
''')
r = Crun(["--standalone", "--nproc-per-node", "2", dbg])
r.wait_for(r"\[rank1\]:after 42\n")  # rank 1's pdb read end of file and went on
r.wait_for(r"\[rank0\]:.*\(Pdb\) ")
r.send("p x + 1\n")
r.wait_for(r"\[rank0\]:(\(Pdb\) )?42\n")
r.send("x = 7\n")
r.send("c\n")
r.wait_for(r"\[rank0\]:(\(Pdb\) )*after 7\n")
r.close_stdin()
if r.finish() != 0:
    fail("pdb: exit code")
note("pdb on rank 0: printed x + 1, changed x, continued")

# After a restart the new rank 0 reads stdin again.
again = program("again.py", r'''
import os, sys
n = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
if os.environ["RANK"] == "0":
    line = sys.stdin.readline().strip()
    print("attempt %d read %s" % (n, line or "EOF"))
    if n == 0:
        sys.exit(3)  # only after the line is read: rank 1 failing first could stop rank 0 before
''')
r = Crun(["--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
          "--restart-backoff", "0", again])
r.send("one\n")
r.wait_for(r"\[rank0\]:attempt 0 read one\n")
r.send("two\n")
r.wait_for(r"\[rank0\]:attempt 1 read two\n")
r.close_stdin()
if r.finish() != 0:
    fail("restart: exit code")
note("after the restart rank 0 read 'two'")

cleanup()
print("stdin: ok")
