"""training/procs.py: kept processes serve every later pool of the block; fold jobs never share them."""
from __future__ import annotations

from concurrent.futures.process import BrokenProcessPool

import psutil
import pytest
from proc_jobs import die, pid

from training.procs import kept_processes, spawn_map, spawn_shares


def _pids(got: list[tuple[int, int]], jobs: list[int]) -> set[int]:
    assert [j for j, _ in got] == jobs                   # every result, in the order of the jobs
    return {p for _, p in got}


def _alive(p: int) -> bool:
    try:
        return psutil.Process(p).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_kept_processes_serve_every_later_call_and_end_with_the_block():
    jobs = list(range(6))
    with kept_processes():
        # Which of the 2 processes serves a job is a matter of timing (on a loaded machine one may take all 6
        # before the other has started), so the check is on the union: no third process, and each still alive.
        first = _pids(spawn_map(pid, jobs, 2), jobs)
        kept = first | _pids(spawn_map(pid, jobs, 2), jobs)
        assert len(kept) <= 2                              # the same processes, none started anew
        assert all(_alive(p) for p in kept)                # kept after their call, not ended with it
        fold_jobs = _pids(spawn_shares(pid, jobs, 2), jobs)
        assert not fold_jobs & kept                        # fold jobs always start processes of their own
    assert not any(_alive(p) for p in kept)
    outside = [_pids(spawn_map(pid, jobs, 2), jobs) for _ in range(2)]
    assert not outside[0] & outside[1]                     # outside the block every call starts its own


def test_a_pool_a_dead_worker_broke_is_not_used_again():
    with kept_processes():
        with pytest.raises(BrokenProcessPool):
            spawn_map(die, [0, 1, 2], 2)
        assert spawn_map(die, [1, 2, 3], 2) == [1, 2, 3]  # a new pool: the block goes on
