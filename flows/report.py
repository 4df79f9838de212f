"""Prefect flow: the benchmark bias report. Thin over features/diagnostics/report.py.

Computes Hasty Student / distance probe / learned question-only probe / overlap for every dataset (or
the given ones), writes DuckDB `bias_metrics` and a static HTML report (default
MRQA_HOME/reports/latest), and publishes the per-task tables and the ordering of settings by
learned-probe accuracy as Prefect artifacts.
"""
from __future__ import annotations

import logging
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from etl.config import Paths
from etl.warehouse import connect
from features.diagnostics.background_cue import format_cue
from features.diagnostics.report import build_report, format_ordering
from flows.params import ProbeModel
from flows.tasks import in_flow_run, run_task

log = logging.getLogger(__name__)
DEFAULT_NAME = "latest"


def default_out(paths: Paths) -> Path:
    return paths.reports / DEFAULT_NAME


@task(name="bias-report", cache_policy=NO_CACHE)
def report_task(datasets: list[str] | None, out: str, seed: int, model: str) -> dict:
    paths = Paths.from_env().ensure()
    con = connect(paths)
    try:
        return build_report(con, Path(out), datasets, lance_uri=paths.lance, seed=seed, model=model)
    finally:
        con.close()


def publish_artifacts(res: dict) -> None:
    """One table artifact per task + a markdown summary with the ordering by learned-probe accuracy."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact
    for task_name, info in res["tasks"].items():
        create_table_artifact(table=info["table"], key=f"bias-{task_name.replace('_', '-')}",
                              description=f"Bias diagnostics of the {task_name} datasets")
    md = [f"# Bias report\n\nHTML: `{res['index']}` ({res['n_datasets']} datasets)\n",
          ("Settings by learned question-only probe accuracy (or the distance probe's where higher), "
           "most biased first:\n"), "```",
          *format_ordering(res["tasks"]), "```"]
    create_markdown_artifact(markdown="\n".join(md), key="bias-report-summary",
                             description="Ordering of settings by learned-probe accuracy")


@flow(name="report", log_prints=True)
def report_flow(datasets: list[str] | None = None, out: str | None = None, seed: int = 0,
                model: ProbeModel = "logreg") -> dict:
    """Build the bias report; returns {out, index, images, n_datasets, tasks}."""
    out = out or str(default_out(Paths.from_env().ensure()))
    res = run_task(report_task, datasets, out, seed, model)
    if in_flow_run():           # artifacts belong to a flow run; the direct path has none to attach to
        publish_artifacts(res)
    for line in format_ordering(res["tasks"]) + format_cue(res.get("background_cue") or []):
        print(line)
    print(f"report: {res['index']}")
    return res
