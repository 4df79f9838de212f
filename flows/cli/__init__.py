"""`mrqa`: the command line of the Meta-RecipeQA pipeline.

Each command is a thin wrapper over a flow (flows/) or a library function (etl/, features/, training/);
heavy libraries are imported inside the commands so `mrqa --help` stays fast. The commands live in one
module per stage:

    warehouse    init, sql-test, query, status
    ingest       parse, ingest instructables|recipeqa, sample build|serve|cue
    clean        clean, tokenize, vocab-report
    embed        encoder train|add|list|eval, embed
    datasets     generate, datasets, export
    report       report (the bias report)
    compare      compare (two homes: datasets, figures, reading benchmark)
    adversarial  af-report, af-pool, af-check, reading-check
    train        train, evaluate, baselines, sweep
    score        score (any model's predictions, judged as the reading benchmark judges its readers),
                 look-probe, pixel-probe, words-probe, order-probe
    orchestrate  demo, pipeline, deploy
    competence   roles extract|truth|eval, competence generate|evaluate|export
    bench/       bench ... (one module per stage)

choices.py holds the fixed value sets of options; common.py the error exit and output helpers.

Global options: --home sets MRQA_HOME (default ./data); --prefect / --no-prefect choose how a stage
command (ingest, clean, embed, generate, report) runs its flow: without either, as a plain function
call unless PREFECT_API_URL is set (common.run_flow). demo, pipeline and deploy are always Prefect.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer

from flows.cli import (
    adversarial,
    bench,
    clean,
    compare,
    competence,
    datasets,
    embed,
    ingest,
    orchestrate,
    redraw,
    report,
    score,
    share,
    train,
    warehouse,
)
from flows.cli.common import PREFECT_ENV, OneLineErrors, fail, package_version, setup_logging

app = typer.Typer(cls=OneLineErrors, add_completion=True, no_args_is_help=True,
                  help="Meta-RecipeQA pipeline: scrape/import recipes, clean, embed, generate "
                       "de-biased benchmarks with control knobs, train and evaluate.")
for _stage in (warehouse, ingest, clean, embed, datasets, report, compare, adversarial, redraw, train, score,
               orchestrate):
    app.add_typer(_stage.app)          # no name: the stage's commands join `mrqa` directly
share.register(embed.encoder_app)      # mrqa encoder export / import
app.add_typer(bench.app, name="bench")
app.add_typer(competence.roles_app, name="roles")
app.add_typer(competence.app, name="competence")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"mrqa {package_version()}")
        raise typer.Exit()


@app.callback()
def _root(home: Optional[Path] = typer.Option(None, "--home", envvar="MRQA_HOME",
                                              help="Base data directory (default ./data)."),
          verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging."),
          prefect: Optional[bool] = typer.Option(None, "--prefect/--no-prefect", help="Run stage commands "
                                                 "(ingest, clean, embed, generate, report) as Prefect flow runs, "
                                                 "or as plain calls (no temporary Prefect server, same results). "
                                                 "Default: Prefect only when PREFECT_API_URL is set. demo, "
                                                 "pipeline and deploy always use Prefect."),
          version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="Print the installed version and exit.")):
    if home is not None:
        _check_home(home)
    setup_logging(home, verbose)
    if prefect is not None:
        os.environ[PREFECT_ENV] = "1" if prefect else "0"


def _check_home(home: Path) -> None:
    """--home / MRQA_HOME must name a folder (or one to create): not empty, not a file, not inside one."""
    if not str(home).strip():
        fail("--home (MRQA_HOME) is empty: give the data folder, e.g. --home ./data")
    from etl.config import file_in_path
    blocked = file_in_path(Path(home).expanduser())
    if blocked is not None:
        fail(f"--home (MRQA_HOME): {blocked} is a file, not a folder")


def main() -> None:
    """Entry point of the `mrqa` script: SIGTERM/SIGINT end its child processes too (flows/signals.py);
    glibc keeps freed large blocks for reuse (flows/malloc.py); the environment variables it reads are checked
    before any work starts."""
    from features.diagnostics.tree_probe import tree_threads, tree_workers
    from flows.malloc import tune_malloc
    from flows.signals import stop_children_on_signals
    try:
        tune_malloc()
        tree_threads(), tree_workers()         # a bad MRQA_TREE_* value stops here, not after minutes of work
    except ValueError as e:
        sys.stderr.write(f"error: {e}\n")      # as `fail` writes a refused value
        raise SystemExit(2) from None
    stop_children_on_signals()
    app()


if __name__ == "__main__":
    main()
