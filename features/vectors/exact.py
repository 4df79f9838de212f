"""Exact k-nearest-neighbour search by cosine distance: torch matmul in blocks, GPU or CPU.

Used to check the ANN index (recall@K) and instead of it when a table is small. Vectors are
expected L2-normalised, so cosine distance = 1 - <q, b>.
"""
from __future__ import annotations

import numpy as np
import torch

from features.embed.encoders import pick_device

MAX_BLOCK_ELEMENTS = 1 << 26      # similarity block of at most 64M floats (256 MB)


def exact_knn(queries: np.ndarray, base: np.ndarray, k: int, exclude_mask: np.ndarray | None = None,
              block: int = 4096, device: str | torch.device | None = None,
              query_groups: np.ndarray | None = None, base_groups: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    """Indices into `base` [nq, k] and cosine distances [nq, k] of each query's k nearest.

    Excluded pairs: `exclude_mask` [nq, nb] (True = never return), and/or equal group labels
    (`query_groups[i] == base_groups[j]`, e.g. same recipe) computed per block without an nq x nb
    mask. Where fewer than k candidates remain, idx is -1 and dist is +inf. Ties break by base index.
    """
    dev = pick_device(device)
    nq, nb = len(queries), len(base)
    k_eff = min(k, nb)
    idx_out = np.full((nq, k), -1, dtype=np.int64)
    dist_out = np.full((nq, k), np.inf, dtype=np.float32)
    if nq == 0 or nb == 0 or k == 0:
        return idx_out, dist_out
    b = torch.as_tensor(np.ascontiguousarray(base, dtype=np.float32), device=dev)
    bg = torch.as_tensor(base_groups, device=dev) if base_groups is not None else None
    rows = max(1, min(block, MAX_BLOCK_ELEMENTS // max(nb, 1)))
    for s in range(0, nq, rows):
        e = min(nq, s + rows)
        q = torch.as_tensor(np.ascontiguousarray(queries[s:e], dtype=np.float32), device=dev)
        sim = q @ b.T
        if exclude_mask is not None:
            sim.masked_fill_(torch.as_tensor(np.asarray(exclude_mask[s:e]), device=dev), -np.inf)
        if bg is not None and query_groups is not None:
            qg = torch.as_tensor(query_groups[s:e], device=dev)
            sim.masked_fill_(qg[:, None] == bg[None, :], -np.inf)
        # stable tie-breaking: topk on the similarity, then a sort by (-sim, index)
        top_sim, top_idx = torch.topk(sim, k_eff, dim=1, largest=True, sorted=True)
        top_sim, top_idx = top_sim.cpu().numpy(), top_idx.cpu().numpy()
        order = np.lexsort((top_idx, -top_sim), axis=-1) if k_eff > 1 else None
        if order is not None:
            top_sim = np.take_along_axis(top_sim, order, 1)
            top_idx = np.take_along_axis(top_idx, order, 1)
        valid = np.isfinite(top_sim)
        idx_out[s:e, :k_eff] = np.where(valid, top_idx, -1)
        dist_out[s:e, :k_eff] = np.where(valid, 1.0 - top_sim, np.inf)
    return idx_out, dist_out


def numpy_exact_knn(queries: np.ndarray, base: np.ndarray, k: int, block: int = 1024
                    ) -> np.ndarray:
    """The obvious alternative for benchmarks: numpy matmul + argpartition per block (indices only)."""
    out = np.empty((len(queries), k), dtype=np.int64)
    for s in range(0, len(queries), block):
        sim = queries[s:s + block] @ base.T
        part = np.argpartition(-sim, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(sim, part, 1), axis=1)
        out[s:s + block] = np.take_along_axis(part, order, 1)
    return out
