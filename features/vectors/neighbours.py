"""The `neighbours` table: each image's K nearest images from OTHER recipes of the SAME split.

Computed once per encoder and read by every knob setting (DuckDB table, sql/schema/051_neighbours.sql).
Each split is searched on its own (the split prefilter); same-recipe pairs are masked.
- method "ann" (the default ANN build): features.vectors.ivf - an IVF partition of the split, then
  blocked exact search of each partition against its nearest partitions (no per-query calls).
- method "lance": batched queries on the LanceDB ANN index of `image_vectors` (prefilter on split,
  over-fetch K + the largest recipe so K other-recipe hits remain). Kept as an alternative and for
  comparison (`mrqa bench knn --lance`); it has no recall check of its own.
- method "exact": features.vectors.exact.exact_knn (torch matmul in blocks).
- method "auto": exact when the split has at most EXACT_AUTO_MAX images or CUDA is present, "ann"
  otherwise.
  EXACT_AUTO_MAX comes from the crossover measured by `mrqa bench knn` (comment below).
Both ANN methods redo exactly (and count) the queries that end with fewer neighbours than the split
holds. Distances are always exact cosine distances (1 - cos) of the stored float32 vectors, so only
the candidate set of an ANN path is approximate; ties break by neighbour index (id order).
"""
from __future__ import annotations

import logging
import time

import duckdb
import numpy as np
import pyarrow as pa
import torch
from tqdm import tqdm

from etl.warehouse import transaction
from features.vectors.exact import exact_knn
from features.vectors.ivf import IvfKnnConfig, ivf_all_knn, recall_at_k  # noqa: F401 (re-export)
from features.vectors.store import IMAGE_TABLE, AnnConfig, FeatureStore, vectors_matrix

log = logging.getLogger(__name__)

METHODS = ("auto", "ann", "exact", "lance")
# `mrqa bench knn` (2 shared cores, 256-d, K=100): the IVF build overtakes numpy exact search between
# 5k and 10k images per split; below this exact search is as fast and has recall 1.
EXACT_AUTO_MAX = 8_000


def _need(groups: np.ndarray, k: int) -> np.ndarray:
    """How many other-group rows each row can have as neighbours (at most k)."""
    per_group = np.bincount(groups)
    return np.minimum(k, len(groups) - per_group[groups])


def _redo_short_rows(mat, groups, k, idx, dist) -> int:
    """Rows with fewer valid neighbours than exist: recomputed exactly in place; returns their count."""
    short = np.flatnonzero((idx >= 0).sum(1) < _need(groups, k))
    if len(short):
        ei, ed = exact_knn(mat[short], mat, k, query_groups=groups[short], base_groups=groups)
        idx[short], dist[short] = ei, ed
    return len(short)


def canonical(mat: np.ndarray, idx: np.ndarray, rows: np.ndarray | None = None, chunk: int = 1024
              ) -> tuple[np.ndarray, np.ndarray]:
    """Distances recomputed by one fixed procedure (float32 einsum, no BLAS) and each row ordered by
    (distance, index): BLAS matmuls of differently shaped blocks differ in the last bits, so this
    makes the table byte-identical across re-runs and methods for the same neighbour sets."""
    rows = np.arange(len(idx)) if rows is None else rows
    idx = idx.copy()
    dist = np.full(idx.shape, np.inf, np.float32)
    for s in range(0, len(rows), chunk):
        r = rows[s:s + chunk]
        nb = idx[r]
        sims = np.einsum("ckd,cd->ck", mat[np.maximum(nb, 0)], mat[r])
        d = np.where(nb >= 0, np.float32(1) - sims, np.float32(np.inf)).astype(np.float32)
        order = np.lexsort((nb, d), axis=-1)
        idx[r] = np.take_along_axis(nb, order, 1)
        dist[r] = np.take_along_axis(d, order, 1)
    return idx, dist


def split_knn(mat: np.ndarray, groups: np.ndarray, k: int, method: str = "auto",
              ivf: IvfKnnConfig | None = None, desc: str | None = None
              ) -> tuple[np.ndarray, np.ndarray, dict]:
    """One split's table as arrays: (idx [n, k] into mat, cosine dist [n, k], info).

    groups: integer recipe label per row (same label = never neighbours). method: auto|ann|exact
    ("lance" needs the store: see compute_neighbours).
    """
    groups = np.asarray(groups)
    use = method
    if method == "auto":     # on a GPU exact matmul beats the CPU IVF build at any size here
        use = "exact" if len(mat) <= EXACT_AUTO_MAX or torch.cuda.is_available() else "ann"
    info: dict = {"images": len(mat), "method": use}
    if use == "exact":
        idx, dist = exact_knn(mat, mat, k, query_groups=groups, base_groups=groups)
    elif use == "ann":
        idx, dist, stats = ivf_all_knn(mat, groups, k, ivf, desc)
        info.update(stats)
        if stats["nprobe"] is None:
            info["method"] = "exact"
        else:
            info["exact_fallback"] = _redo_short_rows(mat, groups, k, idx, dist)
    else:
        raise ValueError(f"method must be one of {METHODS}, not {method!r}")
    idx, dist = canonical(mat, idx)
    return idx, dist, info


def _lance_split_knn(store, encoder_id, split, ids, mat, groups, k, batch, ann, desc, rows=None):
    """LanceDB ANN candidates (batched queries, split prefilter, over-fetch) -> exact re-ranking.

    rows: the row indices to query (default all); other rows stay -1."""
    n = len(ids)
    rows = np.arange(n) if rows is None else np.asarray(rows)
    pos = {s: i for i, s in enumerate(ids)}
    fetch = min(n, k + int(np.bincount(groups).max()))
    idx_out = np.full((n, k), -1, np.int64)
    dist_out = np.full((n, k), np.inf, np.float32)
    for s in tqdm(range(0, len(rows), batch), desc=desc, unit="batch", leave=False, disable=desc is None):
        qrows = rows[s:s + batch]
        res = store.search(encoder_id, mat[qrows], fetch, split=split, ann=ann)
        qi = res["query_index"].to_numpy()
        cand = np.array([pos[x] for x in res["id"].to_pylist()], dtype=np.int64)
        order = np.lexsort((cand, qi))
        qi, cand = qi[order], cand[order]
        bounds = np.searchsorted(qi, np.arange(len(qrows) + 1))
        for j, i in enumerate(qrows):
            c = cand[bounds[j]:bounds[j + 1]]
            c = np.unique(c[groups[c] != groups[i]])
            d = 1.0 - mat[c] @ mat[i]
            o = np.lexsort((c, d))[:k]
            idx_out[i, :len(o)], dist_out[i, :len(o)] = c[o], d[o]
    short = rows[(idx_out[rows] >= 0).sum(1) < _need(groups, k)[rows]]
    if len(short):
        idx_out[short], dist_out[short] = exact_knn(mat[short], mat, k, query_groups=groups[short],
                                                    base_groups=groups)
    idx_out, dist_out = canonical(mat, idx_out, rows)
    return idx_out, dist_out, {"images": n, "method": "lance", "exact_fallback": len(short)}


def _rows_for(encoder_id, ids, recipes, idx, dist) -> pa.Table:
    valid = idx >= 0
    qrow, rank0 = np.nonzero(valid)
    nb = idx[valid]
    return pa.table({
        "encoder_id": pa.array([encoder_id] * len(nb), pa.string()),
        "image_id": pa.array(ids[qrow].tolist(), pa.string()),
        "rank": pa.array((rank0 + 1).astype(np.int32)),
        "neighbour_id": pa.array(ids[nb].tolist(), pa.string()),
        "neighbour_recipe_id": pa.array(recipes[nb].tolist(), pa.string()),
        "distance": pa.array(dist[valid].astype(np.float64))})


def compute_neighbours(store: FeatureStore, encoder_id: str, k: int = 100, method: str = "auto",
                       batch: int = 512, ann: AnnConfig | None = None,
                       ivf: IvfKnnConfig | None = None) -> tuple[pa.Table, dict]:
    """All splits' neighbour rows (encoder_id, image_id, rank, neighbour_id, neighbour_recipe_id,
    distance) and a summary."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}")
    if k < 1:
        raise ValueError("k must be >= 1")
    rows = store.image_rows(encoder_id)
    if rows.num_rows == 0:
        raise LookupError(f"no image vectors for encoder {encoder_id}; run `mrqa embed` first")
    tbl = store.find_table(IMAGE_TABLE, encoder_id)
    out, summary = [], {"encoder_id": encoder_id, "k": k, "splits": {}, "exact_fallback": 0}
    all_ids = np.array(rows["id"].to_pylist(), dtype=object)
    all_recipes = np.array(rows["recipe_id"].to_pylist(), dtype=object)
    all_splits = np.array(rows["split"].to_pylist(), dtype=object)
    dim = store._dim_of(tbl)
    all_mat = vectors_matrix(rows["vector"], dim)
    for split in sorted(set(all_splits)):
        sel = np.flatnonzero(all_splits == split)
        ids, recipes, mat = all_ids[sel], all_recipes[sel], np.ascontiguousarray(all_mat[sel])
        _, groups = np.unique(recipes, return_inverse=True)
        use = method
        if use == "lance" and not store.has_ann_index(tbl):
            log.warning("no ANN index on %s (%d rows): exact search instead", tbl.name, tbl.count_rows())
            use = "exact"
        t0 = time.perf_counter()
        if use == "lance":
            idx, dist, info = _lance_split_knn(store, encoder_id, split, list(ids), mat, groups, k,
                                               batch, ann, f"neighbours {split}")
        else:
            idx, dist, info = split_knn(mat, groups, k, use, ivf, f"neighbours {split}")
        secs = time.perf_counter() - t0
        table = _rows_for(encoder_id, ids, recipes, idx, dist)
        out.append(table)
        summary["exact_fallback"] += info.pop("exact_fallback", 0)
        summary["splits"][split] = {**info, "rows": table.num_rows, "seconds": round(secs, 2),
                                    "queries_per_s": round(len(ids) / max(secs, 1e-9), 1)}
    table = pa.concat_tables(out)
    summary["rows"] = table.num_rows
    return table, summary


def build_neighbour_table(con: duckdb.DuckDBPyConnection, store: FeatureStore, encoder_id: str,
                          k: int = 100, method: str = "auto", batch: int = 512,
                          ann: AnnConfig | None = None, ivf: IvfKnnConfig | None = None) -> dict:
    """Replace the encoder's rows of DuckDB `neighbours` (one transaction; re-running gives the
    same rows); returns a summary dict."""
    table, summary = compute_neighbours(store, encoder_id, k, method, batch, ann, ivf)
    with transaction(con):
        con.execute("DELETE FROM neighbours WHERE encoder_id = ?", [encoder_id])
        con.register("_neighbour_rows", table)
        con.execute("INSERT INTO neighbours SELECT encoder_id, image_id, rank, neighbour_id, "
                    "neighbour_recipe_id, distance FROM _neighbour_rows")
        con.unregister("_neighbour_rows")
    log.info("neighbours for %s: %d rows (%s)", encoder_id, summary["rows"], summary["splits"])
    return summary
