"""The look statistics of a photo (`image_statistics`), and those of every photo kept between runs
(`MRQA_HOME/models/look/statistics-v1.npz`).

`image_statistics`: 124 numbers per photo, from the photo scaled to 64 x 64 RGB (look_probe.py reads them):
a 4 x 4 thumbnail (48), a 4 x 4 x 4 colour histogram (64), and the mean and spread of each colour in the
outer 8-pixel frame (the counter) and in the centre (12).

`mrqa report` and `mrqa look-probe` read them for every readable photo of the home: on the 1,000-recipe demo
13,195 photos, about 14 s of decoding on 2 threads in every report. They depend only on a photo's file, so
they are kept, keyed by the file's path, size and modification time: a photo written again is read again,
and a cached entry of a photo no longer in the `images` table is dropped at the next write. Photos whose
file is missing or cannot be decoded are never cached; their reason is found again each time.

The embed stage fills the cache in a background process at low priority (`filling_in_background`)
while it trains the encoder, whose two threads leave a part of the machine's two cores idle; the report then
finds the statistics there. The cache holds the very arrays `image_statistics` returns, so every figure is
the same with or without it (tests/features/diagnostics/test_look_probe.py)."""
from __future__ import annotations

import logging
import os
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import numpy as np

log = logging.getLogger(__name__)

SIDE = 64                      # photos are scaled to SIDE x SIDE before the statistics
THUMB = 4                      # thumbnail side
BINS = 4                       # histogram bins per colour channel
FRAME = 8                      # width of the outer frame, in pixels of the scaled photo
BLOCKS = ("thumb", "hist", "frame")
CACHE_VERSION = 1              # bump when image_statistics changes: every photo is then read again
DECODE_THREADS = 2             # photos read side by side (the order of the results is the rows')
FILL_NICE = 10                 # the background fill's priority: the encoder's threads come first


def image_statistics(path: Path) -> dict[str, np.ndarray]:
    """The three blocks of one photo (see the module's doc). Raises OSError / PIL errors on a file
    that is missing or cannot be decoded."""
    from PIL import Image
    with Image.open(path) as im:
        im.draft("RGB", (SIDE, SIDE))               # JPEG: decode at a reduced scale when it can
        rgb = im.convert("RGB").resize((SIDE, SIDE), Image.BILINEAR)
    a = np.asarray(rgb, dtype=np.float32) / 255.0
    thumb = np.asarray(rgb.resize((THUMB, THUMB), Image.BILINEAR), dtype=np.float32).ravel() / 255.0
    q = np.minimum((a * BINS).astype(np.int64), BINS - 1)
    code = (q[..., 0] * BINS + q[..., 1]) * BINS + q[..., 2]
    hist = np.bincount(code.ravel(), minlength=BINS ** 3).astype(np.float32) / code.size
    outer = np.ones((SIDE, SIDE), dtype=bool)
    outer[FRAME:-FRAME, FRAME:-FRAME] = False
    frame = np.concatenate([a[outer].mean(0), a[outer].std(0), a[~outer].mean(0), a[~outer].std(0)])
    return {"thumb": thumb, "hist": hist, "frame": frame.astype(np.float32)}


def cache_path(home: Path) -> Path:
    return Path(home) / "models" / "look" / f"statistics-v{CACHE_VERSION}.npz"


def photo_rows(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str | None]]:
    """(image_id, path) of every `images` row with status ok and of every photo drawn again in another
    kitchen (`redrawn_images`, `mrqa redraw`), in image_id order."""
    if not _has_redrawn(con):
        return con.execute("SELECT image_id, path FROM images WHERE status = 'ok' ORDER BY image_id").fetchall()
    return con.execute("SELECT image_id, path FROM images WHERE status = 'ok' UNION ALL "
                       "SELECT image_id, path FROM redrawn_images ORDER BY image_id").fetchall()


def _has_redrawn(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the warehouse has the `redrawn_images` table (a read-only one opened before its migration may not)."""
    return bool(con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'redrawn_images' "
                            "AND database_name = current_database()").fetchall()[0][0])


def redrawn_photo_ids(con: duckdb.DuckDBPyConnection) -> set[str]:
    """The image ids of the photos drawn again in another kitchen."""
    if not _has_redrawn(con):
        return set()
    return {i for (i,) in con.execute("SELECT image_id FROM redrawn_images").fetchall()}


def _file_key(home: Path, rel: str | None) -> str | None:
    """What a photo's statistics depend on: its path, size and modification time (None: no file)."""
    if not rel:
        return None
    try:
        st = (Path(home) / rel).stat()
    except OSError:
        return None
    return f"{rel}\t{st.st_size}\t{st.st_mtime_ns}"


def _load(path: Path) -> dict[str, tuple[str, dict[str, np.ndarray]]]:
    """image_id -> (file key, statistics) from the cache file; {} when there is none or it is unreadable (then
    every photo is read again and the file replaced)."""
    if not path.is_file():
        return {}
    try:
        with np.load(path) as z:
            ids, keys = z["ids"].tolist(), z["keys"].tolist()
            blocks = {b: z[b] for b in BLOCKS}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        log.warning("look statistics cache %s is unreadable (%s): reading every photo again", path, e)
        return {}
    if any(len(blocks[b]) != len(ids) for b in BLOCKS) or len(keys) != len(ids):
        log.warning("look statistics cache %s is inconsistent: reading every photo again", path)
        return {}
    return {i: (k, {b: blocks[b][n] for b in BLOCKS}) for n, (i, k) in enumerate(zip(ids, keys))}


def _save(path: Path, entries: dict[str, tuple[str, dict[str, np.ndarray]]]) -> None:
    """Write the cache in one step (a temporary file, then a rename): a reader never sees half a file."""
    ids = sorted(entries)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            np.savez(fh, ids=np.array(ids, dtype=str), keys=np.array([entries[i][0] for i in ids], dtype=str),
                     **{b: np.stack([entries[i][1][b] for i in ids]) if ids else np.zeros((0, 1), np.float32)
                        for b in BLOCKS})
        os.replace(tmp, path)
    except OSError as e:
        log.warning("look statistics cache %s not written (%s); the next run reads the photos again", path, e)


def read_statistics(rows: list[tuple[str, str | None]], home: Path, threads: int = DECODE_THREADS,
                    progress: bool = True) -> tuple[list[dict[str, np.ndarray] | str], int]:
    """Per row of `photo_rows`, its statistics or the reason it has none; and how many photos were decoded.
    Cached statistics of an unchanged file are taken as they are; the others are decoded on `threads`
    threads, and the cache is rewritten for `rows` when any was."""
    from concurrent.futures import ThreadPoolExecutor

    from tqdm import tqdm

    path = cache_path(home)
    cached = _load(path)
    keys = [_file_key(home, rel) for _, rel in rows]
    out: list[dict[str, np.ndarray] | str | None] = [None] * len(rows)
    todo = []
    for n, ((iid, _), key) in enumerate(zip(rows, keys)):
        hit = cached.get(iid)
        if key is not None and hit is not None and hit[0] == key:
            out[n] = hit[1]
        else:
            todo.append(n)

    def read(n: int):
        rel = rows[n][1]
        if not rel:
            return "no stored file"
        try:
            return image_statistics(Path(home) / rel)
        except Exception as e:  # noqa: BLE001 - any unreadable photo is counted with its reason, not fatal
            return f"{type(e).__name__}: {e}"[:200]

    if todo:
        with ThreadPoolExecutor(max(1, threads)) as pool:     # PIL decodes and scales without the GIL
            for n, st in tqdm(zip(todo, pool.map(read, todo, chunksize=64)), total=len(todo),
                              desc="image statistics", unit="photo", disable=not progress, mininterval=2):
                out[n] = st
        fresh = {rows[n][0]: (keys[n], out[n]) for n in range(len(rows))
                 if keys[n] is not None and isinstance(out[n], dict)}
        if any(isinstance(out[n], dict) for n in todo) or set(cached) - set(fresh):
            _save(path, fresh)
    return out, len(todo)


def _fill(home: str, rows: list[tuple[str, str | None]]) -> None:
    """The background process: at low priority, the statistics of every photo not yet cached."""
    try:
        os.nice(FILL_NICE)
    except OSError:
        pass
    read_statistics(rows, Path(home), progress=False)


@contextmanager
def filling_in_background(con: duckdb.DuckDBPyConnection, home: Path) -> Iterator[None]:
    """While the block runs, a spawned process at low priority fills the cache with the photos of the
    `images` table; the block's end waits for it. A block that raises (Ctrl-C too) ends the process instead:
    the cache keeps what it held before, and the report reads the photos itself."""
    import multiprocessing
    rows = photo_rows(con)
    if not rows:
        yield
        return
    proc = multiprocessing.get_context("spawn").Process(target=_fill, args=(str(home), rows),
                                                        name="look-statistics", daemon=True)
    t0 = time.perf_counter()
    proc.start()
    try:
        yield
    except BaseException:
        proc.terminate()
        proc.join()
        raise
    proc.join()
    if proc.exitcode == 0:
        log.info("look statistics of %d photos cached in the background (%.1f s)", len(rows),
                 time.perf_counter() - t0)
    else:
        log.warning("look statistics: the background process ended with code %s; `mrqa report` reads the "
                    "photos itself", proc.exitcode)
