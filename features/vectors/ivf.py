"""All-pairs approximate kNN for the neighbour table: an IVF partition of the vectors, then blocked
exact search of each partition's members against the members of its nearest partitions.

Why not one LanceDB query per image: LanceDB 0.40 takes a matrix of queries, but runs them one by
one (index probe + prefilter + top-k each); measured here at 20k x 256 it gave 111 q/s (IVF_HNSW_SQ,
recall@100 0.917) and 36 q/s (IVF_PQ, 0.979) against 447 q/s for exact torch matmul, i.e. slower than
brute force. Building the table for ALL images is a batch job, so the IVF idea is applied in bulk:
  1. spherical k-means (seeded sample, `nlist` ~ sqrt(n) centroids) on the split's vectors;
  2. each vector goes to its nearest centroid (its list);
  3. each list's members are the queries of one block; its candidates are the members of the
     `nprobe` lists whose centroids are nearest to that list's centroid (itself first), grown until
     there are at least `min_candidates_factor * k` candidates;
  4. features.vectors.exact.exact_knn on (block queries x candidates) with the same-recipe mask, so
     same-recipe hits are dropped exactly and no over-fetch is needed.
Before the full pass, nprobe is checked on a seeded sample of rows against exact search and doubled
until the sample recall@k reaches the target (exact search when that would scan > 50% of pairs), so a
feature space without cluster structure degrades to exact search, not to a bad table.
Distances are exact cosine distances; only the candidate set is approximate. Queries left with fewer
neighbours than exist in the split are returned as such and redone exactly by the caller.
Deterministic: seeded sampling, candidates in ascending index order (ties break by index).
"""
from __future__ import annotations

import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from features.vectors.exact import exact_knn

log = logging.getLogger(__name__)


@dataclass
class IvfKnnConfig:
    """Settings of the bulk IVF neighbour build (defaults chosen with `mrqa bench knn`: at 100k x 256,
    nprobe 4 already gave recall@100 0.998 on the recipe-structured data, 8 gives margin for real
    feature spaces; the sample check widens it where that is not enough)."""
    nlist: int | None = None            # partitions; None: round(sqrt(n))
    nprobe: int | None = None           # lists scanned per block; None: max(8, 5% of nlist)
    min_candidates_factor: int = 10     # and at least this many x k candidates per block
    kmeans_iters: int = 10
    sample_per_list: int = 64           # k-means trains on nlist * this many sampled vectors
    seed: int = 0
    workers: int | None = None          # threads over list blocks; None: torch.get_num_threads()
    check_queries: int = 256            # seeded sample whose recall is checked against exact search
    target_recall: float = 0.95         # below it on the sample: nprobe doubled (exact past 50% scanned)

    def lists_for(self, n: int) -> int:
        return max(1, min(n, self.nlist or round(math.sqrt(n))))

    def probes_for(self, nlist: int) -> int:
        return min(nlist, self.nprobe or max(8, math.ceil(0.05 * nlist)))


def spherical_kmeans(x: torch.Tensor, nlist: int, iters: int, sample: int, seed: int) -> torch.Tensor:
    """Unit-norm centroids [nlist, d] trained on a seeded sample of the rows of x."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(x), generator=g)
    s = x[perm[:max(nlist, min(len(x), sample))]]
    c = s[:nlist].clone()
    for _ in range(iters):
        a = (s @ c.T).argmax(1)
        sums = torch.zeros_like(c).index_add_(0, a, s)
        filled = torch.bincount(a, minlength=nlist) > 0
        c = torch.where(filled[:, None], sums, c)        # an empty list keeps its old centroid
        c = c / c.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return c


def assign_lists(x: torch.Tensor, centroids: torch.Tensor, block: int = 65536) -> np.ndarray:
    return torch.cat([(x[s:s + block] @ centroids.T).argmax(1)
                      for s in range(0, len(x), block)]).numpy()


@dataclass
class IvfPartition:
    members: list[np.ndarray]     # row indices of each list
    sizes: np.ndarray
    near: np.ndarray              # [nlist, nlist] lists by centroid similarity, itself first
    build_s: float

    @property
    def nlist(self) -> int:
        return len(self.members)

    def candidates(self, c: int, nprobe: int, min_cand: int) -> np.ndarray:
        """Rows of the nprobe lists nearest to list c (more until min_cand rows), ascending."""
        take = nprobe
        while take < self.nlist and self.sizes[self.near[c, :take]].sum() < min_cand:
            take += 1
        return np.sort(np.concatenate([self.members[p] for p in self.near[c, :take]]))


def build_partition(mat: np.ndarray, cfg: IvfKnnConfig) -> IvfPartition:
    t0 = time.perf_counter()
    x = torch.from_numpy(mat)
    nlist = cfg.lists_for(len(mat))
    with _torch_threads(1):           # mid-sized ops: see _block_parallel
        cent = spherical_kmeans(x, nlist, cfg.kmeans_iters, nlist * cfg.sample_per_list, cfg.seed)
        lists = assign_lists(x, cent)
    order = np.argsort(lists, kind="stable")
    bounds = np.searchsorted(lists[order], np.arange(nlist + 1))
    near = torch.argsort(cent @ cent.T, dim=1, descending=True, stable=True).numpy()
    return IvfPartition([order[bounds[c]:bounds[c + 1]] for c in range(nlist)], np.diff(bounds),
                        near, time.perf_counter() - t0)


@contextmanager
def _torch_threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield before
    finally:
        torch.set_num_threads(before)


@contextmanager
def _block_parallel(workers: int | None):
    """Run list blocks in `workers` Python threads, each with single-threaded torch ops.

    Blocks are independent, so coarse-grained parallelism replaces torch's intra-op threads: measured
    under a loaded 2-core machine (load ~15), 2 intra-op threads made the many mid-sized block ops
    ~6x slower than 1 thread (OpenMP barriers), while a big exact matmul barely changed."""
    with _torch_threads(1) as before, ThreadPoolExecutor(
            max_workers=max(1, workers or before),
            initializer=torch.set_num_threads, initargs=(1,)) as pool:   # per-thread with OpenMP
        yield pool


def search_partition(mat, groups, k, part: IvfPartition, nprobe: int, min_cand: int,
                     rows: np.ndarray | None = None, desc: str | None = None,
                     workers: int | None = None):
    """(idx [n, k], dist [n, k], scanned pairs) for all rows, or only `rows` (others stay -1)."""
    n = len(mat)
    idx_out = np.full((n, k), -1, np.int64)
    dist_out = np.full((n, k), np.inf, np.float32)
    keep = None if rows is None else np.isin(np.arange(n), rows)

    def one_list(c: int) -> int:
        q = part.members[c] if keep is None else part.members[c][keep[part.members[c]]]
        if not len(q):
            return 0
        cand = part.candidates(c, nprobe, min_cand)
        i, d = exact_knn(mat[q], mat[cand], k, query_groups=groups[q], base_groups=groups[cand],
                         device="cpu")
        idx_out[q] = np.where(i >= 0, cand[np.maximum(i, 0)], -1)     # disjoint rows per list
        dist_out[q] = d
        return len(q) * len(cand)

    with _block_parallel(workers) as pool:
        scanned = sum(tqdm(pool.map(one_list, range(part.nlist)), total=part.nlist,
                           desc=desc or "ivf knn", unit="list", leave=False, disable=desc is None))
    return idx_out, dist_out, scanned


def ivf_all_knn(mat: np.ndarray, groups: np.ndarray, k: int, cfg: IvfKnnConfig | None = None,
                desc: str | None = None) -> tuple[np.ndarray, np.ndarray, dict]:
    """Every row's k nearest rows of another group: (idx [n, k], cosine dist [n, k], stats).

    nprobe is checked first on a seeded sample of cfg.check_queries rows against exact search and
    doubled until the sample's recall@k reaches cfg.target_recall; when that would scan more than
    half of all pairs, exact search is cheaper and is used instead (stats["nprobe"] is None).
    idx is -1 (dist +inf) where a row got fewer than k candidates of other groups.
    """
    cfg = cfg or IvfKnnConfig()
    n = len(mat)
    mat = np.ascontiguousarray(mat, dtype=np.float32)
    groups = np.asarray(groups)
    t0 = time.perf_counter()
    part = build_partition(mat, cfg)
    min_cand = cfg.min_candidates_factor * k
    nprobe = cfg.probes_for(part.nlist)
    check = np.sort(np.random.default_rng(cfg.seed).choice(n, min(n, cfg.check_queries), replace=False))
    ex_idx, _ = exact_knn(mat[check], mat, k, query_groups=groups[check], base_groups=groups)
    while True:
        idx, _, scanned = search_partition(mat, groups, k, part, nprobe, min_cand, check,
                                           workers=cfg.workers)
        recall = recall_at_k(idx[check], ex_idx)
        share = scanned / max(1, len(check) * n)
        if recall >= cfg.target_recall:
            break
        if share * 2 > 0.5 or nprobe >= part.nlist:     # the next try would scan > half
            log.warning("IVF neighbour recall %.3f < %.2f on the sample even at nprobe %d: "
                        "exact search instead", recall, cfg.target_recall, nprobe)
            idx, dist = exact_knn(mat, mat, k, query_groups=groups, base_groups=groups)
            return idx, dist, {"nlist": part.nlist, "nprobe": None, "scanned_share": 1.0,
                               "sample_recall": 1.0, "index_build_s": round(part.build_s, 2),
                               "search_s": round(time.perf_counter() - t0 - part.build_s, 2)}
        log.info("IVF neighbour recall %.3f < %.2f on the sample at nprobe %d: trying %d",
                 recall, cfg.target_recall, nprobe, min(part.nlist, 2 * nprobe))
        nprobe = min(part.nlist, 2 * nprobe)
    idx, dist, scanned = search_partition(mat, groups, k, part, nprobe, min_cand, None, desc,
                                          cfg.workers)
    stats = {"nlist": part.nlist, "nprobe": nprobe, "scanned_share": round(scanned / max(1, n * n), 4),
             "sample_recall": round(recall, 4), "index_build_s": round(part.build_s, 2),
             "search_s": round(time.perf_counter() - t0 - part.build_s, 2)}
    return idx, dist, stats


def recall_at_k(approx_idx: np.ndarray, exact_idx: np.ndarray) -> float:
    """Mean share of each query's exact K neighbours found by the approximate search."""
    hits = [len(set(a[a >= 0]) & set(e[e >= 0])) / max(1, (e >= 0).sum())
            for a, e in zip(approx_idx, exact_idx)]
    return float(np.mean(hits)) if hits else 1.0
