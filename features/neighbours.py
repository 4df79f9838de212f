"""The `neighbours` table: each image's K nearest images from OTHER recipes of the SAME split.

Computed once per encoder and read by every knob setting (DuckDB table, sql/schema/051_neighbours.sql).
- method "ann": batched LanceDB queries with a split prefilter; same-recipe hits are dropped, so each
  query over-fetches K + (largest number of images of one recipe in that split); queries that still
  end with fewer than K candidates (ANN misses) are redone exactly and counted.
- method "exact": features.exact.exact_knn (torch matmul in blocks), same-recipe pairs masked.
- method "auto": exact when the split has at most EXACT_AUTO_MAX images or the table has no ANN
  index, ANN otherwise (the crossover measured by `mrqa bench ann`, see README).
Distances are always exact cosine distances (1 - cos) recomputed from the stored float32 vectors, so
only the candidate set of the ANN path is approximate; ties break by neighbour id.
"""
from __future__ import annotations

import logging
import time

import duckdb
import numpy as np
import pyarrow as pa
from tqdm import tqdm

from features.exact import exact_knn
from features.store import IMAGE_TABLE, AnnConfig, FeatureStore

log = logging.getLogger(__name__)

EXACT_AUTO_MAX = 200_000


def _split_neighbours_exact(mat, groups, k):
    return exact_knn(mat, mat, k, query_groups=groups, base_groups=groups)


def _split_neighbours_ann(store, encoder_id, split, ids, mat, groups, k, batch, ann, desc):
    """ANN candidates -> exact re-ranking; returns (idx, dist, n_fallback)."""
    n = len(ids)
    pos = {s: i for i, s in enumerate(ids)}
    per_recipe = np.bincount(groups)
    fetch = min(n, k + int(per_recipe.max()))
    idx_out = np.full((n, k), -1, np.int64)
    dist_out = np.full((n, k), np.inf, np.float32)
    need = np.minimum(k, n - per_recipe[groups])         # how many other-recipe images exist
    fallback = []
    for s in tqdm(range(0, n, batch), desc=desc, unit="batch", leave=False):
        q = mat[s:s + batch]
        res = store.search(encoder_id, q, fetch, split=split, ann=ann)
        qi = res["query_index"].to_numpy()
        cand = np.array([pos[x] for x in res["id"].to_pylist()], dtype=np.int64)
        order = np.lexsort((cand, qi))
        qi, cand = qi[order], cand[order]
        bounds = np.searchsorted(qi, np.arange(len(q) + 1))
        for j in range(len(q)):
            i = s + j
            c = cand[bounds[j]:bounds[j + 1]]
            c = np.unique(c[groups[c] != groups[i]])
            if len(c) < need[i]:
                fallback.append(i)
                continue
            d = 1.0 - mat[c] @ mat[i]
            o = np.lexsort((c, d))[:k]
            idx_out[i, :len(o)], dist_out[i, :len(o)] = c[o], d[o]
    if fallback:
        fb = np.array(fallback)
        ei, ed = exact_knn(mat[fb], mat, k, query_groups=groups[fb], base_groups=groups)
        idx_out[fb], dist_out[fb] = ei, ed
    return idx_out, dist_out, len(fallback)


def compute_neighbours(store: FeatureStore, encoder_id: str, k: int = 100, method: str = "auto",
                       batch: int = 512, ann: AnnConfig | None = None) -> tuple[pa.Table, dict]:
    """All splits' neighbour rows (encoder_id, image_id, rank, neighbour_id, neighbour_recipe_id,
    distance) and a summary."""
    if method not in ("ann", "exact", "auto"):
        raise ValueError("method must be ann, exact or auto")
    rows = store.image_rows(encoder_id)
    if rows.num_rows == 0:
        raise LookupError(f"no image vectors for encoder {encoder_id}; run `mrqa embed` first")
    tbl = store.find_table(IMAGE_TABLE, encoder_id)
    has_index = store.has_ann_index(tbl)
    out, summary = [], {"encoder_id": encoder_id, "k": k, "splits": {}, "exact_fallback": 0}
    all_ids = np.array(rows["id"].to_pylist(), dtype=object)
    all_recipes = np.array(rows["recipe_id"].to_pylist(), dtype=object)
    all_splits = np.array(rows["split"].to_pylist(), dtype=object)
    dim = store._dim_of(tbl)
    all_mat = rows["vector"].combine_chunks().flatten().to_numpy(zero_copy_only=False)
    all_mat = all_mat.reshape(-1, dim).astype(np.float32, copy=False)
    for split in sorted(set(all_splits)):
        sel = np.flatnonzero(all_splits == split)
        ids, recipes, mat = all_ids[sel], all_recipes[sel], np.ascontiguousarray(all_mat[sel])
        _, groups = np.unique(recipes, return_inverse=True)
        use = method
        if method == "auto":
            use = "exact" if (len(ids) <= EXACT_AUTO_MAX or not has_index) else "ann"
        if use == "ann" and not has_index:
            log.warning("no ANN index on %s (%d rows < threshold): exact search instead",
                        tbl.name, tbl.count_rows())
            use = "exact"
        t0 = time.perf_counter()
        if use == "ann":
            idx, dist, fb = _split_neighbours_ann(store, encoder_id, split, list(ids), mat, groups,
                                                  k, batch, ann, f"neighbours {split}")
            summary["exact_fallback"] += fb
        else:
            idx, dist = _split_neighbours_exact(mat, groups, k)
        secs = time.perf_counter() - t0
        valid = idx >= 0
        qrow, rank0 = np.nonzero(valid)
        nb = idx[valid]
        out.append(pa.table({
            "encoder_id": pa.array([encoder_id] * len(nb), pa.string()),
            "image_id": pa.array(ids[qrow].tolist(), pa.string()),
            "rank": pa.array((rank0 + 1).astype(np.int32)),
            "neighbour_id": pa.array(ids[nb].tolist(), pa.string()),
            "neighbour_recipe_id": pa.array(recipes[nb].tolist(), pa.string()),
            "distance": pa.array(dist[valid].astype(np.float64))}))
        summary["splits"][split] = {"images": len(ids), "method": use, "rows": int(valid.sum()),
                                    "seconds": round(secs, 2),
                                    "queries_per_s": round(len(ids) / max(secs, 1e-9), 1)}
    table = pa.concat_tables(out)
    summary["rows"] = table.num_rows
    return table, summary


def build_neighbour_table(con: duckdb.DuckDBPyConnection, store: FeatureStore, encoder_id: str,
                          k: int = 100, method: str = "auto", batch: int = 512,
                          ann: AnnConfig | None = None) -> dict:
    """Replace the encoder's rows of DuckDB `neighbours`; returns a summary dict."""
    table, summary = compute_neighbours(store, encoder_id, k, method, batch, ann)
    con.execute("BEGIN")
    try:
        con.execute("DELETE FROM neighbours WHERE encoder_id = ?", [encoder_id])
        con.register("_neighbour_rows", table)
        con.execute("INSERT INTO neighbours SELECT encoder_id, image_id, rank, neighbour_id, "
                    "neighbour_recipe_id, distance FROM _neighbour_rows")
        con.unregister("_neighbour_rows")
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    log.info("neighbours for %s: %d rows (%s)", encoder_id, summary["rows"], summary["splits"])
    return summary


def recall_at_k(approx_idx: np.ndarray, exact_idx: np.ndarray) -> float:
    """Mean share of each query's exact K neighbours found by the approximate search."""
    hits = [len(set(a[a >= 0]) & set(e[e >= 0])) / max(1, (e >= 0).sum())
            for a, e in zip(approx_idx, exact_idx)]
    return float(np.mean(hits)) if hits else 1.0
