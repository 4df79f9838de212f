"""Decoding image files in DataLoader workers, and reading (image, step text) pairs from the warehouse.

Unreadable files never crash a batch: the dataset returns a zero tensor plus an error reason
(`missing_file` or `image_decode_error`, the `embed` reject vocabulary) and the caller decides.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import torch
from PIL import Image, UnidentifiedImageError
from torch.utils.data import DataLoader, Dataset

from etl.config import Paths


@dataclass(frozen=True)
class ImageItem:
    image_id: str
    path: Path
    recipe_id: str
    step_idx: int
    ord: int
    split: str
    sha256: str
    text: str = ""


def step_text(title: str | None, body: str | None) -> str:
    """The text paired with a step's images: cleaned title and body."""
    title, body = (title or "").strip(), (body or "").strip()
    if title and body:
        return f"{title}. {body}"
    return title or body


def image_items(con: duckdb.DuckDBPyConnection, paths: Paths, split: str | None = None,
                recipe_ids: Sequence[str] | None = None) -> list[ImageItem]:
    """Images with status 'ok' of ok recipes that have a split, with their step text, by image_id."""
    where, params = ["i.status = 'ok'", "r.status = 'ok'", "r.split IS NOT NULL"], []
    if split is not None:
        where.append("r.split = ?")
        params.append(split)
    if recipe_ids is not None:
        where.append("list_contains(?, r.recipe_id)")
        params.append(list(recipe_ids))
    rows = con.execute(f"""
        SELECT i.image_id, i.path, i.recipe_id, i.step_idx, i.ord, r.split, i.sha256, s.title, s.body
        FROM images AS i
        JOIN recipes AS r USING (recipe_id)
        LEFT JOIN steps AS s ON s.recipe_id = i.recipe_id AND s.step_idx = i.step_idx
        WHERE {' AND '.join(where)}
        ORDER BY i.image_id""", params).fetchall()
    out = []
    for iid, path, rid, step, ord_, sp, sha, title, body in rows:
        p = Path(path) if path else Path("")
        out.append(ImageItem(iid, p if p.is_absolute() else paths.home / p, rid, step, ord_, sp,
                             sha or "", step_text(title, body)))
    return out


class ImageFileDataset(Dataset):
    """(position, preprocessed tensor, error reason, error detail) for each item."""

    def __init__(self, files: Sequence[Path], preprocess: Callable, image_size: int):
        self.files = list(files)
        self.preprocess = preprocess
        self.image_size = image_size

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        path = self.files[i]
        try:
            with Image.open(path) as im:
                im.load()
                x = self.preprocess(im.convert("RGB"))
            return i, x, "", ""
        except FileNotFoundError as e:
            reason, detail = "missing_file", str(e)
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
            reason, detail = "image_decode_error", f"{type(e).__name__}: {e}"
        return i, torch.zeros(3, self.image_size, self.image_size), reason, detail[:500]


def image_loader(files: Sequence[Path], preprocess: Callable, image_size: int,
                 batch_size: int = 128, num_workers: int = 0) -> DataLoader:
    """Batches in file order; decoding runs in `num_workers` worker processes (0 = in-process)."""
    return DataLoader(ImageFileDataset(files, preprocess, image_size), batch_size=batch_size,
                      shuffle=False, num_workers=num_workers,
                      pin_memory=torch.cuda.is_available(),
                      persistent_workers=False,
                      # fork after LanceDB started its runtime may deadlock: forkserver workers
                      multiprocessing_context="forkserver" if num_workers > 0 else None,
                      prefetch_factor=4 if num_workers > 0 else None)


def image_size_of(model: torch.nn.Module) -> int:
    size = model.visual.image_size
    return int(size[0] if isinstance(size, (tuple, list)) else size)
