"""`mrqa bench train`: training examples/s."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from flows.cli.train import _train_configs, _training_export

app = typer.Typer()



@app.command("train")
def bench_train_cmd(dataset: str = typer.Option(..., "--dataset", help="dataset_id to time on."),
                    scorer: str = typer.Option("transformer", "--scorer", help="Scorer to time."),
                    tiny: bool = typer.Option(False, "--tiny", help="Tiny model."),
                    size: Optional[str] = typer.Option(None, "--size", help="paper (default) | small | tiny."),
                    examples: int = typer.Option(256, "--examples", help="Train questions timed."),
                    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch."),
                    export: Optional[Path] = typer.Option(None, "--export", help="Parquet export directory.")):
    """Training examples/s: batch 32 vs batch 1 (and AMP vs no AMP on CUDA)."""
    from etl.config import Paths
    from training.bench import bench_train
    from training.data import load_qa_dataset
    mc, tc = _train_configs(scorer, "tokens", tiny, size, threads=threads)
    exp = _training_export(dataset, export)
    ds = load_qa_dataset(exp, dataset, "tokens", max_steps=tc.max_steps_per_recipe,
                         max_tokens=tc.max_tokens_per_step, min_token_freq=tc.min_token_freq,
                         lance_uri=Paths.from_env().lance)
    for line in bench_train(ds, mc, tc, examples):
        typer.echo(line)
