# SPDX-License-Identifier: MIT
# bench/launch/launchlib.py: what bench/launch/run and bench/launch/ab share: waiting for a
# command without polling, and reading the workers' stamps.
import os
import signal
import threading


def wait_exit(p, timeout):
    """p's exit status, as soon as it exits; p's process group killed after timeout seconds
    (RuntimeError then).

    Not p.wait(timeout=...): with a timeout, Python polls waitpid() with sleeps that double up
    to 50 ms, which added 2-10 ms to crun's whole-command rows (15.6 against 7.8 ms at N=8,
    64 against 28-35 at N=64) and to the floor's; a plain wait() returns at the exit.
    """
    expired = []

    def kill():
        expired.append(True)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout, kill)
    timer.start()
    try:
        rc = p.wait()
    finally:
        timer.cancel()
    if expired:
        raise RuntimeError("timed out after %d s: %s" % (timeout, p.args))
    return rc


def stamps(d, restart):
    """The start times (ns) that bench/launch/stamp wrote in d for attempt `restart`."""
    out = []
    for f in os.listdir(d):
        parts = f.split(".")
        if f.startswith("start.") and len(parts) == 3 and parts[2] == str(restart):
            with open(os.path.join(d, f)) as fh:
                out.append(int(fh.read()))
    return out
