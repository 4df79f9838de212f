"""Decoding image files in a thread pool (the embed default) or DataLoader workers, and reading
(image, step text) pairs from the warehouse.

Unreadable files never crash a batch: the dataset returns a zero tensor plus an error reason
(`missing_file` or `image_decode_error`, the `embed` reject vocabulary) and the caller decides.
The embed loaders send uint8 pixels (the resized + cropped image, a quarter of the bytes of float
input) and the encoder normalises them on its device (`to_model_input`); a preprocess that cannot be
split that way keeps the float path (whole preprocess on the CPU).
`PixelCache` keeps decoded + resized uint8 pixels keyed by sha256, so training decodes each image once.
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch.utils.data import DataLoader, Dataset

from etl.config import Paths

log = logging.getLogger(__name__)


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


def open_rgb(path: Path, size: int) -> Image.Image:
    """Decode an image as RGB. JPEGs are decoded with libjpeg's DCT scaling (`draft`) to the smallest
    scale that is still >= size x size, so a 640 px photo for a 224 px model costs a quarter of a full
    decode; the resize after it is unchanged. Both decode paths (embed, pixel cache) use this."""
    im = Image.open(path)
    try:
        if im.format == "JPEG":
            im.draft("RGB", (size, size))
        im.load()
        return im.convert("RGB")
    finally:
        im.close()


def decode_worker_init(_worker_id: int) -> None:
    """One torch thread per decode worker: N workers each with an all-core OpenMP pool would
    oversubscribe the CPU (the float path's ToTensor/Normalize and the batch collation run torch ops
    in the worker)."""
    torch.set_num_threads(1)


class PixelArray:
    """PIL image -> uint8 tensor of `pil(image)` (the PIL part of a split preprocess): [s, s, 3], or
    with `channels_first` a [3, s, s] view of it (the layout of ToTensor, copied once by the collation)."""

    def __init__(self, pil: Callable, size: int, channels_first: bool = True):
        self.pil, self.size, self.channels_first = pil, size, channels_first

    def __call__(self, im: Image.Image) -> torch.Tensor:
        arr = np.asarray(self.pil(im))
        if arr.dtype != np.uint8 or arr.shape != (self.size, self.size, 3):
            raise ValueError(f"preprocess gave {arr.dtype} {arr.shape}, not uint8 "
                             f"{(self.size, self.size, 3)}")
        x = torch.from_numpy(arr.copy())
        return x.permute(2, 0, 1) if self.channels_first else x


class ImageFileDataset(Dataset):
    """(position, tensor, error reason, error detail) for each file: `transform` of the decoded RGB
    image, or for a missing or unreadable file a zero tensor of `blank` shape and dtype (default: the
    float [3, s, s] of a preprocess) plus the reason and detail."""

    def __init__(self, files: Sequence[Path], transform: Callable, image_size: int,
                 blank: tuple[tuple[int, ...], torch.dtype] | None = None):
        self.files = list(files)
        self.transform = transform
        self.image_size = image_size
        self.blank = blank or ((3, image_size, image_size), torch.float32)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        path = self.files[i]
        try:
            return i, self.transform(open_rgb(path, self.image_size)), "", ""
        except FileNotFoundError as e:
            reason, detail = "missing_file", str(e)
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
            reason, detail = "image_decode_error", f"{type(e).__name__}: {e}"
        shape, dtype = self.blank
        return i, torch.zeros(shape, dtype=dtype), reason, detail[:500]


_FLOAT_PATH_LOGGED: set[str] = set()      # one log line per unsplittable preprocess and process


def image_dataset(files: Sequence[Path], preprocess: Callable, image_size: int,
                  pixels: bool = True) -> ImageFileDataset:
    """The embed paths' dataset: with `pixels`, uint8 [3, s, s] made by the PIL part of `preprocess`
    (`split_preprocess`; `Encoder.encode_image_tensors` normalises them on its device), else, or when
    `preprocess` cannot be split (logged), its float tensors [3, s, s] made on the CPU."""
    if pixels:
        try:
            pil = split_preprocess(preprocess)[0]
        except ValueError as e:
            if repr(preprocess) not in _FLOAT_PATH_LOGGED:
                _FLOAT_PATH_LOGGED.add(repr(preprocess))
                log.warning("image decoding stays on the float path (whole preprocess on the CPU, "
                            "4x the bytes of uint8 pixels): %s", e)
        else:
            return ImageFileDataset(files, PixelArray(pil, image_size), image_size,
                                    ((3, image_size, image_size), torch.uint8))
    return ImageFileDataset(files, preprocess, image_size)


class ThreadedImageBatches:
    """The same batches as `image_loader`'s DataLoader, decoded by a pool of threads in this process.

    PIL releases the GIL while it decodes and resizes, so threads scale without sending decoded
    tensors between processes (the DataLoader's worker->main copy of float tensors through shared
    memory measured 79 img/s with 15 workers vs 176 with none on a 16-core GPU VM, `mrqa bench embed`).
    Batches are collated into pinned memory with `pin_memory` (as the DataLoader's)."""

    def __init__(self, dataset: ImageFileDataset, batch_size: int, threads: int,
                 pin_memory: bool = False):
        self.dataset = dataset
        self.batch_size, self.threads, self.pin_memory = batch_size, max(1, threads), pin_memory

    def __len__(self) -> int:
        return -(-len(self.dataset) // self.batch_size)

    def __iter__(self):
        from concurrent.futures import ThreadPoolExecutor
        n = len(self.dataset)
        with ThreadPoolExecutor(self.threads, thread_name_prefix="decode") as pool:
            pending = None
            for start in range(0, n, self.batch_size):      # one batch decoding ahead
                nxt = pool.map(self.dataset.__getitem__, range(start, min(start + self.batch_size, n)))
                if pending is not None:
                    yield _collate(list(pending), self.pin_memory)
                pending = nxt
            if pending is not None:
                yield _collate(list(pending), self.pin_memory)


def _collate(items: list, pin_memory: bool = False) -> tuple:
    xs = [it[1] for it in items]
    out = torch.empty((len(xs), *xs[0].shape), dtype=xs[0].dtype, pin_memory=pin_memory)
    return (torch.tensor([it[0] for it in items]), torch.stack(xs, out=out),
            [it[2] for it in items], [it[3] for it in items])


def image_loader(files: Sequence[Path], preprocess: Callable, image_size: int,
                 batch_size: int = 128, num_workers: int = 0, decode: str = "processes",
                 pixels: bool = True):
    """Batches in file order (positions, images [n, 3, s, s], error reasons, details); decoding runs
    in `num_workers` worker processes (0 = in-process), or with decode="threads" in as many threads.
    Images are uint8 pixels with `pixels` (see `image_dataset`), float otherwise; batches are in
    pinned memory when CUDA is available, so `.to(device, non_blocking=True)` overlaps."""
    if decode not in ("processes", "threads"):
        raise ValueError(f"decode must be processes or threads, got {decode!r}")
    ds = image_dataset(files, preprocess, image_size, pixels)
    pin = torch.cuda.is_available()
    if decode == "threads" and num_workers > 0:
        return ThreadedImageBatches(ds, batch_size, num_workers, pin)
    return DataLoader(ds, batch_size=batch_size,
                      shuffle=False, num_workers=num_workers,
                      worker_init_fn=decode_worker_init if num_workers > 0 else None,
                      pin_memory=pin,
                      persistent_workers=False,
                      # fork after LanceDB started its runtime may deadlock: forkserver workers
                      multiprocessing_context="forkserver" if num_workers > 0 else None,
                      prefetch_factor=4 if num_workers > 0 else None)


def image_size_of(model: torch.nn.Module) -> int:
    size = model.visual.image_size
    return int(size[0] if isinstance(size, (tuple, list)) else size)


# ----------------------------------------------------------------------------- uint8 pixels

def split_preprocess(preprocess: Callable) -> tuple[Callable, torch.Tensor, torch.Tensor, str]:
    """Split an open_clip Compose into (PIL part, mean [3], std [3], key of the PIL part).

    The PIL part (resize, crop, RGB) makes the uint8 pixels; `to_model_input` then gives exactly what
    ToTensor + Normalize would, so cached pixels, the uint8 embed loaders and the float path see the
    same input.
    Anything else after ToTensor (a tensor transform the split would drop) raises ValueError.
    """
    from torchvision.transforms import Compose, Normalize
    steps = list(getattr(preprocess, "transforms", []))
    cut = next((i for i, t in enumerate(steps) if "ToTensor" in type(t).__name__), None)
    if cut is None or len(steps) != cut + 2 or not isinstance(steps[cut + 1], Normalize):
        raise ValueError(f"preprocess {preprocess!r} does not end in ToTensor, Normalize")
    norm = steps[cut + 1]
    desc = [(type(t).__name__, {k: str(v) for k, v in sorted(vars(t).items())
                                if not k.startswith("_") and k != "training"}) for t in steps[:cut]]
    key = hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:12]
    pil = Compose([_without_open_clip(t) for t in steps[:cut]])
    return pil, torch.tensor(norm.mean).float(), torch.tensor(norm.std).float(), key


class ConvertMode:
    """PIL `convert(mode)`: open_clip's MaybeConvertMode / _convert_to_rgb step, defined here so a
    decode worker that unpickles the PIL part imports torchvision only, not open_clip (measured:
    unpickling open_clip's step took 3.9 s of each worker's start-up, open_clip's import)."""

    def __init__(self, mode: str = "RGB"):
        self.mode = mode

    def __call__(self, im):
        return im if isinstance(im, (np.ndarray, torch.Tensor)) else im.convert(self.mode)

    def __repr__(self) -> str:
        return f"ConvertMode({self.mode!r})"


def _without_open_clip(step: Callable) -> Callable:
    """`step`, or the same conversion as a ConvertMode when it is open_clip's (the key of the
    preprocess is computed from the original steps, so pixel caches stay valid)."""
    if type(step).__name__ == "MaybeConvertMode":
        return ConvertMode(getattr(step, "mode", "RGB"))
    if getattr(step, "__name__", "") == "_convert_to_rgb":
        return ConvertMode("RGB")
    return step


def to_model_input(pixels: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """uint8 [n, 3, s, s] -> normalised float32 [n, 3, s, s] on the pixels' device: the same
    operations as ToTensor + Normalize, so the same numbers."""
    mean, std = mean.to(pixels.device), std.to(pixels.device)
    x = pixels.float().div_(255)
    return x.sub_(mean.view(1, 3, 1, 1)).div_(std.view(1, 3, 1, 1)).contiguous()


# ----------------------------------------------------------------------------- decoded uint8 cache

class PixelCache:
    """Decoded + resized images as one uint8 array [n, s, s, 3], keyed by image sha256.

    Lives in `root/<size>px-<key of the PIL preprocessing>/` as `pixels.npy` + `keys.json`; every
    image is decoded once, later runs (other epochs, other seeds, re-training) only read the array.
    Files are replaced atomically (tmp + rename); a torn pair (lengths differ) is rebuilt.
    """

    def __init__(self, root: Path | None, preprocess: Callable, size: int):
        self.pil, self.mean, self.std, key = split_preprocess(preprocess)
        self.size = size
        self.dir = Path(root) / f"{size}px-{key}" if root is not None else None

    def _load(self, mmap: bool = False) -> tuple[list[str], np.ndarray]:
        empty = np.zeros((0, self.size, self.size, 3), np.uint8)
        if self.dir is None or not (self.dir / "keys.json").exists():
            return [], empty
        try:
            keys = json.loads((self.dir / "keys.json").read_text())
            arr = np.load(self.dir / "pixels.npy", mmap_mode="r" if mmap else None)
        except (OSError, ValueError):
            return [], empty
        if len(keys) != len(arr) or arr.shape[1:] != empty.shape[1:]:
            return [], empty
        return keys, arr

    def _save(self, keys: list[str], arr: np.ndarray) -> None:
        if self.dir is None:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp_arr, tmp_keys = self.dir / "pixels.tmp.npy", self.dir / "keys.tmp.json"
        np.save(tmp_arr, arr)
        tmp_keys.write_text(json.dumps(keys))
        tmp_arr.replace(self.dir / "pixels.npy")
        tmp_keys.replace(self.dir / "keys.json")

    def lookup(self, items: Sequence[ImageItem]) -> tuple[dict[int, int], np.ndarray]:
        """Read-only: ({position of a cached item: its row}, memory-mapped pixel array)."""
        keys, arr = self._load(mmap=True)
        row = {k: i for i, k in enumerate(keys)}
        return {p: row[self.item_key(it)] for p, it in enumerate(items) if self.item_key(it) in row}, arr

    @staticmethod
    def item_key(it: ImageItem) -> str:
        return it.sha256 or f"path:{it.path}"

    def pixels(self, items: Sequence[ImageItem], num_workers: int = 0,
               desc: str = "decode") -> tuple[torch.Tensor, list[int], dict]:
        """(uint8 [n_ok, s, s, 3], positions of readable items, stats) — decoding only cache misses."""
        keys, arr = self._load()
        row = {k: i for i, k in enumerate(keys)}
        missing = [p for p, it in enumerate(items) if self.item_key(it) not in row]
        new_keys, new_rows = [], []
        if missing:
            ds = ImageFileDataset([items[p].path for p in missing],
                                  PixelArray(self.pil, self.size, channels_first=False), self.size,
                                  ((self.size, self.size, 3), torch.uint8))
            loader = DataLoader(ds, batch_size=256, shuffle=False, num_workers=num_workers,
                                worker_init_fn=decode_worker_init if num_workers > 0 else None,
                                multiprocessing_context="forkserver" if num_workers > 0 else None)
            from tqdm import tqdm
            for pos, x, err, _ in tqdm(loader, desc=desc, unit="batch", leave=False):
                for j, e in enumerate(err):
                    if not e:
                        key = self.item_key(items[missing[int(pos[j])]])
                        if key not in row:
                            row[key] = len(keys) + len(new_keys)
                            new_keys.append(key)
                            new_rows.append(x[j].numpy())
            if new_keys:
                arr = np.concatenate([arr, np.stack(new_rows)])
                keys = keys + new_keys
                self._save(keys, arr)
        ok = [p for p, it in enumerate(items) if self.item_key(it) in row]
        idx = np.array([row[self.item_key(items[p])] for p in ok], dtype=np.int64)
        out = torch.from_numpy(arr[idx]) if len(idx) else torch.zeros(0, self.size, self.size, 3,
                                                                       dtype=torch.uint8)
        stats = {"decoded": len(missing), "cached": len(items) - len(missing),
                 "unreadable": len(items) - len(ok)}
        return out, ok, stats

    def model_input(self, pixels: torch.Tensor) -> torch.Tensor:
        """uint8 [n, s, s, 3] (the cache's layout) -> normalised float [n, 3, s, s]."""
        return to_model_input(pixels.permute(0, 3, 1, 2), self.mean, self.std)
