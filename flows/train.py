"""Prefect flows: train (and test) GM3C on an exported dataset, or run a sweep; and the pipeline's
short training of chosen datasets (`short_training`) and its reading check (`reading_check`: the reader
against a learned question-only model on the AF visual cloze settings). Thin over training/."""
from __future__ import annotations

import logging
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from etl.config import Paths
from flows.params import ModelSize, ReaderTask, Scorer, TextFeatures
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
def sweep_flow(export_dir: str, out_dir: str, scorers: list[Scorer], tasks: list[ReaderTask],
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


READING_EXPORT = "reading-check"            # MRQA_HOME/exports/<this>: what `reading_check` trains on
READING_SETTINGS = tuple(f"{a}-{b}-{c}-af" for a in (0, 1) for b in (0, 1) for c in (0, 1))
# The reader: 4 layers at the tiny width (32), 3 epochs, lr 3e-3, step-text vectors with the alignment
# (docs/results.md, "A narrower reader reads more": chosen by the pooled validation accuracy, 34 s here).
# The question-only model it is measured against: the README's (2 layers, 64 wide, early stopping; 23 s
# here): at the reader's width and 3 epochs it has not converged (18-25%) and would flatter the reader.
READING_READER = {"size": "tiny", "layers": 4}
READING_QUESTION_ONLY = {"size": "small", "max_epochs": 30, "patience": 5}


def reading_check(paths: Paths, seed: int = 0, settings: tuple[str, ...] = READING_SETTINGS,
                  workers: int | None = None, datasets: tuple[str, ...] = (), record: bool = False,
                  reader: dict | None = None, question_only: dict | None = None, waiting: bool = False,
                  folds: str = "test") -> dict:
    """Does a model have to read the recipe? On the newest visual cloze datasets of `settings` (seed
    `seed`; the AF knob settings by default), or on the `datasets` named (any task: each has a reader; an
    unknown id or a split without questions is a ValueError), pooled per task: the reader
    (`reader`, default READING_READER) and a learned question-only model (`question_only`, default
    READING_QUESTION_ONLY) each trained once on the datasets' train questions together, tested on each
    dataset's test split, and the reader again with another recipe's steps. Returns {"settings": [per
    dataset: task, setting, dataset_id, n_test, reader, question_only (each with its 95% Wilson interval,
    `*_ci`), reader_other_recipe, hasty_student, lead]} or {"skipped": reason}. Writes no runs; `record`:
    each dataset's figures to reading_checks, with the content hash they were measured on (for `mrqa export
    --reading-only`). `waiting` (without
    `datasets`; the pipeline's train stage): also every dataset of the seed that `mrqa export --reading-only`
    holds back only for want of a reading check (`waiting_for_reading`), pooled with those of its task. The
    two models of a task train in `workers` processes (default: one per CPU core, at most 2), each on one
    thread, as they do in turn (the same figures, tested): on 2 cores the check takes the time of the slower
    one. `folds` "split": every split held out in turn (training/split_folds.py), so each dataset's
    figures are over all its questions (`n_test`), each scored by models that never saw its recipe, with
    each fold's own under `folds`; "test" (default): the test split only."""
    from etl.warehouse import connect
    from features.datasets.export import export_parquet
    from training.split_folds import FOLDS, combine, fold_exports

    if folds not in FOLDS:
        raise ValueError(f"folds must be one of {', '.join(FOLDS)}, not {folds!r}")
    reader, question_only = dict(reader or READING_READER), dict(question_only or READING_QUESTION_ONLY)
    con = connect(paths)
    try:
        if datasets:
            rows = con.execute("SELECT dataset_id, setting, task FROM datasets WHERE list_contains(?, dataset_id) "
                               "ORDER BY task, setting, dataset_id", [sorted(set(datasets))]).fetchall()
            unknown = sorted(set(datasets) - {d for d, _, _ in rows})
            if unknown:
                raise ValueError(f"no dataset {', '.join(unknown)} in the warehouse (`mrqa datasets` lists them)")
        else:
            rows = con.execute("SELECT dataset_id, setting, task FROM datasets WHERE task = 'visual_cloze' "
                               "AND seed = ? AND list_contains(?, setting) AND n_questions > 0 "
                               "QUALIFY row_number() OVER (PARTITION BY setting ORDER BY created_at DESC, "
                               "dataset_id) = 1 ORDER BY setting", [seed, list(settings)]).fetchall()
        ids = [d for d, _, _ in rows]
        empty = _without_a_split(con, ids)
        if waiting and not datasets and not empty:
            more = [d for d in waiting_for_reading(con, seed) if d not in ids]
            short = _without_a_split(con, more)
            if short:
                log.info("reading check: %d datasets held back for want of it have a split without questions: %s",
                         len(short), ", ".join(short))
            more = [d for d in more if d not in short]
            rows = sorted(rows + con.execute("SELECT dataset_id, setting, task FROM datasets "
                                             "WHERE list_contains(?, dataset_id)", [more]).fetchall(),
                          key=lambda r: (r[2], r[1], r[0]))
            ids = [d for d, _, _ in rows]
        if not ids or empty:
            reason = ((f"no visual cloze dataset of {', '.join(settings)} (seed {seed})"
                       + (", nor one held back for want of a reading check" if waiting else "") if settings
                       else f"no dataset of seed {seed} held back for want of a reading check") if not ids
                      else f"a split without questions in {', '.join(empty)}")
            if datasets:
                raise ValueError(f"cannot check {reason}: each dataset needs train, val and test questions")
            log.warning("reading check skipped: %s", reason)
            return {"skipped": reason}
        export_dir = paths.exports / READING_EXPORT
        export_parquet(con, ids, export_dir, with_vectors=True, lance_uri=paths.lance)
    finally:
        con.close()
    out = paths.reports / "reading-check"
    tasks = sorted({t for _, _, t in rows})
    held = fold_exports(export_dir, paths.exports / f"{READING_EXPORT}-folds") if folds == "split" else [
        ("test", export_dir)]
    keys = [(h, t, s) for h, _ in held for t in tasks for s in ("transformer", "question_only")]
    jobs = [(str(fdir), str(out / scorer if h == "test" else out / f"held-{h}" / scorer), scorer, cfg, seed, t)
            for h, fdir in held for t in tasks
            for scorer, cfg in (("transformer", reader), ("question_only", question_only))]
    res = dict(zip(keys, _in_processes(_reading_run, jobs, workers)))
    table = []
    for d, setting, t in rows:
        per_fold = [(h, _check_row(t, setting, d, res[(h, t, "transformer")][d], res[(h, t, "question_only")][d]))
                    for h, _ in held]
        row = per_fold[0][1] if folds == "test" else combine(per_fold)
        table.append(row)
        log.info("reading check %s %s: reader %.3f, question-only %.3f, reader with another recipe's steps %.3f "
                 "(%d questions)", t, setting, row["reader"], row["question_only"], row["reader_other_recipe"],
                 row["n_test"])
    done = {"settings": table, "reader": reader, "question_only": question_only, "out": str(out), "folds": folds}
    if record:
        done["recorded"] = record_reading_checks(paths, table, seed, reader, question_only, folds)
    return done


def with_ci(x, ci) -> str:
    """A share with its 95% interval in points, e.g. 76.2% [69.1, 82.3]."""
    pct = f"{100 * x:.1f}%" if isinstance(x, (int, float)) else str(x)
    return pct if not ci else f"{pct} [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def reading_table(res: dict) -> str:
    """`reading_check`'s table as `mrqa reading-check` prints it: per dataset its scored questions (the test
    split's, or all of them with every split held out in turn), the reader and question-only with their 95%
    intervals, the lead, the reader with another recipe's steps and what they cost."""
    lines = [f"{'dataset':36s} {'all q' if res.get('folds') == 'split' else 'test q':>6s} {'reader [95% CI]':>20s} "
             f"{'question-only [95% CI]':>22s} {'lead [95% CI]':>20s} {'reader, another recipe':>22s} "
             f"{'cost [95% CI]':>20s}"]
    for r in res["settings"]:
        lines.append(f"{r['dataset_id']:36s} {r['n_test']:6d} {with_ci(r['reader'], r.get('reader_ci')):>20s} "
                     f"{with_ci(r['question_only'], r.get('question_only_ci')):>22s} "
                     f"{_points(r['lead'], r.get('lead_ci')):>20s} {100 * r['reader_other_recipe']:21.1f}% "
                     f"{_points(r['reader'] - r['reader_other_recipe'], r.get('cost_ci')):>20s}")
    return "\n".join(lines)


def _points(x: float, ci) -> str:
    """A difference of accuracies in points with its 95% interval, e.g. +23.9 [15.7, 31.6]."""
    return f"{100 * x:+.1f}" + (f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else "")


def _check_row(task: str, setting: str, dataset_id: str, rd: dict, qo: dict) -> dict:
    """A dataset's reading-check figures on one scored split, from its reader's and question-only model's
    sweep rows; the lead and the cost with their 95% intervals (`difference_ci`)."""
    from training.sweep import difference_ci
    return {"task": task, "setting": setting, "dataset_id": dataset_id, "n_test": rd["n_test"],
            "reader": rd["test_acc"], "question_only": qo["test_acc"],
            # 95% Wilson intervals over the n_test questions (about 15 points wide at 100)
            "reader_ci": rd.get("test_ci"), "question_only_ci": qo.get("test_ci"),
            "reader_other_recipe": rd["foreign_context_acc"], "hasty_student": rd["hasty_student_acc"],
            "lead": round(rd["test_acc"] - qo["test_acc"], 4),
            "lead_ci": difference_ci(rd["test_acc"], qo["test_acc"], rd["n_test"]),
            "cost_ci": difference_ci(rd["test_acc"], rd["foreign_context_acc"], rd["n_test"])}


PIPELINE_CHECK_SEEDS = (0,)      # the train stage's independent GM3C check: one seed (76 s for the demo's 10)


def gm3c_check_waiting(paths: Paths, seed: int = 0, seeds: tuple[int, ...] = PIPELINE_CHECK_SEEDS,
                       size: str = "small") -> dict:
    """The independent GM3C question-only check (flows/af_pool.py `af_check_flow`, recorded in af_checks) of
    every AF dataset of seed `seed` that `mrqa export --reading-only` holds back for want of one (its
    report figures pass; what its af-pool adversaries read of the questions they kept does not count),
    per task, with the check seeds `seeds`, at model size `size` (small, or the paper's: then also those it
    admits, or holds back only for want of a reading check, on a check of another size). Returns {task:
    {dataset_id: accuracy}} (a task whose check cannot run: {"skipped": why})."""
    from etl.warehouse import connect
    from features.datasets.card import UNCHECKED_GM3C
    from flows.af_pool import af_check_flow
    con = connect(paths)        # the stage's own configuration: a read-only one is refused beside it
    try:
        held = _held_back(con, seed, UNCHECKED_GM3C, af_only=True)
        if size != "small":           # and those the gate would admit on a check of another size
            held = sorted(set(held) | set(_checked_at_another_size(con, seed, size)))
    finally:
        con.close()
    by_task: dict[str, list[str]] = {}
    for d, t in held:
        by_task.setdefault(t, []).append(d)
    out: dict[str, dict] = {}
    for t, ids in sorted(by_task.items()):
        try:
            res = af_check_flow(datasets=tuple(ids), seeds=tuple(seeds), record=True, size=size)
            out[t] = {r["dataset_id"]: r["accuracy"] for r in res["datasets"]}
        except ValueError as e:       # e.g. too few recipes for its folds
            log.warning("independent GM3C check of %s skipped: %s", t, e)
            out[t] = {"skipped": str(e)}
    return out


def pixel_check(paths: Paths, datasets: list[str] | None, seed: int = 0, side: int | None = None,
                epochs: int | None = None, workers: int | None = None, record: bool = True,
                read_only: bool = True) -> dict:
    """The pixel probe (features/diagnostics/pixel_probe.py) of `datasets` (None: every visual dataset): the
    questions and photos read on a connection closed before the models train, then with `record` the figures
    written to pixel_checks on a short write connection, so the warehouse is not held while they train.
    `read_only`: the reading connection's configuration (the pipeline's stages open theirs writable)."""
    from etl.warehouse import connect
    from features.diagnostics import pixel_probe as pp
    side, epochs = pp.SIDE if side is None else side, pp.EPOCHS if epochs is None else epochs
    con = connect(paths, read_only=read_only)
    try:
        loaded, unreadable = pp.load_questions(con, paths.home, datasets, side, epochs)
    finally:
        con.close()
    res = pp.probe(loaded, unreadable, seed=seed, side=side, epochs=epochs, workers=workers)
    if record:
        con = connect(paths)
        try:
            res["recorded"] = pp.record_pixel_checks(con, res)
        finally:
            con.close()
    return res


def pixel_check_waiting(paths: Paths, seed: int = 0, side: int | None = None) -> dict[str, float]:
    """The pixel probe (`pixel_check`, recorded in pixel_checks) of every visual dataset of seed `seed` that
    `mrqa export --reading-only` holds back for want of one (every other question-only figure heard and at or
    below the bound), with the folds' and models' seed `seed`. Returns {dataset_id: accuracy}; {} when none
    waits (on the sample kitchen's default demo the look probe holds every visual dataset back first)."""
    from etl.warehouse import connect
    from features.datasets.card import UNCHECKED_PIXEL
    con = connect(paths)        # the stage's own configuration: a read-only one is refused beside it
    try:
        held = [d for d, _ in _held_back(con, seed, UNCHECKED_PIXEL)]
    finally:
        con.close()
    if not held:
        return {}
    res = pixel_check(paths, held, seed=seed, side=side, read_only=False)
    return {r["dataset_id"]: r["accuracy"] for r in res["datasets"] if r["accuracy"] is not None}


def _without_a_split(con, ids: list[str]) -> list[str]:
    """The datasets of `ids` without questions in one of the train, val and test splits."""
    full = {d for (d,) in con.execute("SELECT dataset_id FROM questions WHERE list_contains(?, dataset_id) GROUP BY 1 "
                                      "HAVING count(DISTINCT split) FILTER (split IN ('train', 'val', 'test')) = 3",
                                      [ids]).fetchall()}
    return sorted(d for d in ids if d not in full)


def waiting_for_reading(con, seed: int) -> list[str]:
    """The datasets of seed `seed` that `mrqa export --reading-only` holds back only for want of a reading
    check (features/datasets/card.py reading_gate): every question-only figure heard and at or below the
    bound, an AF dataset keeping enough."""
    from features.datasets.card import NOT_READ_CHECKED
    return [d for d, _ in _held_back(con, seed, NOT_READ_CHECKED)]


def _checked_at_another_size(con, seed: int, size: str) -> list[tuple[str, str]]:
    """(dataset_id, task) of the AF datasets of seed `seed` that `mrqa export --reading-only` admits, or holds
    back only for want of a reading check, on a recorded GM3C check (af_checks, the same content hash) of a
    model size other than `size`."""
    from features.datasets.card import NOT_READ_CHECKED, reading_gate
    rows = con.execute("""SELECT d.dataset_id, d.task FROM datasets d
                            JOIN af_checks c ON c.dataset_id = d.dataset_id AND c.content_sha256 = d.content_sha256
                           WHERE d.seed = ? AND d.setting LIKE '%-af' AND coalesce(c.size, '') <> ?
                           ORDER BY 1""", [seed, size]).fetchall()
    why = reading_gate(con, [d for d, _ in rows])[1]
    return [(d, t) for d, t in rows if not why.get(d) or why[d].startswith(NOT_READ_CHECKED)]


def _held_back(con, seed: int, reason: str, af_only: bool = False) -> list[tuple[str, str]]:
    """(dataset_id, task) of the datasets of seed `seed` (`af_only`: the AF ones) that `mrqa export
    --reading-only` (features/datasets/card.py reading_gate) leaves out for a reason starting `reason`."""
    from features.datasets.card import reading_gate
    rows = con.execute("SELECT dataset_id, task FROM datasets WHERE seed = ? "
                       + ("AND setting LIKE '%-af' " if af_only else "") + "ORDER BY 1", [seed]).fetchall()
    why = reading_gate(con, [d for d, _ in rows])[1]
    return [(d, t) for d, t in rows if why.get(d, "").startswith(reason)]


def record_reading_checks(paths: Paths, table: list[dict], seed: int, reader: dict, question_only: dict,
                          folds: str = "test") -> int:
    """reading_checks rows for the checked datasets (`reading_check`'s table), each with the content hash
    it was measured on, the datasets of its task it was pooled with and how its questions were held out
    (`folds`); a dataset checked again replaces its row. Returns the rows written."""
    import json

    from etl.warehouse import connect, transaction, utcnow
    ids = [r["dataset_id"] for r in table]
    pooled = {t: sorted(r["dataset_id"] for r in table if r["task"] == t) for t in {r["task"] for r in table}}
    con = connect(paths)
    try:
        sha = dict(con.execute("SELECT dataset_id, content_sha256 FROM datasets WHERE list_contains(?, dataset_id)",
                               [ids]).fetchall())
        with transaction(con):
            con.executemany("INSERT OR REPLACE INTO reading_checks (dataset_id, content_sha256, task, seed, n_test, "
                            "reader_acc, question_only_acc, reader_other_recipe_acc, pooled_with, reader, "
                            "question_only, folds, computed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            [[r["dataset_id"], sha[r["dataset_id"]], r["task"], seed, r["n_test"], r["reader"],
                              r["question_only"], r["reader_other_recipe"], pooled[r["task"]],
                              json.dumps(reader, sort_keys=True), json.dumps(question_only, sort_keys=True), folds,
                              utcnow()]
                             for r in table])
    finally:
        con.close()
    log.info("reading check: recorded %d datasets in reading_checks", len(table))
    return len(table)


def _reading_run(job: tuple) -> dict:
    """One model of the reading check (a process pool's unit of work): dataset_id -> its sweep row."""
    from training.sweep import sweep
    export_dir, out, scorer, cfg, seed, task_name = job
    cfg = dict(cfg)
    mc, tc = resolve_configs(cfg.pop("size"), scorer=scorer, text_features="vectors", layers=cfg.pop("layers", None),
                             seed=seed, **cfg)
    return {r["dataset_id"]: r for r in sweep(Path(export_dir), Path(out) / task_name, [scorer], [task_name], None,
                                               mc, tc, "vectors", pooled=True)["rows"]}


def _in_processes(fn, jobs: list, workers: int | None) -> list:
    """[fn(job) for job in jobs], in up to `workers` spawned processes of one thread each (default: one
    per CPU core), or in turn in this process, on one thread too, when that is one (training/procs.py
    `in_turn`): the reader's figures move with the thread count (sums taken in another order), so both
    ways give the same bytes."""
    import os

    from training.procs import in_turn, spawn_map
    n = min(len(jobs), workers if workers is not None else (os.cpu_count() or 1))
    return in_turn(fn, jobs) if n <= 1 else spawn_map(fn, jobs, n)
