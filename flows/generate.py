"""Prefect flow: generate Meta-RecipeQA datasets (3 visual tasks x knob settings, textual cloze,
RecipeQA-style presets) from the warehouse + feature store. Thin over features/datasets/generate.py."""
from __future__ import annotations

import logging
import time

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from etl.config import Paths
from etl.warehouse import connect
from features.datasets.generate import generate_datasets, settings_for
from features.datasets.knobs import AF_DEFAULT_ROUNDS, KnobParams

log = logging.getLogger(__name__)


@task(name="generate-datasets", cache_policy=NO_CACHE)
def generate_task(settings: list[tuple[str, KnobParams]], seed: int, encoder_id: str | None) -> list[dict]:
    paths = Paths.from_env().ensure()
    con = connect(paths)
    try:
        return generate_datasets(con, settings, seed=seed, encoder_id=encoder_id, lance_uri=paths.lance)
    finally:
        con.close()


@flow(name="generate")
def generate_flow(all_settings: bool = True, seed: int = 0, encoder_id: str | None = None,
                  task_name: str | None = None, knobs: tuple[int, int, int] | None = None,
                  preset: str | None = None, k3_mode: str = "coin", overrides: dict | None = None,
                  adversarial: bool | None = None, af_rounds: int = AF_DEFAULT_ROUNDS) -> dict:
    """Generate datasets: every setting (`all_settings`), one knob setting (`task_name` + `knobs`),
    or a preset (`task_name` + `preset="recipeqa"`). Returns {datasets: [...], n_questions, seconds}.
    `adversarial`: the adversarially filtered variant of the setting (True), or with `all_settings`
    the AF variants next to every setting (None, the default, or True; False: none)."""
    settings = settings_for(task_name, knobs, preset, k3_mode, overrides,
                            all_settings=all_settings and not (task_name or knobs or preset),
                            adversarial=adversarial, af_rounds=af_rounds)
    t0 = time.perf_counter()
    summaries = generate_task(settings, seed, encoder_id)
    # wall time of the whole task (datasets are assembled on several threads, so the per-dataset
    # seconds overlap and their sum is more than this)
    return {"datasets": summaries, "n_datasets": len(summaries),
            "n_questions": sum(s["n_questions"] for s in summaries),
            "seconds": round(time.perf_counter() - t0, 3)}
