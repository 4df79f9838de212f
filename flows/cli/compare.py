"""`mrqa compare`: this home against another, read-only (features/datasets/compare.py): the datasets, the
measured figures and the reading benchmark, each difference named; rc 0 when they are the same, 1 when not."""
from __future__ import annotations

from contextlib import closing
from pathlib import Path

import typer

from flows.cli.common import echo_json, fail, require_warehouse, wait_option

app = typer.Typer()


@app.command("compare")
def compare_cmd(other: Path = typer.Argument(..., help="The other home (its folder, or its warehouse.duckdb)."),
                as_json: bool = typer.Option(False, "--json", help="Print the whole comparison as JSON."),
                wait: float = wait_option()):
    """Compare this home with another, read-only: the datasets (content hashes, counts, params), the measured
    figures (bias_metrics, af_checks, reading_checks, but their times) and the reading benchmark. rc 0 when
    they are the same, 1 when not (as diff)."""
    from etl.config import Paths
    from etl.warehouse import SchemaError, connect, connect_reader
    from features.datasets.compare import compare_homes, format_comparison
    require_warehouse()
    other_db = other / "warehouse.duckdb" if other.is_dir() else other
    if not other_db.is_file():
        fail(f"{other}: no warehouse there (a home folder holding warehouse.duckdb, or the file itself)")
    here = Paths.from_env().warehouse
    try:
        a = connect_reader(wait=wait)
    except SchemaError as e:               # a locked warehouse too (WarehouseLocked)
        fail(str(e))
    with closing(a):
        try:
            b = connect(database=other_db, read_only=True, wait=wait)
        except SchemaError as e:
            fail(str(e))
        with closing(b):
            res = compare_homes(a, b)
    if as_json:
        echo_json({"here": str(here), "other": str(other_db), **res})
    else:
        typer.echo(format_comparison(res, str(here), str(other_db)))
    raise typer.Exit(0 if res["same"] else 1)
