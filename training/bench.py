"""`mrqa bench train`: training throughput (examples/s) of GM3C on a real exported dataset.

Compares batch size 32 with batch size 1 (the obvious alternative: per-question updates) on the
same questions; Adam's foreach step (what `fit` uses) with its per-tensor step (torch's default on
CPU), and whether both end at the same weights; and on CUDA also AMP with no AMP. Times whole
optimisation steps (forward, backward, Adam) after one warm-up batch.
"""
from __future__ import annotations

import os
import time
from dataclasses import replace

import numpy as np
import torch
import torch.nn.functional as F

from training.config import ModelConfig, TrainConfig
from training.data import QADataset
from training.train import autocast, build_model, pick_device, set_seed


def throughput(ds: QADataset, model_cfg: ModelConfig, cfg: TrainConfig, n_examples: int = 256,
               foreach: bool = True, weights: dict | None = None) -> float:
    """Examples/s of training steps over the first `n_examples` train questions; `foreach`: Adam's
    multi-tensor step (False: one tensor at a time); `weights`: filled with the final weights."""
    set_seed(cfg.seed)
    device = pick_device(cfg)
    model = build_model(ds, model_cfg).to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, foreach=foreach)
    scaler = torch.amp.GradScaler("cuda", enabled=cfg.amp and device.type == "cuda")
    n = min(n_examples, len(ds.splits["train"]))
    idx = np.arange(n)

    def step(batch):
        with autocast(device, cfg.amp):
            loss = F.cross_entropy(model(batch).float(), batch["answer"])
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    step(ds.batch("train", idx[:cfg.batch_size], device))          # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for s in range(0, n, cfg.batch_size):
        step(ds.batch("train", idx[s:s + cfg.batch_size], device))
    if device.type == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    if weights is not None:
        weights.update({k: v.detach().cpu().clone() for k, v in model.state_dict().items()})
    return n / secs


def bench_train(ds: QADataset, model_cfg: ModelConfig, cfg: TrainConfig, n_examples: int = 256) -> list[str]:
    threads = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        dev = pick_device(cfg)
        lines = [f"dataset {ds.dataset_id} ({ds.task}), scorer {model_cfg.scorer}, device {dev}, "
                 f"threads {torch.get_num_threads()}, {min(n_examples, len(ds.splits['train']))} train questions"]
        b32 = throughput(ds, model_cfg, replace(cfg, batch_size=32), n_examples)
        b1 = throughput(ds, model_cfg, replace(cfg, batch_size=1), min(n_examples, 64))
        lines.append(f"batch 32: {b32:,.1f} examples/s; batch 1: {b1:,.1f} examples/s; ratio {b32 / b1:.1f}x "
                     f"(load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs)")
        w_each, w_one = {}, {}      # batch 32 again, now warm, each step right beside its alternative
        each = throughput(ds, model_cfg, replace(cfg, batch_size=32), n_examples, True, w_each)
        one = throughput(ds, model_cfg, replace(cfg, batch_size=32), n_examples, False, w_one)
        same = w_each.keys() == w_one.keys() and all(torch.equal(w_each[k], w_one[k]) for k in w_each)
        lines.append(f"Adam foreach (fit's): {each:,.1f} examples/s; per tensor (torch's CPU default): {one:,.1f} "
                     f"examples/s; ratio {each / one:.2f}x; same weights: {same}")
        if dev.type == "cuda":
            off = throughput(ds, model_cfg, replace(cfg, batch_size=32, amp=False), n_examples)
            lines.append(f"AMP (fp16): {b32:,.1f} examples/s; no AMP: {off:,.1f} examples/s; ratio {b32 / off:.2f}x")
        return lines
    finally:
        torch.set_num_threads(threads)
