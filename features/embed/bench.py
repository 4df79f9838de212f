"""Benchmarks of the embed stage: decode-only and end-to-end embedding throughput, encoder training.

Each prints a figure and a ratio against the obvious alternative measured in the same run.
"""
from __future__ import annotations

import io
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from features.embed.decode import image_loader, image_size_of, split_preprocess, to_model_input
from features.embed.encoders import Encoder

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


@contextmanager
def bench_image_files(n: int, synthetic: bool = False, synthetic_size: int = 256, con=None, paths=None):
    """Yield (files, source) for the image benchmarks: up to `n` warehouse images (`con`, `paths`),
    or `n` synthetic JPEGs of `synthetic_size` pixels in a temporary folder (removed afterwards) when
    `synthetic`, without a warehouse (`con` None) or when it has fewer than min(n, 256) images."""
    if synthetic_size < 16:
        raise ValueError(f"the synthetic image size must be >= 16 pixels, got {synthetic_size}")
    from features.embed.decode import image_items
    files = [] if synthetic or con is None else [it.path for it in image_items(con, paths)][:n]
    if len(files) >= min(n, 256):
        yield files, "warehouse"
        return
    with tempfile.TemporaryDirectory() as tmp:
        yield synthetic_jpegs(Path(tmp), n, size=synthetic_size), f"synthetic {synthetic_size}px JPEGs"


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


# ----------------------------------------------------------------------------- encoder training

def bench_encoder_training(con, paths, epochs: int = 2, repeats: int = 1, seed: int = 0) -> dict:
    """Seconds to train the default encoder for `epochs` on the home's train split, with its two towers
    on two threads (the default on CPU) vs on one, alternating `repeats` times each, and whether both
    gave the same weights (the encoder id names their hash). Decoded pixels come from the pixel cache
    after the first run. The encoders it trains are removed again (rows and files), and an encoder that
    was registered before is left as it was, so the home's latest encoder does not change."""
    import shutil

    import torch

    from features.embed.encoders import list_encoders, register_encoder
    from features.embed.train_encoder import TrainConfig, train_encoder
    before = {r["encoder_id"]: r for r in list_encoders(con)}
    kept = {(eid, f.name): f.read_bytes() for eid in before
            for f in (paths.models / "encoders" / eid).glob("*.json")}     # manifests: small
    seconds: dict[str, list[float]] = {"two_threads": [], "one_thread": []}
    ids: dict[str, set[str]] = {"two_threads": set(), "one_thread": set()}
    try:
        for _ in range(repeats):
            for name in seconds:
                cfg = TrainConfig(epochs=epochs, seed=seed, tower_threads=name == "two_threads", device="cpu",
                                  eval_max_pairs=10)      # the retrieval figures are not what is timed
                res = train_encoder(con, paths, cfg)
                seconds[name].append(res["fit_seconds"])          # the epochs' loop, unrounded
                ids[name].add(res["encoder_id"])
    finally:
        for eid in set().union(*ids.values()):
            if eid in before:                  # the same weights as an encoder of the home: put its row
                register_encoder(con, dict(before[eid]))      # and manifest back as they were
                for (kid, fname), data in kept.items():
                    if kid == eid:
                        (paths.models / "encoders" / eid / fname).write_bytes(data)
            else:
                con.execute("DELETE FROM encoders WHERE encoder_id = ?", [eid])
                shutil.rmtree(paths.models / "encoders" / eid, ignore_errors=True)
    best = {k: min(v) for k, v in seconds.items()}
    return {"epochs": epochs, "repeats": repeats, "device": "cpu", "torch_threads": 1,
            "cpu_count": os.cpu_count(), "torch": torch.__version__,
            "two_threads_s": [round(s, 2) for s in seconds["two_threads"]],
            "one_thread_s": [round(s, 2) for s in seconds["one_thread"]],
            "one_thread_vs_two_threads": round(best["one_thread"] / max(best["two_threads"], 1e-9), 2),
            "same_weights": len(ids["two_threads"] | ids["one_thread"]) == 1,
            "encoder_ids": sorted(ids["two_threads"] | ids["one_thread"])}
