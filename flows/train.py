"""Prefect flow: train (and test) GM3C on an exported dataset, or run a sweep. Thin over training/."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from training.config import ModelConfig, TrainConfig, configs_for


@task(name="train-gm3c", cache_policy=NO_CACHE)
def train_task(export_dir: str, dataset_id: str, model_cfg: ModelConfig, train_cfg: TrainConfig) -> dict:
    from training.train import train_run
    return train_run(Path(export_dir), dataset_id, model_cfg, train_cfg)


@flow(name="train")
def train_flow(export_dir: str, dataset_id: str, scorer: str = "transformer", text_features: str = "tokens",
               tiny: bool = False, overrides: dict | None = None, size: str | None = None) -> dict:
    """One training run; returns its metrics (without the per-epoch history)."""
    mc, tc = configs_for(size or ("tiny" if tiny else "paper"), scorer=scorer, text_features=text_features)
    tc = replace(tc, **(overrides or {}))
    m = train_task(export_dir, dataset_id, mc, tc)
    return {k: v for k, v in m.items() if k not in ("history", "model_args", "train_config")}


@flow(name="sweep")
def sweep_flow(export_dir: str, out_dir: str, scorers: list[str], tasks: list[str], knobs: list[str] | None = None,
               text_features: str = "tokens", tiny: bool = False, overrides: dict | None = None,
               size: str | None = None) -> dict:
    """scorers x knob settings x tasks (training.sweep); returns the summary table."""
    from training.sweep import sweep
    mc, tc = configs_for(size or ("tiny" if tiny else "paper"))
    tc = replace(tc, **(overrides or {}))
    res = sweep(Path(export_dir), Path(out_dir), scorers, tasks, knobs, mc, tc, text_features)
    return {"out": res["out"], "summary": res["summary"], "n_runs": len(res["rows"])}


def demo_training(export_dir: str | Path, dataset_ids: list[str], seed: int = 0, max_epochs: int = 3,
                  prefixes: tuple[str, ...] = ("vc-recipeqa-", "vc-k011-"), scorer: str = "transformer") -> list[dict]:
    """The demo's short training run (plain function, no subflow): the tiny `scorer` for
    `max_epochs` on the visual-cloze preset and knob setting 0-1-1 of `dataset_ids`; one row per
    dataset with test/val accuracy next to Hasty Student (or `skipped` with the reason)."""
    import logging
    from dataclasses import replace
    from training.config import configs_for
    from training.train import train_run
    log = logging.getLogger(__name__)
    mc, tc = configs_for("tiny", scorer=scorer)
    tc = replace(tc, max_epochs=max_epochs, seed=seed)
    rows = []
    for prefix in prefixes:
        for dataset_id in sorted(i for i in dataset_ids if i.startswith(prefix)):
            try:
                m = train_run(Path(export_dir), dataset_id, mc, tc)
            except ValueError as e:          # e.g. a tiny sample without val questions
                log.warning("demo training skipped on %s: %s", dataset_id, e)
                rows.append({"dataset_id": dataset_id, "skipped": str(e)})
                continue
            rows.append({"dataset_id": dataset_id, "scorer": f"{scorer} (tiny)",
                         **{k: m.get(k) for k in ("test_acc", "val_acc", "hasty_student_acc", "chance",
                                                   "faithfulness", "context_ablation", "run_id", "train_seconds",
                                                   "examples_per_s")}})
    return rows
