"""`spawn_map`: jobs in spawned processes of one thread each (the pooled adversary, the reading check,
the report's probes and plots, the tree probe's folds); `spawn_shares`: the same with each process's share of
the jobs fixed before they start (fold jobs); `in_turn`: the jobs in this process, on one thread too, so a
job gives the same bytes wherever it runs; `kept_processes`: inside it, `spawn_map` keeps its processes for
the next call instead of starting new ones (the report's probes and plots)."""
from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager

ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
_KEPT = threading.local()          # this thread's kept pools, {n: executor}, inside `kept_processes`


@contextmanager
def _one_thread_env():
    """ONE_THREAD in this process's environment while the block runs (a spawned process inherits it)."""
    saved = {k: os.environ.get(k) for k in ONE_THREAD}
    os.environ.update(ONE_THREAD)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _pool(n: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"))


@contextmanager
def kept_processes():
    """Inside it, `spawn_map` on this thread starts its `n` processes once and hands them the jobs of every
    later call of the same `n`, so a run of several short pools (the report: the tree, look and words
    probes, then the plots) pays a process's start (its Python and its imports, a few seconds on 2 cores)
    once. Only for jobs whose results do not depend on what ran in the process before them: never GM3C fold
    jobs, whose last float32 bits MKL rounds by the process's memory state (`spawn_shares` always starts
    its own). The processes end when the block does; a pool a crashed worker broke is not used again."""
    outer = getattr(_KEPT, "pools", None)
    _KEPT.pools = {}
    try:
        yield
    finally:
        pools, _KEPT.pools = _KEPT.pools, outer
        for ex in pools.values():
            ex.shutdown(wait=True, cancel_futures=True)


def spawn_map(fn, jobs: list, n: int, fresh: bool = False) -> list:
    """[fn(job) for job in jobs] in `n` spawned processes of one thread each (inside `kept_processes`, the
    processes kept from an earlier call, unless `fresh`). One thread per process: OpenMP threads that spin on
    a core another process needs cost more than they give (3 runs in 2 processes of 2 threads each took 2.4x
    the time of running them in turn)."""
    pools = None if fresh else getattr(_KEPT, "pools", None)
    with _one_thread_env():
        if pools is None:
            with _pool(n) as ex:
                return list(ex.map(fn, jobs))
        ex = pools.get(n)
        if ex is None:
            ex = pools[n] = _pool(n)
        try:
            return list(ex.map(fn, jobs))
        except BrokenProcessPool:
            pools.pop(n, None)
            ex.shutdown(wait=False, cancel_futures=True)
            raise


def in_turn(fn, jobs: list) -> list:
    """[fn(job) for job in jobs] in this process, on one torch, BLAS and OpenMP thread, as a spawned process
    of `spawn_map` runs them: sums taken over another thread count round otherwise (on an AMD EPYC machine a
    GM3C check on 2 threads early-stopped at another epoch and read up to 3 points more of a dataset).
    One thread also cost less here: the demo's check of 2,488 questions took 44.6 s against 55.3 s."""
    import torch
    from threadpoolctl import threadpool_limits
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(1):
            return [fn(j) for j in jobs]
    finally:
        torch.set_num_threads(before)


def _in_order(share: tuple) -> list:
    """[fn(job) for job in jobs] of one process's share (fn, jobs)."""
    fn, jobs = share
    return [fn(j) for j in jobs]


def spawn_shares(fn, jobs: list, n: int) -> list:
    """`spawn_map` with the jobs shared out before they start: process i runs jobs i, i + n, i + 2n, ... in
    order, so each job runs in the same process after the same jobs on every call. MKL may round a model
    trained in another process's memory state differently in the last float32 bits; a pool that hands the
    next job to whichever process is free would make that a matter of timing. Results in `jobs` order."""
    n = max(1, min(n, len(jobs)))
    shares = spawn_map(_in_order, [(fn, jobs[i::n]) for i in range(n)], n, fresh=True)
    out = [None] * len(jobs)
    for i, res in enumerate(shares):
        out[i::n] = res
    return out
