"""Jobs for the spawned-process tests (training/procs.py): a spawned process imports them by name."""
from __future__ import annotations

import os


def pid(job: int) -> tuple[int, int]:
    """The job and the process that ran it."""
    return job, os.getpid()


def die(job: int) -> int:
    """A worker that dies without a word on job 0 (as one the kernel kills would)."""
    if job == 0:
        os._exit(3)
    return job
