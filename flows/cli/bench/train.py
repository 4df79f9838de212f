"""`mrqa bench train`: training examples/s; `mrqa bench af-folds`: the check's models in turn or fold by fold."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from flows.cli.choices import FoldBy, Scorer, Size, VisualTask
from flows.cli.common import fail, parse_seeds
from flows.cli.train import SIZE_HELP, configs, export_for

app = typer.Typer()


@app.command("train")
def bench_train_cmd(dataset: str = typer.Option(..., "--dataset", help="dataset_id to time on."),
                    scorer: Scorer = typer.Option(Scorer.transformer, "--scorer", help="Scorer to time."),
                    tiny: bool = typer.Option(False, "--tiny", help="Tiny model."),
                    size: Optional[Size] = typer.Option(None, "--size", help=SIZE_HELP),
                    examples: int = typer.Option(256, "--examples", help="Train questions timed."),
                    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch."),
                    export: Optional[Path] = typer.Option(None, "--export", help="Parquet export directory.")):
    """Training examples/s: batch 32 vs batch 1 (and AMP vs no AMP on CUDA)."""
    from etl.config import Paths
    from training.bench import bench_train
    from training.data import DatasetError, load_qa_dataset
    if examples < 1:
        fail(f"--examples must be >= 1, got {examples}")
    mc, tc = configs(scorer.value, "tokens", tiny, size and size.value, threads=threads)
    exp = export_for(dataset, export)
    try:
        ds = load_qa_dataset(exp, dataset, "tokens", max_steps=tc.max_steps_per_recipe,
                             max_tokens=tc.max_tokens_per_step, min_token_freq=tc.min_token_freq,
                             lance_uri=Paths.from_env().lance)
    except DatasetError as e:
        fail(str(e))
    for line in bench_train(ds, mc, tc, examples):
        typer.echo(line)


@app.command("af-folds")
def bench_af_folds_cmd(task: VisualTask = typer.Option(VisualTask.visual_cloze, "--task", help="The task whose "
                                                       "AF datasets the check's models train on."),
                       seeds: str = typer.Option("0", "--seeds", help="Comma-separated check seeds (af-check's)."),
                       size: Size = typer.Option(Size.small, "--size", help="The models' size."),
                       workers: Optional[int] = typer.Option(None, "--workers", min=2, help="Processes of the "
                                                             "fold jobs (default: one per CPU core)."),
                       folds: int = typer.Option(4, "--folds", help="Folds of recipes."),
                       fold_by: FoldBy = typer.Option(FoldBy.split, "--fold-by", help="The check's folds.")):
    """af-check's GM3C models trained in turn against each fold a process's job (`--workers` above the
    seeds): wall time, ratio, and whether the logits are the same."""
    from flows.af_pool import bench_af_folds
    ss = parse_seeds(seeds)
    try:
        for line in bench_af_folds(task.value, ss, size.value, workers, folds, fold_by.value):
            typer.echo(line)
    except ValueError as e:
        fail(str(e))
