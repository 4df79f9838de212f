"""The DuckDB warehouse: connection, a tiny ordered migration runner, upserts, rejects, SQL tests.

Schema files live in sql/schema/ and are applied in the order of sql/migrations.txt, each once,
recorded in `schema_version` with its checksum. The checksum covers the SQL, not the comment lines
(`-- ...`), so documenting an applied file is safe. View files (name contains `_v_`) are re-applied
when they change; any other applied file whose SQL changed is refused with an error.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from etl.config import SQL_DIR, Paths

log = logging.getLogger(__name__)


class SchemaError(RuntimeError):
    pass


class WarehouseLocked(SchemaError):
    """Another process holds the warehouse's lock (DuckDB allows one writer); the message is one
    line naming the holder when DuckDB says who it is, and what to do."""


LOCK_WAIT_ENV = "MRQA_LOCK_WAIT"      # seconds connect() retries a locked warehouse (`--wait`)
_HOLDER = re.compile(r"Conflicting lock is held in (.*?) \(PID (\d+)\)")


def lock_holder(message: str) -> str | None:
    """'PID 123 (mrqa embed)' from DuckDB's lock error text (the command line from /proc when it
    can be read, else the executable DuckDB names); None when the text names no process."""
    m = _HOLDER.search(message)
    if not m:
        return None
    try:
        argv = Path(f"/proc/{m[2]}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        words = [Path(argv[0].decode()).name] + [a.decode(errors="replace") for a in argv[1:]]
        # `python .../bin/mrqa embed` reads better as `mrqa embed`
        if len(words) > 1 and words[0].startswith("python") and not words[1].startswith("-"):
            words = [Path(words[1]).name] + words[2:]
        cmd = " ".join(words)
    except (OSError, IndexError):
        cmd = m[1]
    cmd = " ".join(cmd.split())                      # one line, whatever the arguments hold
    cmd = cmd if len(cmd) <= 80 else cmd[:77] + "..."
    return f"PID {m[2]} ({cmd})"


def lock_wait_seconds() -> float:
    """The `--wait` of the running command (MRQA_LOCK_WAIT), 0 when unset or not a number."""
    try:
        return max(0.0, float(os.environ.get(LOCK_WAIT_ENV) or 0))
    except ValueError:
        return 0.0


def utcnow() -> datetime:
    """Naive UTC timestamp (DuckDB TIMESTAMP has no zone)."""
    return datetime.now(UTC).replace(tzinfo=None)


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """BEGIN ... COMMIT around the block; ROLLBACK and re-raise if it raises."""
    con.execute("BEGIN")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


@contextmanager
def trial(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """BEGIN ... ROLLBACK whatever happens: try writes to learn whether the warehouse accepts them,
    keeping nothing (e.g. which of a batch's recipes would fail to load)."""
    con.execute("BEGIN")
    try:
        yield con
    finally:
        con.execute("ROLLBACK")


def migration_files(sql_dir: Path = SQL_DIR) -> list[Path]:
    order = (sql_dir / "migrations.txt").read_text().splitlines()
    names = [ln.strip() for ln in order if ln.strip() and not ln.lstrip().startswith("#")]
    files = [sql_dir / "schema" / n for n in names]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise SchemaError(f"sql/migrations.txt names files that do not exist: {missing}")
    return files


def schema_checksums(text: str) -> tuple[str, str]:
    """(checksum of the SQL without its comment lines, checksum of the whole text). The first is
    recorded; a row holding the second (an older runner wrote it) is upgraded to the first."""
    sql = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("--"))
    return hashlib.sha256(sql.encode()).hexdigest(), hashlib.sha256(text.encode()).hexdigest()


def _plan(applied: dict[int, tuple[str, str]], sql_dir: Path) -> list[tuple[int, Path, str, str, str]]:
    """(version, path, text, sha256, action) per schema file against `applied` (schema_version: version ->
    (file name, sha256)): action `skip` (applied as it is), `record` (applied, its checksum recorded by an
    older runner over the whole text: to upgrade) or `apply`. A file reordered, or a changed file that is
    not a view (`_v_`), raises SchemaError."""
    out = []
    for version, path in enumerate(migration_files(sql_dir), start=1):
        text = path.read_text()
        sha, whole_text_sha = schema_checksums(text)
        action = "apply"
        if version in applied:
            name, old_sha = applied[version]
            if name != path.name:
                raise SchemaError(f"schema version {version} was {name}, now {path.name}: "
                                  "append new files to sql/migrations.txt instead of reordering")
            if old_sha in (sha, whole_text_sha):
                action = "skip" if old_sha == sha else "record"
            elif "_v_" not in path.name:
                raise SchemaError(f"{path.name} changed after it was applied; add a new migration "
                                  "file instead (or rebuild the warehouse)")
        out.append((version, path, text, sha, action))
    return out


def _applied(con: duckdb.DuckDBPyConnection) -> dict[int, tuple[str, str]]:
    return {v: (name, sha) for v, name, sha in
            con.execute("SELECT version, file_name, sha256 FROM schema_version").fetchall()}


def migrate(con: duckdb.DuckDBPyConnection, sql_dir: Path = SQL_DIR) -> list[str]:
    """Apply pending schema files in declared order (`_plan`); returns the names applied now."""
    con.execute((sql_dir / "schema" / migration_files(sql_dir)[0].name).read_text())  # schema_version itself
    done: list[str] = []
    for version, path, text, sha, action in _plan(_applied(con), sql_dir):
        if action == "record":
            con.execute("UPDATE schema_version SET sha256 = ? WHERE version = ?", [sha, version])
        if action != "apply":
            continue
        with transaction(con):
            con.execute(text)
            con.execute("INSERT OR REPLACE INTO schema_version VALUES (?, ?, ?, ?)",
                        [version, path.name, sha, utcnow()])
        done.append(path.name)
    if done:
        log.info("warehouse: applied %d schema file(s): %s", len(done), ", ".join(done))
    return done


def connect(paths: Paths | None = None, read_only: bool = False,
            database: str | Path | None = None, wait: float | None = None) -> duckdb.DuckDBPyConnection:
    """Open (and migrate, unless read-only) the warehouse of MRQA_HOME, or an explicit file.

    When another process holds the file's lock, retry for `wait` seconds (default: MRQA_LOCK_WAIT,
    set by the commands' `--wait`), then raise WarehouseLocked with a one-line message."""
    if database is None:
        paths = paths or Paths.from_env()
        database = (paths if read_only else paths.ensure()).warehouse     # reading makes no folder
    if str(database) != ":memory:":
        if read_only and not Path(database).exists():
            raise SchemaError(f"no warehouse at {database}; run `mrqa init` (an empty one) or `mrqa demo` first, "
                              "or check --home (MRQA_HOME)")
        if not read_only:
            Path(database).parent.mkdir(parents=True, exist_ok=True)
    wait = lock_wait_seconds() if wait is None else max(0.0, wait)
    deadline = time.monotonic() + wait
    while True:
        try:
            con = duckdb.connect(str(database), read_only=read_only)
            break
        except duckdb.ConnectionException as e:
            # this process holds the file for writing already (a library user's open connection, or a
            # command run in-process): DuckDB shares one database per process and file, so read through
            # it; there is no other lock to take
            if not read_only or "different configuration" not in str(e):
                raise
            con = duckdb.connect(str(database))
            read_only = True                    # no migration: the open connection has run them
            break
        except duckdb.IOException as e:
            if "lock" not in str(e).lower():
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                if _not_writable(str(e)) and Path(database).exists():
                    raise SchemaError(f"cannot open the warehouse {database} for writing ({first}): this command "
                                      "writes it; give your user write access to it and its folder, or copy the "
                                      "home elsewhere and point --home (MRQA_HOME) at the copy") from None
                raise SchemaError(f"{database} is not a usable DuckDB warehouse ({first}); move it aside or "
                                  "point --home (MRQA_HOME) at another folder") from None
            if time.monotonic() < deadline:
                time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
                continue
            holder = lock_holder(str(e))
            waited = f" after waiting {wait:g} s" if wait else ""
            raise WarehouseLocked(
                f"the warehouse {database} is locked by another process"
                + (f", {holder}" if holder else "") + f"{waited}; DuckDB allows one writer and no "
                "reader beside it: wait for that process to finish (a command that writes the warehouse "
                "takes --wait SECONDS to retry until it does), or stop it") from None
    if not read_only:
        migrate(con)
    return con


def _not_writable(message: str) -> bool:
    m = message.lower()
    return any(x in m for x in ("permission denied", "operation not permitted", "read-only file system",
                                "read only file system"))


def pending_migrations(con: duckdb.DuckDBPyConnection, sql_dir: Path = SQL_DIR) -> list[str]:
    """The schema files `migrate` would apply on this connection (read-only: nothing is written; the same
    `_plan`, so a reordered or changed file raises SchemaError here too)."""
    try:
        applied = _applied(con)
    except duckdb.CatalogException:
        return [f.name for f in migration_files(sql_dir)]
    return [path.name for _, path, _, _, action in _plan(applied, sql_dir) if action == "apply"]


def connect_reader(paths: Paths | None = None, wait: float | None = None) -> duckdb.DuckDBPyConnection:
    """A read-only connection to the warehouse of MRQA_HOME, for the commands that only read it (status,
    datasets, export): no write lock is taken, and a home the user cannot write is read. A warehouse
    with schema files still to apply (made by an older version) is migrated first, which writes it once,
    as any command that writes would; where it cannot be written, the error says so."""
    paths = paths or Paths.from_env()
    con = connect(paths, read_only=True, wait=wait)
    if pending_migrations(con):
        con.close()
        connect(paths, wait=wait).close()           # applies them
        con = connect(paths, read_only=True, wait=wait)
    return con


def upsert(con: duckdb.DuckDBPyConnection, table: str, rows: Sequence[dict],
           key: Sequence[str] | None = None) -> int:
    """Insert-or-replace rows (dicts with the same keys) into `table`; returns the row count.

    Uses the table's primary key (INSERT OR REPLACE), so loads are idempotent.
    """
    if not rows:
        return 0
    cols = list(rows[0].keys())
    placeholders = ", ".join("?" for _ in cols)
    sql = f"INSERT OR REPLACE INTO {table} ({', '.join(cols)}) VALUES ({placeholders})"
    con.executemany(sql, [[r[c] for c in cols] for r in rows])
    return len(rows)


def record_reject(con: duckdb.DuckDBPyConnection, stage: str, key: str, reason: str,
                  detail: str | None = None) -> None:
    """Record a dropped/quarantined item. Idempotent on (stage, key, reason)."""
    con.execute("INSERT OR REPLACE INTO rejects VALUES (?, ?, ?, ?, ?)",
                [stage, key, reason, (detail or "")[:2000] or None, utcnow()])


def clear_rejects(con: duckdb.DuckDBPyConnection, stage: str, keys: Iterable[str]) -> None:
    """Forget earlier rejects of `keys` at `stage` (called when an item is re-processed)."""
    keys = list(keys)
    if keys:
        con.execute("DELETE FROM rejects WHERE stage = ? AND list_contains(?, key)", [stage, keys])


def load_query(name: str, sql_dir: Path = SQL_DIR) -> str:
    """The text of sql/queries/<name>.sql (one query per file, named after what it selects)."""
    path = sql_dir / "queries" / f"{name}.sql"
    if not path.exists():
        raise FileNotFoundError(f"no query {path}")
    return path.read_text().strip().rstrip(";")


def sql_tests(sql_dir: Path = SQL_DIR) -> list[Path]:
    return sorted((sql_dir / "tests").glob("*.sql"))


def run_sql_tests(con: duckdb.DuckDBPyConnection, sql_dir: Path = SQL_DIR) -> dict[str, int]:
    """Run every data test (a query that must return zero rows); returns {name: failing_rows}."""
    return {p.stem: len(con.execute(p.read_text()).fetchall()) for p in sql_tests(sql_dir)}


def table_fingerprint(con: duckdb.DuckDBPyConnection, table: str,
                      exclude: Sequence[str] = ()) -> str:
    """A content hash of a table (order-independent), ignoring columns such as timestamps."""
    cols = [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall() if r[0] not in exclude]
    quoted = ", ".join('"' + c.replace('"', '""') + '"' for c in cols)   # e.g. rejects.at is a keyword
    rows = con.execute(f"SELECT {quoted} FROM {table} ORDER BY ALL").fetchall()
    h = hashlib.sha256()
    for r in rows:
        h.update(repr(r).encode())
    return h.hexdigest()
