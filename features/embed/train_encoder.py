"""Train the default encoder: a small open_clip model on the train split, contrastively.

1. CLIP (`open_clip.ClipLoss`) on (step image, the step's cleaned title + body) pairs;
2. optionally (`recipe_weight` > 0, off by default) a recipe-level image-image term (SupCon on the
   image tower): images of the same recipe are positives, the other recipes' images negatives.
   It teaches the kitchen (background) cue on purpose; on the sample kitchen with author kitchens
   it halves image->text R@1 (1,000-recipe demo, 824 val pairs: R@1 0.036 / R@10 0.285 at 0.25
   and 8 epochs, 0.068 / 0.384 without it, 0.085 / 0.428 without it at 16 epochs). The CLIP term
   alone still keeps much of the cue: an image's nearest image is from its own recipe 28% of
   the time (chance 1%), as real CLIP features keep backgrounds, so the knobs have a bias to remove.

Batches are recipe-aware: each recipe's steps are cut into chunks of `images_per_recipe` steps and
chunks are packed into batches, so every image meets other steps of its own recipe (same kitchen,
other text: hard negatives for the CLIP term, positives for the recipe term); one seeded image per step
per epoch, so two images of one step (identical text) never sit in a batch as false negatives.
Only recipes with split 'train' and images with status 'ok' are read (the manifest lists every image
id used; a test checks it is disjoint from val/test). Images are decoded + resized once into a uint8
`PixelCache` (MRQA_HOME/models/pixel_cache, keyed by sha256), so later epochs and later trainings
decode nothing. Output, under MRQA_HOME/models/encoders/<encoder_id>/: model.safetensors,
open_clip_config.json, train_manifest.json (written last), and a row in `encoders`.
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
import torch.nn.functional as F
from tqdm import tqdm

from etl.config import Paths
from features.datasets.twins import StepWords
from features.embed.decode import ImageItem, PixelCache, image_items, image_loader, image_size_of
from features.embed.encoders import (
    TINY_MODEL,
    Encoder,
    EncoderUnavailable,
    _store_path,
    embed_dim,
    file_sha256,
    make_encoder_id,
    pick_device,
    preprocess_sha256,
    register_encoder,
    register_tiny_config,
)

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    model_name: str = TINY_MODEL
    epochs: int = 16                    # 8 -> 16: val image->text R@10 0.384 -> 0.428 (no recipe term)
    batch_size: int = 64                # images (= steps) per batch: small batches, more updates
    images_per_recipe: int = 4          # steps of one recipe kept together in a batch (positives)
    lr: float = 1e-3
    weight_decay: float = 0.05
    warmup_steps: int = 20
    clip_weight: float = 1.0            # image<->text ClipLoss
    recipe_weight: float = 0.0          # image<->image same-recipe SupCon (teaches the kitchen cue;
    recipe_temperature: float = 0.3     # at 1.0 it dominates and the CLIP loss stays at chance)
    hard_share: float = 0.0             # share of each epoch's steps (from the 2nd epoch on) batched
                                        # with their nearest look-alike steps (neighbour_batches)
    twins: str = "none"                 # text twins in a batch: "none" (negatives, as CLIP), "positive"
                                        # (soft targets) or "mask" (out of each other's softmax)
    seed: int = 0
    image_size: int | None = None       # None: the architecture's (32 for mrqa-tiny-clip)
    num_workers: int = 0                # decode workers (cache misses only)
    threads: int | None = 1             # torch CPU threads (None: torch's default). 1: this model is
                                        # tiny, and on a loaded 2-core machine 2 threads ran 5-8x slower
    tower_threads: bool = True          # on CPU, the image and the text tower's forward and backward on
                                        # two threads (each op on one thread: the same weights, bit for bit)
    pixel_cache: bool = True            # keep decoded pixels in MRQA_HOME/models/pixel_cache
    max_train_pairs: int | None = None  # cap on steps used (seeded sample), for quick runs
    eval_max_pairs: int = 1000
    device: str | None = None


class TrainingDataError(RuntimeError):
    pass


# ----------------------------------------------------------------------------- data

def _steps_by_recipe(items: list[ImageItem], positions: list[int]
                     ) -> tuple[list[list[int]], np.ndarray, list[str]]:
    """(rows of the pixel tensor per step, recipe index of each step, recipe ids), sorted."""
    groups: dict[tuple[str, int], list[int]] = {}
    for row, pos in enumerate(positions):
        it = items[pos]
        groups.setdefault((it.recipe_id, it.step_idx), []).append(row)
    keys = sorted(groups)
    recipes = sorted({k[0] for k in keys})
    r_index = {r: i for i, r in enumerate(recipes)}
    return [groups[k] for k in keys], np.array([r_index[k[0]] for k in keys]), recipes


def recipe_batches(step_recipe: np.ndarray, batch_size: int, per_recipe: int,
                   rng: np.random.Generator) -> list[np.ndarray]:
    """One epoch of step indices: each recipe's steps shuffled and cut into chunks of `per_recipe`,
    chunks shuffled and packed into batches of `batch_size` (the last one kept if >= 2 steps)."""
    chunks = []
    for r in np.unique(step_recipe):
        steps = rng.permutation(np.flatnonzero(step_recipe == r))
        chunks.extend(steps[i:i + per_recipe] for i in range(0, len(steps), per_recipe))
    order = np.concatenate([chunks[i] for i in rng.permutation(len(chunks))])
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    return [b for b in batches if len(b) >= 2]


def neighbour_batches(vecs: np.ndarray, steps: np.ndarray, batch_size: int,
                      rng: np.random.Generator) -> list[np.ndarray]:
    """Batches of look-alike steps: a seeded anchor step and its `batch_size - 1` nearest not yet
    batched steps (cosine of the current image vectors, any recipe), until `steps` are used up.

    Knob 2 draws a cloze question's distractors from the answer image's nearest neighbours, so a
    reader must tell a step's text from the look-alike photos; random batches rarely hold such
    photos and teach mainly which recipe (kitchen) a text belongs to. Hard-negative batches from the
    model's own neighbours (as in ANCE-style mining) put them side by side."""
    v = vecs[steps] / np.maximum(np.linalg.norm(vecs[steps], axis=1, keepdims=True), 1e-12)
    free = np.ones(len(steps), dtype=bool)
    out = []
    for a in rng.permutation(len(steps)):
        if not free[a]:
            continue
        cand = np.flatnonzero(free)
        sim = v[cand] @ v[a]
        take = cand[np.argsort(-sim, kind="stable")[:batch_size]]   # the anchor itself comes first
        free[take] = False
        if len(take) >= 2:
            out.append(steps[take])
    return out


def clip_loss_soft(img: torch.Tensor, txt: torch.Tensor, scale: torch.Tensor,
                   tokens: torch.Tensor, twins: torch.Tensor | None = None, mask: bool = False) -> torch.Tensor:
    """CLIP's symmetric InfoNCE, with steps of identical text (or text twins, `twins` (B, B) bool:
    steps that say the same thing, features/datasets/twins.py) counted as positives of each other
    (`mask` False), or left out of each other's softmax (`mask` True): "Chop the onions" in two
    recipes is no negative. With no duplicate texts and no twins it is exactly open_clip's ClipLoss."""
    logits = scale * img @ txt.T
    same = (tokens[:, None, :] == tokens[None, :, :]).all(-1)
    if twins is not None:
        same = same | twins
    if mask:
        eye = torch.eye(len(same), dtype=torch.bool, device=same.device)
        logits = logits.masked_fill(same & ~eye, -1e4)
        same = eye
    same = same.float()
    target = same / same.sum(1, keepdim=True)
    li = -(target * F.log_softmax(logits, dim=1)).sum(1).mean()
    lt = -(target * F.log_softmax(logits.T, dim=1)).sum(1).mean()
    return (li + lt) / 2


def recipe_supcon_loss(features: torch.Tensor, labels: torch.Tensor, temperature: float) -> torch.Tensor:
    """Supervised contrastive loss: for each anchor with >= 1 positive (same label, not itself),
    the mean over positives of -log softmax over all other batch members."""
    n = features.shape[0]
    sim = features @ features.T / temperature
    self_mask = torch.eye(n, dtype=torch.bool, device=features.device)
    sim = sim.masked_fill(self_mask, float("-inf"))
    log_prob = sim - torch.logsumexp(sim, dim=1, keepdim=True)
    pos = (labels[:, None] == labels[None, :]) & ~self_mask
    n_pos = pos.sum(1)
    has = n_pos > 0
    if not bool(has.any()):
        return features.sum() * 0.0
    per_anchor = -(log_prob.masked_fill(~pos, 0.0).sum(1)[has] / n_pos[has])
    return per_anchor.mean()


def _mixed_batches(model, cache, pixels, step_recipe: np.ndarray, batch_size: int, per_recipe: int,
                   share: float, rng: np.random.Generator, device) -> list[np.ndarray]:
    """A seeded `share` of the steps in look-alike batches (current image vectors), the rest in
    recipe batches; the batches shuffled together."""
    model.eval()
    with torch.no_grad():
        vecs = np.concatenate([model.encode_image(cache.model_input(pixels[i:i + 512]).to(device),
                                                  normalize=True).float().cpu().numpy()
                               for i in range(0, len(pixels), 512)])
    n = len(step_recipe)
    hard = np.sort(rng.permutation(n)[:int(round(share * n))])
    rest = np.setdiff1d(np.arange(n), hard)
    batches = neighbour_batches(vecs, hard, batch_size, rng)
    if len(rest):
        sub = recipe_batches(step_recipe[rest], batch_size, per_recipe, rng)
        batches += [rest[b] for b in sub]
    return [batches[i] for i in rng.permutation(len(batches))]


class _UsedRowsEmbedding(torch.nn.Module):
    """Token embedding training only the rows of tokens that occur in the corpus.

    The text tower's 49k x d table is mostly unused on a small corpus; AdamW on the full table costs
    more than the forward pass. Unused rows get no gradient either way; `write_back` puts the trained
    rows into the full table, so the saved model is a plain open_clip model.
    """

    def __init__(self, full: torch.nn.Embedding, used: torch.Tensor):
        super().__init__()
        self.full = [full]                      # not a submodule: its table stays out of the optimiser
        self.register_buffer("used", used)
        lut = torch.zeros(full.num_embeddings, dtype=torch.long)
        lut[used] = torch.arange(len(used))
        self.register_buffer("lut", lut)
        self.weight = torch.nn.Parameter(full.weight.detach()[used].clone())

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(self.lut[ids], self.weight)

    def write_back(self) -> torch.nn.Embedding:
        full = self.full[0]
        with torch.no_grad():
            full.weight[self.used] = self.weight.detach()
        return full


class _TwoTowers:
    """CLIP's forward and backward with the text tower on a second thread, the image tower on this one.

    The towers share no weights (only `logit_scale`, used by the loss alone), so the loss's gradients
    with respect to the two feature tensors and the scale are taken first, then each tower's graph is
    run back on its own thread. Every op runs as it would in `model(x, t)` and `loss.backward()`, on one
    intra-op thread, in the same order within its tower, so the weights are the same bit for bit
    (tests/features/embed/test_encoders.py); torch releases the GIL inside its ops and its autograd
    engine, so the two towers' work overlaps on two cores. CPU only: autocast is per thread."""

    def __init__(self, model):
        from concurrent.futures import ThreadPoolExecutor
        self.model = model
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="text-tower")

    def forward(self, x: torch.Tensor, t: torch.Tensor):
        text = self.pool.submit(self.model.encode_text, t, True)
        img_f = self.model.encode_image(x, normalize=True)
        txt_f = text.result()
        return img_f, txt_f, self.model.logit_scale.exp()

    def backward(self, loss: torch.Tensor, img_f: torch.Tensor, txt_f: torch.Tensor, scale: torch.Tensor):
        g_img, g_txt, g_scale = torch.autograd.grad(loss, [img_f, txt_f, scale])
        text = self.pool.submit(torch.autograd.backward, [txt_f], [g_txt])
        torch.autograd.backward([img_f, scale], [g_img, g_scale])
        text.result()

    def close(self):
        self.pool.shutdown()


# ----------------------------------------------------------------------------- training

def _lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    t = (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps)
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))


def train_encoder(con: duckdb.DuckDBPyConnection, paths: Paths | None = None,
                  cfg: TrainConfig | None = None) -> dict:
    """Train, save, evaluate on val and register the default encoder; returns a summary dict."""
    cfg = cfg or TrainConfig()
    old_threads = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        return _train_encoder(con, (paths or Paths.from_env()).ensure(), cfg)
    finally:
        torch.set_num_threads(old_threads)


def _train_encoder(con: duckdb.DuckDBPyConnection, paths: Paths, cfg: TrainConfig) -> dict:
    import open_clip
    from safetensors.torch import save_file

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
    if any(it.split != "train" for it in items):          # defensive: the query filters on split
        raise TrainingDataError("non-train image in the training set")
    if cfg.max_train_pairs is not None:
        steps = sorted({(it.recipe_id, it.step_idx) for it in items})
        rng = np.random.default_rng(cfg.seed)
        keep = {steps[i] for i in rng.permutation(len(steps))[:cfg.max_train_pairs]}
        items = [it for it in items if (it.recipe_id, it.step_idx) in keep]
    cache = PixelCache(paths.models / "pixel_cache" if cfg.pixel_cache else None, preprocess, size)
    pixels, positions, cache_stats = cache.pixels(items, cfg.num_workers, "decode train")
    decode_seconds = time.perf_counter() - t0
    groups, step_recipe, recipes = _steps_by_recipe(items, positions)
    if len(groups) < 2:
        raise TrainingDataError(f"the default encoder trains on the train split's step photos and texts, and this "
                                f"home has {len(groups)} train step(s) with a readable image: crawl recipes with "
                                "their photos (`mrqa ingest instructables`, `mrqa demo`), import RecipeQA with "
                                "its images (`mrqa ingest recipeqa FILE --images DIR`), or add real CLIP weights "
                                "(`mrqa encoder add --pretrained FILE|TAG`) and run `mrqa embed --encoder ID`; for "
                                "the text alone, fit the words encoder (`mrqa encoder words`) and run `mrqa embed "
                                "--encoder ID`")
    tokens = tokenizer([items[positions[g[0]]].text for g in groups])
    words = StepWords(list(range(len(groups))), [items[positions[g[0]]].text for g in groups]) \
        if cfg.twins != "none" else None
    log.info("training %s on %d train steps of %d recipes (%d images: %d decoded, %d from cache, "
             "%d unreadable) on %s, %d threads%s", cfg.model_name, len(groups), len(recipes),
             len(positions), cache_stats["decoded"], cache_stats["cached"], cache_stats["unreadable"],
             device, torch.get_num_threads(),
             ", the text tower on a thread of its own" if cfg.tower_threads and device.type == "cpu" else "")

    full_embedding = model.token_embedding
    model.token_embedding = _UsedRowsEmbedding(full_embedding, torch.unique(tokens)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    batch_size = min(cfg.batch_size, len(groups))
    per_recipe = max(1, min(cfg.images_per_recipe, batch_size))
    epochs = [recipe_batches(step_recipe, batch_size, per_recipe, np.random.default_rng([cfg.seed, e]))
              for e in range(cfg.epochs)]
    total = sum(len(b) for b in epochs)          # neighbour batches are as full: the same count
    use_amp = device.type == "cuda"
    losses, clip_losses, recipe_losses, step = [], [], [], 0
    model.train()
    towers = _TwoTowers(model) if cfg.tower_threads and device.type == "cpu" else None
    bar = tqdm(total=total, desc="train encoder", unit="step")
    t_fit = time.perf_counter()
    try:
        for epoch, batches in enumerate(epochs):
            rng = np.random.default_rng([cfg.seed, epoch, 1])
            pick = np.array([g[rng.integers(len(g))] for g in groups])
            if cfg.hard_share > 0 and epoch > 0:
                batches = _mixed_batches(model, cache, pixels[pick], step_recipe, batch_size, per_recipe,
                                         cfg.hard_share, np.random.default_rng([cfg.seed, epoch, 2]), device)
                model.train()
            acc = np.zeros(3)
            for idx in batches:
                x = cache.model_input(pixels[pick[idx]]).to(device)
                t = tokens[idx].to(device)
                tw = torch.from_numpy(words.twins(idx[:, None], idx[None, :])).to(device) if words else None
                labels = torch.from_numpy(step_recipe[idx]).to(device)
                for g in opt.param_groups:
                    g["lr"] = _lr_at(step, total, cfg)
                with torch.autocast(device.type, enabled=use_amp):
                    img_f, txt_f, scale = towers.forward(x, t) if towers else model(x, t)
                    l_clip = clip_loss_soft(img_f, txt_f, scale, t, tw, mask=cfg.twins == "mask")
                    l_recipe = recipe_supcon_loss(img_f.float(), labels, cfg.recipe_temperature)
                    loss = cfg.clip_weight * l_clip + cfg.recipe_weight * l_recipe
                opt.zero_grad(set_to_none=True)
                if towers:
                    towers.backward(loss, img_f, txt_f, scale)
                else:
                    loss.backward()
                opt.step()
                with torch.no_grad():
                    model.logit_scale.clamp_(0, math.log(100))
                acc += [float(loss.detach()), float(l_clip.detach()), float(l_recipe.detach())]
                step += 1
                bar.update(1)
                bar.set_postfix(epoch=epoch, clip=f"{float(l_clip.detach()):.3f}",
                                recipe=f"{float(l_recipe.detach()):.3f}")
            n = max(1, len(batches))
            losses.append(acc[0] / n)
            clip_losses.append(acc[1] / n)
            recipe_losses.append(acc[2] / n)
    finally:
        bar.close()
        if towers:
            towers.close()
    fit_seconds = time.perf_counter() - t_fit
    model.token_embedding = model.token_embedding.write_back()
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
                   clip_loss_per_epoch=[round(x, 4) for x in clip_losses],
                   recipe_loss_per_epoch=[round(x, 4) for x in recipe_losses],
                   train_seconds=round(train_seconds, 1), decode_seconds=round(decode_seconds, 1),
                   n_train_steps=len(groups), n_train_images=len(positions),
                   n_train_recipes=len(recipes), n_optimizer_steps=step,
                   images_decoded=cache_stats["decoded"], images_from_cache=cache_stats["cached"],
                   threads=torch.get_num_threads())
    platform = built_on(device)
    manifest = {"encoder_id": encoder_id, "config": asdict(cfg), "image_size": size, "platform": platform,
                "train_split": "train",
                "train_image_ids": sorted(items[p].image_id for p in positions),
                "train_recipe_ids": sorted({items[p].recipe_id for p in positions}),
                "metrics": metrics}
    register_encoder(con, {
        "encoder_id": encoder_id, "kind": "trained", "model_name": cfg.model_name,
        "pretrained": None, "weights_sha256": w_sha, "preprocess_sha256": p_sha,
        "dim": encoder.dim, "checkpoint_path": _store_path(out / "model.safetensors", paths),
        "train_split": "train",
        "config": {**asdict(cfg), "image_size": size, "platform": platform,
                   "train_manifest": _store_path(out / "train_manifest.json", paths)},
        "metrics": metrics})
    (out / "train_manifest.json").write_text(json.dumps(manifest, indent=1))
    log.info("encoder %s trained in %.0f s; val %s", encoder_id, train_seconds,
             {k: v for k, v in metrics.items() if k.startswith(("i2t", "t2i", "chance", "n_", "img_"))})
    return {"encoder_id": encoder_id, "dir": str(out), "metrics": metrics, "fit_seconds": fit_seconds}


def built_on(device) -> dict:
    """What the weights depend on besides the data, the config and the seed: torch's version and the
    instruction set its CPU kernels (and MKL's, oneDNN's) chose. The same seed on a CPU with another
    instruction set (AVX2 against AVX-512) rounds differently and trains other weights, so other
    vectors, neighbours and datasets (docs/knobs.md, "Determinism and provenance")."""
    import platform
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "machine": platform.machine(), "device": str(device),
            "cuda": torch.version.cuda if str(device).startswith("cuda") else None}


# ----------------------------------------------------------------------------- evaluation

def evaluate_retrieval(encoder: Encoder, items: list[ImageItem], max_pairs: int = 1000,
                       seed: int = 0, num_workers: int = 0, ks: tuple[int, ...] = (1, 10)) -> dict:
    """Image<->text retrieval on (first image of a step, step text) pairs, with chance levels, and
    image->same-recipe retrieval (is an image's nearest other image a step of its own recipe?).

    Returns {n_pairs, i2t_r@k, t2i_r@k, chance_r@k, img_same_recipe_r@1, chance_same_recipe_r@1};
    empty texts are left out.
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
    recipe = np.array([pairs[i].recipe_id for i in ok], dtype=object)
    same = torch.from_numpy(recipe[:, None] == recipe[None, :])
    isim = (img @ img.T).fill_diagonal_(-float("inf"))
    nearest = isim.argmax(1)
    out["img_same_recipe_r@1"] = round(float(same[torch.arange(n), nearest].float().mean()), 4)
    out["chance_same_recipe_r@1"] = round(float((same.sum(1) - 1).float().mean()) / (n - 1), 4)
    texts = [pairs[i].text for i in ok]
    twins = torch.from_numpy(StepWords(list(range(n)), texts).twins(np.arange(n)[:, None], np.arange(n)[None, :]))
    out.update(hard_choice_accuracy(img, txt, same, twins))
    return out


def hard_choice_accuracy(img: torch.Tensor, txt: torch.Tensor, same: torch.Tensor,
                         twins: torch.Tensor | None = None, n_distractors: int = 3) -> dict:
    """Text -> image among 1 + `n_distractors` images, as a reader meets them in a cloze question.

    `t2i_hard4`: the distractors are the image's nearest images of *other* recipes (what knob 2 picks:
    the answer's neighbours); `t2i_rand4`: other-recipe images drawn at random (fixed seed);
    `t2i_hard4_distinct`: the nearest images of other recipes whose step text is no twin of the text
    (`twins`, (n, n) bool; features/datasets/twins.py): what AF's cloze questions ask. Chance 0.25.
    Retrieval R@k over all pairs rewards telling recipes apart (the kitchen); these reward telling a
    step's content from look-alike steps, which is what reading a recipe needs.
    """
    n = img.shape[0]
    if n < n_distractors + 1:
        return {}
    own = (txt * img).sum(1)
    rng = np.random.default_rng(0)                                  # a fixed draw: same figure each run
    orders = [torch.from_numpy(rng.permutation(n)) for _ in range(n)]
    out = {}
    allowed = [("t2i_hard4", ~same, False), ("t2i_rand4", ~same, True)]
    if twins is not None:
        allowed.append(("t2i_hard4_distinct", ~same & ~twins, False))
    sim = img @ img.T
    for name, ok, at_random in allowed:
        rows = torch.nonzero(ok.sum(1) >= n_distractors).ravel()  # texts with enough choices
        if len(rows) == 0:
            continue
        if at_random:
            idx = torch.stack([orders[i][ok[i, orders[i]]][:n_distractors] for i in rows.tolist()])
        else:
            idx = sim[rows].masked_fill(~ok[rows], -float("inf")).topk(n_distractors, dim=1).indices
        d = (txt[rows, None, :] * img[idx]).sum(2).max(1).values
        out[name] = round(float((own[rows] > d).float().mean()), 4)
    out["chance_4"] = 0.25
    return out


def load_manifest(paths: Paths, checkpoint_path: str) -> dict:
    ckpt = Path(checkpoint_path)
    ckpt = ckpt if ckpt.is_absolute() else paths.home / ckpt
    f = ckpt.parent / "train_manifest.json"
    if not f.exists():
        raise EncoderUnavailable(f"no training manifest at {f}")
    return json.loads(f.read_text())
