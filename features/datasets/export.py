"""Exports of generated datasets: a Parquet dataset that loads in one line, and RecipeQA JSON.

Parquet (`export_parquet`), a folder `OUT` that `datasets.load_dataset(OUT, "<task>-<setting>")`,
polars, pandas and DuckDB read as it is:

- OUT/questions/task=<task>/knobs=<setting>/split=<split>/data_0.parquet (hive layout; `<setting>` is
  the setting's one name, e.g. `0-1-1`, `0-0-1-balanced`, `0-1-1-af`, `recipeqa`), the partition columns
  written inside the files too (as dictionary-encoded strings, so pandas' hive reader merges them), typed
  columns (k1/k2/k3 int8, NULL for a preset, read by pandas as Int8 through the files' pandas metadata;
  k3_mode; adversarial; ordering choices as lists of image ids) and the provenance JSON;
- OUT/recipes.parquet, OUT/steps.parquet: every ok recipe of the exported splits and its steps;
- OUT/context_ablation.parquet: per question, the recipe whose steps replace its own in the context
  ablation (training/ablation.py: the rule of the trainer, the reading check and `mrqa score`);
- with vectors, OUT/image_vectors.parquet and OUT/text_vectors.parquet (title vectors), both keyed by
  `item_id` (image_vectors keeps `image_id`, the same value), so anyone can recompute the distances;
- with images, OUT/images.parquet: the image files of those recipes in the Hugging Face Image layout
  (struct of bytes + path, declared in the schema's `huggingface` metadata);
- OUT/README.md, the dataset card (features/datasets/card.py): one `configs:` entry per dataset, named by task x setting
  with its train/validation/test files, column descriptions, knob legend, provenance schema, encoders,
  counts and bias figures.

Written single-threaded in a fixed order with a fixed row-group size, so the bytes are the same on
every run.

RecipeQA JSON (`export_recipeqa_json`): OUT/<split>.json = {"data": [record, ...]} with RecipeQA's
record keys (one dataset; several: one such folder per dataset, OUT/<dataset_id>/). The qid is
`<dataset_id>.<qid>`; context steps are the recipe's steps from 1 (RecipeQA leaves out the intro,
step 0), their ids the step numbers that also name the images. With images, every image a record
shows (question, choices, textual-cloze context) is copied (hard-linked where possible) to
OUT/images-qa/<split>/images-qa/ (RecipeQA's layout).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import itertools
import json
import logging
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from etl.config import sql_glob, sql_path
from etl.warehouse import load_query
from features.datasets.card import write_card
from training.ablation import other_recipes

log = logging.getLogger(__name__)

ROW_GROUP = 100_000
IMAGE_ROW_GROUP = 500                # images.parquet: rows of image bytes per row group
PARTITIONS = ("task", "knobs", "split")
VECTORS_OF = ("splits", "questions")   # export_parquet's `vectors_of`
QID_SEPARATOR = "."                  # RecipeQA JSON qid: <dataset_id>.<qid> (dataset ids have no '.')
QUESTION_TEXT = {                    # RecipeQA's question_text per task
    "textual_cloze": "Choose the best title for the missing blank to correctly complete the recipe.",
    "visual_cloze": "Choose the best image for the missing blank to correctly complete the recipe.",
    "visual_coherence": "Select the incoherent image in the following sequence of images.",
    "visual_ordering": "What is the correct order of the images?",
}

_DICT = pa.dictionary(pa.int32(), pa.string())
_STRINGS = pa.list_(pa.string())
QUESTION_SCHEMA = pa.schema([
    ("dataset_id", pa.string()), ("qid", pa.string()), ("recipe_id", pa.string()),
    ("task", _DICT), ("knobs", _DICT), ("split", _DICT),
    ("k1", pa.int8()), ("k2", pa.int8()), ("k3", pa.int8()), ("k3_mode", pa.string()),
    ("adversarial", pa.bool_()), ("preset", pa.string()), ("seed", pa.int64()), ("encoder_id", pa.string()),
    ("question", _STRINGS), ("choice_list", _STRINGS), ("choice_orderings", pa.list_(_STRINGS)),
    ("answer", pa.int32()), ("question_step_ids", pa.list_(pa.int32())), ("provenance", pa.string()),
])
# pandas reads int columns with NULLs as float64 unless the file says which extension dtype they had
_PANDAS_META = json.dumps({
    "index_columns": [], "column_indexes": [],
    "columns": [{"name": c, "field_name": c, "pandas_type": "int8", "numpy_type": "Int8", "metadata": None}
                for c in ("k1", "k2", "k3")],
    "creator": {"library": "pyarrow", "version": "meta-recipeqa"}, "pandas_version": "2.0.0"},
    sort_keys=True).encode()
QUESTION_SCHEMA = QUESTION_SCHEMA.with_metadata({b"pandas": _PANDAS_META})


def _in(ids: list[str]) -> str:
    return "[" + ", ".join("'" + i.replace("'", "''") + "'" for i in ids) + "]"


def _copy(con: duckdb.DuckDBPyConnection, query: str, dest: Path) -> None:
    con.execute(f"COPY ({query}) TO {sql_path(dest)} (FORMAT parquet, ROW_GROUP_SIZE {ROW_GROUP}, "
                "COMPRESSION zstd)")


def _choose(con: duckdb.DuckDBPyConnection, dataset_ids: list[str]) -> None:
    con.execute(f"CREATE OR REPLACE TEMP VIEW export_datasets AS SELECT unnest({_in(dataset_ids)}) AS dataset_id")


EXPORT_NAMES = frozenset({"README.md", "questions", "recipes.parquet", "steps.parquet",     # what export_parquet
                          "context_ablation.parquet", "image_vectors.parquet", "text_vectors.parquet",  # writes
                          "images.parquet"})
EXPORT_CORE = ("README.md", "recipes.parquet", "steps.parquet", "context_ablation.parquet")   # in every export
RECIPEQA_NAMES = frozenset({"train.json", "val.json", "test.json", "images-qa"})   # what _recipeqa_folder writes


def storage_uri(out) -> re.Match | None:
    """`out` as a storage URI (scheme, path), e.g. s3://bucket/x, or the s3:/bucket/x a Path makes of it;
    None for a local folder."""
    return re.match(r"^([a-z][a-z0-9+.-]+):/+(.*)$", str(out))


def _check_out_name(out: Path) -> None:
    """An export is swapped in beside its folder, so `out` must name one: not the working directory, the
    root, or a `..` (`newdir/..` was written whole, then failed)."""
    if str(out).strip() in ("", "."):
        raise ValueError("refusing to export into the working directory: give a folder (--out DIR)")
    if out.name in ("", ".."):
        raise ValueError(f"refusing to export to {out}: give the folder by its own name, not the root or '..'")


def check_replaceable(names, where: str, allowed: frozenset = EXPORT_NAMES, what: str = "an export") -> None:
    """An export replaces only an earlier export: raise ValueError naming `where` when the folder holds
    anything else (`names`: its entries), so a user's folder is never emptied by a mistyped --out."""
    foreign = sorted(set(names) - allowed)
    if foreign:
        raise ValueError(f"refusing to replace {where}: it holds more than {what} ({', '.join(foreign[:3])}"
                         f"{', ...' if len(foreign) > 3 else ''}); choose another --out")


def export_parquet(con: duckdb.DuckDBPyConnection, dataset_ids: list[str], out: Path,
                   with_vectors: bool = False, lance_uri: str | None = None,
                   with_images: bool = False, home: Path | None = None,
                   left_out: dict[str, str] | None = None, vectors_of: str = "splits") -> dict:
    """Write the Parquet export of `dataset_ids` into `out` (replaced); returns counts + hash.

    `vectors_of` (with `with_vectors`): "splits", every photo's and step's vector of the exported splits (the
    knob distances can be recomputed from them); "questions", only those the questions' models read (the
    photos and choices they show, and their recipes' and context-ablation recipes' own photos and steps): the
    same datasets load from it (training/data.py), a smaller export to train on another machine.

    `out` may be a URI (s3://bucket/x, gs://bucket/x, file:///x; also the `s3:/bucket/x` a Path
    makes of it): the export is written locally, then copied with pyarrow.fs (credentials from the
    usual AWS_* / GOOGLE_* environment), replacing the export at the destination (`publish`: not swapped
    in whole, since an object store has no rename, but its card last and nothing deleted first);
    file:///x is the local folder /x, written and swapped in as one. `home` (MRQA_HOME)
    resolves the relative image paths for `with_images`. `left_out` ({dataset_id: why}, `mrqa export
    --reading-only`): the datasets the card says were left out, and why.
    """
    if vectors_of not in VECTORS_OF:
        raise ValueError(f"vectors_of must be one of {', '.join(VECTORS_OF)}, not {vectors_of!r}")
    m = storage_uri(out)
    if m:
        from pyarrow import fs as pafs
        uri = f"{m[1]}://{'/' if m[1] == 'file' else ''}{m[2]}"
        if not m[2].strip("/"):
            raise ValueError(f"refusing to export to {uri}: give a folder below the root")
        try:
            dest_fs, dest = pafs.FileSystem.from_uri(uri)
        except (pa.ArrowException, ValueError) as e:
            raise ValueError(f"--out {out}: not a folder or a storage URI pyarrow can write to ({e})") from None
        if isinstance(dest_fs, pafs.LocalFileSystem):     # file:///x is the folder /x: written beside it and
            res = export_parquet(con, dataset_ids, Path(dest), with_vectors, lance_uri,   # swapped in whole
                                 with_images, home, left_out, vectors_of)
            return {**res, "out": uri}
        info = dest_fs.get_file_info(dest)
        if info.type == pafs.FileType.File:
            raise ValueError(f"refusing to export to {uri}: it is a file")
        if info.type == pafs.FileType.Directory:
            listing = dest_fs.get_file_info(pafs.FileSelector(dest, allow_not_found=True))
            check_replaceable([i.base_name for i in listing], uri)
        with tempfile.TemporaryDirectory(prefix="mrqa-export-") as tmp:
            res = export_parquet(con, dataset_ids, Path(tmp) / "export", with_vectors, lance_uri,
                                 with_images, home, left_out, vectors_of)
            publish(Path(res["out"]), dest_fs, dest)
        return {**res, "out": uri}
    out = Path(out)
    _check_out_name(out)
    given = out
    if out.is_symlink():                # the folder it points to is replaced; the link stays a link
        try:
            out = Path(os.path.realpath(out, strict=True))
        except FileNotFoundError:       # a link to a folder not made yet: the export makes it
            out = Path(os.path.realpath(out))
        except OSError as e:            # ELOOP: a link that leads back to itself
            raise ValueError(f"refusing to export to {given}: it is a symbolic link that leads to a loop "
                             f"({e.strerror}); point it at a folder, or choose another --out") from None
    if out.exists():
        if not out.is_dir():
            raise ValueError(f"refusing to export to {out}: it is a file")
        check_replaceable([p.name for p in out.iterdir()], str(out))
    if with_vectors:                    # before anything is replaced: no half export without its vectors
        _check_vectors(con, dataset_ids, lance_uri)
    # written beside `out` first, then swapped in: a reader of an earlier export never sees half of one,
    # and an export that fails leaves the earlier one as it was
    with _writing(out) as new:
        try:
            return _write_parquet(con, dataset_ids, out, new, given, with_vectors, lance_uri, with_images, home,
                                  left_out, vectors_of)
        except (OSError, duckdb.IOException) as e:     # e.g. the disk is full
            raise ValueError(f"cannot write the export {out}: {getattr(e, 'strerror', None) or e} (an earlier "
                             "export is left as it was)") from None


def publish(local: Path, dest_fs, dest: str) -> None:
    """Copy the export folder `local` to `dest` on an object store (a pyarrow FileSystem), replacing the
    export there. An object store has no rename, so it cannot be swapped in whole; instead no object of the
    earlier export is deleted before every new one is written, and the card (README.md) is written last: a
    copy that fails leaves the earlier export's files and card readable, overwritten in part (the error
    says to run the export again), never an emptied folder."""
    files = sorted((p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()),
                   key=lambda f: (f == "README.md", f))
    from pyarrow import fs as pafs
    before = [i.path for i in dest_fs.get_file_info(pafs.FileSelector(dest, recursive=True, allow_not_found=True))
              if i.type == pafs.FileType.File]
    try:
        for f in files:
            _put(local / f, dest_fs, f"{dest.rstrip('/')}/{f}")
    except (OSError, pa.ArrowException) as e:
        raise ValueError(f"cannot write the export to {dest}: {e}; the earlier export's files are still there, "
                         "some overwritten: run the export again") from None
    new = {f"{dest.rstrip('/')}/{f}" for f in files}
    for path in before:
        if path not in new:
            dest_fs.delete_file(path)


def _put(src: Path, dest_fs, path: str) -> None:
    """One file to the object store (its parent "folders" made first, for stores that have them)."""
    dest_fs.create_dir(path.rpartition("/")[0], recursive=True)
    with dest_fs.open_output_stream(path) as out, open(src, "rb") as f:
        while chunk := f.read(1 << 20):
            out.write(chunk)


def _write_parquet(con, dataset_ids, out: Path, new: Path, given: Path, with_vectors: bool, lance_uri: str | None,
                   with_images: bool, home: Path | None, left_out: dict[str, str] | None,
                   vectors_of: str = "splits") -> dict:
    """export_parquet's files, written into `new` (beside `out`) and swapped in as `out`."""
    threads = con.execute("SELECT current_setting('threads')").fetchall()[0][0]
    con.execute("SET threads = 1")            # deterministic file layout and row order
    try:
        _choose(con, dataset_ids)
        questions = con.sql(load_query("export_questions")).to_arrow_table()
        parts = _write_questions(questions, new / "questions")
        _copy(con, load_query("export_recipes"), new / "recipes.parquet")
        _copy(con, load_query("export_steps"), new / "steps.parquet")
        context = _write_context_ablation(questions, new / "context_ablation.parquet")
        counts = {"questions": questions.num_rows}
        if with_vectors:
            read = _read_by(questions, context) if vectors_of == "questions" else None
            counts.update(_export_vectors(con, new, lance_uri, read))
        if with_images:
            counts.update(_export_images(con, new, home))
        card = write_card(con, new, questions, parts, files=sorted(p.name for p in new.glob("*.parquet")),
                          left_out=left_out, vectors_of=vectors_of if with_vectors else None)
        counts["configs"] = card["configs"]
        sha = tree_sha256(new)            # of what this export wrote: once swapped in, `out` may be another's
        _swap_in(new, out)
    finally:
        con.execute(f"SET threads = {threads}")
    return {"out": str(given), **counts, "sha256": sha}


WRITING_PREFIX = ".writing-"          # an export being written, beside its folder (readers pass it over)
_writer_ids = itertools.count()
NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)   # flock's "this file system cannot"


@contextlib.contextmanager
def _writing(out: Path):
    """The folder to write an export of `out` into, `.writing-<name>.<pid>-<n>` beside it (empty), for the
    length of the block; its lock file `.writing-<name>.<pid>-<n>.lock` is held (flock) meanwhile, so the
    next export can tell what a killed one left (its lock is free) from one still running, whatever the pids
    do since. What the block leaves of the folder is deleted, also on Ctrl-C or SIGTERM (`_clean_up_first`)."""
    with _clean_up_first():
        with _writing_beside(out) as new:
            yield new


class _Stopped(BaseException):
    """SIGINT or SIGTERM inside `_clean_up_first`'s block."""


@contextlib.contextmanager
def _clean_up_first():
    """In the main thread, SIGINT and SIGTERM raise `_Stopped` inside the block, so the export deletes what it
    wrote beside its folder and puts the earlier export back (`_swap_in`); then the handler that was there
    acts: `mrqa`'s ends the process (flows/signals.py, os._exit: it would have skipped all of that), Python's
    raises KeyboardInterrupt. A second signal meanwhile is held back until then."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    got: list[int] = []

    def stop(signum, _frame):
        got.append(signum)
        if len(got) == 1:
            raise _Stopped(signum)
    caught = [s for s, h in before.items() if h is not signal.SIG_IGN and h is not None]
    for s in caught:
        signal.signal(s, stop)
    try:
        yield
    except _Stopped:
        pass
    finally:
        for s in caught:
            signal.signal(s, before[s])
        if got:                         # whatever the block ended with (DuckDB says "Query interrupted")
            signal.raise_signal(got[0])
            raise KeyboardInterrupt    # its handler did not end the process (it returned)


@contextlib.contextmanager
def _writing_beside(out: Path):
    """`_writing` without its signal handling."""
    token = f"{os.getpid()}-{next(_writer_ids)}"
    new, lock = (out.parent / f"{WRITING_PREFIX}{out.name}.{token}{end}" for end in ("", ".lock"))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, held = _locked_file(out.parent)
    except OSError as e:
        raise ValueError(f"cannot write an export next to {out}: {e.strerror or e}") from None
    try:
        os.rename(held, lock)           # appears under its name already held
    except OSError as e:                # e.g. a name too long for the lock's: no `.mrqa-lock-*` left behind
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(held)
        raise ValueError(f"cannot write an export next to {out}: {e.strerror or e}") from None
    try:
        try:
            _clear_dead_writers_beside(out.parent)
            if new.exists():
                shutil.rmtree(new)
            new.mkdir()
        except OSError as e:
            raise ValueError(f"cannot write an export next to {out}: {e.strerror or e}") from None
        try:
            yield new
        finally:
            shutil.rmtree(new, ignore_errors=True)
    finally:
        with contextlib.suppress(OSError):
            lock.unlink()
        os.close(fd)


def _locked_file(folder: Path) -> tuple[int, str]:
    """A new empty file in `folder` under a passing name, locked (flock) by this process: (fd, path)."""
    fd, path = tempfile.mkstemp(prefix=".mrqa-lock-", dir=folder)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as e:
        if e.errno in NO_LOCKS:         # a file system without locks (some network ones): the pid tells
            log.info("export: %s has no file locks; a killed export is told by its pid", folder)
            return fd, path
        os.close(fd)
        os.unlink(path)
        raise
    return fd, path


WRITER_NAME = re.compile(r"^\.writing-(?P<name>.+)\.(?P<token>\d+(?:-\d+)?)(?:\.old|\.lock)?$")
ORPHAN_LOCK_S = 60                    # a `.mrqa-lock-*` file this old, unlocked, was left by a killed writer


def _clear_dead_writers_beside(folder: Path) -> None:
    """Delete what exports stopped half way (killed) left in `folder`, whatever folder they were writing:
    `.writing-<name>.<token>` folders (and their `.old`) whose lock file no process holds, and the temporary
    lock files of writers killed before naming theirs. A folder without a lock file (left by an older
    version, which named it by pid alone) goes when its process is gone."""
    try:
        entries = list(folder.iterdir())
    except OSError:
        return
    for name, token in sorted({(m["name"], m["token"]) for p in entries if (m := WRITER_NAME.match(p.name))}):
        _clear_dead_writer(folder / f"{WRITING_PREFIX}{name}.{token}")
    for p in entries:
        if not p.name.startswith(".mrqa-lock-"):
            continue
        try:
            if time.time() - p.stat().st_mtime < ORPHAN_LOCK_S:     # a writer may be about to name it
                continue
            fd = os.open(p, os.O_RDWR)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            p.unlink()
        except OSError:                 # held, or no locks here: left
            pass
        finally:
            os.close(fd)


def _clear_dead_writer(writing: Path) -> None:
    """Delete `writing` (`.writing-<name>.<token>`) and its `.old` when no process holds its lock file."""
    token = writing.name.rsplit(".", 1)[1]
    pid = token.split("-", 1)[0]
    lock = writing.with_name(f"{writing.name}.lock")
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:           # its writer is done (a leftover it could not delete), or the folder
        if token.isdigit() and _running(int(token)):        # is an older version's, named by its pid
            return
        fd = None
    except OSError:
        return
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:               # held: another export is writing
                return
            except OSError as e:                  # no locks here: its pid tells
                if e.errno not in NO_LOCKS or _running(int(pid)):
                    return
        for end in ("", ".old"):
            shutil.rmtree(writing.with_name(writing.name + end), ignore_errors=True)
        if fd is not None:
            with contextlib.suppress(OSError):
                lock.unlink()
    finally:
        if fd is not None:
            os.close(fd)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:             # another user's process
        pass
    return True


def _swap_in(new: Path, out: Path) -> None:
    """Replace the folder `out` (an earlier export, or nothing) by `new`: two renames in one folder, so a
    reader sees the earlier export or the new one, each whole (only between the renames, microseconds, no
    folder at all); the earlier one is deleted after."""
    old = new.with_name(f"{new.name}.old")
    moved = False                       # the earlier export was moved aside (there was one)
    try:
        if out.exists():
            out.rename(old)
            moved = True
        new.rename(out)
    except OSError as e:
        if moved and not out.exists():
            old.rename(out)
        elif moved:                     # another export of the same folder swapped its own in meanwhile
            shutil.rmtree(old, ignore_errors=True)
            raise ValueError(f"cannot replace the export {out}: another export of it was swapped in meanwhile "
                             "(that one is left)") from None
        raise ValueError(f"cannot replace the export {out}: {e.strerror or e} (it is left as it was)") from None
    except BaseException:               # interrupted (Ctrl-C) in the renames, maybe just after one of them
        if not out.exists() and old.exists():           # between them: the earlier one back
            old.rename(out)
        else:                                           # after both: the earlier one goes, as it would
            shutil.rmtree(old, ignore_errors=True)
        raise
    if not moved:
        return
    try:
        shutil.rmtree(old)
    except OSError as e:                # the new export is in place; only the earlier one's files are left
        log.warning("export: the earlier export, moved to %s, could not be deleted (%s); delete it by hand", old,
                    e.strerror or e)


CONTEXT_ABLATION_SCHEMA = pa.schema([("dataset_id", pa.string()), ("split", pa.string()), ("qid", pa.string()),
                                     ("recipe_id", pa.string()), ("context_recipe_id", pa.string())])


def _write_context_ablation(tbl: pa.Table, dest: Path) -> list[str]:
    """context_ablation.parquet: per question (dataset, split, qid order), the recipe whose steps the context
    ablation gives it instead of its own (`training.ablation.other_recipes`, per split); returns those recipes."""
    cols = {c: tbl[c].to_pylist() for c in ("dataset_id", "split", "qid", "recipe_id")}
    order = sorted(range(tbl.num_rows), key=lambda i: (cols["dataset_id"][i], cols["split"][i], cols["qid"][i]))
    rows = {c: [v[i] for i in order] for c, v in cols.items()}
    other: list[str] = []
    start = 0
    for i in range(1, len(order) + 1):
        if i < len(order) and (rows["dataset_id"][i], rows["split"][i]) == (rows["dataset_id"][start],
                                                                            rows["split"][start]):
            continue
        other += other_recipes(rows["recipe_id"][start:i])
        start = i
    pq.write_table(pa.table({**rows, "context_recipe_id": other}, schema=CONTEXT_ABLATION_SCHEMA), dest,
                   row_group_size=ROW_GROUP, compression="zstd")
    return other


def _write_questions(tbl: pa.Table, root: Path) -> list[dict]:
    """One file per (task, knobs, split) run of the sorted table, partition columns included;
    returns the partitions with their path and per-dataset counts. Arrow-to-Arrow only (no Python
    objects), so pyarrow never loads pandas."""
    cast = {f.name: tbl[f.name].cast(f.type) for f in QUESTION_SCHEMA if f.name not in PARTITIONS}
    keys = list(zip(*(tbl[c].to_pylist() for c in PARTITIONS)))
    dids = tbl["dataset_id"].to_pylist()
    parts, start = [], 0
    for i in range(1, len(keys) + 1):
        if i < len(keys) and keys[i] == keys[start]:
            continue
        n = i - start
        task, knobs, split = keys[start]
        rel = Path("questions", f"task={task}", f"knobs={knobs}", f"split={split}", "data_0.parquet")
        cols = [tbl[f.name].slice(start, n).combine_chunks().dictionary_encode() if f.name in PARTITIONS
                else cast[f.name].slice(start, n) for f in QUESTION_SCHEMA]
        dest = root.parent / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_arrays(cols, schema=QUESTION_SCHEMA), dest, row_group_size=ROW_GROUP,
                       compression="zstd")
        per_ds: dict[str, int] = {}
        for d in dids[start:i]:
            per_ds[d] = per_ds.get(d, 0) + 1
        parts.append({"task": task, "knobs": knobs, "split": split, "path": rel.as_posix(), "n": n,
                      "datasets": per_ds})
        start = i
    return parts


def _check_vectors(con, dataset_ids: list[str], lance_uri: str | None) -> None:
    """--with-vectors: every encoder of the datasets has image and step-text vectors in the feature store."""
    from features.embed.words_encoder import is_words_encoder
    from features.vectors.store import IMAGE_TABLE, TEXT_TABLE, FeatureStore
    store = FeatureStore(lance_uri)
    for (enc,) in con.execute("SELECT DISTINCT encoder_id FROM datasets WHERE list_contains(?, dataset_id) "
                              "AND encoder_id IS NOT NULL ORDER BY 1", [list(dataset_ids)]).fetchall():
        for base, what in ((IMAGE_TABLE, "image vectors"), (TEXT_TABLE, "step-text vectors")):
            if base == IMAGE_TABLE and is_words_encoder(enc):
                continue                # a words encoder has no image tower
            if store.find_table(base, enc) is None:
                raise LookupError(f"--with-vectors: no {what} of encoder {enc} in {store.uri}: run `mrqa embed` "
                                  "(or check --home), or export without vectors")


def _read_by(questions: pa.Table, context: list[str]) -> tuple[set[str], set[str]]:
    """(the item ids the questions show: their photos, choices and orderings, and textual cloze's titles, which
    its provenance names; the recipes whose own photos and steps their models read: each question's and its
    context-ablation recipe's, `context`)."""
    import pyarrow.compute as pc
    items: set[str] = set()
    for col in ("question", "choice_list", "choice_orderings"):
        flat = pc.list_flatten(questions.column(col))
        if col == "choice_orderings":
            flat = pc.list_flatten(flat)
        items.update(x for x in pc.unique(flat).to_pylist() if x is not None)
    textual = pc.equal(questions.column("task").cast(pa.string()), "textual_cloze")
    for prov in questions.filter(textual).column("provenance").to_pylist():   # textual cloze: the titles' ids
        doc = json.loads(prov or "{}")
        items.update(doc.get("question_items") or [], doc.get("choice_items") or [])
    recipes = set(pc.unique(questions.column("recipe_id")).to_pylist())
    recipes.update(context)
    return items, recipes - {None}


def _export_vectors(con, out: Path, lance_uri: str | None, read: tuple[set[str], set[str]] | None = None) -> dict:
    """image_vectors.parquet (item_id = image_id) and text_vectors.parquet (item_id =
    <recipe_id>_<step_idx>_<field>, field title or body) of the exported splits, with the same leading
    columns. The body vectors are the step texts the readers' `--text-features vectors` read: with them
    an export trains the same models on a machine without the feature store (training/data.py). `read`
    (`_read_by`): only the items named there and their recipes' own photos (not photos drawn again
    elsewhere, which a question reads only as a choice) and steps."""
    from etl.records import is_redrawn_image
    from features.embed.words_encoder import is_words_encoder
    from features.vectors.store import FeatureStore, vector_rows
    store = FeatureStore(lance_uri)
    encs = [r[0] for r in con.execute("SELECT DISTINCT encoder_id FROM datasets JOIN export_datasets "
                                      "USING (dataset_id) ORDER BY 1").fetchall()]
    splits = {r[0] for r in con.execute("SELECT DISTINCT split FROM questions JOIN export_datasets "
                                        "USING (dataset_id)").fetchall()}
    meta = con.execute("SELECT i.image_id, i.recipe_id, i.step_idx, r.split FROM images i JOIN recipes r "
                       "USING (recipe_id) WHERE i.status = 'ok' AND r.status = 'ok' UNION ALL "
                       "SELECT i.image_id, i.recipe_id, i.step_idx, r.split FROM redrawn_images i JOIN recipes r "
                       "USING (recipe_id) WHERE r.status = 'ok'").fetchall()      # redrawn: `mrqa redraw`'s photos
    img_meta = {a: (b, c, d) for a, b, c, d in meta if d in splits}
    rsplit = dict(con.execute("SELECT recipe_id, split FROM recipes WHERE status = 'ok'").fetchall())
    counts = {}
    for kind, fetch in (("image_vectors", lambda e: store.image_vectors(e)),
                        ("text_vectors", lambda e: _text_fields(store, e))):
        parts = []
        for enc in encs:
            if kind == "image_vectors" and is_words_encoder(enc):   # no image tower
                continue
            ids, mat = fetch(enc)
            if not len(ids):            # --with-vectors promised them: never an export without, silently
                raise LookupError(f"--with-vectors: no {kind.replace('_', ' ')} of encoder {enc} in "
                                  f"{store.uri}: run `mrqa embed` (or check --home), or export without vectors")
            if kind == "image_vectors":
                recs = [img_meta.get(i, (None, None, None)) for i in ids]
            else:
                recs = []
                for i in ids:
                    rid, step, _field = i.rsplit("_", 2)
                    recs.append((rid, int(step), rsplit.get(rid)))
            keep = np.array([s in splits for _, _, s in recs], dtype=bool)
            if read is not None:
                items, recipes = read
                keep &= np.array([i in items or (r in recipes and not (kind == "image_vectors" and is_redrawn_image(i)))
                                  for i, (r, _, _) in zip(ids, recs)], dtype=bool)
            kept = [r for r, k in zip(recs, keep) if k]
            mat = np.ascontiguousarray(np.asarray(mat, np.float32)[keep])
            parts.append(vector_rows(np.asarray(ids, dtype=object)[keep].tolist(), mat, id_column="item_id",
                                     recipe_id=pa.array([r for r, _, _ in kept], pa.string()),
                                     step_idx=pa.array([s for _, s, _ in kept], pa.int32()),
                                     split=pa.array([s for _, _, s in kept], pa.string()),
                                     encoder_id=enc))
        if parts:
            tbl = pa.concat_tables(parts)
            con.register("export_vec_arrow", tbl)
            lead = ("item_id AS image_id, item_id" if kind == "image_vectors"
                    else "item_id, split_part(item_id, '_', -1) AS field")
            _copy(con, f"SELECT {lead}, recipe_id, step_idx, split, encoder_id, vector "
                       f"FROM export_vec_arrow ORDER BY encoder_id, item_id", out / f"{kind}.parquet")
            con.unregister("export_vec_arrow")
            counts[kind] = tbl.num_rows
    return counts


IMAGE_FEATURES = {"image_id": {"dtype": "string", "_type": "Value"},
                  "recipe_id": {"dtype": "string", "_type": "Value"},
                  "step_idx": {"dtype": "int32", "_type": "Value"},
                  "split": {"dtype": "string", "_type": "Value"},
                  "image": {"_type": "Image"}}
IMAGE_SCHEMA = pa.schema([("image_id", pa.string()), ("recipe_id", pa.string()), ("step_idx", pa.int32()),
                          ("split", pa.string()),
                          ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())]))],
                         metadata={b"huggingface": json.dumps({"info": {"features": IMAGE_FEATURES}}).encode()})


def _image_file(path: str | None, home: Path | None) -> Path | None:
    if not path:
        return None
    p = Path(path)
    if not p.is_absolute():
        if home is None:
            return None
        p = Path(home) / p
    return p if p.is_file() else None


def _export_images(con, out: Path, home: Path | None) -> dict:
    """images.parquet: every ok image of the recipes in recipes.parquet, and every photo of their steps drawn
    again in another kitchen (`mrqa redraw`), bytes + path (= image_id)."""
    rows = con.execute("WITH r AS (" + load_query("export_recipes") + ") SELECT i.image_id, i.recipe_id, "
                       "i.step_idx, r.split, i.path FROM images i JOIN r USING (recipe_id) "
                       "WHERE i.status = 'ok' UNION ALL SELECT i.image_id, i.recipe_id, i.step_idx, r.split, i.path "
                       "FROM redrawn_images i JOIN r USING (recipe_id) ORDER BY image_id").fetchall()
    missing = 0
    writer = pq.ParquetWriter(out / "images.parquet", IMAGE_SCHEMA, compression="zstd")
    try:
        for start in range(0, max(len(rows), 1), IMAGE_ROW_GROUP):
            chunk, cols = rows[start:start + IMAGE_ROW_GROUP], {k: [] for k in IMAGE_SCHEMA.names}
            for iid, rid, step, split, path in chunk:
                f = _image_file(path, home)
                if f is None:
                    missing += 1
                    continue
                for k, v in (("image_id", iid), ("recipe_id", rid), ("step_idx", step), ("split", split),
                             ("image", {"bytes": f.read_bytes(), "path": iid})):
                    cols[k].append(v)
            writer.write_table(pa.table(cols, schema=IMAGE_SCHEMA), row_group_size=IMAGE_ROW_GROUP)
    finally:
        writer.close()
    return {"images": len(rows) - missing, "images_missing": missing}


def tree_sha256(root: Path) -> str:
    """sha256 over (relative path, file bytes) of every file under root, in sorted order."""
    h = hashlib.sha256()
    for p in sorted(Path(root).rglob("*")):
        if p.is_file():
            h.update(p.relative_to(root).as_posix().encode() + b"\0")
            h.update(p.read_bytes())
    return h.hexdigest()


# ----------------------------------------------------------------------------- freshness

def export_freshness(con: duckdb.DuckDBPyConnection, export_dir: Path,
                     dataset_ids: list[str] | None = None) -> dict[str, list[str]]:
    """What a Parquet export holds against the warehouse, per dataset by its content hash
    (sql/queries/export_content_hashes.sql, the warehouse's `questions_content_hash` recomputed from the
    files): {"current": ids whose questions are the warehouse's, "changed": ids generated or filtered again
    since the export was written (`mrqa af-pool` rewrites a dataset under its id), "gone": ids no longer in
    the warehouse, "missing": the side files every export has (EXPORT_CORE) that this one lacks, e.g. one
    whose writing stopped half way}; with `dataset_ids`, of those only. A folder that is no export, or
    whose questions cannot be read, raises ValueError."""
    qdir = Path(export_dir) / "questions"
    if not qdir.is_dir():
        raise ValueError(f"{export_dir} is not a Parquet export (no questions/ folder)")
    glob = sql_glob(qdir, "**/*.parquet")
    try:
        only = "" if dataset_ids is None else f" WHERE list_contains({_in(dataset_ids)}, dataset_id)"
        con.execute(f"CREATE OR REPLACE TEMP VIEW export_read AS SELECT * FROM read_parquet({glob}, "
                    f"hive_partitioning = false){only}")
        hashes = con.execute(load_query("export_content_hashes")).fetchall()
    except duckdb.Error as e:
        raise ValueError(f"{export_dir}: its questions cannot be read ({str(e).splitlines()[0]})") from None
    finally:
        con.execute("DROP VIEW IF EXISTS export_read")
    known = dict(con.execute("SELECT dataset_id, content_sha256 FROM datasets WHERE list_contains(?, dataset_id)",
                             [[d for d, _ in hashes]]).fetchall())
    out: dict[str, list[str]] = {"current": [], "changed": [], "gone": [],
                                 "missing": [f for f in EXPORT_CORE if not (Path(export_dir) / f).is_file()]}
    for did, sha in hashes:
        out["gone" if did not in known else "current" if known[did] == sha else "changed"].append(did)
    return out


def current_export(con: duckdb.DuckDBPyConnection, dataset_ids: list[str], out: Path, **kw) -> bool:
    """Write the Parquet export of `dataset_ids` (those with questions) into `out` (`export_parquet`, options
    `kw`) unless it holds exactly them as the warehouse has them (`export_freshness`); True when written."""
    have = [r[0] for r in con.execute("SELECT dataset_id FROM datasets WHERE list_contains(?, dataset_id) "
                                      "AND n_questions > 0 ORDER BY 1", [dataset_ids]).fetchall()]
    try:
        if (Path(out) / "questions").is_dir() and export_freshness(con, out) == {"current": have, "changed": [],
                                                                                 "gone": [], "missing": []}:
            return False
    except ValueError:
        pass
    export_parquet(con, have, out, **kw)
    return True


# ----------------------------------------------------------------------------- RecipeQA JSON

def export_recipeqa_json(con: duckdb.DuckDBPyConnection, dataset_ids: list[str], out: Path,
                         home: Path | None = None, with_images: bool = True) -> dict:
    """RecipeQA-format files OUT/{train,val,test}.json for one dataset; for several, one such folder per
    dataset (OUT/<dataset_id>/), so RecipeQA's tools score each knob setting on its own."""
    out = Path(out)
    _check_out_name(out)
    if len(dataset_ids) > 1 and (out / "questions").is_dir():     # its folders would go into a Parquet export
        raise ValueError(f"refusing to write RecipeQA JSON folders into {out}: it is a Parquet export; choose "
                         "another --out")
    if len(dataset_ids) > 1 and out.is_dir() and RECIPEQA_NAMES & {p.name for p in out.iterdir()}:
        raise ValueError(f"refusing to write RecipeQA JSON folders into {out}: it holds one dataset's RecipeQA "
                         "export (its split files); choose another --out")
    # every folder checked before any is written: a refused one must not leave the others half replaced
    for folder in [out] if len(dataset_ids) == 1 else [out / did for did in dataset_ids]:
        _recipeqa_target(folder)
    records = recipeqa_records(con, dataset_ids)
    sources: dict[str, str | None] = {}
    if with_images:
        shown = sorted({i for by_split in records.values() for recs in by_split.values() for rec in recs
                        for i in record_images(rec)})
        for iid, path in con.execute("SELECT image_id, path FROM images WHERE status = 'ok' AND "
                                     "list_contains(?, image_id) UNION ALL SELECT image_id, path FROM redrawn_images "
                                     "WHERE list_contains(?, image_id)", [shown, shown]).fetchall():
            f = _image_file(path, home)
            sources[iid] = str(f) if f is not None else None
    if len(dataset_ids) == 1:
        return _recipeqa_folder(records.get(dataset_ids[0], {}), out, sources, with_images)
    res = {"out": str(out), "datasets": {}, "images_copied": 0, "images_missing": 0}
    for did in dataset_ids:
        r = _recipeqa_folder(records.get(did, {}), out / did, sources, with_images)
        res["datasets"][did] = r["records"]
        res["images_copied"] += r["images_copied"]
        res["images_missing"] += r["images_missing"]
    res["records"] = {s: sum(d.get(s, 0) for d in res["datasets"].values())
                      for s in sorted({s for d in res["datasets"].values() for s in d})}
    return res


def recipeqa_records(con: duckdb.DuckDBPyConnection, dataset_ids: list[str]) -> dict[str, dict[str, list[dict]]]:
    """The datasets' questions as RecipeQA records: dataset_id -> split -> records (qid order)."""
    from features.datasets.tasks import FAMILIES
    _choose(con, dataset_ids)
    cur = con.execute(load_query("export_questions"))
    cols = [d[0] for d in cur.description]
    rows = [dict(zip(cols, r)) for r in cur.fetchall()]
    recipes = sorted({r["recipe_id"] for r in rows})
    steps: dict[str, list] = {}
    for rid, idx, title, body in con.execute(
            "SELECT recipe_id, step_idx, title, body FROM steps WHERE list_contains(?, recipe_id) "
            "AND step_idx >= 1 ORDER BY recipe_id, step_idx", [recipes]).fetchall():
        steps.setdefault(rid, []).append((idx, title, body))
    imgs: dict[tuple, list] = {}
    for iid, rid, idx in con.execute(
            "SELECT image_id, recipe_id, step_idx FROM images WHERE status = 'ok' AND "
            "list_contains(?, recipe_id) ORDER BY recipe_id, step_idx, ord, image_id", [recipes]).fetchall():
        imgs.setdefault((rid, idx), []).append(iid)
    contexts: dict[tuple, list] = {}       # (recipe, textual) -> context, built once, shared by records

    def context(rid: str, textual: bool) -> list[dict]:
        if (rid, textual) not in contexts:
            contexts[rid, textual] = [
                {"id": idx, "body": body or "", "videos": [],
                 **({"images": imgs.get((rid, idx), [])} if textual else {"title": title or ""})}
                for idx, title, body in steps.get(rid, [])]
        return contexts[rid, textual]

    out: dict[str, dict[str, list]] = {}
    for r in rows:
        fam = FAMILIES[r["task"]]
        choices = [list(c) for c in r["choice_orderings"]] if r["task"] == "visual_ordering" \
            else list(r["choice_list"])
        out.setdefault(r["dataset_id"], {}).setdefault(r["split"], []).append({
            "recipe_id": r["recipe_id"], "task": r["task"], "qid": f"{r['dataset_id']}{QID_SEPARATOR}{r['qid']}",
            "split": r["split"], "context": context(r["recipe_id"], fam.space == "title"),
            "question": list(r["question"]), "choice_list": choices, "answer": int(r["answer"]),
            "question_text": QUESTION_TEXT[r["task"]], "context_modality": list(fam.context_modality),
            "question_modality": list(fam.question_modality)})
    return out


def _recipeqa_folder(by_split: dict[str, list[dict]], out: Path, sources: dict[str, str | None],
                     with_images: bool) -> dict:
    """One dataset's OUT/<split>.json (+ OUT/images-qa/<split>/images-qa/), replacing what an earlier
    export wrote there (and nothing else: a folder with other files is refused). Written beside OUT and
    swapped in whole, as the Parquet export is: a reader sees the earlier files or the new ones."""
    given, out = out, _recipeqa_target(out)
    with _writing(out) as new:
        try:
            written, copied, missing = _write_recipeqa(by_split, new, sources, with_images)
        except OSError as e:                # e.g. the disk is full (it blamed the image it was copying)
            raise ValueError(f"cannot write the export {out}: {e.strerror or e} (an earlier export is left as it "
                             "was)") from None
        _swap_in(new, out)
    return {"out": str(given), "records": written, "images_copied": copied, "images_missing": missing}


def _write_recipeqa(by_split: dict[str, list[dict]], new: Path, sources: dict[str, str | None],
                    with_images: bool) -> tuple[dict, int, int]:
    """_recipeqa_folder's files, into `new`: (records per split, images copied, images missing)."""
    written, copied, missing = {}, 0, 0
    for split, recs in sorted(by_split.items()):
        (new / f"{split}.json").write_text(json.dumps({"data": recs}, ensure_ascii=False, sort_keys=True))
        written[split] = len(recs)
        if not with_images:
            continue
        dest = new / "images-qa" / split / "images-qa"
        dest.mkdir(parents=True)
        for iid in sorted({i for rec in recs for i in record_images(rec)}):
            src = sources.get(iid)
            if src is None:
                missing += 1
                continue
            _link_or_copy(src, os.path.join(dest, iid))
            copied += 1
    return written, copied, missing


def _recipeqa_target(out: Path) -> Path:
    """The folder a RecipeQA export of `out` replaces (where a symlink points: the link stays a link); raises
    ValueError when it is a file or holds more than a RecipeQA export."""
    if out.is_symlink():
        out = Path(os.path.realpath(out))
    if out.exists() and not out.is_dir():
        raise ValueError(f"refusing to export to {out}: it is a file")
    if out.is_dir():
        check_replaceable([p.name for p in out.iterdir()], str(out), RECIPEQA_NAMES, "a RecipeQA export")
    return out


def _link_or_copy(src: str, dest: str) -> None:
    try:
        os.link(src, dest)
    except OSError:                # another file system (or links not allowed): copy the bytes
        shutil.copyfile(src, dest)


def record_images(rec: dict) -> list[str]:
    """Every image a RecipeQA record shows: question items, all choices (distractors included) and,
    for textual cloze, the context's images."""
    items = rec["question"] + [x for c in rec["choice_list"] for x in (c if isinstance(c, list) else [c])]
    items += [i for c in rec["context"] for i in c.get("images", [])]
    return [i for i in items if isinstance(i, str) and i.endswith(".jpg")]


def _text_fields(store, encoder_id: str) -> tuple[list[str], np.ndarray]:
    """The step-title and step-body vectors of an encoder, as one (ids, matrix)."""
    ids, mats = [], []
    for field in ("title", "body"):
        got, mat = store.text_vectors(encoder_id, field)
        if len(got):
            ids += list(got)
            mats.append(np.asarray(mat, np.float32))
    return ids, (np.concatenate(mats) if mats else np.zeros((0, 0), np.float32))
