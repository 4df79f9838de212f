"""The record type that flows from sources (parser, RecipeQA importer, sample kitchen) to the loader."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class StepRecord:
    step_idx: int                     # 0 = intro
    title: str
    body: str
    images: list[str] = field(default_factory=list)   # image URLs (or file names for RecipeQA)
    n_videos: int = 0


@dataclass
class RecipeRecord:
    recipe_id: str                    # page slug; RecipeQA uses the same slug
    url: str | None
    title: str | None
    author: str | None = None
    category: str | None = None
    channel: str | None = None
    license: str | None = None
    steps: list[StepRecord] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def image_id(recipe_id: str, step_idx: int, ord_: int) -> str:
    """RecipeQA naming: <recipe_id>_<step_idx>_<ord>.jpg"""
    return f"{recipe_id}_{step_idx}_{ord_}.jpg"


REDRAWN_ORD = 1_000_000_000        # photos drawn again in another kitchen (`mrqa redraw`) have an ord from here


def is_redrawn_image(image_id_: str) -> bool:
    """Whether an image id names a photo drawn again in another kitchen (its ord is REDRAWN_ORD or more):
    never a recipe's own photo."""
    ord_ = str(image_id_).rsplit(".", 1)[0].rsplit("_", 1)[-1]
    return ord_.isdigit() and int(ord_) >= REDRAWN_ORD
