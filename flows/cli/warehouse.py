"""`mrqa init`, `sql-test`, `query`, `status`: create, test, query and count the warehouse."""
from __future__ import annotations

import sys

import typer

from flows.cli.choices import QueryFormat
from flows.cli.common import echo_json, fail, require_warehouse, wait_option

app = typer.Typer()


@app.command("init")
def init_cmd(wait: float = wait_option()):
    """Create MRQA_HOME and the warehouse, applying pending schema files."""
    from etl.config import Paths
    from etl.warehouse import connect
    paths = Paths.from_env().ensure()
    con = connect(paths)
    n = con.execute("SELECT count(*) FROM schema_version").fetchone()[0]
    typer.echo(f"warehouse {paths.warehouse} at schema version {n}")


@app.command("sql-test")
def sql_test_cmd():
    """Run the warehouse data tests (sql/tests/*.sql must return zero rows)."""
    from etl.warehouse import connect, run_sql_tests
    require_warehouse()
    failures = {k: v for k, v in run_sql_tests(connect()).items() if v}
    for name, n in failures.items():
        typer.secho(f"FAIL {name}: {n} row(s)", fg="red")
    if failures:
        raise typer.Exit(1)
    typer.echo("all SQL data tests pass")


MAX_TIMEOUT = 86_400 * 365           # a year: a larger timer overflows the platform's clock


@app.command("query")
def query_cmd(sql: str = typer.Argument(..., help="SQL to run read-only against the warehouse."),
              fmt: QueryFormat = typer.Option(QueryFormat.table, "--format", help="Output format."),
              timeout: float = typer.Option(300.0, "--timeout", min=0.0, metavar="SECONDS",
                                            help="Stop the query after this long (0: no limit); a running "
                                                 "query holds the warehouse's lock."),
              wait: float = wait_option()):
    """Ad hoc analyst query: one SELECT/WITH/DESCRIBE/SHOW/EXPLAIN statement on a read-only,
    locked connection without file access (etl/analyst.py); anything else is refused (rc 2)."""
    import math

    from etl.analyst import AnalystQueryError, connect_analyst
    from etl.config import Paths
    from etl.warehouse import SchemaError
    if not math.isfinite(timeout) or timeout > MAX_TIMEOUT:
        fail(f"--timeout: {timeout:g} is not a number of seconds up to {MAX_TIMEOUT:,}; 0 means no limit")
    paths = Paths.from_env()
    if not paths.warehouse.exists():
        fail(f"no warehouse at {paths.warehouse}; run `mrqa init` or `mrqa demo` first")
    try:
        con = connect_analyst(paths)
    except (AnalystQueryError, SchemaError) as e:
        fail(str(e))
    try:                                # closed here, on this thread, whatever happens (see run_analyst_query)
        _query(con, sql, fmt, timeout)
    finally:
        con.close()


def _query(con, sql: str, fmt: str, timeout: float) -> None:
    from etl.analyst import AnalystQueryError, run_analyst_query
    try:
        result = run_analyst_query(con, sql, timeout=timeout)
    except AnalystQueryError as e:
        fail(str(e))
    names = result.column_names
    repeated = list(dict.fromkeys(c for c in names if names.count(c) > 1))
    if fmt == "json" and repeated:      # a JSON object keeps one value per key: the others would be lost
        fail(f"--format json needs distinct column names; repeated: {', '.join(map(repr, repeated))} "
             "(give each column its own alias, `AS name`, or use --format csv or table)")
    if fmt == "json":
        import json
        rows = _as_text(con, result, "to_json")
        # DuckDB's own JSON of each value (structs as objects, maps as objects, blobs and intervals as its
        # text); strict JSON: a NaN or infinite double, which it writes as NaN / Infinity, is null
        echo_json([{c: None if v is None else json.loads(v, parse_constant=lambda _: None)
                    for c, v in zip(result.column_names, r)} for r in rows])
    elif fmt == "csv":
        import csv
        w = csv.writer(sys.stdout)
        w.writerow(result.column_names)
        w.writerows(_as_text(con, result, "varchar"))     # DuckDB's text of each value, as COPY ... (FORMAT csv)
    else:
        con.from_arrow(result).show(max_rows=50)


def _as_text(con, result, how: str) -> list[tuple]:
    """The rows of an Arrow result with every value as DuckDB writes it: `varchar` (its cast to text, as
    its CSV writer does) or `to_json` (its JSON text), so nested values, blobs and intervals are never
    Python reprs. Columns are taken by position (a query may repeat a name)."""
    tbl = result.rename_columns([f"c{i}" for i in range(result.num_columns)])
    rel = con.from_arrow(tbl)
    if not tbl.num_columns:
        return [() for _ in range(tbl.num_rows)]
    cast = "{}::VARCHAR" if how == "varchar" else "to_json({})::VARCHAR"
    return rel.project(", ".join(cast.format(f"c{i}") + f" AS c{i}" for i in range(tbl.num_columns))).fetchall()


@app.command("status")
def status_cmd(wait: float = wait_option()):
    """Row counts of the warehouse tables and rejects by stage and reason."""
    from etl.warehouse import connect_reader, load_query
    require_warehouse()
    con = connect_reader()
    for table, n in con.execute(load_query("table_counts")).fetchall():
        typer.echo(f"{table:12s} {n:>10,d}")
    for stage, reason, n, *_ in con.execute("SELECT * FROM v_reject_summary").fetchall():
        typer.echo(f"  reject {stage}/{reason}: {n}")
