# SPDX-License-Identifier: MIT
# tests/agent/stdio_lib.py: run crun with its stdio on pipes or on a pseudo-terminal, read its
# output as it comes and wait for patterns in it (the stdin, tty and live-line tests share it).
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import termios
import time

BUILD = os.environ["CRUN_BUILD_DIR"]
CRUN = os.environ.get("CRUN_EXE", os.path.join(BUILD, "src", "crun"))
PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else "python3"
TMP = tempfile.mkdtemp(prefix="crun-stdio-test.")
os.environ["TMPDIR"] = TMP
os.environ["PYTHON_EXEC"] = PYTHON
os.environ["CRUN_TOKEN_FILE"] = os.path.join(TMP, "token")
RUNS = []


def fail(msg):
    sys.stderr.write("FAIL: %s\n" % msg)
    for r in RUNS:
        sys.stderr.write("--- output so far of crun %s:\n%r\n" % (" ".join(r.args), r.text()))
    cleanup()
    sys.exit(1)


def note(msg):
    sys.stderr.write("note: %s\n" % msg)


def cleanup():
    for r in RUNS:
        r.kill()
    shutil.rmtree(TMP, ignore_errors=True)


def program(name, text):
    """Write a worker program into the temp dir; returns its path."""
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(text)
    return path


class Crun:
    """crun ARGS with stdin a pipe (or /dev/null), stdout+stderr a pipe or both on one pty."""

    def __init__(self, args, tty=False, stdin=True, rows=30, cols=100):
        self.args = args
        self.buf = b""
        self.tty = tty
        if tty:
            self.master, slave = pty.openpty()
            attrs = termios.tcgetattr(slave)
            # Keep the terminal's echo and line editing; only \n -> \r\n goes, so that what
            # the test reads is what crun wrote.
            attrs[1] &= ~termios.ONLCR
            termios.tcsetattr(slave, termios.TCSANOW, attrs)
            import fcntl
            import struct
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            self.proc = subprocess.Popen([CRUN] + args, stdin=slave, stdout=slave,
                                         stderr=slave, start_new_session=True,
                                         preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
            os.close(slave)
            self.out = self.master
            self.inp = self.master
        else:
            self.proc = subprocess.Popen([CRUN] + args,
                                         stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            self.out = self.proc.stdout.fileno()
            self.inp = self.proc.stdin.fileno() if stdin else None
        RUNS.append(self)

    def text(self):
        return self.buf.decode("utf-8", "replace")

    def pump(self, timeout):
        """Read what crun wrote within @timeout seconds; False at its end of output."""
        r, _, _ = select.select([self.out], [], [], timeout)
        if not r:
            return True
        try:
            chunk = os.read(self.out, 65536)
        except OSError:  # EIO: the pty's other side is closed
            chunk = b""
        if not chunk:
            return False
        self.buf += chunk
        return True

    def wait_for(self, pattern, timeout=30, start=0):
        """Wait until @pattern (a regex) matches the output from @start; returns the match."""
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern, re.S)
        while True:
            m = rx.search(self.text(), start)
            if m:
                return m
            left = deadline - time.monotonic()
            if left <= 0 or not self.pump(min(left, 0.5)) and not rx.search(self.text(), start):
                if left > 0:
                    fail("crun ended without printing %r" % pattern)
                fail("no %r within %ds" % (pattern, timeout))

    def resize(self, rows, cols):
        """Resize crun's terminal (the kernel sends crun SIGWINCH)."""
        import fcntl
        import struct
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def send(self, data):
        os.write(self.inp, data.encode())

    def close_stdin(self):
        if not self.tty and self.proc.stdin is not None:
            self.proc.stdin.close()

    def finish(self, timeout=60):
        """Read to the end; returns crun's exit code."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.pump(0.5):
            pass
        try:
            rc = self.proc.wait(max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            fail("crun %s did not finish in %ds" % (" ".join(self.args), timeout))
        while self.pump(0):
            pass
        return rc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.tty:
            try:
                os.close(self.master)
            except OSError:
                pass
            self.tty = False

    def lines(self):
        """The output's lines (a pty's \r\n as \n), crun's own log lines left out."""
        t = self.text().replace("\r\n", "\n")
        return [l for l in t.split("\n") if l and not l.startswith("crun ")]


def check_prefixed(run, ranks):
    """Every worker line starts with one rank's prefix and carries no other rank's prefix."""
    for line in run.lines():
        m = re.match(r"\[rank(\d+)\]:", line)
        if not m or int(m.group(1)) not in ranks:
            fail("line without a rank prefix: %r" % line)
        seen = re.findall(r"\[rank(\d+)\]:", line)
        # A \r redraw repeats the prefix: the same rank's, once per \r.
        if len(set(seen)) != 1 or len(seen) != line.count("\r") + 1:
            fail("two ranks' bytes in one line: %r" % line)


signal.signal(signal.SIGALRM, lambda *a: fail("test took over 170 s"))
signal.alarm(170)
