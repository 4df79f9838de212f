"""The sample kitchen's ground truth (MRQA_HOME/sample/<build>/ground_truth.jsonl, written by `mrqa sample
build` and `mrqa demo`): per recipe its kitchen and author, per photo its step and what it depicts (action,
vessel, items in their states, tool). `mrqa redraw` draws photos again from it (features/datasets/redraw.py)
and AF's items twin rule reads it (features/datasets/twins.py, ItemTwins); a real site has none.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from etl.config import Paths

NO_TRUTH = ("drawing distractors again needs the sample kitchen's ground truth (MRQA_HOME/sample/<build>/"
            "ground_truth.jsonl, written by `mrqa sample build` and `mrqa demo`); a real site's photos cannot be "
            "drawn again in another kitchen without an image model that moves a step's content (segmentation "
            "and inpainting weights)")


@dataclass
class Truth:
    """A sample kitchen build's ground truth: per recipe its kitchen, per photo its step and content."""
    folder: Path
    seed: int
    size: int
    content_sha256: str
    recipes: dict            # recipe_id -> {"kitchen_style", "author_id"}
    photos: dict             # image_id -> (recipe_id, step_idx, depicts)
    _renderers: dict = field(default_factory=dict)

    def renderer(self, recipe_id: str):
        from etl.sample.recipes import derive_seed
        from etl.sample.render import KitchenRenderer
        if recipe_id not in self._renderers:
            r = self.recipes[recipe_id]
            seed = derive_seed("kitchen", self.seed, r["author_id"])          # the author's counter
            self._renderers[recipe_id] = KitchenRenderer(r["kitchen_style"], seed, self.size)
        return self._renderers[recipe_id]


def read_truth(folder: Path) -> Truth:
    """The ground truth of one sample kitchen build folder (ValueError naming the file when it is not one)."""
    from etl.vocab import read_ground_truth
    folder = Path(folder)
    manifest = folder / "manifest.json"
    try:
        man = json.loads(manifest.read_text(encoding="utf-8"))
        seed, size = int(man["seed"]), int(man["image_size"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{manifest}: not a finished sample kitchen build's manifest ({e}); rebuild it with "
                         "`mrqa sample build`") from None
    recipes, photos = {}, {}
    for rec in read_ground_truth(folder / "ground_truth.jsonl"):
        if rec.get("kitchen_style") is None or rec.get("author_id") is None:
            continue
        recipes[rec["recipe_id"]] = {"kitchen_style": rec["kitchen_style"], "author_id": rec["author_id"]}
        for s in rec.get("steps", ()):
            for im in s.get("images", ()):
                if im.get("depicts") is not None:
                    photos[im["image_id"]] = (rec["recipe_id"], s["step_idx"], im["depicts"])
    return Truth(folder, seed, size, str(man.get("content_sha256", "")), recipes, photos)


def find_truth(paths: Paths, recipe_ids: set[str], sample: Path | None = None) -> Truth:
    """The build whose ground truth covers the most of `recipe_ids`: `sample` when given, else one of
    MRQA_HOME/sample/*/. ValueError (NO_TRUTH) when there is none or it covers none of them."""
    folders = [Path(sample)] if sample else \
        sorted(p.parent for p in (paths.home / "sample").glob("*/ground_truth.jsonl"))
    if sample and not (Path(sample) / "ground_truth.jsonl").is_file():
        raise ValueError(f"{sample}: no ground_truth.jsonl there; {NO_TRUTH}")
    best, cover = None, 0
    for f in folders:
        t = read_truth(f)
        n = len(recipe_ids & set(t.recipes))
        if n > cover:
            best, cover = t, n
    if best is None:
        raise ValueError(f"no sample kitchen build under {paths.home / 'sample'} knows this dataset's recipes; "
                         f"{NO_TRUTH}")
    return best
