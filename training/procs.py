"""`spawn_map`: jobs in spawned processes of one thread each (the pooled adversary, the reading check)."""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def spawn_map(fn, jobs: list, n: int) -> list:
    """[fn(job) for job in jobs] in `n` spawned processes of one thread each. One thread per process:
    OpenMP threads that spin on a core another process needs cost more than they give (3 runs in 2
    processes of 2 threads each took 2.4x the time of running them in turn)."""
    saved = {k: os.environ.get(k) for k in ONE_THREAD}
    os.environ.update(ONE_THREAD)
    try:
        with ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn")) as ex:
            return list(ex.map(fn, jobs))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
