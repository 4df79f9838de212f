"""torchrun DDP for the GM3C trainer: process group (gloo on CPU, NCCL on CUDA), the sharded
epoch order, and a launcher.

    torchrun --nproc_per_node 2 -m training.train --export DIR --dataset D --tiny
    launch(2, ["--export", DIR, "--dataset", D, "--tiny"])       # what `mrqa train --nproc 2` does

Same seed semantics as one process: every rank seeds identically (DDP also broadcasts rank 0's
weights), the epoch's permutation is DistributedSampler's (seed + epoch) in both cases, and each
rank trains on batch_size / world of every global batch, so a DDP step averages the gradients of
the same questions a single-process step sees. Rank 0 writes the checkpoint, metrics and `runs`.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from training.config import TrainConfig


def pick_device(cfg: TrainConfig) -> torch.device:
    if cfg.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg.device)


@dataclass
class Dist:
    """This process's place in a torchrun job (world 1: plain single-process training)."""
    rank: int = 0
    world: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def sum(self, *values: float) -> list[float]:
        """All-reduce (sum) of a few numbers over the ranks (identity in a single process)."""
        if self.world == 1:
            return list(values)
        import torch.distributed as dist
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t)
        return t.tolist()


def init_distributed(cfg: TrainConfig) -> tuple[Dist, torch.device]:
    """Under torchrun (WORLD_SIZE > 1): join the process group, NCCL on CUDA (one GPU per local
    rank) or gloo on CPU. Otherwise a single process on `pick_device`."""
    device = pick_device(cfg)
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return Dist(), device
    import torch.distributed as dist
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Dist(dist.get_rank(), dist.get_world_size()), device


def epoch_order(n: int, cfg: TrainConfig, epoch: int, d: Dist) -> np.ndarray:
    """This rank's share of the epoch's shuffle (DistributedSampler: permutation seeded by
    seed + epoch, padded to a multiple of the world, rank r takes every world-th index). With
    world 1 it is the whole permutation, so a DDP step sees the same global batch as one process."""
    from torch.utils.data import DistributedSampler
    sampler = DistributedSampler(range(n), num_replicas=d.world, rank=d.rank, shuffle=True, seed=cfg.seed)
    sampler.set_epoch(epoch)
    return np.fromiter(iter(sampler), dtype=np.int64)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def finish(d: Dist) -> None:
    """Wait for every rank (rank 0 tests after training), then leave the process group."""
    if d.world > 1:
        import torch.distributed as dist
        dist.barrier()
        dist.destroy_process_group()


def launch(nproc: int, argv: list[str], env: dict | None = None, timeout: float | None = None) -> dict:
    """Run `training.train argv` on `nproc` local processes through torchrun (loopback rendezvous on
    a free port); returns rank 0's metrics. Raises RuntimeError with the workers' output on failure."""
    with tempfile.TemporaryDirectory(prefix="mrqa-ddp-") as tmp:
        out = Path(tmp) / "metrics.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(nproc),
               "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
               "-m", "training.train", *argv, "--metrics-json", str(out)]
        e = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), **(env or {})}
        p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0 or not out.exists():
            raise RuntimeError(f"torchrun exited with {p.returncode}:\n{(p.stdout + p.stderr)[-4000:]}")
        return json.loads(out.read_text())
