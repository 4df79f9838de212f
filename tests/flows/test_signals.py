"""flows/signals.py: SIGTERM ends `mrqa` and its children; the backstop ends the process when a handler that
should have done so is stuck, and a forked child's SIGTERM never ends the parent. Each case runs in a
fresh interpreter (the handlers and the wakeup fd are process-wide). The CLI end to end, with a real
Prefect server stopped by SIGSTOP, is tests/hostile/test_crawl_faults.py."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def test_the_backstop_ends_the_process_when_the_handler_in_place_is_stuck():
    """Another handler replaced ours (as Prefect's engine does during a flow run) and blocks: the process
    still ends with 143, `backstop_s` after the signal, and says why."""
    t0 = time.monotonic()
    res = _run("""
        import os, signal, time
        from flows.signals import stop_children_on_signals
        stop_children_on_signals(backstop_s=1.0, grace_s=1.0)
        signal.signal(signal.SIGTERM, lambda *_: time.sleep(60))     # a handler that never lets go
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)
        print("still running")
    """)
    assert res.returncode == 143, res.stderr[-2000:]
    assert "still running" not in res.stdout
    assert "1 s later: the flow engine had not let the process end" in res.stderr
    assert time.monotonic() - t0 < 30


def test_our_handler_ends_the_process_at_once():
    res = _run("""
        import os, signal, time
        from flows.signals import stop_children_on_signals
        stop_children_on_signals(backstop_s=30.0)
        t0 = time.monotonic()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)
    """)
    assert res.returncode == 143 and "stopped by SIGTERM; ended 0 child process(es)" in res.stderr, res.stderr


def test_a_forked_childs_sigterm_does_not_end_the_parent():
    """A pool's forked worker inherits the handlers; ending it with SIGTERM must not wake the parent's
    backstop (the wakeup fd would otherwise be the parent's socket)."""
    res = _run("""
        import multiprocessing, os, signal, time
        from flows.signals import stop_children_on_signals
        stop_children_on_signals(backstop_s=1.0, grace_s=1.0)
        p = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
        p.start()
        time.sleep(0.5)
        os.kill(p.pid, signal.SIGTERM)
        p.join(10)
        time.sleep(3)                        # three times the backstop
        print("parent alive, child exit", p.exitcode)
    """)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "parent alive, child exit 143" in res.stdout


def test_a_signal_raised_in_a_finalizer_prints_no_traceback():
    """Prefect's SIGTERM handler raises TerminationSignal wherever the main thread is, a finalizer
    (`__del__`) included; Python then prints "Exception ignored in ..." and a traceback while the CLI
    ends as it should. The CLI drops those, and still prints any other exception of a finalizer."""
    res = _run("""
        import gc
        from flows.signals import stop_children_on_signals
        stop_children_on_signals(backstop_s=30.0)
        class TerminationSignal(BaseException):          # prefect.exceptions' name for it
            pass
        class Raises:
            def __init__(self, exc):
                self.exc = exc
            def __del__(self):
                raise self.exc
        Raises(TerminationSignal("SIGTERM"))
        Raises(KeyboardInterrupt())
        gc.collect()
        print("alive")
        Raises(ValueError("a real bug in a finalizer"))
    """)
    assert res.returncode == 0 and res.stdout.strip() == "alive", res.stderr[-2000:]
    assert "TerminationSignal" not in res.stderr and "KeyboardInterrupt" not in res.stderr
    assert res.stderr.count("Traceback") == 1 and "a real bug in a finalizer" in res.stderr, res.stderr
