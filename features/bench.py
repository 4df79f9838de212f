"""Benchmarks of the feature store: embedding throughput and ANN vs exact neighbour search.

Each prints a figure and a ratio against the obvious alternative measured in the same run.
"""
from __future__ import annotations

import io
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import torch

from features.encoders import Encoder
from features.exact import exact_knn, numpy_exact_knn
from features.image_data import image_loader, image_size_of, split_preprocess, to_model_input
from features.ivf_knn import recall_at_k

if TYPE_CHECKING:                  # LanceDB is imported by the ANN benchmarks only, so `bench embed`
    from features.store import AnnConfig   # runs where only torch + open_clip are installed


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


def _time_end_to_end(encoder: Encoder, files, batch_size, workers, decode: str = "processes",
                     pixels: bool = True) -> float:
    size = image_size_of(encoder.model)
    loader = image_loader(files, encoder.preprocess, size, batch_size, workers, decode=decode,
                          pixels=pixels)
    t0 = time.perf_counter()
    n = 0
    for _, x, _, _ in loader:
        encoder.encode_image_tensors(x)
        n += len(x)
    if encoder.device.type == "cuda":
        torch.cuda.synchronize()
    return n / (time.perf_counter() - t0)


def _time_encode(encoder: Encoder, x: torch.Tensor, reps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        encoder.encode_image_tensors(x)
    if encoder.device.type == "cuda":
        torch.cuda.synchronize()
    return reps * len(x) / (time.perf_counter() - t0)


def bench_embed(encoder: Encoder, files: list[Path], batch_size: int = 128, workers: int = 2) -> dict:
    """images/s, for each decoder output: uint8 pixels normalised on the encoder's device (the
    default) and float tensors of the whole preprocess on the CPU (the old path; the only one when
    the preprocess cannot be split). End to end with `workers` decode processes, threads, and 0
    workers (default input); model only (input already on the device) and model fed from the host
    (uint8: copy + normalise + model, the ceiling of the default path; float: copy + model); batched
    vs 1 image; decode only (`workers` processes and threads; the faster one decides `bound_by`)."""
    import logging
    log = logging.getLogger(__name__)
    size = image_size_of(encoder.model)
    try:
        split_preprocess(encoder.preprocess)
        inputs = {"uint8": True, "float": False}
    except ValueError:                                 # image_loader logs it and stays on float
        inputs = {"float": False}
    default = next(iter(inputs))
    _time_end_to_end(encoder, files[:batch_size], batch_size, 0)           # warm-up
    e2e, from_host, decode_only, host = {}, {}, {}, {}
    for name, pixels in inputs.items():
        for decode in ("processes", "threads"):
            e2e[name, decode] = _time_end_to_end(encoder, files, batch_size, workers, decode, pixels)
            log.warning("bench embed: end to end, %s input, %d decode %s: %.1f img/s",
                        name, workers, decode, e2e[name, decode])
    e2e_inline = _time_end_to_end(encoder, files[:max(batch_size, len(files) // 8)], batch_size, 0)
    log.warning("bench embed: end to end, %s input, 0 workers: %.1f img/s", default, e2e_inline)
    for name, pixels in inputs.items():
        host[name] = next(iter(image_loader(files[:batch_size], encoder.preprocess, size, batch_size,
                                            0, pixels=pixels)))[1]
    x = host[default].to(encoder.device)
    x = to_model_input(x, *encoder.pixel_norm) if x.dtype == torch.uint8 else x
    reps = max(1, len(files) // len(x))
    model_only = _time_encode(encoder, x, reps)
    log.warning("bench embed: model only (batch %d on the device): %.1f img/s", len(x), model_only)
    for name in inputs:
        from_host[name] = _time_encode(encoder, host[name], reps)
        log.warning("bench embed: model fed %s from the host: %.1f img/s", name, from_host[name])
    n1 = min(64, len(x))
    t0 = time.perf_counter()
    for i in range(n1):
        encoder.encode_image_tensors(x[i:i + 1])
    per_image = n1 / (time.perf_counter() - t0)
    for name, pixels in inputs.items():      # decode only (workers): what bounds the end-to-end figure
        for decode in ("processes", "threads"):
            loader = image_loader(files, encoder.preprocess, size, batch_size, workers, decode=decode,
                                  pixels=pixels)
            t0 = time.perf_counter()
            n = sum(len(b[1]) for b in loader)
            decode_only[name, decode] = n / (time.perf_counter() - t0)
            log.warning("bench embed: decode only, %s pixels, %d decode %s: %.1f img/s",
                        name, workers, decode, decode_only[name, decode])
    best_decode = max(decode_only[default, "processes"], decode_only[default, "threads"])
    res = {"device": str(encoder.device), "amp": encoder.use_amp, "model": encoder.model_name,
           "image_size": size, "images": len(files), "batch_size": batch_size, "workers": workers,
           "input": ("uint8 pixels, normalised on the device" if default == "uint8"
                     else "float (preprocess cannot be split into PIL steps + ToTensor + Normalize)"),
           "pinned": bool(host[default].is_pinned()),
           "end_to_end_img_s": round(e2e[default, "processes"], 1),
           "end_to_end_0_workers_img_s": round(e2e_inline, 1),
           "workers_speedup": round(e2e[default, "processes"] / e2e_inline, 2),
           "end_to_end_threads_img_s": round(e2e[default, "threads"], 1),
           "threads_vs_processes": round(e2e[default, "threads"] / e2e[default, "processes"], 2),
           "model_only_img_s": round(model_only, 1),
           "model_from_host_img_s": round(from_host[default], 1),
           "per_image_img_s": round(per_image, 1),
           "batch_vs_per_image": round(model_only / per_image, 2),
           "decode_only_img_s": round(decode_only[default, "processes"], 1),
           "decode_only_threads_img_s": round(decode_only[default, "threads"], 1),
           # the faster decoder vs the model fed from the host: which one caps the end-to-end figure
           "bound_by": "decode" if best_decode < from_host[default] else "model"}
    if default == "uint8":
        best = {name: max(e2e[name, "processes"], e2e[name, "threads"]) for name in inputs}
        res.update({"end_to_end_float_img_s": round(e2e["float", "processes"], 1),
                    "end_to_end_float_threads_img_s": round(e2e["float", "threads"], 1),
                    "uint8_vs_float_best": round(best["uint8"] / best["float"], 2),
                    "model_from_host_float_img_s": round(from_host["float"], 1),
                    "decode_only_float_img_s": round(decode_only["float", "processes"], 1),
                    "decode_only_float_threads_img_s": round(decode_only["float", "threads"], 1)})
    return res


def bench_decode(files: list[Path], image_size: int = 224, batch_size: int = 128, workers: int = 2) -> dict:
    """Decode-only images/s of the embed loaders (uint8 pixels of open_clip's eval preprocessing at
    `image_size`, the part of `mrqa embed` that runs on the CPU): `workers` threads (the default) vs
    `workers` DataLoader processes (start-up included, as in a run) vs in-process. No model: on a GPU
    box this is the ceiling of the end-to-end figure, so it tells whether the GPU will be fed."""
    import open_clip
    pre = open_clip.image_transform(image_size, is_train=False)
    res: dict = {"images": len(files), "image_size": image_size, "batch_size": batch_size,
                 "workers": workers, "cpu_count": os.cpu_count()}
    for name, n_workers, decode in (("threads", workers, "threads"), ("processes", workers, "processes"),
                                    ("in_process", 0, "processes")):
        loader = image_loader(files, pre, image_size, batch_size, n_workers, decode=decode)
        t0 = time.perf_counter()
        n = sum(len(b[1]) for b in loader)
        res[f"{name}_img_s"] = round(n / (time.perf_counter() - t0), 1)
    res["threads_vs_processes"] = round(res["threads_img_s"] / res["processes_img_s"], 2)
    res["threads_vs_in_process"] = round(res["threads_img_s"] / res["in_process_img_s"], 2)
    return res


# ----------------------------------------------------------------------------- ann

def clustered_vectors(n: int, dim: int, seed: int = 0, per_cluster: int = 50, noise: float = 0.5):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(max(1, n // per_cluster), dim)).astype(np.float32)
    x = centers[rng.integers(len(centers), size=n)] + noise * rng.normal(size=(n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def bench_ann(vectors: np.ndarray, groups: np.ndarray, k: int = 100, n_queries: int = 1000,
              configs: list[AnnConfig] | None = None, seed: int = 0, workdir: str | None = None) -> dict:
    """recall@k (other-group neighbours) and q/s of ANN configs vs exact, on one temp LanceDB table."""
    from features.store import FeatureStore
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
    from features.store import IMAGE_TABLE, vectors_column
    n = len(mat)
    ids = [f"v{i:07d}" for i in range(n)]
    store.upsert(IMAGE_TABLE, pa.table({
        "id": ids, "recipe_id": [f"g{g}" for g in groups],
        "step_idx": pa.array(np.zeros(n, np.int32)), "split": [split] * n,
        "encoder_id": ["bench"] * n, "sha256": [""] * n, "vector": vectors_column(mat)}))
    return ids, store.find_table(IMAGE_TABLE, "bench")


def default_sweep(n: int) -> list[AnnConfig]:
    from features.store import AnnConfig
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


def _lance_build(mat, groups, k, qsel, ex_idx, workdir, cfg: "AnnConfig") -> dict:
    """LanceDB route on one split: index build time, batched-query q/s and recall on the sample."""
    from features.store import FeatureStore
    from features.neighbours import _lance_split_knn
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
    import os
    from features.neighbours import split_knn
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
                from features.store import AnnConfig
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
