"""Train the default encoder: a small open_clip model, contrastive (ClipLoss) on the train split.

Pairs are (step image, the step's cleaned title + body) of recipes with split 'train' and images
with status 'ok'; nothing of val/test is read (the manifest lists every image id used, and a test
checks it is disjoint from val/test). Each epoch takes one seeded image per step, so two images of
one step never sit in a batch as false negatives. Images are decoded once (DataLoader workers) and
kept in memory as float16. Output, under MRQA_HOME/models/encoders/<encoder_id>/:
model.safetensors, open_clip_config.json, train_manifest.json (written last), and a row in `encoders`.
"""
from __future__ import annotations

import json
import logging
import math
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import duckdb
import numpy as np
import torch
from tqdm import tqdm

from etl.config import Paths
from features.encoders import (TINY_MODEL, Encoder, EncoderUnavailable, _store_path, embed_dim,
                               file_sha256, make_encoder_id, pick_device, preprocess_sha256,
                               register_encoder, register_tiny_config)
from features.image_data import ImageItem, image_items, image_loader, image_size_of

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    model_name: str = TINY_MODEL
    epochs: int = 5
    batch_size: int = 256
    lr: float = 2e-3
    weight_decay: float = 0.05
    warmup_steps: int = 20
    seed: int = 0
    image_size: int | None = None      # None: the architecture's (64 for mrqa-tiny-clip)
    num_workers: int = 0               # decode workers
    max_train_pairs: int | None = None  # cap on steps used (seeded sample), for quick runs
    eval_max_pairs: int = 1000
    device: str | None = None


class TrainingDataError(RuntimeError):
    pass


# ----------------------------------------------------------------------------- data

def decode_items(items: list[ImageItem], preprocess, image_size: int, num_workers: int = 0,
                 desc: str = "decode") -> tuple[torch.Tensor, list[int]]:
    """Decode + preprocess all items -> (float16 tensor [n_ok, 3, s, s], positions of ok items)."""
    loader = image_loader([it.path for it in items], preprocess, image_size, 256, num_workers)
    xs, ok = [], []
    for pos, x, err, _ in tqdm(loader, desc=desc, unit="batch", leave=False):
        keep = [j for j, e in enumerate(err) if not e]
        xs.append(x[keep].half())
        ok.extend(int(pos[j]) for j in keep)
    if not xs:
        return torch.zeros(0, 3, image_size, image_size, dtype=torch.float16), []
    return torch.cat(xs), ok


def _group_by_step(items: list[ImageItem], positions: list[int]) -> list[list[int]]:
    """Rows of the decoded tensor grouped by step (ordered by recipe, step)."""
    groups: dict[tuple[str, int], list[int]] = {}
    for row, pos in enumerate(positions):
        it = items[pos]
        groups.setdefault((it.recipe_id, it.step_idx), []).append(row)
    return [groups[k] for k in sorted(groups)]


# ----------------------------------------------------------------------------- training

def _lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    t = (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps)
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))


def train_encoder(con: duckdb.DuckDBPyConnection, paths: Paths | None = None,
                  cfg: TrainConfig | None = None) -> dict:
    """Train, save, evaluate on val and register the default encoder; returns a summary dict."""
    import open_clip
    from safetensors.torch import save_file

    cfg = cfg or TrainConfig()
    paths = (paths or Paths.from_env()).ensure()
    register_tiny_config()
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    device = pick_device(cfg.device)
    t0 = time.perf_counter()

    model, _, preprocess = open_clip.create_model_and_transforms(
        cfg.model_name, pretrained=None, device=device, force_image_size=cfg.image_size)
    tokenizer = open_clip.get_tokenizer(cfg.model_name)
    size = image_size_of(model)

    items = image_items(con, paths, split="train")
    if cfg.max_train_pairs is not None:
        steps = sorted({(it.recipe_id, it.step_idx) for it in items})
        rng = np.random.default_rng(cfg.seed)
        keep = {steps[i] for i in rng.permutation(len(steps))[:cfg.max_train_pairs]}
        items = [it for it in items if (it.recipe_id, it.step_idx) in keep]
    images, positions = decode_items(items, preprocess, size, cfg.num_workers, "decode train")
    groups = _group_by_step(items, positions)
    if len(groups) < 2:
        raise TrainingDataError(f"only {len(groups)} train step(s) with a readable image: ingest "
                                "recipes with images first (mrqa ingest / mrqa demo)")
    step_texts = [items[positions[g[0]]].text for g in groups]
    tokens = tokenizer(step_texts)
    log.info("training %s on %d train steps (%d images, %d unreadable skipped), %s",
             cfg.model_name, len(groups), len(positions), len(items) - len(positions), device)

    loss_fn = open_clip.ClipLoss()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    batch_size = min(cfg.batch_size, len(groups))
    n_batches = len(groups) // batch_size
    total = n_batches * cfg.epochs
    use_amp = device.type == "cuda"
    losses, step = [], 0
    model.train()
    bar = tqdm(total=total, desc="train encoder", unit="step")
    for epoch in range(cfg.epochs):
        rng = np.random.default_rng([cfg.seed, epoch])
        pick = np.array([g[rng.integers(len(g))] for g in groups])
        order = rng.permutation(len(groups))
        epoch_loss = []
        for b in range(n_batches):
            idx = order[b * batch_size:(b + 1) * batch_size]
            x = images[pick[idx]].to(device).float()
            t = tokens[idx].to(device)
            for g in opt.param_groups:
                g["lr"] = _lr_at(step, total, cfg)
            with torch.autocast(device.type, enabled=use_amp):
                img_f, txt_f, scale = model(x, t)
                loss = loss_fn(img_f, txt_f, scale)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():
                model.logit_scale.clamp_(0, math.log(100))
            epoch_loss.append(float(loss.detach()))
            step += 1
            bar.update(1)
            bar.set_postfix(epoch=epoch, loss=f"{epoch_loss[-1]:.3f}")
        losses.append(float(np.mean(epoch_loss)) if epoch_loss else float("nan"))
    bar.close()
    model.eval()
    train_seconds = time.perf_counter() - t0

    # ---- save: weights first (their hash names the encoder), the manifest last
    tmp = paths.models / "encoders" / f".tmp-{cfg.model_name}-{cfg.seed}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(tmp / "model.safetensors"))
    w_sha, p_sha = file_sha256(tmp / "model.safetensors"), preprocess_sha256(model)
    encoder_id = make_encoder_id(cfg.model_name, w_sha, p_sha)
    out = paths.models / "encoders" / encoder_id
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    from open_clip.model import get_model_preprocess_cfg
    model_cfg = open_clip.get_model_config(cfg.model_name)
    model_cfg["vision_cfg"]["image_size"] = size
    (out / "open_clip_config.json").write_text(json.dumps(
        {"model_cfg": model_cfg, "preprocess_cfg": get_model_preprocess_cfg(model)}, indent=2,
        default=str))

    encoder = Encoder(encoder_id, cfg.model_name, model, preprocess, tokenizer, device,
                      embed_dim(model))
    metrics = evaluate_retrieval(encoder, image_items(con, paths, split="val"),
                                 max_pairs=cfg.eval_max_pairs, seed=cfg.seed,
                                 num_workers=cfg.num_workers)
    metrics.update(train_loss_per_epoch=[round(x, 4) for x in losses],
                   train_seconds=round(train_seconds, 1), n_train_steps=len(groups),
                   n_train_images=len(positions))
    manifest = {"encoder_id": encoder_id, "config": asdict(cfg), "image_size": size,
                "train_split": "train",
                "train_image_ids": sorted(items[p].image_id for p in positions),
                "train_recipe_ids": sorted({items[p].recipe_id for p in positions}),
                "metrics": metrics}
    register_encoder(con, {
        "encoder_id": encoder_id, "kind": "trained", "model_name": cfg.model_name,
        "pretrained": None, "weights_sha256": w_sha, "preprocess_sha256": p_sha,
        "dim": encoder.dim, "checkpoint_path": _store_path(out / "model.safetensors", paths),
        "train_split": "train",
        "config": {**asdict(cfg), "image_size": size,
                   "train_manifest": _store_path(out / "train_manifest.json", paths)},
        "metrics": metrics})
    (out / "train_manifest.json").write_text(json.dumps(manifest, indent=1))
    log.info("encoder %s trained in %.0f s; val %s", encoder_id, train_seconds,
             {k: v for k, v in metrics.items() if k.startswith(("i2t", "t2i", "chance", "n_"))})
    return {"encoder_id": encoder_id, "dir": str(out), "metrics": metrics}


# ----------------------------------------------------------------------------- evaluation

def evaluate_retrieval(encoder: Encoder, items: list[ImageItem], max_pairs: int = 1000,
                       seed: int = 0, num_workers: int = 0, ks: tuple[int, ...] = (1, 10)) -> dict:
    """Image<->text retrieval on (first image of a step, step text) pairs, with chance levels.

    Returns {n_pairs, i2t_r@k, t2i_r@k, chance_r@k}; empty texts are left out.
    """
    first: dict[tuple[str, int], ImageItem] = {}
    for it in items:
        key = (it.recipe_id, it.step_idx)
        if it.text and (key not in first or it.ord < first[key].ord):
            first[key] = it
    pairs = [first[k] for k in sorted(first)]
    if len(pairs) > max_pairs:
        rng = np.random.default_rng(seed)
        pairs = [pairs[i] for i in sorted(rng.choice(len(pairs), max_pairs, replace=False))]
    if len(pairs) < 2:
        return {"n_pairs": len(pairs)}
    size = image_size_of(encoder.model)
    loader = image_loader([p.path for p in pairs], encoder.preprocess, size, 256, num_workers)
    vecs, ok = [], []
    for pos, x, err, _ in loader:
        keep = [j for j, e in enumerate(err) if not e]
        if keep:
            vecs.append(encoder.encode_image_tensors(x[keep]))
            ok.extend(int(pos[j]) for j in keep)
    img = torch.from_numpy(np.concatenate(vecs))
    txt = torch.from_numpy(encoder.encode_texts([pairs[i].text for i in ok]))
    sim = img @ txt.T
    n = sim.shape[0]
    diag = sim.diagonal().unsqueeze(1)
    rank_i2t = (sim > diag).sum(1)            # 0 = correct text ranked first
    rank_t2i = (sim.T > diag).sum(1)        # same diagonal: text j's own image is image j
    out: dict = {"n_pairs": n}
    for k in ks:
        out[f"i2t_r@{k}"] = round(float((rank_i2t < k).float().mean()), 4)
        out[f"t2i_r@{k}"] = round(float((rank_t2i < k).float().mean()), 4)
        out[f"chance_r@{k}"] = round(min(1.0, k / n), 4)
    return out


def load_manifest(paths: Paths, checkpoint_path: str) -> dict:
    ckpt = Path(checkpoint_path)
    ckpt = ckpt if ckpt.is_absolute() else paths.home / ckpt
    f = ckpt.parent / "train_manifest.json"
    if not f.exists():
        raise EncoderUnavailable(f"no training manifest at {f}")
    return json.loads(f.read_text())
