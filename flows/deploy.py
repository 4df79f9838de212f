"""Prefect deployments of the pipeline (`mrqa deploy --pool NAME`; prefect.yaml says the same).

Registers, against the server at PREFECT_API_URL, on a `process` work pool (created if missing):
- `mrqa-weekly-refresh`: every Monday 03:00 UTC, re-scrape stale (> 7 days) or missing/partial
  recipes, then the incremental pipeline (clean, embed new images, regenerate, report);
- `mrqa-pipeline`: the whole pipeline on demand (parameters: listing / sitemap / urls_file /
  sample_recipes, seed, train + train_datasets, sweep, force, ...);
- `mrqa-generate`, `mrqa-report`, `mrqa-sweep`: those stages on demand with their parameters.
A process worker (`prefect worker start --pool NAME`) runs them from this repository's directory,
with MRQA_HOME set to the home given at deploy time.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from etl.config import REPO_ROOT, Paths

log = logging.getLogger(__name__)

DEFAULT_POOL = "mrqa-process"
WEEKLY_CRON = "0 3 * * 1"          # Mondays 03:00 (UTC)


@dataclass(frozen=True)
class DeploymentSpec:
    name: str
    entrypoint: str                  # path/to/file.py:flow_function, relative to the repository root
    description: str
    cron: str | None = None
    parameters: dict = field(default_factory=dict)
    tags: tuple[str, ...] = ("mrqa",)


DEPLOYMENTS: tuple[DeploymentSpec, ...] = (
    DeploymentSpec("mrqa-weekly-refresh", "flows/pipeline.py:pipeline_flow",
                   "Weekly: re-scrape stale or missing recipes, then clean, embed new images, "
                   "regenerate every dataset and rebuild the bias report (unchanged stages are skipped).",
                   cron=WEEKLY_CRON, parameters={"rescrape": True, "stale_days": 7},
                   tags=("mrqa", "scheduled")),
    DeploymentSpec("mrqa-pipeline", "flows/pipeline.py:pipeline_flow",
                   "The whole pipeline on demand: ingest (listing / sitemap / urls_file / sample_recipes) "
                   "-> clean -> embed -> generate -> report (-> train on train_datasets, sweep)."),
    DeploymentSpec("mrqa-generate", "flows/generate.py:generate_flow",
                   "Generate datasets on demand: every setting (all_settings), or task_name + knobs / "
                   "preset."),
    DeploymentSpec("mrqa-report", "flows/report.py:report_flow",
                   "Rebuild the bias report on demand (datasets: all, or the given ids)."),
    DeploymentSpec("mrqa-sweep", "flows/train.py:sweep_flow",
                   "Training sweep on demand over an export (export_dir, out_dir, scorers, tasks)."),
)


def ensure_process_pool(pool: str) -> str:
    """Create the `process` work pool unless it exists; returns 'created' or 'exists'."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound
    with get_client(sync_client=True) as client:
        try:
            wp = client.read_work_pool(pool)
        except ObjectNotFound:
            client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
            return "created"
        if wp.type != "process":
            raise ValueError(f"work pool {pool!r} exists with type {wp.type!r}; give a process pool")
        return "exists"


def register_deployments(pool: str = DEFAULT_POOL, home: Path | None = None, repo: Path = REPO_ROOT,
                         names: list[str] | None = None) -> list[dict]:
    """Register DEPLOYMENTS (or those in `names`) against PREFECT_API_URL; returns one row each."""
    from prefect import flow
    from prefect.settings import PREFECT_API_URL
    if not PREFECT_API_URL.value():
        raise RuntimeError("PREFECT_API_URL is not set: start a server (`prefect server start`) and "
                           "export PREFECT_API_URL=http://127.0.0.1:4200/api")
    specs = [d for d in DEPLOYMENTS if names is None or d.name in names]
    unknown = set(names or ()) - {d.name for d in DEPLOYMENTS}
    if unknown:
        raise ValueError(f"unknown deployment(s) {sorted(unknown)}; known: {[d.name for d in DEPLOYMENTS]}")
    home = Path(home) if home else Paths.from_env().home
    pool_state = ensure_process_pool(pool)
    rows = []
    for spec in specs:
        f = flow.from_source(source=str(repo), entrypoint=spec.entrypoint)
        dep_id = f.deploy(name=spec.name, work_pool_name=pool, cron=spec.cron, parameters=spec.parameters,
                          description=spec.description, tags=list(spec.tags),
                          job_variables={"env": {"MRQA_HOME": str(home)}, "working_dir": str(repo)},
                          print_next_steps=False)
        rows.append({"deployment": f"{f.name}/{spec.name}", "id": str(dep_id), "cron": spec.cron,
                     "entrypoint": spec.entrypoint, "pool": pool, "pool_state": pool_state})
        log.info("registered %s/%s on pool %s (cron %s)", f.name, spec.name, pool, spec.cron)
    return rows
