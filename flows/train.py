"""Prefect flow: train (and test) GM3C on an exported dataset, or run a sweep. Thin over training/."""
from __future__ import annotations

from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from training.config import ModelConfig, TrainConfig


@task(name="train-gm3c", cache_policy=NO_CACHE)
def train_task(export_dir: str, dataset_id: str, model_cfg: ModelConfig, train_cfg: TrainConfig) -> dict:
    from training.train import train_run
    return train_run(Path(export_dir), dataset_id, model_cfg, train_cfg)


@flow(name="train")
def train_flow(export_dir: str, dataset_id: str, scorer: str = "transformer", text_features: str = "tokens",
               tiny: bool = False, overrides: dict | None = None) -> dict:
    """One training run; returns its metrics (without the per-epoch history)."""
    mc = (ModelConfig.tiny if tiny else ModelConfig)(scorer=scorer, text_features=text_features)
    tc = TrainConfig.tiny(**(overrides or {})) if tiny else TrainConfig(**(overrides or {}))
    m = train_task(export_dir, dataset_id, mc, tc)
    return {k: v for k, v in m.items() if k not in ("history", "model_args", "train_config")}


@flow(name="sweep")
def sweep_flow(export_dir: str, out_dir: str, scorers: list[str], tasks: list[str], knobs: list[str] | None = None,
               text_features: str = "tokens", tiny: bool = False, overrides: dict | None = None) -> dict:
    from training.sweep import sweep
    mc = ModelConfig.tiny() if tiny else ModelConfig()
    tc = TrainConfig.tiny(**(overrides or {})) if tiny else TrainConfig(**(overrides or {}))
    res = sweep(Path(export_dir), Path(out_dir), scorers, tasks, knobs, mc, tc, text_features)
    return {"out": res["out"], "summary": res["summary"], "n_runs": len(res["rows"])}
