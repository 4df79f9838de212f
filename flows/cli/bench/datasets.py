"""`mrqa bench generate`, `bench report`, `bench report-home`: figures of dataset generation and the bias report."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

app = typer.Typer()
MIN_QUESTIONS = 20                 # features.diagnostics.bias.distance_probe's min_questions (fewer: no accuracy)


@app.command("generate")
def bench_generate_cmd(recipes: int = typer.Option(2000, "--recipes", help="Synthetic recipes (20000 = target)."),
                       dim: int = typer.Option(128, "--dim", help="Vector dimension (default encoder: 128)."),
                       k: int = typer.Option(100, "--k", help="Neighbours per image."),
                       bench_home: Optional[Path] = typer.Option(None, "--bench-home", help="Where the "
                                                                 "synthetic world lives (default "
                                                                 "MRQA_HOME/bench/generate-N)."),
                       paper_only: bool = typer.Option(False, "--paper-only", help="Time the paper's 32 "
                                                       "settings only (no knob-3 balanced variants).")):
    """Time `generate --all` per dataset and in total on a synthetic world (neighbours built first,
    not timed), and vectorised distractor selection vs a per-question Python loop."""
    from etl.config import Paths
    from features.datasets.bench import bench_generate
    home = bench_home or Paths.from_env().home / "bench" / f"generate-{recipes}-d{dim}-k{k}"
    res = bench_generate(home, recipes, dim=dim, k=k, balanced=not paper_only)
    for s in res["datasets"]:
        typer.echo(f"{s['dataset_id']:32s} {s['n_questions']:>7,d} q {s['seconds']:7.2f}s")
    for line in res["lines"]:
        typer.echo(line)


@app.command("report")
def bench_report_cmd(questions: int = typer.Option(20000, "--questions", min=MIN_QUESTIONS,
                                                 help=f"Synthetic cloze questions (at least {MIN_QUESTIONS}, "
                                                 "the probe's minimum)."),
                     repeats: int = typer.Option(3, "--repeats", min=1, help="Timing repeats (best kept).")):
    """Time the bias distances (vectorised numpy) against a per-question Python loop on random
    unit vectors, and the probe's 5-fold cross-validation."""
    from features.diagnostics.bias import bench_bias
    for line in bench_bias(questions, repeats):
        typer.echo(line)


@app.command("report-home")
def bench_report_home_cmd(workers: int = typer.Option(2, "--workers", help="Spawned processes, against "
                                                      "the run in turn (2 or more)."),
                          seed: int = typer.Option(0, "--seed", help="The probes' seed (the report's: 0).")):
    """On MRQA_HOME's datasets (read-only): the words probe, the look probe and the report's plots in turn
    against in `--workers` spawned processes, each with its ratio and whether the results are the same."""
    from etl.config import Paths
    from etl.warehouse import connect
    from features.diagnostics.report_bench import bench_report_home
    from flows.cli.common import fail
    paths = Paths.from_env()
    if not paths.warehouse.exists():
        fail(f"no warehouse at {paths.warehouse}: run `mrqa demo`, or `mrqa generate --all` and `mrqa report`, first")
    con = connect(paths, read_only=True)
    try:
        for line in bench_report_home(con, paths.home, paths.lance, workers, seed):
            typer.echo(line)
    except (ValueError, LookupError) as e:
        fail(str(e))
    finally:
        con.close()
