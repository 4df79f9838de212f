"""The images carry what the paper needs: a per-recipe background cue that is strong but not total,
and look-alike images of the same step content across recipes (hard negatives)."""
from __future__ import annotations

import itertools
import random
from collections import defaultdict

import numpy as np
from PIL import Image


def _load(sample_build):
    out, _, gt = sample_build
    rows = []
    for g in gt:
        for s in g["steps"]:
            for im in s["images"]:
                if im["expected"] != "ok":
                    continue
                with Image.open(out / "site" / im["url_path"].lstrip("/")) as f:
                    a = np.asarray(f.convert("RGB").resize((32, 32), Image.BILINEAR), dtype=np.float32)
                d = im["depicts"]
                key = (d["action"], d["vessel"], tuple(sorted((i["name"], i["state"]) for i in d["items"])))
                rows.append({"recipe": g["recipe_id"], "step": s["step_idx"], "key": key, "pix": a})
    return rows


def _mean_dist(pairs, f):
    return float(np.mean([f(a, b) for a, b in pairs]))


def test_background_cue_mean_colour_closer_within_recipe(sample_build):
    rows = _load(sample_build)
    mean = {id(r): r["pix"].reshape(-1, 3).mean(0) for r in rows}
    rng = random.Random(0)
    by_recipe = defaultdict(list)
    for r in rows:
        by_recipe[r["recipe"]].append(r)
    within = [p for rs in by_recipe.values() for p in itertools.combinations(rs, 2)]
    across = [(a, b) for a, b in (rng.sample(rows, 2) for _ in range(4000)) if a["recipe"] != b["recipe"]]
    dist = lambda a, b: float(np.linalg.norm(mean[id(a)] - mean[id(b)]))
    w, x = _mean_dist(within, dist), _mean_dist(across, dist)
    print(f"\nbackground cue: mean-colour distance within recipe {w:.1f}, across recipes {x:.1f}, ratio {w / x:.3f}")
    assert w / x < 0.4


def test_same_content_across_recipes_is_nearer_than_other_content_in_the_same_kitchens(sample_build):
    """Photo a and a same-content photo b of another recipe are nearer than a and a photo of other
    content from b's recipe: the control shares b's kitchen, so the background cancels out."""
    rows = _load(sample_build)
    by_key, by_recipe = defaultdict(list), defaultdict(list)
    for r in rows:
        by_key[r["key"]].append(r)
        by_recipe[r["recipe"]].append(r)
    rng = random.Random(1)
    dist = lambda a, b: float(np.linalg.norm(a["pix"] - b["pix"]))
    same, control = [], []
    for rs in by_key.values():
        for a, b in itertools.combinations(rs, 2):
            others = [o for o in by_recipe[b["recipe"]] if o["key"] != a["key"]]
            if a["recipe"] != b["recipe"] and others:
                same.append(dist(a, b))
                control.append(dist(a, rng.choice(others)))
    s, c = float(np.mean(same)), float(np.mean(control))
    print(f"\nhard negatives: {len(same)} same-content cross-recipe pairs, pixel distance {s:.0f} vs other content "
          f"in the same kitchen {c:.0f} (ratio {s / c:.3f})")
    assert len(same) >= 10
    assert s < 0.92 * c


def test_step_content_dominates_within_a_recipe(sample_build):
    """Photos of one step differ less than photos of different steps of the same recipe."""
    rows = _load(sample_build)
    by_recipe = defaultdict(list)
    for r in rows:
        by_recipe[r["recipe"]].append(r)
    same_step, other_step = [], []
    for rs in by_recipe.values():
        for a, b in itertools.combinations(rs, 2):
            (same_step if a["step"] == b["step"] else other_step if a["key"] != b["key"] else []).append((a, b))
    dist = lambda a, b: float(np.linalg.norm(a["pix"] - b["pix"]))
    s, o = _mean_dist(same_step, dist), _mean_dist(other_step, dist)
    print(f"\nwithin a recipe: same-step photos {s:.0f}, different steps {o:.0f} (ratio {s / o:.3f})")
    assert s < 0.75 * o
