"""`mrqa bench ...`: benchmarks that print measured figures, one module per pipeline stage."""
from __future__ import annotations

import typer

from flows.cli.bench import corpus, datasets, embed, train

app = typer.Typer(no_args_is_help=True, help="Benchmarks that print measured figures.")
for _stage in (corpus, embed, datasets, train):
    app.add_typer(_stage.app)          # no name: the stage's commands join `mrqa bench` directly
