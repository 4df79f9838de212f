"""A small warehouse with real JPEG files whose content correlates with their step text.

Each step names a colour and a shape ("Add the red circle"); its images draw that shape in that
colour on a per-recipe background, so a contrastive encoder learns a measurable image<->text link in
seconds. Recipes are loaded with etl.load.load_recipe (explicit splits), images written under
MRQA_HOME/images/<recipe_id>/<image_id> and marked ok with their sha256, as the ingest stage would.
"""
from __future__ import annotations

import hashlib
import io

import numpy as np
from PIL import Image, ImageDraw

from etl.load import load_recipe
from etl.records import RecipeRecord, StepRecord, image_id

COLOURS = {"red": (220, 30, 30), "green": (30, 180, 40), "blue": (30, 60, 220),
           "yellow": (240, 220, 20), "purple": (140, 40, 170), "orange": (250, 140, 10),
           "white": (250, 250, 250), "black": (10, 10, 10)}
SHAPES = ("circle", "square", "triangle")
SPLIT_CYCLE = ("train",) * 6 + ("val", "val", "test", "test")


def draw(colour: str, shape: str, rng: np.random.Generator, size: int = 48) -> bytes:
    bg = tuple(int(v) for v in rng.integers(90, 170, 3))
    im = Image.new("RGB", (size, size), bg)
    d = ImageDraw.Draw(im)
    r = int(rng.integers(size // 4, size // 2 - 2))
    cx, cy = (int(v) for v in rng.integers(r, size - r, 2))
    c = COLOURS[colour]
    if shape == "circle":
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=c)
    elif shape == "square":
        d.rectangle([cx - r, cy - r, cx + r, cy + r], fill=c)
    else:
        d.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=c)
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def build_toy_warehouse(con, paths, n_recipes: int = 20, steps: int = 4, images_per_step: int = 1,
                        seed: int = 0, prefix: str = "Toy-Recipe", splits=SPLIT_CYCLE) -> list[str]:
    """Load `n_recipes` toy recipes with images; returns their recipe ids."""
    rng = np.random.default_rng(seed)
    names = list(COLOURS)
    ids = []
    for r in range(n_recipes):
        rid = f"{prefix}-{r}"
        ids.append(rid)
        plan = []
        for _s in range(steps):
            colour, shape = names[int(rng.integers(len(names)))], SHAPES[int(rng.integers(3))]
            plan.append((colour, shape))
        rec = RecipeRecord(rid, f"https://example.test/{rid}/", f"Toy recipe {r}", category="cooking",
                           steps=[StepRecord(s, f"Add the {c} {sh}",
                                             f"Put the {c} {sh} into the dish and stir.",
                                             images=[f"https://example.test/{rid}/{s}/{k}.jpg"
                                                     for k in range(images_per_step)])
                                  for s, (c, sh) in enumerate(plan)])
        load_recipe(con, rec, source="sample", split=splits[r % len(splits)])
        for s, (c, sh) in enumerate(plan):
            for k in range(images_per_step):
                iid = image_id(rid, s, k)
                data = draw(c, sh, rng)
                f = paths.images / rid / iid
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_bytes(data)
                con.execute("UPDATE images SET status = 'ok', path = ?, sha256 = ?, width = 48, "
                            "height = 48 WHERE image_id = ?",
                            [str(f.relative_to(paths.home)), hashlib.sha256(data).hexdigest(), iid])
    return ids
