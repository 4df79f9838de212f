"""`mrqa bench train`: training examples/s."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from flows.cli.choices import Scorer, Size
from flows.cli.common import fail
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
