"""Prefect flow: generate Meta-RecipeQA datasets (3 visual tasks x knob settings, textual cloze,
RecipeQA-style presets) from the warehouse + feature store. Thin over features/datasets/generate.py.

In a flow run every dataset is registered by its own `register-dataset` task run (named after the
dataset, retried on an IO error: the registration is one transaction that replaces the dataset's
rows, so a retry writes the same bytes); the questions are assembled on threads exactly as
generate_datasets does without Prefect, so the datasets are the same on both paths."""
from __future__ import annotations

import logging
import time

import duckdb
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from etl.config import Paths
from etl.warehouse import connect
from features.datasets.generate import (
    GeneratedDataset,
    check_neighbour_k,
    default_encoder,
    generate_datasets,
    register_dataset,
    settings_for,
)
from features.datasets.knobs import AF_DEFAULT_ROUNDS, KnobParams, check_seed
from flows.params import K3Mode, PresetName, TaskName
from flows.tasks import in_flow_run, run_task

log = logging.getLogger(__name__)


def is_io_error(task, task_run, state) -> bool:
    """Retry condition of the dataset writes: an OS or DuckDB IO error (disk, file system); a
    refused dataset (e.g. a repeated qid) or a bug fails at once."""
    try:
        state.result()
    except (OSError, duckdb.IOException):
        return True
    except Exception:  # noqa: BLE001 - any other failure is not transient: no retry
        return False
    return False


@task(name="register-dataset", task_run_name="register-{ds.dataset_id}", cache_policy=NO_CACHE,
      retries=2, retry_delay_seconds=2, retry_condition_fn=is_io_error)
def register_dataset_task(con, ds: GeneratedDataset) -> dict:
    """Write one generated dataset (questions, datasets row, skips) in one transaction."""
    return register_dataset(con, ds)


def generate_and_register(settings: list[tuple[str, KnobParams]], seed: int, encoder_id: str | None,
                          af_pooled_drop: tuple[str, ...] = (), k_requested: bool = False,
                          twin_rule: str = "words") -> list[dict]:
    """generate_datasets on the warehouse of MRQA_HOME; each dataset's write is a task run inside a
    flow run, a plain call outside one. `af_pooled_drop`: tasks whose AF drop is left to `mrqa af-pool`.
    `twin_rule`: AF's cloze twin rule of the visual cloze AF settings (features/datasets/twins.py).
    `k_requested` (a k given, not the default): refuse one above the stored neighbour lists first."""
    paths = Paths.from_env().ensure()
    con = connect(paths)
    register = register_dataset_task if in_flow_run() else register_dataset
    try:
        encoder = encoder_id or default_encoder(con)
        settings = text_only_settings(encoder, settings)
        if k_requested:
            check_neighbour_k(con, encoder, settings)
        return generate_datasets(con, settings, seed=seed, encoder_id=encoder_id, lance_uri=paths.lance,
                                 register=register, af_pooled_drop=tuple(af_pooled_drop), twin_rule=twin_rule)
    finally:
        con.close()


def text_only_settings(encoder_id: str, settings: list[tuple[str, KnobParams]]) -> list[tuple[str, KnobParams]]:
    """`settings` as an encoder can make them: a words encoder (text only, no image vectors) makes the
    textual cloze settings only; the visual ones are left out with a warning, or refused when nothing is
    left (ValueError naming the ways out)."""
    from features.embed.words_encoder import is_words_encoder
    if not is_words_encoder(encoder_id):
        return settings
    keep = [(t, p) for t, p in settings if t == "textual_cloze"]
    if not keep:
        raise ValueError(f"encoder {encoder_id} is a words encoder (text only, no image vectors): only textual cloze "
                         "is made in its space; for the visual tasks embed photos with another encoder "
                         "(`mrqa encoder train`, or `mrqa encoder add --pretrained ...`) and pass --encoder")
    if len(keep) < len(settings):
        log.warning("generate: encoder %s is a words encoder (text only): its %d textual cloze setting(s) are made, "
                    "the %d visual one(s) left out", encoder_id, len(keep), len(settings) - len(keep))
    return keep


@task(name="question-only-probe", cache_policy=NO_CACHE)
def probe_task(dataset_ids: list[str], seed: int) -> dict[str, dict]:
    """The learned question-only probe of each new dataset (features/diagnostics/bias.py)."""
    from features.diagnostics.bias import learned_probe_rows
    paths = Paths.from_env().ensure()
    con = connect(paths)
    try:
        return learned_probe_rows(con, dataset_ids, lance_uri=paths.lance, seed=seed)
    finally:
        con.close()


def format_probe_line(s: dict) -> str:
    """One printed line: a dataset's learned-probe accuracy on its test split (95% interval) next to
    chance, or why there is none."""
    if s.get("qo_test_acc") is None:
        acc = "-" if s.get("qo_acc") is None else f"{100 * s['qo_acc']:.1f}%"
        return f"{s['dataset_id']:32s} learned question-only probe: all questions {acc}, no test-split questions"
    return (f"{s['dataset_id']:32s} learned question-only probe, test split {100 * s['qo_test_acc']:.1f}% "
            f"[{100 * s['qo_test_ci_low']:.1f}, {100 * s['qo_test_ci_high']:.1f}] n={s['qo_n_test']} "
            f"(all questions {100 * s['qo_acc']:.1f}%; chance 25.0%)")


@flow(name="generate")
def generate_flow(all_settings: bool = True, seed: int = 0, encoder_id: str | None = None,
                  task_name: TaskName | None = None, knobs: tuple[int, int, int] | str | None = None,
                  preset: PresetName | None = None, k3_mode: K3Mode | None = None, overrides: dict | None = None,
                  adversarial: bool | None = None, af_rounds: int = AF_DEFAULT_ROUNDS,
                  probe: bool = True, af_pooled_drop: tuple[str, ...] = (), twin_rule: str = "words") -> dict:
    """Generate datasets: every setting (`all_settings`), one knob setting (`task_name` + `knobs`),
    or a preset (`task_name` + `preset="recipeqa"`). Returns {datasets: [...], n_questions, seconds}.
    `adversarial`: the adversarially filtered variant of the setting (True), or with `all_settings`
    the AF variants next to every setting (None, the default, or True; False: none). `probe`: add the
    learned question-only probe (qo_* keys) to each dataset's summary and print it (about a second
    per dataset). `af_pooled_drop`: the tasks (visual cloze, coherence) whose AF datasets leave the drop
    of what stays predictable to the pooled adversary (`mrqa af-pool`, which must follow). `twin_rule`: AF's
    cloze twin rule of the visual cloze AF settings (words, or items by the sample kitchen's ground truth)."""
    check_seed(seed)                       # before anything is generated or registered
    settings = settings_for(task_name, knobs, preset, k3_mode, overrides,
                            all_settings=all_settings and not (task_name or knobs or preset),
                            adversarial=adversarial, af_rounds=af_rounds)
    t0 = time.perf_counter()
    summaries = generate_and_register(settings, seed, encoder_id, af_pooled_drop,
                                      k_requested="k" in (overrides or {}), twin_rule=twin_rule)
    # wall time of the whole task (datasets are assembled on several threads, so the per-dataset
    # seconds overlap and their sum is more than this); the probe below is not counted
    seconds = round(time.perf_counter() - t0, 3)
    if probe and summaries:
        rows = run_task(probe_task, [x["dataset_id"] for x in summaries], seed)
        for x in summaries:
            x.update(rows.get(x["dataset_id"], {}))
            print(format_probe_line(x))
    return {"datasets": summaries, "n_datasets": len(summaries),
            "n_questions": sum(s["n_questions"] for s in summaries),
            "seconds": seconds}
