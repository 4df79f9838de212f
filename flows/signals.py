"""`mrqa` ends its child processes when it is told to stop.

Python's default SIGTERM action kills the process at once, so the children it started stay behind:
Prefect's temporary API server (a `python -m uvicorn` subprocess that is only stopped by an atexit
hook), the forkserver and the worker processes of a process pool. `stop_children_on_signals()`
(called by the CLI entry point, not by in-process test runners) makes SIGTERM and SIGINT terminate
every descendant of this process, kill the ones still there after a grace period, and exit with
128 + the signal number (143 for SIGTERM, 130 for SIGINT). The warehouse needs no clean-up: every
stage commits in transactions, so stopping between two of them is the same as a kill.

A SIGKILL cannot be caught; after one, the temporary server has to be stopped by hand.
"""
from __future__ import annotations

import os
import signal
import sys


def stop_children_on_signals(signals=(signal.SIGTERM, signal.SIGINT), grace_s: float = 5.0) -> None:
    """Install the handler for `signals` (main thread only)."""
    def handler(signum, _frame):
        for sig in signals:   # a second signal during the clean-up must not interrupt it
            signal.signal(sig, signal.SIG_IGN)
        n = end_descendants(grace_s)
        sys.stdout.flush()
        sys.stderr.write(f"mrqa: stopped by {signal.Signals(signum).name}; ended {n} child process(es)\n")
        sys.stderr.flush()
        os._exit(128 + signum)

    for sig in signals:
        signal.signal(sig, handler)


def end_descendants(grace_s: float = 5.0) -> int:
    """SIGTERM every descendant process, SIGKILL those still alive after `grace_s`; returns how many."""
    import psutil
    kids = psutil.Process().children(recursive=True)
    for k in kids:
        try:
            k.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(kids, timeout=grace_s)
    for k in alive:
        try:
            k.kill()
        except psutil.NoSuchProcess:
            pass
    return len(kids)
