"""Prefect flow: competence question families (R2VQ-style) from the warehouse.

roles (the rule-based extractor over every ok recipe's steps; and the sample kitchen's planned roles
when its ground truth is given) -> generate the six families (features/competence/generate.py) ->
store them (competence_datasets / competence_questions) -> score the answer prior, question-only,
context-only baselines and the reference reader with its own and another recipe's text
(competence_metrics). Re-running replaces the rows of the same seed.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from etl.config import Paths
from etl.warehouse import connect
from flows.tasks import run_task

log = logging.getLogger(__name__)


@task(name="roles", cache_policy=NO_CACHE)
def roles_task(ground_truth: str | None) -> dict:
    from etl.roles.store import extract_roles, load_truth
    con = connect(Paths.from_env().ensure())
    try:
        out = {"rules": extract_roles(con, progress=False)}
        if ground_truth:
            out["truth"] = load_truth(con, Path(ground_truth))
        return out
    finally:
        con.close()


@task(name="competence-generate", cache_policy=NO_CACHE)
def generate_task(source: str | None, seed: int, split: str) -> dict:
    from features.competence.evaluate import evaluate
    from features.competence.generate import generate
    from features.competence.store import write, write_metrics
    con = connect(Paths.from_env().ensure())
    try:
        gen = generate(con, source, seed)
        datasets = write(con, gen, seed)
        results = evaluate(con, gen["families"], split)
        write_metrics(con, results, seed, split)
        return {"source": gen["source"], "seed": seed, "split": split, "datasets": datasets, "results": results}
    finally:
        con.close()


@flow(name="competence", log_prints=True)
def competence_flow(seed: int = 0, ground_truth: str | None = None, source: str | None = None,
                    split: str = "test", roles: bool = True) -> dict:
    """Extract the role layer (unless roles=False), generate the competence datasets and score them."""
    out = {}
    if roles:
        out["roles"] = run_task(roles_task, ground_truth)
    out.update(run_task(generate_task, source, seed, split))
    log.info("competence: %s", ", ".join(f"{d['dataset_id']}={d['n_questions']}" for d in out["datasets"]))
    return out


def ground_truth_if_planned(path: Path) -> str | None:
    """A sample kitchen ground truth that records roles (older builds do not), else None."""
    if not path.is_file():
        return None
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if any(st.get("roles") for st in rec.get("steps", [])):
                return str(path)
    return None
