"""`mrqa` ends its child processes when it is told to stop.

Python's default SIGTERM action kills the process at once, so the children it started stay behind:
Prefect's temporary API server (a `python -m uvicorn` subprocess that is only stopped by an atexit
hook), the forkserver and the worker processes of a process pool. `stop_children_on_signals()`
(called by the CLI entry point, not by in-process test runners) makes SIGTERM and SIGINT terminate
every descendant of this process, kill the ones still there after a grace period, and exit with
128 + the signal number (143 for SIGTERM, 130 for SIGINT). The warehouse needs no clean-up: every
stage commits in transactions, so stopping between two of them is the same as a kill.

While a Prefect flow runs, Prefect's engine swaps its own SIGTERM handler in: it raises an exception in
the flow, reports the crash to the Prefect API, and only then hands the signal on to the handler here.
Against a stalled API server (a loaded machine, a server stopped with SIGSTOP) that report waited for
minutes, so `mrqa --prefect ...` did not end on SIGTERM. A backstop thread therefore sees every caught
signal independently of which Python handler is installed (CPython's C-level handler writes the signal's
number to the wakeup fd before any Python handler runs) and, `BACKSTOP_S` after a SIGTERM or SIGINT that
has not ended the process, ends the descendants and exits itself.

A signal's exception that lands in a finalizer (Prefect's `TerminationSignal` inside a garbage-collected
asyncio transport's `__del__`) would be printed as "Exception ignored in ..." with a traceback while the
process ends as it should; the CLI drops those, and prints every other such exception.

A SIGKILL cannot be caught; after one, the temporary server has to be stopped by hand.
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time

BACKSTOP_S = 10.0        # time the flow engine gets to report a crash before the process ends regardless
_wakeup: list[socket.socket] = []        # the wakeup socket pair, kept open for the process's life


def stop_children_on_signals(signals=(signal.SIGTERM, signal.SIGINT), grace_s: float = 5.0,
                             backstop_s: float = BACKSTOP_S) -> None:
    """Install the handler for `signals` and the backstop thread (main thread only)."""
    def handler(signum, _frame):
        for sig in signals:   # a second signal during the clean-up must not interrupt it
            signal.signal(sig, signal.SIG_IGN)
        _stop(signum, end_descendants(grace_s), "")

    for sig in signals:
        signal.signal(sig, handler)
    _start_backstop(signals, grace_s, backstop_s)
    sys.unraisablehook = _quiet_signal_unraisable


def _quiet_signal_unraisable(info, _default=sys.unraisablehook) -> None:
    """A signal's exception raised inside a finalizer (Prefect's engine raises `TerminationSignal` from
    its SIGTERM handler, and a garbage-collected asyncio transport's `__del__` may be what runs then)
    cannot propagate, so Python prints it as "Exception ignored in ..." with a traceback, while the
    process is ending as it should. Those are dropped; every other unraisable exception is printed."""
    exc = info.exc_value
    if isinstance(exc, (KeyboardInterrupt, SystemExit)) or type(exc).__name__ == "TerminationSignal":
        return
    _default(info)


def _stop(signum: int, n: int, how: str) -> None:
    sys.stdout.flush()
    sys.stderr.write(f"mrqa: stopped by {signal.Signals(signum).name}{how}; ended {n} child process(es)\n")
    sys.stderr.flush()
    os._exit(128 + signum)


def _start_backstop(signals, grace_s: float, backstop_s: float) -> None:
    """A daemon thread reading the signal wakeup fd: `backstop_s` after one of `signals` arrived, if the
    process still runs (a handler that should have ended it is stuck behind another), it ends it."""
    r, w = socket.socketpair()
    w.setblocking(False)
    try:
        signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
    except ValueError:            # not the main thread: no backstop, the handlers still work
        r.close()
        w.close()
        return
    _wakeup[:] = [r, w]
    os.register_at_fork(after_in_child=_forget_backstop)
    wanted = {int(s) for s in signals}

    def watch() -> None:
        while True:
            data = r.recv(64)
            hit = next((b for b in data if b in wanted), None)
            if not data or hit is not None:
                break
        if hit is None:
            return
        time.sleep(backstop_s)
        _stop(hit, end_descendants(grace_s), f" ({backstop_s:g} s later: the flow engine had not let the "
                                              "process end)")

    threading.Thread(target=watch, name="mrqa-signal-backstop", daemon=True).start()


def _forget_backstop() -> None:
    """In a forked child: the wakeup fd is the parent's socket, so a SIGTERM to the child (a pool ending
    its workers) would reach the parent's backstop and end the parent 10 s later. The child drops it."""
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:
        pass
    for sock in _wakeup:
        sock.close()
    _wakeup.clear()


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
