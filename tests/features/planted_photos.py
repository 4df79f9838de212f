"""Photos written as real image files into a synthetic home (tests/features/synthetic_home.py), for the probes
that read pixels: with `planted`, every photo of a recipe on its recipe's own background colour (a giveaway:
visual cloze distractors and coherence's foreign photos come from other recipes); without, a colour drawn per
photo."""
from __future__ import annotations

import hashlib

import numpy as np
from PIL import Image


def write_photos(con, home, planted: bool, seed: int = 0) -> int:
    """Every `images` row with status ok gets a 32 x 32 JPEG at its path: a background colour (the
    recipe's own when `planted`, else one drawn per photo) with a small noisy square in the middle."""
    rng = np.random.default_rng(seed)
    rows = con.execute("SELECT image_id, recipe_id, path FROM images WHERE status = 'ok' ORDER BY image_id").fetchall()
    colour = {}
    for _iid, rid, path in rows:
        if planted:
            key = int(hashlib.sha256(rid.encode()).hexdigest()[:8], 16)
            colour.setdefault(rid, np.random.default_rng(key).integers(30, 226, size=3))
            bg = colour[rid]
        else:
            bg = rng.integers(30, 226, size=3)
        a = np.empty((32, 32, 3), np.float64)
        a[:] = bg
        a[12:20, 12:20] = rng.integers(0, 256, size=(8, 8, 3))
        a += rng.normal(0, 4, size=a.shape)
        p = home / path
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(p, "JPEG", quality=90)
    return len(rows)
