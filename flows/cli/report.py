"""`mrqa report`: the bias report of the generated datasets (Hasty Student, the distance probe, the learned
question-only probe and the other context-free probes, as HTML + PNG plots and DuckDB bias_metrics)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from flows.cli.choices import Probe
from flows.cli.common import check_out_path, fail, require_warehouse, run_flow, wait_option

app = typer.Typer()


@app.command("report")
def report_cmd(datasets: Optional[list[str]] = typer.Option(None, "--datasets", "--dataset",
                                                            help="dataset_id to report on (repeat, or "
                                                                 "comma-separated; default: every dataset)."),
               out: Optional[Path] = typer.Option(None, "--out", help="Output folder (default "
                                                  "MRQA_HOME/reports/latest; replaced on each run)."),
               seed: int = typer.Option(0, "--seed", help="Seed of the probe's classifier."),
               model: Probe = typer.Option(Probe.logreg, "--probe", help="Distance probe classifier."),
               wait: float = wait_option()):
    """Bias report: Hasty Student, distance probe and overlap per dataset, as HTML + PNG plots,
    DuckDB bias_metrics and Prefect artifacts; prints the settings ordered by probe accuracy, and the
    background cue of the photos (same recipe, same author, other authors; DuckDB background_cue)."""
    from etl.config import Paths
    from etl.warehouse import connect
    from features.diagnostics.bias import list_datasets
    from features.diagnostics.report import check_out_dir
    from flows.report import report_flow
    ids = list(dict.fromkeys(d.strip() for item in (datasets or []) for d in item.split(",") if d.strip())) or None
    if datasets is not None and ids is None:
        fail(f"--datasets: no dataset id in {','.join(datasets)!r}; leave the option out to report on every dataset")
    if out is not None:
        out = check_out_path("--out", out)
    require_warehouse()
    paths = Paths.from_env().ensure()
    con = connect(paths)
    try:
        known = list_datasets(con, ids)
    except ValueError as e:
        fail(str(e))
    finally:
        con.close()
    if not known:
        fail("no datasets to report on; run `mrqa generate --all` first")
    try:
        check_out_dir(out or paths.reports / "latest")
        res = run_flow(report_flow, datasets=ids, out=str(out) if out else None, seed=seed, model=model.value)
    except (ValueError, LookupError) as e:
        fail(str(e))
    typer.echo(f"report written: {res['index']} ({res['n_datasets']} datasets, {len(res['images'])} plots)")
