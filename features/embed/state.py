"""The embed stage's no-op shortcut: after a run that found nothing to do, remember a fingerprint of
everything the stage reads (the warehouse tables it selects from, the embed rejects, the neighbour
count, the LanceDB files, the run's parameters) with that run's summary; a later run with the same
fingerprint returns that summary without loading torch, open_clip or LanceDB.

Light on purpose (duckdb and the standard library only): `mrqa embed` checks it before importing the
embed stage, so an embed with nothing new costs about as much as `mrqa status`. Any change to an input
(a new image, a changed step text, a registered encoder, a deleted vector file, other parameters)
changes the fingerprint and the full stage runs, and records again when it too finds nothing to do.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import duckdb

from etl.config import Paths

STATE_FILE = "embed-noop.json"           # in MRQA_HOME/state/
INPUT_TABLES = ("recipes", "steps", "images", "encoders")
COUNTERS = ("images_encoded", "images_rejected", "vectors_deleted", "texts_encoded", "text_vectors_deleted")


def state_path(paths: Paths) -> Path:
    return paths.home / "state" / STATE_FILE


def embed_params(encoder_id: str | None, train_if_missing: bool, k: int, num_workers: int, batch_size: int,
                 neighbour_method: str, device: str | None, dask_address: str | None, decode: str) -> dict:
    """The parameters of a run, as the fingerprint holds them (every one, so a run with other
    parameters never reuses a summary)."""
    return {"encoder_id": encoder_id, "train_if_missing": train_if_missing, "k": k, "num_workers": num_workers,
            "batch_size": batch_size, "neighbour_method": neighbour_method, "device": device,
            "dask_address": dask_address, "decode": decode}


def _table_digest(con: duckdb.DuckDBPyConnection, table: str, where: str = "") -> str:
    cols = [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()]
    row_hash = "hash(" + ", ".join('"' + c.replace('"', '""') + '"' for c in cols) + ")"
    n, s = con.execute(f"SELECT count(*), coalesce(sum({row_hash}::HUGEINT), 0) FROM {table} {where}").fetchall()[0]
    return f"{table}:{n}:{s}"


def _files_digest(root: Path) -> str:
    """Names, sizes and modification times of every file under `root` (LanceDB writes new files for
    every change and never rewrites one in place)."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath, name)
            try:
                st = p.stat()
            except OSError:
                continue
            h.update(f"{p.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def fingerprint(con: duckdb.DuckDBPyConnection, paths: Paths, params: dict) -> str | None:
    """A hash of the stage's inputs and outputs; None when there is none to trust (a remote LanceDB
    URI, no LanceDB folder, or no encoder to resolve yet)."""
    lance = paths.lance
    if "://" in lance or not Path(lance).is_dir():
        return None
    encoder_id = params["encoder_id"] or next(iter(con.execute(
        "SELECT encoder_id FROM encoders ORDER BY created_at DESC, encoder_id DESC LIMIT 1").fetchall()), [None])[0]
    if encoder_id is None:
        return None
    parts = [_table_digest(con, t) for t in INPUT_TABLES]
    parts.append(_table_digest(con, "rejects", "WHERE stage = 'embed'"))
    parts.append(f"{encoder_id}:" + str(con.execute("SELECT count(*) FROM neighbours WHERE encoder_id = ?",
                                                    [encoder_id]).fetchall()[0][0]))
    parts.append(_files_digest(Path(lance)))
    parts.append(json.dumps(params, sort_keys=True, default=str))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def is_noop(summary: dict) -> bool:
    """Whether a run's summary says it changed nothing: no vector written or deleted, no reject, the
    neighbours and the LanceDB indexes left as they were."""
    return (all(summary.get(c) == 0 for c in COUNTERS) and isinstance(summary.get("neighbours"), str)
            and all(set(v) <= {"rows", "table"} for v in summary.get("indexes", {}).values()))


def known_noop(con: duckdb.DuckDBPyConnection, paths: Paths, params: dict) -> dict | None:
    """The summary of the last no-op run when nothing it read has changed since, else None."""
    path = state_path(paths)
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    fp = fingerprint(con, paths, params)
    return saved.get("summary") if fp is not None and saved.get("fingerprint") == fp else None


def cached_summary(params: dict, paths: Paths | None = None) -> dict | None:
    """known_noop on its own connection to the warehouse of MRQA_HOME (`mrqa embed` asks this before
    it imports the stage); None when the warehouse does not exist yet."""
    from etl.warehouse import connect
    paths = paths or Paths.from_env()
    if not paths.warehouse.exists() or not state_path(paths).exists():
        return None
    con = connect(paths)
    try:
        return known_noop(con, paths, params)
    finally:
        con.close()


def remember(con: duckdb.DuckDBPyConnection, paths: Paths, params: dict, summary: dict) -> bool:
    """After a run: record its fingerprint and summary when it was a no-op (forget any earlier one
    otherwise); returns whether it recorded."""
    path = state_path(paths)
    fp = fingerprint(con, paths, params) if is_noop(summary) else None
    if fp is None:
        path.unlink(missing_ok=True)
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"fingerprint": fp, "summary": summary}, indent=1, default=str))
    tmp.replace(path)
    return True
