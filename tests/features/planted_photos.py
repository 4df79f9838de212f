"""Photos written as real image files into a synthetic home (tests/features/synthetic_home.py), for the probes
that read pixels: with `planted`, every photo of a recipe on its recipe's own background colour (a giveaway:
visual cloze distractors and coherence's foreign photos come from other recipes); without, a colour drawn per
photo. `photo_world` is the probes' module-scoped world; `break_photos` makes some of a dataset's photos
unreadable."""
from __future__ import annotations

import hashlib
from contextlib import contextmanager

import numpy as np
from PIL import Image
from synthetic_home import synthetic_home

ENC = "synthetic-enc-0001"


@contextmanager
def photo_world(tmp_path_factory, name: str, settings: list, authors: int = 0):
    """A synthetic home of 60 recipes with `settings` generated (seed 0): {"home", "paths", "con", "ids": task ->
    dataset_id}; with `authors`, each recipe has one of that many authors (round robin) before. The photos are
    written by the test (`write_photos`)."""
    from features.datasets.generate import generate_datasets
    with synthetic_home(tmp_path_factory, name, n_recipes=60, seed=2, dim=16, k=60) as (home, paths, con):
        if authors:
            con.execute(f"""UPDATE recipes SET author = 'author-' ||
                            CAST(CAST(split_part(recipe_id, '-', 3) AS INTEGER) % {int(authors)} AS VARCHAR)""")
        made = generate_datasets(con, settings, seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False)
        yield {"home": home, "paths": paths, "con": con, "ids": {s["task"]: s["dataset_id"] for s in made}}


def break_photos(con, home, dataset_id: str) -> list[str]:
    """The first shown photo of the dataset's first 3 questions: the first written as a broken file, the others
    removed. Returns their image ids, sorted; `write_photos` writes them again."""
    shown = con.execute("SELECT question FROM questions WHERE dataset_id = ? ORDER BY qid LIMIT 3",
                        [dataset_id]).fetchall()
    victims = sorted({q[0][0] for q in shown})
    path = dict(con.execute("SELECT image_id, path FROM images").fetchall())
    (home / path[victims[0]]).write_bytes(b"not a jpeg at all")
    for v in victims[1:]:
        (home / path[v]).unlink()
    return victims


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
