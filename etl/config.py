"""Where data lives: one base directory, MRQA_HOME (default ./data), overridable by env or argument.

Layout (docs/data-model.md): warehouse.duckdb, lance/, raw/ (content-addressed fetched bodies), images/,
exports/, models/, reports/.
"""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SQL_DIR = REPO_ROOT / "sql"
# `mrqa demo` sample-kitchen size: `make demo` takes 12-16 minutes on 2 CPU cores in most of a machine's
# phases, 22-29 in its slowest (README, "How long it takes").
# Here, not in flows/demo.py, so the CLI can show it without importing Prefect.
DEMO_RECIPES = 1000
SEED_MAX = 2**32 - 1               # the largest seed numpy and sklearn accept (unsigned 32-bit)


def sql_path(path: str | os.PathLike) -> str:
    """A file path (or glob) as a SQL string literal for DuckDB's read_parquet / COPY ... TO, quotes
    doubled: a folder named "Bob's data" is a path like any other."""
    text = path.as_posix() if isinstance(path, Path) else os.fspath(path)
    return "'" + text.replace("'", "''") + "'"


def sql_glob(folder: str | os.PathLike, pattern: str) -> str:
    """`folder`/`pattern` as a SQL string literal for DuckDB's read_parquet, the folder's own glob characters
    (`[`, `*`, `?`) each in brackets so they match only themselves: an export in a folder named "res [old]"
    is read like any other (DuckDB took `[old]` for a character class and found no files)."""
    text = folder.as_posix() if isinstance(folder, Path) else os.fspath(folder)
    return sql_path(glob.escape(text).rstrip("/") + "/" + pattern)


def file_in_path(path: str | os.PathLike) -> Path | None:
    """The first existing part of `path` (itself, then each folder above it) that is not a folder: a file
    where a folder is needed. None when every part that exists is a folder."""
    p = Path(path)
    return next((q for q in (p, *p.parents) if q.exists() and not q.is_dir()), None)


@dataclass(frozen=True)
class Paths:
    home: Path

    @classmethod
    def from_env(cls, home: str | os.PathLike | None = None) -> Paths:
        base = home if home is not None else (os.environ.get("MRQA_HOME") or "data")     # set but empty: unset
        return cls(Path(base).expanduser().resolve())

    @property
    def warehouse(self) -> Path:
        return self.home / "warehouse.duckdb"

    @property
    def lance(self) -> str:
        # a URI: LanceDB accepts s3://... too (MRQA_LANCE_URI overrides)
        return os.environ.get("MRQA_LANCE_URI", str(self.home / "lance"))

    @property
    def raw(self) -> Path:
        return self.home / "raw"

    @property
    def images(self) -> Path:
        return self.home / "images"

    @property
    def exports(self) -> Path:
        return self.home / "exports"

    @property
    def models(self) -> Path:
        return self.home / "models"

    @property
    def reports(self) -> Path:
        return self.home / "reports"

    def ensure(self) -> Paths:
        for p in (self.home, self.raw, self.images, self.exports, self.models, self.reports):
            p.mkdir(parents=True, exist_ok=True)
        return self
