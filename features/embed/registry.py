"""What every kind of encoder shares: its id, its row in the `encoders` table and where its files are kept.

The CLIP encoders (features/embed/encoders.py) and the words encoder (features/embed/words_encoder.py)
both register here, so neither imports the other's module to do so."""
from __future__ import annotations

import json
from pathlib import Path

import duckdb

from etl.config import Paths
from etl.warehouse import utcnow


class EncoderUnavailable(RuntimeError):
    """The encoder (or its weights) cannot be loaded; the message says what to do."""


def make_encoder_id(model_name: str, weights_sha: str, preprocess_sha: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-." else "-" for c in model_name)
    return f"{safe}-{weights_sha[:12]}-{preprocess_sha[:8]}"


def _store_path(path: Path, paths: Paths) -> str:
    """Relative to MRQA_HOME when inside it, absolute otherwise."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(paths.home))
    except ValueError:
        return str(path)


def resolve_stored_path(stored: str, paths: Paths) -> Path:
    """A path as `_store_path` stored it: relative to MRQA_HOME, or absolute."""
    p = Path(stored)
    return p if p.is_absolute() else paths.home / p


def encoder_row(con: duckdb.DuckDBPyConnection, encoder_id: str) -> dict | None:
    """The `encoders` row of `encoder_id`, its JSON columns (config, metrics) as dicts; None when absent."""
    rel = con.execute("SELECT * FROM encoders WHERE encoder_id = ?", [encoder_id])
    rows = rel.fetchall()            # not fetchone: a result left unfinished blocks the connection's next register
    if not rows:
        return None
    got = rows[0]
    return parse_json_columns(dict(zip([d[0] for d in rel.description], got)))


def parse_json_columns(row: dict) -> dict:
    """An `encoders` row as read from DuckDB, its JSON columns (config, metrics) parsed into dicts in place."""
    for k in ("config", "metrics"):
        row[k] = json.loads(row[k]) if row[k] else {}
    return row


def register_encoder(con: duckdb.DuckDBPyConnection, row: dict) -> str:
    row = dict(row)
    for k in ("config", "metrics"):
        if not isinstance(row.get(k), (str, type(None))):
            row[k] = json.dumps(row[k], sort_keys=True)
    row.setdefault("created_at", utcnow())
    cols = list(row)
    con.execute(f"INSERT OR REPLACE INTO encoders ({', '.join(cols)}) "
                f"VALUES ({', '.join('?' for _ in cols)})", [row[c] for c in cols])
    return row["encoder_id"]
