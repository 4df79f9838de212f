"""Prefect flows: train (and test) GM3C on an exported dataset, or run a sweep; and the pipeline's
short training of chosen datasets (`short_training`). Thin over training/."""
from __future__ import annotations

import logging
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from etl.config import Paths
from flows.params import ModelSize, Scorer, TextFeatures, VisualTask
from flows.tasks import run_task
from training.config import ModelConfig, TrainConfig, resolve_configs

log = logging.getLogger(__name__)
SHORT_TRAIN_EXPORT = "short-train"          # MRQA_HOME/exports/<this>: what `short_training` trains on


@task(name="train-gm3c", cache_policy=NO_CACHE)
def train_task(export_dir: str, dataset_id: str, model_cfg: ModelConfig, train_cfg: TrainConfig) -> dict:
    from training.train import train_run
    return train_run(Path(export_dir), dataset_id, model_cfg, train_cfg)


@flow(name="train")
def train_flow(export_dir: str, dataset_id: str, scorer: Scorer = "transformer",
               text_features: TextFeatures = "tokens", tiny: bool = False, overrides: dict | None = None,
               size: ModelSize | None = None) -> dict:
    """One training run; returns its metrics (without the per-epoch history)."""
    mc, tc = resolve_configs(size, tiny=tiny, scorer=scorer, text_features=text_features, **(overrides or {}))
    m = run_task(train_task, export_dir, dataset_id, mc, tc)
    return {k: v for k, v in m.items() if k not in ("history", "model_args", "train_config")}


@flow(name="sweep")
def sweep_flow(export_dir: str, out_dir: str, scorers: list[Scorer], tasks: list[VisualTask],
               knobs: list[str] | None = None, text_features: TextFeatures = "tokens", tiny: bool = False,
               overrides: dict | None = None, size: ModelSize | None = None) -> dict:
    """scorers x knob settings x tasks (training.sweep); returns the summary table."""
    from training.sweep import sweep
    mc, tc = resolve_configs(size, tiny=tiny, text_features=text_features, **(overrides or {}))
    res = sweep(Path(export_dir), Path(out_dir), scorers, tasks, knobs, mc, tc, text_features)
    return {"out": res["out"], "summary": res["summary"], "n_runs": len(res["rows"])}


def dataset_ids_matching(con, datasets: list[str]) -> tuple[list[str], list[str]]:
    """(ids of the warehouse's `datasets` equal to or starting with one of `datasets`, sorted;
    the entries of `datasets` that match none)."""
    known = [r[0] for r in con.execute("SELECT dataset_id FROM datasets ORDER BY dataset_id").fetchall()]
    matched = {d: [i for i in known if i == d or i.startswith(d)] for d in datasets}
    return sorted({i for ids in matched.values() for i in ids}), [d for d, ids in matched.items() if not ids]


def short_training(paths: Paths, datasets: list[str], seed: int = 0, max_epochs: int = 3,
                   scorer: str = "transformer") -> list[dict]:
    """Train the tiny `scorer` for `max_epochs` on each generated dataset whose id is, or starts
    with, one of `datasets` (exported with vectors to MRQA_HOME/exports/short-train); one row per
    dataset with test/val accuracy next to Hasty Student, or `skipped` with the reason (a split
    without questions, the trainer refusing the data, or an entry of `datasets` matching nothing)."""
    from etl.warehouse import connect
    from features.datasets.export import export_parquet

    rows: list[dict] = []
    con = connect(paths)
    try:
        ids, unmatched = dataset_ids_matching(con, list(datasets))
        for d in unmatched:
            log.warning("short training: no generated dataset matches %r", d)
            rows.append({"dataset_id": d, "skipped": "no generated dataset matches"})
        splits = {(ds, sp): n for ds, sp, n in con.execute(
            "SELECT dataset_id, split, count(*) FROM questions WHERE list_contains(?, dataset_id) GROUP BY ALL",
            [ids]).fetchall()}
        trainable = []
        for ds in ids:
            empty = [sp for sp in ("train", "val", "test") if not splits.get((ds, sp))]
            if empty:
                reason = f"no {'/'.join(empty)} questions"
                log.warning("short training skipped on %s: %s", ds, reason)
                rows.append({"dataset_id": ds, "skipped": reason})
            else:
                trainable.append(ds)
        export_dir = paths.exports / SHORT_TRAIN_EXPORT
        if trainable:
            export_parquet(con, trainable, export_dir, with_vectors=True, lance_uri=paths.lance)
    finally:
        con.close()
    for dataset_id in trainable:
        try:
            m = train_flow(str(export_dir), dataset_id, scorer=scorer, tiny=True,
                           overrides={"max_epochs": max_epochs, "seed": seed})
        except ValueError as e:          # the trainer's own refusal (e.g. no usable examples)
            log.warning("short training skipped on %s: %s", dataset_id, e)
            rows.append({"dataset_id": dataset_id, "skipped": str(e)})
            continue
        rows.append({"dataset_id": dataset_id, "scorer": f"{scorer} (tiny)",
                     **{k: m.get(k) for k in ("test_acc", "val_acc", "hasty_student_acc",
                                               "faithfulness", "context_ablation", "run_id")}})
    return sorted(rows, key=lambda r: r["dataset_id"])
