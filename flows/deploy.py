"""Prefect deployments of the pipeline, declared once in DEPLOYMENTS: `mrqa deploy --pool NAME`
registers them, and prefect.yaml (for `prefect deploy --all`) is generated from them
(`mrqa deploy --write-yaml`; tests/flows/test_deploy.py checks the committed file is that text).

Registers, against the server at PREFECT_API_URL, on a `process` work pool (created if missing):
- `mrqa-weekly-refresh`: every Monday 03:00 UTC, re-scrape stale (> 7 days) or missing/partial
  recipes, then the incremental pipeline (clean, embed new images, regenerate, report);
- `mrqa-pipeline`: the whole pipeline on demand (parameters: listing / sitemap / urls_file /
  sample_recipes, seed, train + train_datasets, sweep, force, ...);
- `mrqa-generate`, `mrqa-report`, `mrqa-sweep`: those stages on demand with their parameters.
A process worker (`prefect worker start --pool NAME`) runs them from this repository's directory,
with MRQA_HOME set to the home given at deploy time.

Every one of them writes the warehouse, which DuckDB lets one process open at a time, so each has a
deployment concurrency limit of 1 with the ENQUEUE collision strategy (a second run of the same
deployment waits for a slot instead of failing on the lock, CANCEL_NEW would drop it), and the work
pool `mrqa deploy` creates has a concurrency limit of 1, which keeps runs of different deployments
(the weekly refresh and an on-demand pipeline) from overlapping too.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from etl.config import REPO_ROOT, Paths

log = logging.getLogger(__name__)

DEFAULT_POOL = "mrqa-process"
WEEKLY_CRON = "0 3 * * 1"          # Mondays 03:00 (UTC)
COLLISION_STRATEGY = "ENQUEUE"     # prefect.client.schemas.objects.ConcurrencyLimitStrategy
POOL_CONCURRENCY = 1               # runs at a time on a pool `mrqa deploy` creates
PREFECT_YAML = REPO_ROOT / "prefect.yaml"


@dataclass(frozen=True)
class DeploymentSpec:
    name: str
    entrypoint: str                  # path/to/file.py:flow_function, relative to the repository root
    description: str
    cron: str | None = None
    parameters: dict = field(default_factory=dict)
    tags: tuple[str, ...] = ("mrqa",)
    concurrency_limit: int | None = 1        # runs of this deployment at a time (all write the warehouse)


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
            client.create_work_pool(WorkPoolCreate(name=pool, type="process",
                                                   concurrency_limit=POOL_CONCURRENCY))
            return "created"
        if wp.type != "process":
            raise ValueError(f"work pool {pool!r} exists with type {wp.type!r}; give a process pool")
        return "exists"


def register_deployments(pool: str = DEFAULT_POOL, home: Path | None = None, repo: Path = REPO_ROOT,
                         names: list[str] | None = None) -> list[dict]:
    """Register DEPLOYMENTS (or those in `names`) against PREFECT_API_URL; returns one row each."""
    from prefect import flow
    from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
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
        limit = None if spec.concurrency_limit is None else ConcurrencyLimitConfig(
            limit=spec.concurrency_limit, collision_strategy=ConcurrencyLimitStrategy(COLLISION_STRATEGY))
        dep_id = f.deploy(name=spec.name, work_pool_name=pool, cron=spec.cron, parameters=spec.parameters,
                          description=spec.description, tags=list(spec.tags), concurrency_limit=limit,
                          job_variables={"env": {"MRQA_HOME": str(home)}, "working_dir": str(repo)},
                          print_next_steps=False)
        rows.append({"deployment": f"{f.name}/{spec.name}", "id": str(dep_id), "cron": spec.cron,
                     "concurrency_limit": spec.concurrency_limit,
                     "entrypoint": spec.entrypoint, "pool": pool, "pool_state": pool_state})
        log.info("registered %s/%s on pool %s (cron %s)", f.name, spec.name, pool, spec.cron)
    return rows


YAML_HEADER = f"""\
# GENERATED from DEPLOYMENTS in flows/deploy.py by `mrqa deploy --write-yaml`: edit that list, not this
# file (tests/flows/test_deploy.py checks the two agree). The same deployments `mrqa deploy` registers.
# From the repository root, with a server running and PREFECT_API_URL set:
#   export MRQA_HOME=$PWD/data          # where the worker's flow runs read and write
#   prefect work-pool create {DEFAULT_POOL} --type process
#   prefect work-pool set-concurrency-limit {DEFAULT_POOL} {POOL_CONCURRENCY}   # one warehouse writer at a time
#   prefect deploy --all
#   prefect worker start --pool {DEFAULT_POOL}
# `{{{{ $VAR }}}}` is filled from the environment of `prefect deploy`.
name: meta-recipeqa
prefect-version: {{prefect_version}}

build: null
push: null
pull:
  - prefect.deployments.steps.set_working_directory:
      directory: "{{{{ $PWD }}}}"

definitions:
  work_pool: &process_pool
    name: {DEFAULT_POOL}
    work_queue_name: default
    job_variables:
      env:
        MRQA_HOME: "{{{{ $MRQA_HOME }}}}"

deployments:
"""


def _yaml_scalar(v) -> str:
    import json
    return json.dumps(v) if not isinstance(v, bool) else str(v).lower()


def render_prefect_yaml(prefect_version: str = "3.8.8") -> str:
    """The text of prefect.yaml for DEPLOYMENTS (YAML written by hand so the comments and the
    work-pool anchor stay; the test parses it back and compares it with the specs)."""
    import textwrap
    out = [YAML_HEADER.replace("{prefect_version}", prefect_version)]
    for i, d in enumerate(DEPLOYMENTS):
        lines = [f"  - name: {d.name}", "    description: >-"]
        lines += textwrap.wrap(d.description, 96, initial_indent="      ", subsequent_indent="      ")
        lines += [f"    entrypoint: {d.entrypoint}", f"    tags: [{', '.join(d.tags)}]"]
        if d.parameters:
            lines.append("    parameters:")
            lines += [f"      {k}: {_yaml_scalar(v)}" for k, v in d.parameters.items()]
        if d.cron:
            lines += ["    schedules:", f'      - cron: "{d.cron}"', "        timezone: UTC"]
        if d.concurrency_limit is not None:
            lines += ["    concurrency_limit:", f"      limit: {d.concurrency_limit}",
                      f"      collision_strategy: {COLLISION_STRATEGY}"]
        lines.append("    work_pool: *process_pool")
        out.append("\n".join(lines) + "\n" + ("\n" if i < len(DEPLOYMENTS) - 1 else ""))
    return "".join(out)


def write_prefect_yaml(path: Path = PREFECT_YAML) -> bool:
    """Write render_prefect_yaml() to `path`; returns whether the file changed."""
    text = render_prefect_yaml()
    if path.exists() and path.read_text() == text:
        return False
    path.write_text(text)
    return True
