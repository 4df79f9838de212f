"""Prefect flow `af-pool`: the pooled adversary over a task's AF datasets.

Export the task's AF datasets with vectors (a temporary folder) -> out-of-fold GM3C question-only
scores over all of them at once (training/af_pooled.py) -> drop the questions it solves with
probability >= tau, never below `min_kept` x the plain setting -> write back (features/datasets/
af_pooled.py). Run after `mrqa generate` of the AF settings and before `mrqa report`.
"""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from prefect import flow

from etl.config import Paths
from etl.warehouse import connect
from features.datasets.af_pooled import af_datasets, apply_drops
from features.datasets.export import export_parquet
from training.af_pooled import FOLDS, TAU, check_args, drop_plan, out_of_fold

log = logging.getLogger(__name__)


@flow(name="af-pool", log_prints=True)
def af_pool_flow(task: str = "visual_cloze", tau: float = TAU, min_kept: float = 0.0, folds: int = FOLDS,
                 seed: int = 0, size: str = "small") -> dict:
    """Filter the AF datasets of `task` (seed `seed`) with the pooled out-of-fold adversary."""
    paths = Paths.from_env().ensure()
    check_args(tau, min_kept)
    con = connect(paths)
    try:
        rows = af_datasets(con, task, seed)
        if not rows:
            raise ValueError(f"no AF datasets of {task} (seed {seed}) in the warehouse: run "
                             f"`mrqa generate --task {task} --knobs 0-1-1-af` (or --all) first")
        done = [r["dataset_id"] for r in rows if r["params"].get("af_pooled")]
        if done:
            raise ValueError(f"already filtered by the pooled adversary: {', '.join(done)}; regenerate them "
                             "(`mrqa generate`) to filter again")
        ids = [r["dataset_id"] for r in rows]
        recipe_of = {(d, q): r for d, q, r in con.execute(
            "SELECT dataset_id, qid, recipe_id FROM questions WHERE list_contains(?, dataset_id)", [ids]).fetchall()}
        with tempfile.TemporaryDirectory(prefix="mrqa-af-pool-") as tmp:
            export_parquet(con, ids, Path(tmp), with_vectors=True, lance_uri=paths.lance)
            oof = out_of_fold(Path(tmp), ids, recipe_of, folds=folds, seed=seed, size=size, lance_uri=paths.lance)
        plan = drop_plan(oof, {r["dataset_id"]: r["n_plain"] or 0 for r in rows}, tau, min_kept)
        info = {"tau": tau, "folds": folds, "seed": seed, "size": size, "min_kept": min_kept,
                "adversary": "GM3C question_only, pooled over the task's AF datasets, out of fold by recipe"}
        res = apply_drops(con, plan, oof, info)
    finally:
        con.close()
    for r in res:
        log.info("af-pool %s: dropped %d, kept %d (out-of-fold question-only %.3f -> %.3f)", r["dataset_id"],
                 r["dropped"], r["kept"], r["oof_question_only_acc"] or 0, r["oof_question_only_acc_kept"] or 0)
    return {"task": task, "datasets": res, **info}
