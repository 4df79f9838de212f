"""Benchmarks of the vector layer: ANN index vs exact search, and the neighbour-table build.

Each prints a figure and a ratio against the obvious alternative measured in the same run.
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from features.vectors.exact import exact_knn, numpy_exact_knn
from features.vectors.ivf import recall_at_k

if TYPE_CHECKING:                  # LanceDB is imported by the ANN benchmarks only
    from features.vectors.store import AnnConfig

# ----------------------------------------------------------------------------- ann

def clustered_vectors(n: int, dim: int, seed: int = 0, per_cluster: int = 50, noise: float = 0.5):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(max(1, n // per_cluster), dim)).astype(np.float32)
    x = centers[rng.integers(len(centers), size=n)] + noise * rng.normal(size=(n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def bench_ann(vectors: np.ndarray, groups: np.ndarray, k: int = 100, n_queries: int = 1000,
              configs: list[AnnConfig] | None = None, seed: int = 0, workdir: str | None = None) -> dict:
    """recall@k (other-group neighbours) and q/s of ANN configs vs exact, on one temp LanceDB table."""
    from features.vectors.store import FeatureStore
    n, dim = vectors.shape
    rng = np.random.default_rng(seed)
    qi = np.sort(rng.choice(n, min(n_queries, n), replace=False))
    q, qg = vectors[qi], groups[qi]
    fetch = k + int(np.bincount(groups).max())
    res: dict = {"n": n, "dim": dim, "k": k, "queries": len(qi)}
    t0 = time.perf_counter()
    ex_idx, _ = exact_knn(q, vectors, k, query_groups=qg, base_groups=groups)
    res["exact_torch_q_s"] = round(len(qi) / (time.perf_counter() - t0), 1)
    t0 = time.perf_counter()
    numpy_exact_knn(q, vectors, fetch)
    res["exact_numpy_q_s"] = round(len(qi) / (time.perf_counter() - t0), 1)
    configs = configs or default_sweep(n)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        store = FeatureStore(str(Path(tmp) / "lance"))
        ids, tbl = _bench_table(store, vectors, groups, "train")
        store.ensure_indexes(tbl)
        rows = []
        built = None
        for cfg in configs:
            key = (cfg.index_type, cfg.num_partitions, cfg.num_sub_vectors)
            if key != built:
                t0 = time.perf_counter()
                store.ensure_indexes(tbl, cfg, force_ann=True)
                build_s = time.perf_counter() - t0
                built = key
            t0 = time.perf_counter()
            out = store.search("bench", q, fetch, split="train", ann=cfg)
            secs = time.perf_counter() - t0
            got = _drop_same_group(out, qg, groups, k)
            rows.append({"index": cfg.index_type, "partitions": cfg.partitions_for(n),
                         "nprobes": cfg.nprobes, "ef": cfg.ef, "refine": cfg.refine_factor,
                         "build_s": round(build_s, 1), "q_s": round(len(qi) / secs, 1),
                         f"recall@{k}": round(recall_at_k(got, ex_idx), 4)})
        t0 = time.perf_counter()
        store.search("bench", q, fetch, split="train", exact=True)
        res["lance_flat_q_s"] = round(len(qi) / (time.perf_counter() - t0), 1)
    res["configs"] = rows
    return res


def _bench_table(store, mat: np.ndarray, groups: np.ndarray, split: str):
    """One image_vectors table of `mat` (one split, recipe = group) in `store`: (ids, table)."""
    from features.vectors.store import IMAGE_TABLE, vector_rows
    n = len(mat)
    ids = [f"v{i:07d}" for i in range(n)]
    store.upsert(IMAGE_TABLE, vector_rows(ids, mat, recipe_id=[f"g{g}" for g in groups],
                                          step_idx=np.zeros(n, np.int32), split=split, encoder_id="bench",
                                          sha256=""))
    return ids, store.find_table(IMAGE_TABLE, "bench")


def default_sweep(n: int) -> list[AnnConfig]:
    from features.vectors.store import AnnConfig
    hn = AnnConfig("IVF_HNSW_SQ").partitions_for(n)
    pq = AnnConfig("IVF_PQ").partitions_for(n)
    return ([AnnConfig("IVF_HNSW_SQ", nprobes=p) for p in sorted({max(1, hn // 4), max(1, hn // 2), hn})]
            + [AnnConfig("IVF_PQ", nprobes=p, refine_factor=r)
               for p, r in ((max(1, pq // 8), 5), (max(1, pq // 4), 10), (max(1, pq // 2), 10))]
            + [AnnConfig("IVF_FLAT", nprobes=max(1, pq // d)) for d in (16, 8, 4)])


def _drop_same_group(out: pa.Table, qg: np.ndarray, groups: np.ndarray, k: int) -> np.ndarray:
    qi = out["query_index"].to_numpy()
    cand = np.array([int(s[1:]) for s in out["id"].to_pylist()], dtype=np.int64)
    dist = out["_distance"].to_numpy()
    res = np.full((len(qg), k), -1, np.int64)
    order = np.lexsort((dist, qi))
    qi, cand = qi[order], cand[order]
    bounds = np.searchsorted(qi, np.arange(len(qg) + 1))
    for j in range(len(qg)):
        c = cand[bounds[j]:bounds[j + 1]]
        c = c[groups[c] != qg[j]][:k]
        res[j, :len(c)] = c
    return res


# ----------------------------------------------------------------------------- knn (neighbour build)

SPLITS = (("train", 0.8), ("val", 0.1), ("test", 0.1))


def recipe_vectors(n: int, dim: int = 256, seed: int = 0, images_per_recipe: int = 8
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Synthetic image vectors with recipe and split structure: (unit vectors [n, d], recipe label,
    split name). Each image = its step kind's centre (kinds grouped under topics) + its recipe's
    style + noise; a kind has ~100 images (fewer in one split), so a
    K=100 neighbour set spreads over several kinds of a topic and across recipes."""
    rng = np.random.default_rng([seed, n, dim])
    sd = 1 / np.sqrt(dim)
    n_kinds = max(16, n // 100)
    n_topics = max(4, n_kinds // 10)
    topics = rng.normal(size=(n_topics, dim)) * sd
    kinds = topics[rng.integers(n_topics, size=n_kinds)] + rng.normal(size=(n_kinds, dim)) * sd * 0.8
    recipe = np.arange(n) // images_per_recipe
    n_rec = int(recipe[-1]) + 1 if n else 0
    style = rng.normal(size=(n_rec, dim)) * sd * 0.6
    x = kinds[rng.integers(n_kinds, size=n)] + style[recipe] + rng.normal(size=(n, dim)) * sd * 0.6
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    cut = np.cumsum([share for _, share in SPLITS])
    split_of_recipe = np.searchsorted(cut, rng.random(n_rec), side="right").clip(0, len(SPLITS) - 1)
    split = np.array([name for name, _ in SPLITS], dtype=object)[split_of_recipe[recipe]]
    return x, recipe, split


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _lance_build(mat, groups, k, qsel, ex_idx, workdir, cfg: AnnConfig) -> dict:
    """LanceDB route on one split: index build time, batched-query q/s and recall on the sample."""
    from features.vectors.neighbours import _lance_split_knn
    from features.vectors.store import FeatureStore
    n = len(mat)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        store = FeatureStore(str(Path(tmp) / "lance"), ann=cfg)
        ids, tbl = _bench_table(store, mat, groups, "s")
        _, build_s = _timed(lambda: store.ensure_indexes(tbl, cfg, force_ann=True))
        (idx, _, info), q_s = _timed(lambda: _lance_split_knn(store, "bench", "s", ids, mat, groups,
                                                              k, 512, cfg, None, rows=qsel))
    return {"index": cfg.index_type, "index_build_s": round(build_s, 1), "q_s": round(len(qsel) / q_s, 1),
            "est_total_s": round(build_s + n * q_s / len(qsel), 1),
            f"recall@{k}": round(recall_at_k(idx[qsel], ex_idx), 4),
            "exact_fallback_queries": info["exact_fallback"]}


def knn_data(kind: str, n: int, dim: int, seed: int):
    """(vectors, recipe label, split name) for `bench knn`: "recipes" (recipe_vectors) or
    "clustered" (isolated clusters of 50, 4 images per recipe, one split: the worst case for IVF)."""
    if kind == "recipes":
        return recipe_vectors(n, dim, seed)
    return clustered_vectors(n, dim, seed), np.arange(n) // 4, np.full(n, "train", dtype=object)


def bench_knn(sizes: list[int], dim: int = 256, k: int = 100, queries: int = 2000, seed: int = 0,
              lance: bool = False, data: str = "recipes", workdir: str | None = None, log=print) -> dict:
    """Neighbour-table build at each size (per split, same-recipe pairs excluded): numpy exact and
    torch exact (timed on `queries` sampled queries against the full split, scaled to all rows:
    exact cost is linear in the number of queries), the IVF ANN build (timed in full, index build
    shown apart) with recall@k on the sampled queries, and optionally the LanceDB index route."""
    from features.vectors.neighbours import split_knn
    rows = []
    split_knn(recipe_vectors(2000, dim, seed)[0], np.arange(2000) // 8, k, "ann")   # warm-up (torch init)
    for n in sizes:
        load = os.getloadavg()[0]
        vecs, recipe, split = knn_data(data, n, dim, seed)
        rng = np.random.default_rng([seed, n])
        tot = {"numpy_s": 0.0, "torch_s": 0.0, "ann_s": 0.0, "ann_index_s": 0.0, "scanned": 0.0}
        hits, lance_res, methods = [], None, set()
        for name, _ in SPLITS:
            sel = np.flatnonzero(split == name)
            if len(sel) < 2:
                continue
            mat = np.ascontiguousarray(vecs[sel])
            _, groups = np.unique(recipe[sel], return_inverse=True)
            nq = min(len(sel), max(50, round(queries * len(sel) / n)))
            qsel = np.sort(rng.choice(len(sel), nq, replace=False))
            fetch = min(len(sel), k + int(np.bincount(groups).max()))   # over-fetch: same-recipe drop
            _, t_np = _timed(lambda: numpy_exact_knn(mat[qsel], mat, fetch))
            (ex_idx, _), t_t = _timed(lambda: exact_knn(mat[qsel], mat, k, query_groups=groups[qsel],
                                                        base_groups=groups))
            (idx, _, info), t_ann = _timed(lambda: split_knn(mat, groups, k, "ann"))
            methods.add(info["method"])
            scale = len(sel) / nq
            tot["numpy_s"] += t_np * scale
            tot["torch_s"] += t_t * scale
            tot["ann_s"] += t_ann
            tot["ann_index_s"] += info["index_build_s"]
            tot["scanned"] += info["scanned_share"] * len(sel) ** 2
            hits.append((recall_at_k(idx[qsel], ex_idx), nq))
            if lance and name == "train":
                from features.vectors.store import AnnConfig
                lance_res = _lance_build(mat, groups, k, qsel, ex_idx, workdir, AnnConfig())
        recall = sum(r * w for r, w in hits) / sum(w for _, w in hits)
        scanned = tot.pop("scanned") / sum((split == name).sum() ** 2 for name, _ in SPLITS)
        row = {"n": n, **{key: round(v, 2) for key, v in tot.items()}, f"recall@{k}": round(recall, 4),
               "ann_scanned_share": round(float(scanned), 4), "ann_method": "+".join(sorted(methods)),
               "ann_vs_numpy": round(tot["numpy_s"] / tot["ann_s"], 2),
               "ann_vs_torch": round(tot["torch_s"] / tot["ann_s"], 2),
               "load_1min": round(load, 2), "load_after": round(os.getloadavg()[0], 2)}
        if lance_res:
            row["lance_train_split"] = lance_res
        rows.append(row)
        log(row)
    faster = [r["n"] for r in rows if r["ann_s"] < r["numpy_s"]]
    crossover = None
    for i, r in enumerate(rows):
        if all(x["ann_s"] < x["numpy_s"] for x in rows[i:]):
            crossover = r["n"]
            break
    return {"data": data, "dim": dim, "k": k, "queries_sampled": queries, "sizes": rows,
            "ann_faster_at": faster,
            "crossover_n": crossover,
            "crossover_note": (f"ANN build faster than numpy exact from n = {crossover} on"
                               if crossover else "ANN build never faster than numpy exact here")}


MIN_STORE_VECTORS = 4096          # fewer image vectors in the store: `bench ann` uses synthetic ones


def bench_ann_store_or_synthetic(encoder_id: str | None, n: int | None = None, dim: int = 256, k: int = 100,
                                 queries: int = 1000, seed: int = 0, require_store: bool = False) -> dict:
    """`bench_ann` on the image vectors of `encoder_id` in the feature store (groups = recipes) when it
    holds at least MIN_STORE_VECTORS, else on `n` (default 20000) synthetic clustered vectors of `dim`
    with 4 images per recipe; `source` says which. Each config also gets its q/s ratio against
    exact torch and exact numpy search. Raises ValueError when `require_store` and the store has fewer."""
    from features.vectors.store import FeatureStore, vectors_matrix
    rows = FeatureStore().image_rows(encoder_id) if encoder_id else None
    if rows is not None and rows.num_rows >= MIN_STORE_VECTORS:
        d = rows.schema.field("vector").type.list_size
        vecs = vectors_matrix(rows["vector"], d)
        _, groups = np.unique(np.array(rows["recipe_id"].to_pylist(), dtype=object), return_inverse=True)
        res = {"source": f"store ({encoder_id})", **bench_ann(vecs, groups, k, queries, seed=seed)}
    elif require_store:
        raise ValueError(f"encoder {encoder_id} has fewer than {MIN_STORE_VECTORS} image vectors; "
                         "omit --encoder for synthetic data")
    else:
        n = n or 20000
        groups = np.arange(n) // 4                     # 4 images per "recipe"
        res = {"source": "synthetic clustered", **bench_ann(clustered_vectors(n, dim, seed), groups, k, queries,
                                                            seed=seed)}
    for c in res["configs"]:
        c["q_s_vs_exact_torch"] = round(c["q_s"] / res["exact_torch_q_s"], 3)
        c["q_s_vs_exact_numpy"] = round(c["q_s"] / res["exact_numpy_q_s"], 3)
    return res


def format_knn_row(r: dict, k: int) -> str:
    """One `bench_knn` size row as the line `mrqa bench knn` prints while it runs."""
    line = (f"n={r['n']:>7}  numpy exact {r['numpy_s']:>7.1f} s  torch exact {r['torch_s']:>7.1f} s  "
            f"ANN build {r['ann_s']:>6.1f} s (index {r['ann_index_s']:.1f} s, scanned "
            f"{100 * r['ann_scanned_share']:.1f}%)  recall@{k} {r[f'recall@{k}']:.4f}  "
            f"ANN vs numpy x{r['ann_vs_numpy']:.2f}  vs torch x{r['ann_vs_torch']:.2f}  "
            f"load {r['load_1min']:.1f}")
    if "lance_train_split" in r:
        line += f"\n         LanceDB index route (train split): {r['lance_train_split']}"
    return line
