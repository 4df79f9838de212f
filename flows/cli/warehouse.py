"""`mrqa init`, `sql-test`, `query`, `status`, `splits`: create, test, query and count the warehouse, and
show or choose how its splits are drawn."""
from __future__ import annotations

import json
import re
import sys
from typing import Optional

import typer

from flows.cli.choices import QueryFormat, SplitBy
from flows.cli.common import fail, require_warehouse, wait_option

app = typer.Typer()


@app.command("init")
def init_cmd(wait: float = wait_option()):
    """Create MRQA_HOME and the warehouse, applying pending schema files."""
    from etl.config import Paths
    from etl.warehouse import connect
    paths = Paths.from_env().ensure()
    con = connect(paths)
    n = con.execute("SELECT count(*) FROM schema_version").fetchall()[0][0]
    typer.echo(f"warehouse {paths.warehouse} at schema version {n}")


@app.command("sql-test")
def sql_test_cmd(wait: float = wait_option()):
    """Run the warehouse data tests (sql/tests/*.sql must return zero rows)."""
    from etl.warehouse import connect_reader, run_sql_tests
    require_warehouse()
    con = connect_reader()
    try:
        failures = {k: v for k, v in run_sql_tests(con).items() if v}
    finally:
        con.close()
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
        result = run_analyst_query(con, sql, timeout=timeout,
                                   render={"json": "to_json", "csv": "varchar", "table": "table"}.get(fmt))
    except AnalystQueryError as e:
        fail(str(e))
    names = result.column_names
    repeated = list(dict.fromkeys(c for c in names if names.count(c) > 1))
    if fmt == "json" and repeated:      # a JSON object keeps one value per key: the others would be lost
        fail(f"--format json needs distinct column names; repeated: {', '.join(map(repr, repeated))} "
             "(give each column its own alias, `AS name`, or use --format csv or table)")
    if fmt == "table":
        con.from_arrow(result).show(max_rows=50)
        return
    rows = list(zip(*(c.to_pylist() for c in result.columns)))
    sys.stdout.write(json_text(names, rows) if fmt == "json" else csv_text(names, rows))


_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|-?Infinity|-?NaN')


def json_text(names: list[str], rows: list[tuple]) -> str:
    """A JSON array of one object per row from DuckDB's JSON text of each value (to_json): structs and maps
    as objects, JSON columns as their JSON, wide decimals and huge integers exact. Strict JSON: a NaN or
    infinite double, which DuckDB writes as NaN / Infinity, is null."""
    def value(v):
        return "null" if v is None else _JSON_TOKEN.sub(lambda m: m[0] if m[0].startswith('"') else "null", v)
    lines = ["  {" + ", ".join(f"{json.dumps(n, ensure_ascii=False)}: {value(v)}" for n, v in zip(names, r)) + "}"
             for r in rows]
    return "[\n" + ",\n".join(lines) + "\n]\n" if lines else "[]\n"


def csv_text(names: list[str], rows: list[tuple]) -> str:
    """CSV as DuckDB's COPY ... (FORMAT csv) writes it: its text of each value, lines ending in LF, NULL an
    empty field and the empty string "" (so the two stay apart), quotes only where a field needs them."""
    def field(v):
        if v is None:
            return ""
        if v == "" or v != v.strip() or any(c in v for c in ',"\n\r'):
            return '"' + v.replace('"', '""') + '"'
        return v
    return "".join(",".join(field(v) for v in r) + "\n" for r in [tuple(names), *rows])


@app.command("status")
def status_cmd(wait: float = wait_option()):
    """Row counts of the warehouse tables and rejects by stage and reason."""
    from etl.warehouse import connect_reader, load_query
    require_warehouse()
    con = connect_reader()
    try:
        counts = con.execute(load_query("table_counts")).fetchall()
        rejects = con.execute("SELECT * FROM v_reject_summary").fetchall()
    finally:
        con.close()
    for table, n in counts:
        typer.echo(f"{table:12s} {n:>10,d}")
    for stage, reason, n, *_ in rejects:
        typer.echo(f"  reject {stage}/{reason}: {n}")


@app.command("splits")
def splits_cmd(by: Optional[SplitBy] = typer.Option(None, "--by", help="Draw every recipe's split again per "
                                                    "recipe or per author (every recipe of an author in one "
                                                    "split) and store the choice for later crawls; RecipeQA "
                                                    "imports keep their split. Default: only show."),
               wait: float = wait_option()):
    """How the splits are drawn, with recipes, authors and the recipes whose author has another recipe in
    their split (the pool of the author coherence settings), per split."""
    from etl.splits import set_split_unit, split_unit
    from etl.warehouse import connect, connect_reader, load_query
    require_warehouse()
    if by is not None:
        con = connect()
        try:
            res = set_split_unit(con, by.value)
        finally:
            con.close()
        typer.echo(f"splits drawn by {res['split_by']}: {res['moved']} of {res['recipes']} recipes moved")
    con = connect_reader()
    try:
        unit, rows = split_unit(con), con.execute(load_query("split_authors")).fetchall()
    finally:
        con.close()
    typer.echo(f"split_by {unit}")
    typer.echo(f"{'split':<6} {'recipes':>8} {'authors':>8} {'with an author-mate':>20}")
    for split, n, authors, mates in rows:
        typer.echo(f"{split:<6} {n:>8,d} {authors:>8,d} {mates:>20,d}")
