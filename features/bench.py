"""Benchmarks of the feature store: embedding throughput and ANN vs exact neighbour search.

Each prints a figure and a ratio against the obvious alternative measured in the same run.
"""
from __future__ import annotations

import io
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from features.encoders import Encoder
from features.exact import exact_knn, numpy_exact_knn
from features.image_data import image_loader, image_size_of
from features.neighbours import recall_at_k
from features.store import IMAGE_TABLE, AnnConfig, FeatureStore, vectors_column


# ----------------------------------------------------------------------------- embed

def synthetic_jpegs(folder: Path, n: int, size: int = 256, seed: int = 0) -> list[Path]:
    from PIL import Image
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        arr = (rng.random((size // 8, size // 8, 3)) * 255).astype(np.uint8)
        im = Image.fromarray(arr).resize((size, size), Image.BILINEAR)
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=90)
        p = folder / f"synthetic_{i:05d}.jpg"
        p.write_bytes(buf.getvalue())
        out.append(p)
    return out


def _time_end_to_end(encoder: Encoder, files, batch_size, workers) -> float:
    size = image_size_of(encoder.model)
    loader = image_loader(files, encoder.preprocess, size, batch_size, workers)
    t0 = time.perf_counter()
    n = 0
    for _, x, _, _ in loader:
        encoder.encode_image_tensors(x)
        n += len(x)
    if encoder.device.type == "cuda":
        torch.cuda.synchronize()
    return n / (time.perf_counter() - t0)


def bench_embed(encoder: Encoder, files: list[Path], batch_size: int = 128, workers: int = 2) -> dict:
    """images/s: end to end with `workers` decode workers vs 0, model only, batched vs 1 image."""
    size = image_size_of(encoder.model)
    _time_end_to_end(encoder, files[:batch_size], batch_size, 0)           # warm-up
    e2e_workers = _time_end_to_end(encoder, files, batch_size, workers)
    e2e_inline = _time_end_to_end(encoder, files, batch_size, 0)
    x = next(iter(image_loader(files[:batch_size], encoder.preprocess, size, batch_size, 0)))[1]
    reps = max(1, len(files) // len(x))
    t0 = time.perf_counter()
    for _ in range(reps):
        encoder.encode_image_tensors(x)
    if encoder.device.type == "cuda":
        torch.cuda.synchronize()
    model_only = reps * len(x) / (time.perf_counter() - t0)
    n1 = min(64, len(x))
    t0 = time.perf_counter()
    for i in range(n1):
        encoder.encode_image_tensors(x[i:i + 1])
    per_image = n1 / (time.perf_counter() - t0)
    # decode only (workers): what bounds the end-to-end figure
    loader = image_loader(files, encoder.preprocess, size, batch_size, workers)
    t0 = time.perf_counter()
    n = sum(len(b[1]) for b in loader)
    decode_only = n / (time.perf_counter() - t0)
    return {"device": str(encoder.device), "amp": encoder.use_amp, "model": encoder.model_name,
            "image_size": size, "images": len(files), "batch_size": batch_size, "workers": workers,
            "end_to_end_img_s": round(e2e_workers, 1), "end_to_end_0_workers_img_s": round(e2e_inline, 1),
            "workers_speedup": round(e2e_workers / e2e_inline, 2),
            "model_only_img_s": round(model_only, 1), "per_image_img_s": round(per_image, 1),
            "batch_vs_per_image": round(model_only / per_image, 2),
            "decode_only_img_s": round(decode_only, 1),
            "bound_by": "decode" if decode_only < model_only else "model"}


# ----------------------------------------------------------------------------- ann

def clustered_vectors(n: int, dim: int, seed: int = 0, per_cluster: int = 50, noise: float = 0.5):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(max(1, n // per_cluster), dim)).astype(np.float32)
    x = centers[rng.integers(len(centers), size=n)] + noise * rng.normal(size=(n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def bench_ann(vectors: np.ndarray, groups: np.ndarray, k: int = 100, n_queries: int = 1000,
              configs: list[AnnConfig] | None = None, seed: int = 0, workdir: str | None = None) -> dict:
    """recall@k (other-group neighbours) and q/s of ANN configs vs exact, on one temp LanceDB table."""
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
        ids = [f"v{i:07d}" for i in range(n)]
        store.upsert(IMAGE_TABLE, pa.table({
            "id": ids, "recipe_id": [f"g{g}" for g in groups],
            "step_idx": pa.array(np.zeros(n, np.int32)), "split": ["train"] * n,
            "encoder_id": ["bench"] * n, "sha256": [""] * n, "vector": vectors_column(vectors)}))
        tbl = store.find_table(IMAGE_TABLE, "bench")
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


def default_sweep(n: int) -> list[AnnConfig]:
    hn = AnnConfig("IVF_HNSW_SQ").partitions_for(n)
    pq = AnnConfig("IVF_PQ").partitions_for(n)
    return ([AnnConfig("IVF_HNSW_SQ", nprobes=p) for p in sorted({max(1, hn // 4), max(1, hn // 2), hn})]
            + [AnnConfig("IVF_PQ", nprobes=p, refine_factor=r)
               for p, r in ((max(1, pq // 8), 5), (max(1, pq // 4), 10), (max(1, pq // 2), 10))])


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
