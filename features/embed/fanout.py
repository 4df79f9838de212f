"""The image-embedding fan-out: decode + encode batches anywhere, write vectors in the flow process.

`encode_batch(spec, files)` is what a (Dask) worker runs: it loads the encoder once per process
(`worker_encoder`, cached by spec), decodes the files with the same dataset as the local loaders
(`image_data.image_dataset`: uint8 pixels normalised on the encoder's device, or the float path for
a preprocess that cannot be split), and encodes the readable ones in one batch.

`embed_images_fanout(con, store, spec, paths, cfg, submit)` is the flow side: the same selection,
incrementality and rejects as `features.embed.embedding.embed_images`, but each batch of `cfg.batch_size`
images goes through `submit(spec, files)` (a Prefect task submitted to the task runner); results
are consumed in submission order (image_id order, deterministic), so LanceDB receives the same
rows with the same dtype as the local run, and the same rejects. Workers always decode the files
(the local path may take pixels from the training pixel cache instead, which gives the same input
tensors); vectors match the local run to <= 1e-6, bit for bit at equal torch thread counts.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from prefect import task
from prefect.cache_policies import NO_CACHE

from etl.config import Paths
from features.embed.decode import image_dataset, image_size_of
from features.embed.encoders import Encoder, EncoderUnavailable, build_model, file_sha256, pick_device
from features.embed.registry import encoder_row

if TYPE_CHECKING:      # flow-side only: workers import this module, keep LanceDB out of it
    import duckdb

    from features.embed.embedding import EmbedConfig
    from features.vectors.store import FeatureStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EncoderSpec:
    """Everything a worker needs to rebuild a registered encoder without the warehouse."""
    encoder_id: str
    model_name: str
    checkpoint: str            # absolute path of the weights (same path on every worker)
    weights_sha256: str
    image_size: int | None
    dim: int
    device: str | None = None  # None: CUDA when the worker has it, else CPU


def encoder_spec(con: duckdb.DuckDBPyConnection, encoder_id: str, paths: Paths,
                 device: str | None = None) -> EncoderSpec:
    row = encoder_row(con, encoder_id)
    if row is None:
        raise EncoderUnavailable(f"encoder {encoder_id!r} is not registered")
    ckpt = Path(row["checkpoint_path"])
    ckpt = ckpt if ckpt.is_absolute() else paths.home / ckpt
    return EncoderSpec(encoder_id, row["model_name"], str(ckpt), row["weights_sha256"] or "",
                       (row["config"] or {}).get("image_size"), int(row["dim"]), device)


_ENCODERS: dict[EncoderSpec, Encoder] = {}
_LOCK = threading.Lock()


def worker_encoder(spec: EncoderSpec) -> Encoder:
    """The encoder of `spec`, loaded once per process (checked against its weights sha256)."""
    with _LOCK:
        enc = _ENCODERS.get(spec)
        if enc is None:
            if not Path(spec.checkpoint).is_file():
                raise EncoderUnavailable(f"weights of encoder {spec.encoder_id} not found at "
                                         f"{spec.checkpoint} on this worker (workers need the same "
                                         "paths: a shared file system)")
            if spec.weights_sha256 and file_sha256(spec.checkpoint) != spec.weights_sha256:
                raise EncoderUnavailable(f"weights at {spec.checkpoint} on this worker are not those "
                                         f"of encoder {spec.encoder_id} (sha256 differs)")
            dev = pick_device(spec.device)
            model, preprocess, tokenizer = build_model(spec.model_name, spec.checkpoint, dev,
                                                       spec.image_size)
            enc = Encoder(spec.encoder_id, spec.model_name, model, preprocess, tokenizer, dev, spec.dim)
            _ENCODERS.clear()             # one encoder at a time per worker process
            _ENCODERS[spec] = enc
        return enc


def encode_batch(spec: EncoderSpec, files: list[str]) -> dict:
    """Decode and encode one batch: {"ok": positions encoded, "vectors": float32 [len(ok), dim],
    "errors": [(position, reason, detail)]} with reasons `missing_file` / `image_decode_error`."""
    enc = worker_encoder(spec)
    ds = image_dataset([Path(f) for f in files], enc.preprocess, image_size_of(enc.model))
    ok, tensors, errors = [], [], []
    for i in range(len(ds)):
        pos, x, reason, detail = ds[i]
        if reason:
            errors.append((pos, reason, detail))
        else:
            ok.append(pos)
            tensors.append(x)
    vecs = (enc.encode_image_tensors(torch.stack(tensors)) if tensors
            else np.zeros((0, spec.dim), np.float32))
    return {"ok": ok, "vectors": vecs, "errors": errors}


# The Prefect task the flow submits to its task runner. It lives here, not in flows/embed.py, so a
# Dask worker unpickling it imports only this module (torch, open_clip on first use, no LanceDB).
encode_batch_task = task(encode_batch, name="encode-image-batch", cache_policy=NO_CACHE)


def embed_images_fanout(con: duckdb.DuckDBPyConnection, store: FeatureStore, spec: EncoderSpec,
                        paths: Paths, cfg: EmbedConfig, submit: Callable, where: str = "dask") -> dict:
    """Embed new/changed ok images with batches run by `submit(spec, files) -> future`."""
    from tqdm import tqdm

    from etl.warehouse import clear_rejects, record_reject
    from features.embed.embedding import plan_image_embedding, upsert_image_vectors
    todo, summary = plan_image_embedding(con, store, spec.encoder_id, paths)
    summary["fanout"] = where
    if not todo:
        return summary
    clear_rejects(con, "embed", [it.image_id for it in todo])
    t0 = time.perf_counter()
    starts = list(range(0, len(todo), cfg.batch_size))
    futures = [submit(spec, [str(it.path) for it in todo[s:s + cfg.batch_size]]) for s in starts]
    summary["batches"] = len(futures)
    rows, vecs = [], []

    def flush():
        if rows:
            upsert_image_vectors(store, rows, vecs, spec.encoder_id)
            rows.clear()
            vecs.clear()

    bar = tqdm(total=len(todo), desc=f"embed images ({where})", unit="img")
    for s, fut in zip(starts, futures):       # submission order = the local run's order
        batch = todo[s:s + cfg.batch_size]
        res = fut.result()
        for pos, reason, detail in res["errors"]:
            it = batch[pos]
            record_reject(con, "embed", it.image_id, reason, f"sha256={it.sha256}; {it.path}: {detail}")
            summary["images_rejected"] += 1
        if res["ok"]:
            rows.extend(batch[p] for p in res["ok"])
            vecs.append(np.asarray(res["vectors"], np.float32))
            summary["images_encoded"] += len(res["ok"])
        bar.update(len(batch))
        if len(rows) >= cfg.write_every:
            flush()
    flush()
    bar.close()
    summary["images_per_s"] = round(len(todo) / max(time.perf_counter() - t0, 1e-9), 1)
    return summary
