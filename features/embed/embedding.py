"""Embed images and step texts into the feature store, incrementally.

Images: those with status 'ok' (of ok recipes with a split) whose (image_id, sha256) has no vector
for the encoder yet; decoded in DataLoader workers (or threads) to uint8 pixels that the encoder
normalises on its device, encoded in batches (CUDA + autocast when available). A missing or
undecodable file is recorded in `rejects` (stage `embed`) and skipped.
Vectors of images that are no longer ok are deleted. Texts: a step's title and body (cleaned),
keyed by a hash of the text, so only new or changed texts are encoded.
"""
from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass

import duckdb
import numpy as np
import torch
from tqdm import tqdm

from etl.config import Paths
from etl.warehouse import clear_rejects, record_reject
from features.embed.decode import PixelCache, image_items, image_loader, image_size_of
from features.embed.encoders import Encoder
from features.vectors.store import IMAGE_TABLE, TEXT_TABLE, FeatureStore, vector_rows

log = logging.getLogger(__name__)


@dataclass
class EmbedConfig:
    batch_size: int = 128
    num_workers: int = 2
    decode: str = "threads"     # threads (measured 1.5x the DataLoader, docs/results.md) | processes (DataLoader)
    pixels: bool = True         # decoders send uint8 pixels, normalised on the encoder's device
                                # (False: the float path, whole preprocess in the decoders)
    write_every: int = 4096     # rows buffered before a LanceDB append
    pixel_cache: bool = True    # reuse pixels the encoder training decoded (same sha256 + preprocessing)
    pixel_cache_max_size: int = 64   # only small inputs are cached (a 224 px cache would be huge)


def _cached_batches(todo, encoder: Encoder, paths: Paths, cfg: EmbedConfig):
    """(positions in todo, uint8 pixels [n, 3, s, s]) batches for images in the training pixel cache,
    plus the positions still to decode. The cached pixels are exactly what the PIL part of the
    preprocess would give; the encoder normalises them on its device."""
    size = image_size_of(encoder.model)
    if not cfg.pixel_cache or size > cfg.pixel_cache_max_size:
        return [], list(range(len(todo)))
    try:
        cache = PixelCache(paths.models / "pixel_cache", encoder.preprocess, size)
    except ValueError:          # a preprocess without ToTensor/Normalize: decode everything
        return [], list(range(len(todo)))
    rows, arr = cache.lookup(todo)
    hit = sorted(rows)
    batches = [(chunk, lambda c=chunk: torch.from_numpy(
                    np.ascontiguousarray(arr[[rows[p] for p in c]])).permute(0, 3, 1, 2))
               for chunk in (hit[i:i + cfg.batch_size] for i in range(0, len(hit), cfg.batch_size))]
    return batches, [p for p in range(len(todo)) if p not in rows]


def plan_image_embedding(con: duckdb.DuckDBPyConnection, store: FeatureStore, encoder_id: str,
                         paths: Paths) -> tuple[list, dict]:
    """(images to encode, summary so far) for an incremental embed: images whose sha256 has no
    vector for the encoder and that were not already rejected at that sha256; vectors of images no
    longer in the warehouse are deleted. Shared by the local and the fan-out (Dask) paths."""
    items = image_items(con, paths)
    have = store.keys(IMAGE_TABLE, encoder_id)
    wanted = {it.image_id for it in items}
    stale = [i for i in have if i not in wanted]
    known_bad = dict(con.execute("SELECT key, detail FROM rejects WHERE stage = 'embed'").fetchall())
    todo = [it for it in items if have.get(it.image_id) != it.sha256
            and not (known_bad.get(it.image_id) or "").startswith(f"sha256={it.sha256};")]
    deleted = store.delete(IMAGE_TABLE, encoder_id, stale)
    already = sum(have.get(it.image_id) == it.sha256 for it in items)
    return todo, {"images_total": len(items), "images_already": already,
                  "images_known_bad": len(items) - len(todo) - already,
                  "images_encoded": 0, "images_rejected": 0, "vectors_deleted": deleted}


def upsert_image_vectors(store: FeatureStore, items: list, vecs: list[np.ndarray], encoder_id: str) -> None:
    """Write the vectors `vecs` (batches, in the order of `items`) of image items (`image_items`) to the
    store's image table: every image writer (this module, the fan-out in features/embed/fanout.py)."""
    store.upsert(IMAGE_TABLE, vector_rows(
        [it.image_id for it in items], np.concatenate(vecs),
        recipe_id=[it.recipe_id for it in items], step_idx=[it.step_idx for it in items],
        split=[it.split for it in items], encoder_id=encoder_id, sha256=[it.sha256 for it in items]))


def embed_images(con: duckdb.DuckDBPyConnection, store: FeatureStore, encoder: Encoder,
                 paths: Paths | None = None, cfg: EmbedConfig | None = None) -> dict:
    cfg = cfg or EmbedConfig()
    paths = paths or Paths.from_env()
    todo, summary = plan_image_embedding(con, store, encoder.encoder_id, paths)
    if not todo:
        return summary
    clear_rejects(con, "embed", [it.image_id for it in todo])
    size = image_size_of(encoder.model)
    cached, to_decode = _cached_batches(todo, encoder, paths, cfg)
    summary["images_from_pixel_cache"] = sum(len(c) for c, _ in cached)
    loader = image_loader([todo[p].path for p in to_decode], encoder.preprocess, size,
                          cfg.batch_size, cfg.num_workers, decode=cfg.decode,
                          pixels=cfg.pixels) if to_decode else []
    if to_decode:       # uint8: pixels normalised on the device; float32: the whole preprocess on the CPU
        summary["image_input"] = str(loader.dataset.blank[1]).removeprefix("torch.")
    buf_rows: list[int] = []
    buf_vecs: list[np.ndarray] = []
    t0 = time.perf_counter()
    bar = tqdm(total=len(todo), desc=f"embed images ({encoder.device.type})", unit="img")

    def flush():
        if buf_rows:
            upsert_image_vectors(store, [todo[i] for i in buf_rows], buf_vecs, encoder.encoder_id)
            buf_rows.clear()
            buf_vecs.clear()

    for chunk, make_input in cached:
        buf_vecs.append(encoder.encode_image_tensors(make_input()))
        buf_rows.extend(chunk)
        summary["images_encoded"] += len(chunk)
        bar.update(len(chunk))
        if len(buf_rows) >= cfg.write_every:
            flush()
    for pos, x, err, detail in loader:
        pos = [to_decode[int(p)] for p in pos]
        keep = [j for j, e in enumerate(err) if not e]
        for j, e in enumerate(err):
            if e:
                it = todo[int(pos[j])]
                record_reject(con, "embed", it.image_id, e,
                              f"sha256={it.sha256}; {it.path}: {detail[j]}")
                summary["images_rejected"] += 1
        if keep:
            buf_vecs.append(encoder.encode_image_tensors(x[keep]))
            buf_rows.extend(int(pos[j]) for j in keep)
            summary["images_encoded"] += len(keep)
        bar.update(len(err))
        bar.set_postfix(img_per_s=f"{bar.n / max(time.perf_counter() - t0, 1e-9):.0f}")
        if len(buf_rows) >= cfg.write_every:
            flush()
    flush()
    bar.close()
    secs = time.perf_counter() - t0
    summary["images_per_s"] = round(len(todo) / max(secs, 1e-9), 1)
    return summary


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def embed_step_texts(con: duckdb.DuckDBPyConnection, store: FeatureStore, encoder: Encoder,
                     batch_size: int = 256) -> dict:
    rows = con.execute("""
        SELECT s.recipe_id, s.step_idx, r.split, s.title, s.body
        FROM steps AS s JOIN recipes AS r USING (recipe_id)
        WHERE r.status = 'ok' AND r.split IS NOT NULL
        ORDER BY s.recipe_id, s.step_idx""").fetchall()
    items = []
    for rid, step, split, title, body in rows:
        for field, text in (("title", title), ("body", body)):
            text = (text or "").strip()
            if text:
                items.append((f"{rid}_{step}_{field}", rid, step, field, split, text))
    have = store.keys(TEXT_TABLE, encoder.encoder_id)
    wanted = {it[0] for it in items}
    stale = [i for i in have if i not in wanted]
    todo = [it for it in items if have.get(it[0]) != text_sha256(it[5])]
    deleted = store.delete(TEXT_TABLE, encoder.encoder_id, stale)
    summary = {"texts_total": len(items), "texts_encoded": len(todo), "text_vectors_deleted": deleted}
    for s in tqdm(range(0, len(todo), 4096), desc="embed texts", unit="chunk", leave=False):
        chunk = todo[s:s + 4096]
        vecs = encoder.encode_texts([it[5] for it in chunk], batch_size)
        store.upsert(TEXT_TABLE, vector_rows(
            [it[0] for it in chunk], vecs, recipe_id=[it[1] for it in chunk],
            step_idx=[it[2] for it in chunk], field=[it[3] for it in chunk], split=[it[4] for it in chunk],
            encoder_id=encoder.encoder_id, text_sha256=[text_sha256(it[5]) for it in chunk]))
    return summary
