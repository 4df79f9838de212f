"""`mrqa`: the command line of the Meta-RecipeQA pipeline.

Each command is a thin wrapper over a flow (flows/) or a plain function (etl/, features/, training/).
Global option --home sets MRQA_HOME (default ./data).
"""
from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Meta-RecipeQA pipeline: scrape/import recipes, clean, embed, generate "
                       "de-biased benchmarks with control knobs, train and evaluate.")
ingest_app = typer.Typer(no_args_is_help=True, help="Ingest recipes into the warehouse.")
sample_app = typer.Typer(no_args_is_help=True, help="The sample kitchen: a generated corpus served "
                                                    "as a local instructables-shaped site.")
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks that print measured figures.")
app.add_typer(ingest_app, name="ingest")
app.add_typer(sample_app, name="sample")
app.add_typer(bench_app, name="bench")


def _setup(home: Optional[Path], verbose: bool = False) -> None:
    if home is not None:
        os.environ["MRQA_HOME"] = str(home)
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for noisy in ("httpx", "urllib3", "prefect", "distributed", "PIL"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@app.callback()
def _root(home: Optional[Path] = typer.Option(None, "--home", envvar="MRQA_HOME",
                                              help="Base data directory (default ./data)."),
          verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging.")):
    _setup(home, verbose)


def _fail(msg: str, code: int = 2) -> None:
    typer.secho(f"error: {msg}", fg="red", err=True)
    raise typer.Exit(code)


def _echo_json(obj) -> None:
    typer.echo(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


# ----------------------------------------------------------------------------- warehouse

@app.command("init")
def init_cmd():
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
    failures = {k: v for k, v in run_sql_tests(connect()).items() if v}
    for name, n in failures.items():
        typer.secho(f"FAIL {name}: {n} row(s)", fg="red")
    if failures:
        raise typer.Exit(1)
    typer.echo("all SQL data tests pass")


@app.command("query")
def query_cmd(sql: str = typer.Argument(..., help="SQL to run read-only against the warehouse."),
              fmt: str = typer.Option("table", "--format", help="table | json | csv")):
    """Ad hoc analyst query (read-only connection)."""
    import duckdb
    from etl.config import Paths
    from etl.warehouse import connect
    paths = Paths.from_env()
    if not paths.warehouse.exists():
        _fail(f"no warehouse at {paths.warehouse}; run `mrqa init` or `mrqa demo` first")
    con = connect(paths, read_only=True)
    try:
        rel = con.sql(sql)
    except duckdb.Error as e:
        _fail(f"query failed: {e}")
    if rel is None:
        return
    if fmt == "json":
        cols = rel.columns
        _echo_json([dict(zip(cols, r)) for r in rel.fetchall()])
    elif fmt == "csv":
        import csv
        w = csv.writer(sys.stdout)
        w.writerow(rel.columns)
        w.writerows(rel.fetchall())
    elif fmt == "table":
        rel.show(max_rows=50)
    else:
        _fail("--format must be table, json or csv")


@app.command("status")
def status_cmd():
    """Row counts of the warehouse tables and rejects by stage and reason."""
    from etl.warehouse import connect
    con = connect()
    for t in ("recipes", "steps", "step_tokens", "images", "pages", "rejects", "datasets",
              "questions", "runs"):
        typer.echo(f"{t:12s} {con.execute(f'SELECT count(*) FROM {t}').fetchone()[0]:>10,d}")
    for stage, reason, n, *_ in con.execute("SELECT * FROM v_reject_summary").fetchall():
        typer.echo(f"  reject {stage}/{reason}: {n}")


# ----------------------------------------------------------------------------- ingest (issue 2)


# ----------------------------------------------------------------------------- sample kitchen (issue 3)


# ----------------------------------------------------------------------------- cleaning (issue 4)


# ----------------------------------------------------------------------------- features (issue 5)


# ----------------------------------------------------------------------------- demo


def main() -> None:
    app()


if __name__ == "__main__":
    main()
