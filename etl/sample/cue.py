"""How strong the kitchen (background) cue is in a built sample kitchen, in two feature spaces.

Images are grouped three ways: pairs from (a) the same recipe, different steps; (b) the same author,
different recipes; (c) different authors. For each group we report the mean cosine similarity, and a
1-nearest-neighbour probe: is an image's nearest image (its own step's photos left out) from the
same recipe, and is its nearest image from another recipe by the same author (with chance levels)?

Feature spaces:
- `border`: the image downscaled to 32x32, only its 4-pixel border ring kept (mostly counter, so
  it does not depend on any encoder), centred by the mean over the sample;
- an encoder's image vectors (`encoder_features`, e.g. the default encoder), as they are.

Group means are exact and need no pair sampling: with unit vectors x_i, the sum of x_i . x_j over
ordered pairs i != j inside a group is |sum x_i|^2 - n. Same-recipe and same-author means are
compared author by author (see `cue_figures`).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

RING, SIDE = 4, 32


def load_images(out_dir: Path) -> list[dict]:
    """The served, readable images of a build: {file, recipe, step, author}, in ground-truth order."""
    out_dir = Path(out_dir)
    rows = []
    for line in (out_dir / "ground_truth.jsonl").read_text(encoding="utf-8").splitlines():
        g = json.loads(line)
        for s in g["steps"]:
            for im in s["images"]:
                if im["expected"] == "ok":
                    rows.append({"file": out_dir / "site" / im["url_path"].lstrip("/"), "recipe": g["recipe_id"],
                                 "step": s["step_idx"], "author": g["author"]})
    return rows


def border_features(files: list[Path]) -> np.ndarray:
    """[n, 3 * (32^2 - 24^2)] float32: the 4-pixel border of each image at 32x32, mean-centred."""
    ring = np.ones((SIDE, SIDE), bool)
    ring[RING:-RING, RING:-RING] = False
    out = np.empty((len(files), int(ring.sum()) * 3), np.float32)
    for k, f in enumerate(files):
        with Image.open(f) as im:
            a = np.asarray(im.convert("RGB").resize((SIDE, SIDE), Image.BILINEAR), dtype=np.float32)
        out[k] = a[ring].reshape(-1) / 255.0
    return out - out.mean(0, keepdims=True)


def encoder_features(encoder, files: list[Path], workers: int = 0) -> np.ndarray:
    """The encoder's L2-normalised image vectors [n, dim] (every file must decode)."""
    from features.embed.decode import image_loader, image_size_of
    loader = image_loader(files, encoder.preprocess, image_size_of(encoder.model), 256, workers)
    vecs = np.zeros((len(files), encoder.dim), np.float32)
    for pos, x, err, _ in loader:
        bad = [files[int(p)] for p, e in zip(pos, err) if e]
        if bad:
            raise ValueError(f"undecodable image in the sample: {bad[0]}")
        vecs[pos.numpy()] = encoder.encode_image_tensors(x)
    return vecs


def _codes(values: list) -> np.ndarray:
    return np.unique(np.array(values, dtype=object), return_inverse=True)[1]


def _within(x: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per group: (sum of x_i . x_j over its ordered pairs i != j, number of those pairs)."""
    sums = np.zeros((group.max() + 1, x.shape[1]), np.float64)
    np.add.at(sums, group, x)
    n = np.bincount(group).astype(np.float64)
    return (sums ** 2).sum(1) - n, n * (n - 1)     # |x_i| = 1


def cue_figures(x: np.ndarray, recipe: list[str], step: list[int], author: list[str],
                block: int = 1024) -> dict:
    """Mean cosine per pair group and 1-NN recipe / author recovery for features x [n, d].

    Same-recipe and same-author means are taken per author, over the authors with 2 or more
    recipes, then averaged: both compare the same kitchens, and a prolific author does not weigh
    more. The across-authors mean is over all pairs of images by different authors."""
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    r, a = _codes(recipe), _codes(author)
    s = _codes([f"{rc}\0{st}" for rc, st in zip(recipe, step)])
    author_of_r, author_of_s = np.zeros(r.max() + 1, int), np.zeros(s.max() + 1, int)
    author_of_r[r], author_of_s[s] = a, a
    per_author = lambda v, owner: np.bincount(owner, v, minlength=a.max() + 1)
    (sa, na), (sr, nr), (ss, ns) = _within(x, a), _within(x, r), _within(x, s)
    sr_a, nr_a = per_author(sr, author_of_r), per_author(nr, author_of_r)
    ss_a, ns_a = per_author(ss, author_of_s), per_author(ns, author_of_s)
    multi = np.bincount(author_of_r, minlength=a.max() + 1) >= 2
    recipe_pairs, author_pairs = nr_a - ns_a, na - nr_a
    keep = multi & (recipe_pairs > 0) & (author_pairs > 0)
    total = float(x.sum(0) @ x.sum(0)) - len(x)
    across_sum, across_n = total - sa.sum(), len(x) * (len(x) - 1) - na.sum()
    out = {"n_images": len(x), "n_recipes": int(r.max() + 1), "n_authors": int(a.max() + 1),
           "n_authors_multi": int(keep.sum()),
           "cos_same_recipe": round(float(np.mean(((sr_a - ss_a) / np.maximum(recipe_pairs, 1))[keep])), 4)
           if keep.any() else None,
           "cos_same_author": round(float(np.mean(((sa - sr_a) / np.maximum(author_pairs, 1))[keep])), 4)
           if keep.any() else None,
           "cos_across_authors": round(float(across_sum / across_n), 4) if across_n else None}
    out.update(_nn_probe(x, r, s, a, block))
    return out


def _nn_probe(x, r, s, a, block) -> dict:
    """1-NN recovery. Recipe: nearest image outside the query's own step; author: nearest image
    outside the query's own recipe, among queries whose author has another recipe."""
    xt = x.T
    hit_r, hit_a, ch_r, ch_a = [], [], [], []
    n_r, n_s, n_a = np.bincount(r), np.bincount(s), np.bincount(a)
    for i in range(0, len(x), block):
        q = slice(i, min(i + block, len(x)))
        sim = x[q] @ xt
        same_step = s[q][:, None] == s[None, :]
        same_recipe = r[q][:, None] == r[None, :]
        nn = np.where(same_step, -np.inf, sim).argmax(1)
        ok = ~same_step.all(1)
        hit_r.append((r[nn] == r[q])[ok])
        ch_r.append(((n_r[r[q]] - n_s[s[q]]) / np.maximum(len(x) - n_s[s[q]], 1))[ok])
        nn = np.where(same_recipe, -np.inf, sim).argmax(1)
        ok = n_a[a[q]] > n_r[r[q]]
        hit_a.append((a[nn] == a[q])[ok])
        ch_a.append(((n_a[a[q]] - n_r[r[q]]) / np.maximum(len(x) - n_r[r[q]], 1))[ok])
    cat = np.concatenate
    return {"nn_same_recipe": round(float(cat(hit_r).mean()), 4),
            "nn_same_recipe_chance": round(float(cat(ch_r).mean()), 4),
            "nn_same_author": round(float(cat(hit_a).mean()), 4) if cat(hit_a).size else None,
            "nn_same_author_chance": round(float(cat(ch_a).mean()), 4) if cat(ch_a).size else None,
            "nn_author_queries": int(cat(hit_a).size)}


def measure_cue(out_dir: Path, encoder=None, workers: int = 0) -> dict:
    """Cue figures of a built sample in the border-pixel space and, when given, the encoder's."""
    rows = load_images(out_dir)
    if len(rows) < 3:
        raise ValueError(f"{out_dir}: fewer than 3 readable images in the ground truth")
    files = [row["file"] for row in rows]
    labels = ([row["recipe"] for row in rows], [row["step"] for row in rows], [row["author"] for row in rows])
    res = {"border_pixels": cue_figures(border_features(files), *labels)}
    if encoder is not None:
        res[f"encoder:{encoder.encoder_id}"] = cue_figures(encoder_features(encoder, files, workers), *labels)
    return res
