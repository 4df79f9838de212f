"""`mrqa bench generate`, `af-chunks`, `report`, `report-home`, `order-features`: figures of generation, AF and the
bias report."""
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


@app.command("af-chunks")
def bench_af_chunks_cmd(settings: Optional[str] = typer.Option(
                            None, "--settings", help="Comma-separated TASK:SETTING pairs of AF settings to generate "
                            "(default: visual_cloze:0-1-0-af,visual_coherence:0-1-0-af,textual_cloze:0-1-0-af)."),
                        repeats: int = typer.Option(2, "--repeats", min=1, help="Timed runs per budget."),
                        seed: int = typer.Option(0, "--seed", help="Seed of the datasets (the demo's: 0)."),
                        encoder: Optional[str] = typer.Option(None, "--encoder", help="encoder_id (default: "
                                                              "the one `mrqa generate` uses).")):
    """On MRQA_HOME's vectors (the warehouse read-only; nothing registered): AF's candidate features built and
    scored in cache-sized chunks against the 64 MiB chunks of before, each AF dataset generated with both in
    turn; seconds, the medians' ratio and whether the datasets are the same byte for byte."""
    from etl.config import Paths
    from etl.warehouse import connect
    from features.datasets.af_bench import DEFAULT_SETTINGS, bench_af_chunks
    from features.datasets.generate import FAMILIES, default_encoder
    from flows.cli.common import fail
    if settings is None:
        settings = ",".join(f"{t}:{k}" for t, k in DEFAULT_SETTINGS)
    pairs = []
    for item in (s.strip() for s in settings.split(",") if s.strip()):
        task, _, knobs = item.partition(":")
        if task not in FAMILIES or not knobs.endswith("-af"):
            fail(f"--settings: {item!r} is not TASK:SETTING with an AF setting (e.g. visual_cloze:0-1-0-af); "
                 f"tasks: {', '.join(FAMILIES)}")
        pairs.append((task, knobs))
    if not pairs:
        fail("--settings names no setting")
    paths = Paths.from_env()
    if not paths.warehouse.exists():
        fail(f"no warehouse at {paths.warehouse}: run `mrqa demo` (or ingest, clean and embed) first")
    con = connect(paths, read_only=True)
    try:
        enc = encoder or default_encoder(con)
        for line in bench_af_chunks(con, paths.lance, enc, tuple(pairs), repeats, seed):
            typer.echo(line)
    except (ValueError, LookupError) as e:
        fail(str(e))
    finally:
        con.close()


@app.command("order-features")
def bench_order_features_cmd(repeats: int = typer.Option(3, "--repeats", min=1, help="Timed runs of each way.")):
    """On MRQA_HOME's textual cloze datasets (the warehouse read-only): the order figures of every choice (the
    order probe's and AF's order members') with the batch lookup against one choice at a time; the medians,
    their ratio and whether the figures are the same bit for bit."""
    from etl.config import Paths
    from etl.warehouse import connect
    from features.diagnostics.report_bench import bench_order_features
    from flows.cli.common import fail
    paths = Paths.from_env()
    if not paths.warehouse.exists():
        fail(f"no warehouse at {paths.warehouse}: run `mrqa demo` (or ingest, clean, embed and generate) first")
    con = connect(paths, read_only=True)
    try:
        for line in bench_order_features(con, repeats):
            typer.echo(line)
    except LookupError as e:
        fail(str(e))
    finally:
        con.close()
