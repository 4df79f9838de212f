"""Analyst queries: user-written SQL against the warehouse that can only read it.

Three layers, each enough on its own for the attacks it names:

1. the warehouse is opened read-only (no INSERT/UPDATE/DELETE/CREATE/DROP on it);
2. the connection is hardened before the user's SQL is seen: `enable_external_access = false`
   (no file reads or writes other than the warehouse itself: COPY, EXPORT, ATTACH, INSTALL/LOAD,
   read_text/read_csv/read_parquet/glob all fail), `python_enable_replacements = false` (a query
   cannot scan Python variables of the calling process by name), then `lock_configuration = true`
   so SET/RESET cannot undo any of it;
3. the text must be exactly ONE statement of an allowed kind: SELECT (DuckDB classifies WITH,
   FROM-first, VALUES, DESCRIBE, SHOW, SUMMARIZE and PIVOT ... IN (...) as SELECT) or EXPLAIN
   [ANALYZE] of such a statement. Everything else is refused with a reason before it runs.

`run_analyst_query` raises `AnalystQueryRefused` for a query that is not allowed and
`AnalystQueryFailed` for an allowed query that DuckDB could not run (syntax, unknown table...);
both carry a one-line message.
"""
from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pyarrow as pa

from etl.config import Paths
from etl.warehouse import connect

# Applied in this order; lock_configuration last, so nothing after it can change the others.
HARDENING = (("enable_external_access", "false"),
             ("python_enable_replacements", "false"),
             ("lock_configuration", "true"))

ST = duckdb.StatementType
ALLOWED = {ST.SELECT, ST.EXPLAIN}
REFUSAL_REASONS = {
    ST.ATTACH: "ATTACH opens another database",
    ST.DETACH: "DETACH changes the attached databases",
    ST.COPY: "COPY reads or writes files",
    ST.COPY_DATABASE: "COPY FROM DATABASE writes a database",
    ST.EXPORT: "EXPORT DATABASE writes files",
    ST.LOAD: "INSTALL/LOAD adds extensions",
    ST.PRAGMA: "PRAGMA statements can change settings (use SELECT * FROM pragma_...() to read)",
    ST.SET: "SET/RESET/USE change the session",
    ST.VARIABLE_SET: "SET VARIABLE changes the session",
    ST.CALL: "CALL runs a table function (use SELECT * FROM f() for the read-only ones)",
    ST.TRANSACTION: "transaction control is not needed for a read-only query",
    ST.VACUUM: "VACUUM maintains the database",
    ST.MULTI: "this statement expands into several (PIVOT without an explicit IN list?)",
    ST.PREPARE: "PREPARE/EXECUTE are not supported here",
    ST.EXECUTE: "PREPARE/EXECUTE are not supported here",
}
EXPLAIN_PREFIX = re.compile(r"^\s*EXPLAIN\s+(?:ANALY[SZ]E\s+)?(?:\([^()]*\)\s*)?", re.IGNORECASE)


class AnalystQueryError(ValueError):
    """An analyst query that did not produce a result; the message is one line."""


class AnalystQueryRefused(AnalystQueryError):
    """The query is not a single read-only statement, or it tried to touch files."""


class AnalystQueryFailed(AnalystQueryError):
    """An allowed query that DuckDB could not run (syntax error, unknown table, bad cast...)."""


def _one_line(msg: str, limit: int = 300) -> str:
    line = " ".join(msg.split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def connect_analyst(paths: Paths | None = None,
                    database: str | Path | None = None) -> duckdb.DuckDBPyConnection:
    """The warehouse opened read-only with external access off and the configuration locked."""
    con = connect(paths, read_only=True, database=database)
    for name, value in HARDENING:
        con.execute(f"SET {name} = {value}")
    return con


def _statements(con: duckdb.DuckDBPyConnection, sql: str) -> list:
    try:
        return con.extract_statements(sql)
    except duckdb.Error as e:
        raise AnalystQueryFailed(_one_line(f"query failed: {e}")) from None


def _kind(stmt) -> str:
    return stmt.type.name.replace("_", " ")


def check_analyst_sql(con: duckdb.DuckDBPyConnection, sql: str) -> str:
    """The single allowed statement of `sql`; raises AnalystQueryRefused naming what is wrong."""
    stmts = _statements(con, sql)
    if not stmts:
        raise AnalystQueryRefused("refused: the query is empty (give one SELECT statement)")
    if len(stmts) > 1:
        kinds = ", ".join(_kind(s) for s in stmts)
        raise AnalystQueryRefused(f"refused: {len(stmts)} statements ({kinds}); analyst queries "
                                  "run exactly one read-only statement")
    stmt = stmts[0]
    if stmt.type not in ALLOWED:
        why = REFUSAL_REASONS.get(stmt.type, "it would change the warehouse")
        raise AnalystQueryRefused(f"refused: {_kind(stmt)} statement: {why}; analyst queries may "
                                  "only SELECT/WITH/DESCRIBE/SHOW/EXPLAIN")
    if stmt.type == ST.EXPLAIN:
        _check_explained(con, stmt.query)
    return stmt.query


def _check_explained(con: duckdb.DuckDBPyConnection, query: str) -> None:
    """EXPLAIN ANALYZE runs its statement, so the explained statement must itself be a SELECT."""
    m = EXPLAIN_PREFIX.match(query)
    inner = _statements(con, query[m.end():]) if m else []
    if len(inner) != 1 or inner[0].type != ST.SELECT:
        what = _kind(inner[0]) if len(inner) == 1 else "an unrecognised statement"
        raise AnalystQueryRefused(f"refused: EXPLAIN of {what}; only a SELECT may be explained")


ARROW_LOSSY = frozenset({"UHUGEINT", "TIME WITH TIME ZONE", "BIT"})   # types Arrow gets wrong (-1, no offset, bytes)


def run_analyst_query(con: duckdb.DuckDBPyConnection, sql: str, timeout: float | None = None,
                      render: str | None = None) -> pa.Table:
    """Check `sql` (see check_analyst_sql) and run it on a connection from connect_analyst.

    `render` "varchar" or "to_json": every column comes back as DuckDB's own text of its values (its cast
    to VARCHAR, as its CSV writer writes them, or its JSON), made inside DuckDB, so no value goes through a
    type Arrow or Python cannot hold (UHUGEINT, TIMETZ, BIT, wide DECIMAL, JSON); columns are taken by
    position, so a repeated name is kept. `table`: only the columns of those types become DuckDB's text.

    The whole result is materialised here, so run-time errors surface as AnalystQueryFailed
    (not later, while printing). A file access that slips past the statement check is still
    stopped by DuckDB and reported as AnalystQueryRefused. `timeout` (seconds; None or 0: none)
    interrupts a query that runs longer, so a runaway query does not hold the warehouse's lock.
    """
    query = check_analyst_sql(con, sql)
    timer = None
    if timeout:
        import threading
        timer = threading.Timer(timeout, con.interrupt)
        timer.daemon = True
        timer.start()
    try:
        rel = con.sql(query)
        if render is None:
            return rel.to_arrow_table()
        names = rel.columns
        if render == "table":
            casts = ["#{}::VARCHAR" if str(t) in ARROW_LOSSY else "#{}" for t in rel.types]
        else:
            casts = ["#{}::VARCHAR" if render == "varchar" else "to_json(#{})::VARCHAR"] * len(names)
        out = rel.project(", ".join(c.format(i + 1) + f" AS c{i}" for i, c in enumerate(casts))).to_arrow_table()
        return out.rename_columns(names)
    except duckdb.InterruptException:
        raise AnalystQueryFailed(f"query stopped after {timeout:g} s (--timeout); narrow it, or give it more "
                                 "time with --timeout SECONDS (0: no limit)") from None
    except duckdb.PermissionException as e:
        raise AnalystQueryRefused(_one_line(f"refused: analyst queries cannot read or write files "
                                            f"({e})")) from None
    except duckdb.Error as e:
        raise AnalystQueryFailed(_one_line(f"query failed: {e}")) from None
    finally:
        if timer is not None:       # end the thread here: it holds the connection, and a connection freed on
            timer.cancel()          # a thread that outlives the call aborts the process if Python is exiting
            timer.join()
