"""A nonlinear question-only probe: gradient-boosted trees on the choice-set cues.

The linear probe (question_only.py) gives each feature of a choice one weight. Its set-level features
(`question_only.set_features`: the choice's distance to the question, its spread among the choices, its
similarity to each shown item, each as a value, gaps and a rank) carry cues a linear model cannot
combine: "the answer is the second most central choice when the gap to the centre is small" is one
split of a tree and no weight of a logit. A sceptical reviewer tries a tree next, so this module is
that model:

- `tree_features`: the 17 set-level features of each choice and the same minus the question's mean
  over its choices (34), from the probe's own features (`question_only.task_features`); no raw vector
  dimensions (with them the trees fit noise: measured lower on the demo's AF datasets). Ordering has
  only the distance part (its candidate orders' consecutive cosines): there the trees see the Hasty
  Student's cue and no direction, which the linear probe and GM3C read.
- `TreeModel`: sklearn HistGradientBoostingClassifier, one binary "is the answer" model over every
  choice, the choice with the highest log-odds picked; early stopping on a seeded 15% of the rows;
  one OpenMP thread by default (`MRQA_TREE_THREADS=N` for more): sklearn splits its histograms by feature,
  so the scores are the same whatever the threads (tested). Alone, 2 threads fit in 0.6x the time of one;
  inside `make demo`'s generate stage the 3 fold splits took 99 s on 2 threads against about 60 s on one.
  The folds' fits (of every seed) run instead on `tree_workers()` spawned processes of one thread each
  (`MRQA_TREE_WORKERS`; the same scores whatever the workers, tested).
- `tree_scores`: every question scored by a model that never saw its recipe (folds of recipes), or
  with `fold_by="split"` the val and the test split held out whole (their photos are never another
  fold's distractors: the pooled adversary's and af-check's folds).
- `tree_probe`: the probe on one dataset's resolved questions, with 95% intervals, like the linear one.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from features.datasets.knobs import setting_kind
from features.diagnostics.question_only import N_SET_FEATURES, QuestionOnlyResult, accuracy_interval, recipe_folds

TREE_FOLDS = 4
TREE_PARAMS = {"max_iter": 300, "learning_rate": 0.05, "max_leaf_nodes": 15, "early_stopping": True,
               "validation_fraction": 0.15, "n_iter_no_change": 10}
FOLD_BY = ("recipe", "split")


def _env_count(name: str, default: int) -> int:
    """A positive whole number from the environment variable `name`, or `default` when it is unset or
    empty; any other value raises a ValueError that names the variable and what it allows."""
    import os
    env = os.environ.get(name, "").strip()
    if not env:
        return default
    if not env.isdigit() or int(env) < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {env!r} (unset it for the default, {default})")
    return int(env)


def tree_threads() -> int:
    """OpenMP threads for the trees: 1, or `MRQA_TREE_THREADS`."""
    return _env_count("MRQA_TREE_THREADS", 1)


def tree_features(X: np.ndarray) -> np.ndarray:
    """(n, c, f) probe features (`task_features`, the set-level ones last) -> (n, c, 2 x 17): the set-level
    features and the same less their mean over the question's choices."""
    S = np.asarray(X, dtype=np.float32)[..., -N_SET_FEATURES:]
    return np.concatenate([S, S - S.mean(axis=1, keepdims=True)], axis=-1).astype(np.float32)


@dataclass
class TreeModel:
    """Gradient-boosted trees scoring each choice alone (the same model for every slot)."""
    seed: int = 0

    def fit(self, F: np.ndarray, y: np.ndarray) -> TreeModel:
        """F (n, c, f) choice features, y (n,) the answer's index."""
        from sklearn.ensemble import HistGradientBoostingClassifier
        from threadpoolctl import threadpool_limits
        n, c, f = F.shape
        if n == 0:
            raise ValueError("TreeModel.fit needs at least one question")
        target = np.zeros((n, c), dtype=np.int64)
        target[np.arange(n), np.asarray(y, dtype=np.int64)] = 1
        self.model = HistGradientBoostingClassifier(random_state=self.seed, **TREE_PARAMS)
        with threadpool_limits(tree_threads(), user_api="openmp"):
            self.model.fit(F.reshape(-1, f), target.reshape(-1))
        return self

    def scores(self, F: np.ndarray) -> np.ndarray:
        """(n, c) log-odds that each choice is the answer."""
        from threadpoolctl import threadpool_limits
        n, c, f = F.shape
        if n == 0:
            return np.zeros((0, c))
        with threadpool_limits(tree_threads(), user_api="openmp"):
            return np.round(self.model.decision_function(F.reshape(-1, f)).reshape(n, c), 6)


def folds_for(groups, splits=None, n_folds: int = TREE_FOLDS, seed: int = 0, fold_by: str = "recipe") -> np.ndarray:
    """Fold of every question: `recipe`, `n_folds` folds of recipes; `split`, the val and the test
    split each a fold of its own and the other splits' recipes in `n_folds` folds."""
    if fold_by not in FOLD_BY:
        raise ValueError(f"fold_by must be one of {', '.join(FOLD_BY)}, got {fold_by!r}")
    fold = recipe_folds(groups, n_folds, seed)
    if fold_by == "split" and splits is not None:
        s = np.asarray([str(x) for x in splits], dtype=object)
        fold = np.where(s == "val", n_folds, np.where(s == "test", n_folds + 1, fold))
    return fold


POOL_MIN_QUESTIONS = 20_000                 # questions fitted on, over all the jobs, before processes pay


def tree_workers() -> int:
    """Processes for the trees' fits: `MRQA_TREE_WORKERS`, else the CPU count, at most 4. Each fit runs on
    one OpenMP thread in its own process, so the scores are the same whatever the workers."""
    import os
    return _env_count("MRQA_TREE_WORKERS", max(1, min(4, os.cpu_count() or 1)))


def _fit_and_score(F_fit: np.ndarray, y_fit: np.ndarray, F_score: np.ndarray, seed: int) -> np.ndarray:
    """One fold: trees fitted on (F_fit, y_fit), the log-odds of F_score (a process pool's unit of work)."""
    return TreeModel(seed).fit(F_fit, y_fit).scores(F_score)


def _fold_jobs(F: np.ndarray, y: np.ndarray, fold: np.ndarray) -> list[tuple[np.ndarray, tuple]]:
    """(rows scored, (F_fit, y_fit, F_score)) of every fold with enough other questions to fit on."""
    jobs = []
    for k in np.unique(fold):
        test = fold == k
        if (~test).any() and len(np.unique(y[~test])) and (~test).sum() >= 10:
            jobs.append((test, (F[~test], y[~test], F[test])))
    return jobs


def _run_jobs(args: list[tuple], workers: int | None = None) -> list[np.ndarray]:
    """`_fit_and_score` of every job, in turn or on `workers` spawned processes of one OpenMP thread each.
    Default: `tree_workers()` processes when the jobs fit on `POOL_MIN_QUESTIONS` questions or more (a
    process costs about 2 s to start), else in turn. Alone on this 2-core machine, af-pool's 3 fold splits
    took 25.1 s on 2 processes against 42.4 s in turn; 2 OpenMP threads inside `make demo` had been slower
    than one (99 s against about 60 s), which processes of one thread each avoid."""
    if workers is None:
        workers = tree_workers() if sum(len(a[0]) for a in args) >= POOL_MIN_QUESTIONS else 1
    workers = min(max(1, workers), len(args))
    if workers <= 1:
        return [_fit_and_score(*a) for a in args]
    from training.procs import spawn_map
    return spawn_map(_fit_and_score_job, args, workers)


def _fit_and_score_job(args: tuple) -> np.ndarray:
    """`_fit_and_score(*args)`: a process pool's unit of work."""
    return _fit_and_score(*args)


def tree_scores(F: np.ndarray, y: np.ndarray, fold: np.ndarray, seed: int = 0, workers: int | None = None
                ) -> np.ndarray:
    """(n, c) out-of-fold log-odds: each fold's questions scored by trees fitted on the others (zeros
    where nothing is left to fit on); the folds' fits on `workers` processes (`_run_jobs`)."""
    return tree_scores_many(F, y, [fold], [seed], workers)[0]


def tree_scores_many(F: np.ndarray, y: np.ndarray, folds: list[np.ndarray], seeds: list[int],
                     workers: int | None = None) -> list[np.ndarray]:
    """`tree_scores` of several (fold split, seed) pairs, every fold of every pair one job of one pool."""
    F = np.asarray(F, dtype=np.float32)
    y = np.asarray(y, dtype=np.int64)
    jobs = [(i, test, (*a, seed)) for i, (fold, seed) in enumerate(zip(folds, seeds))
            for test, a in _fold_jobs(F, y, fold)]
    outs = [np.zeros(F.shape[:2]) for _ in folds]
    for (i, test, _), s in zip(jobs, _run_jobs([a for _, _, a in jobs], workers)):
        outs[i][test] = s
    return outs


def tree_result(scores: np.ndarray, answers: np.ndarray, groups, splits=None, seed: int = 0,
                n_folds: int = TREE_FOLDS) -> QuestionOnlyResult:
    """Accuracy with 95% intervals (`accuracy_interval`) of out-of-fold scores, overall and on the test split."""
    answers = np.asarray(answers, dtype=np.int64)
    groups = [str(g) for g in groups]
    c = scores.shape[1] if scores.ndim == 2 else 4
    correct = scores.argmax(1) == answers
    test = np.array([s == "test" for s in splits]) if splits is not None else np.zeros(len(answers), dtype=bool)
    tg = [g for g, t in zip(groups, test) if t]
    return QuestionOnlyResult(float(correct.mean()), accuracy_interval(correct, groups, seed=seed), len(answers),
                              float(correct[test].mean()) if test.any() else None,
                              accuracy_interval(correct[test], tg, seed=seed) if test.any() else None,
                              int(test.sum()), 1.0 / c, n_folds, scores)


def tree_probe(X: np.ndarray, answers: np.ndarray, groups, splits=None, n_folds: int = TREE_FOLDS, seed: int = 0,
               fold_by: str = "recipe", min_questions: int = 20) -> QuestionOnlyResult:
    """The tree probe on one dataset's probe features X (n, c, f): cross-fitted accuracy with 95%
    intervals. None accuracies when there are fewer than `min_questions` questions or than 2 recipes."""
    X = np.asarray(X, dtype=np.float32)
    n, c = X.shape[:2]
    if n < min_questions or len({str(g) for g in groups}) < 2:
        return QuestionOnlyResult(None, None, n, None, None, 0, 1.0 / c if c else 0.25, n_folds)
    fold = folds_for(groups, splits, n_folds, seed, fold_by)
    return tree_result(tree_scores(tree_features(X), answers, fold, seed), answers, groups, splits, seed, n_folds)


def pooled_tree_scores(con, lance_uri: str, dataset_ids: list[str], task: str, seed: int = 0,
                       fold_by: str = "recipe", n_folds: int = TREE_FOLDS
                       ) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, dict[str, int]]]:
    """Out-of-fold tree scores of every question of `dataset_ids` (one task, one encoder), the trees
    fitted on all of them together (a cue shared by the settings is learned from all their questions):
    (dataset_id -> qid -> (c,) log-odds, dataset_id -> qid -> answer). A recipe's questions of every
    dataset sit in one fold."""
    runs, answers = pooled_tree_runs(con, lance_uri, dataset_ids, task, [seed], fold_by, n_folds)
    return runs[0], answers


def pooled_tree_runs(con, lance_uri: str, dataset_ids: list[str], task: str, seeds: list[int],
                     fold_by: str = "recipe", n_folds: int = TREE_FOLDS, resolved: dict | None = None
                     ) -> tuple[list[dict[str, dict[str, np.ndarray]]], dict[str, dict[str, int]]]:
    """`pooled_tree_scores` for several seeds (each its own folds and trees), the questions resolved and
    their features built once: ([dataset_id -> qid -> log-odds, one per seed], dataset_id -> qid -> answer).
    `resolved`: dataset_id -> (ResolvedQuestions, its vector matrix) already at hand (the report's, from
    `bias.compute_bias_metrics`); the datasets missing from it are resolved here."""
    pool = _resolved_pool(con, lance_uri, dataset_ids, task, resolved)
    return [_by_dataset(pool, s) for s in _pool_scores(pool, task, seeds, fold_by, n_folds)], _answers(pool)


def _resolved_pool(con, lance_uri: str, dataset_ids: list[str], task: str, resolved: dict | None = None
                   ) -> list[tuple[str, object, np.ndarray]]:
    """[(dataset_id, ResolvedQuestions, matrix)] of the datasets with questions, in `dataset_ids` order."""
    from features.diagnostics.bias import VectorLookup, resolve_dataset
    resolved = resolved or {}
    missing = [d for d in dataset_ids if d not in resolved]
    got = dict(resolved)
    if missing:
        enc = con.execute("SELECT DISTINCT encoder_id FROM datasets WHERE list_contains(?, dataset_id)",
                          [dataset_ids]).fetchall()
        if len(enc) != 1:
            raise ValueError(f"the datasets must share one encoder, got {sorted(str(e[0]) for e in enc)}")
        lookup = VectorLookup(lance_uri, enc[0][0], "title" if task == "textual_cloze" else "image")
        for d in missing:
            got[d] = (resolve_dataset(con, d, lookup, task), lookup.mat)
    return [(d, *got[d]) for d in dataset_ids if got[d][0] is not None and got[d][0].qids]


def _pool_scores(pool, task: str, seeds: list[int], fold_by: str, n_folds: int) -> list[np.ndarray]:
    """Out-of-fold (n, c) log-odds of every pooled question (datasets in pool order), one per seed."""
    from features.diagnostics.question_only import task_features
    if not pool:
        return [np.zeros((0, 4)) for _ in seeds]
    F = np.concatenate([tree_features(task_features(task, r.question_rows, r.choice_rows, mat))
                        for _, r, mat in pool])
    y = np.concatenate([r.answers for _, r, _ in pool])
    groups = [g for _, r, _ in pool for g in r.recipe_ids]
    splits = [s for _, r, _ in pool for s in r.splits]
    return tree_scores_many(F, y, [folds_for(groups, splits, n_folds, seed, fold_by) for seed in seeds], list(seeds))


def _slices(pool) -> list[tuple[str, object, slice]]:
    """Each pooled dataset's rows in the pooled score matrices."""
    out, at = [], 0
    for d, r, _ in pool:
        out.append((d, r, slice(at, at + len(r.qids))))
        at += len(r.qids)
    return out


def _by_dataset(pool, scores: np.ndarray) -> dict[str, dict[str, np.ndarray]]:
    return {d: dict(zip(r.qids, scores[sl])) for d, r, sl in _slices(pool)}


def _answers(pool) -> dict[str, dict[str, int]]:
    return {d: dict(zip(r.qids, np.asarray(r.answers, dtype=np.int64).tolist())) for d, r, _ in pool}


def tree_rows(con, rows: list[dict], lance_uri: str, seed: int = 0) -> None:
    """Put the tree probe's figures (tree_acc, its interval, tree_test_acc) into the metrics rows of the AF
    datasets (the report calls this on `bias.compute_bias_metrics`' rows, whose resolved questions it
    reuses when they carry them under "_resolved"): trees fitted on each task's AF datasets of one encoder
    and seed together (the knob settings', coherence's `-matched` and visual cloze's `-kitchen` ones
    apart, as af-pool and af-check keep them), each question scored out of fold with the val and the test
    split held out whole (as af-check's tree). Other datasets get None: the plain ones are read by the learned
    probe well above chance already, and one pooled fit per task keeps the report's time (for the demo's AF
    datasets of three tasks 24.2 s on 2 processes, 35.5 s in turn)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        r.update(tree_acc=None, tree_ci_low=None, tree_ci_high=None, tree_test_acc=None)
        if r.get("adversarial") and r.get("encoder_id") and r.get("n_scored"):
            kind = setting_kind(r.get("setting") or r.get("knobs"))
            groups.setdefault((r["task"], r["encoder_id"], r["seed"], kind), []).append(r)
    for (task, _enc, _seed, _kind), group in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        ids = [r["dataset_id"] for r in group]
        have = {r["dataset_id"]: r["_resolved"] for r in group if r.get("_resolved") is not None}
        pool = _resolved_pool(con, lance_uri, ids, task, have)
        (scores,) = _pool_scores(pool, task, [seed], "split", TREE_FOLDS)
        by_id = {r["dataset_id"]: r for r in group}
        for d, res, sl in _slices(pool):
            if len(res.qids) < 20:                      # as the learned probe: too few questions for a figure
                continue
            t = tree_result(scores[sl], res.answers, res.recipe_ids, res.splits, seed)
            by_id[d].update(tree_acc=round(t.accuracy, 4), tree_ci_low=round(t.ci[0], 4),
                            tree_ci_high=round(t.ci[1], 4),
                            tree_test_acc=None if t.test_accuracy is None else round(t.test_accuracy, 4))


TASKS = ("visual_cloze", "visual_coherence", "visual_ordering", "textual_cloze")


def tree_table(home: str, task: str, seeds: tuple[int, ...] = (0, 1, 2), fold_by: str = "split",
               matched: bool = False) -> list[dict]:
    """The tree probe on every AF dataset of `task` in the home at `home` (the knob settings', or with
    `matched` coherence's matched ones), pooled and cross-fitted per seed: per dataset its setting,
    questions, the mean accuracy over the seeds with a 95% interval, and on the val and test questions.
    Read-only; any task, textual cloze included (af-check covers the visual ones next to GM3C)."""
    from pathlib import Path

    import duckdb
    if task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    db = Path(home) / "warehouse.duckdb"
    if not db.exists():
        raise LookupError(f"no warehouse at {db}: run `mrqa --home {home} demo` first")
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = [(d, s) for d, s in con.execute(
            "SELECT dataset_id, setting FROM datasets WHERE task = ? AND setting LIKE '%-af' AND n_questions > 0 "
            "ORDER BY setting", [task]).fetchall()
            if ("-matched-" in s) == matched and "-kitchen-" not in s and "-author-" not in s]
        if not rows:
            raise LookupError(f"no AF datasets of {task} in {db}: run `mrqa generate --task {task} --knobs 0-1-1-af`")
        ids = [d for d, _ in rows]
        pool = _resolved_pool(con, str(Path(home) / "lance"), ids, task)
        runs = _pool_scores(pool, task, list(seeds), fold_by, TREE_FOLDS)
    finally:
        con.close()
    setting = dict(rows)
    out = []
    for d, res, sl in _slices(pool):
        hit = np.array([sc[sl].argmax(1) == res.answers for sc in runs], np.float64)
        mean = hit.mean(0)
        ci = accuracy_interval(mean, res.recipe_ids)
        vt = np.isin(np.asarray(res.splits, dtype=object), ["val", "test"])
        out.append({"dataset_id": d, "setting": setting[d], "n": len(res.qids),
                    "accuracy": round(float(mean.mean()), 4), "ci": [round(x, 4) for x in ci],
                    "by_seed": [round(float(h.mean()), 4) for h in hit],
                    "val_test": round(float(mean[vt].mean()), 4) if vt.any() else None})
    return out

if __name__ == "__main__":
    import argparse
    import json
    ap = argparse.ArgumentParser(description="The tree probe (gradient-boosted trees on the choice-set cues) on "
                                             "every AF dataset of a task, pooled and cross-fitted.")
    ap.add_argument("--home", required=True)
    ap.add_argument("--task", default="visual_cloze", choices=TASKS)
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (each its own fold split)")
    ap.add_argument("--fold-by", default="split", choices=FOLD_BY)
    ap.add_argument("--matched", action="store_true", help="coherence's matched AF datasets instead")
    args = ap.parse_args()
    try:
        seeds = tuple(int(s) for s in args.seeds.split(",") if s.strip())
    except ValueError:
        ap.exit(2, f"error: --seeds must be comma-separated integers, got {args.seeds!r}\n")
    if not seeds:
        ap.exit(2, "error: --seeds needs at least one seed\n")
    try:
        table = tree_table(args.home, args.task, seeds, args.fold_by, args.matched)
    except LookupError as e:
        ap.exit(2, f"error: {e}\n")
    for row in table:
        print(json.dumps(row))
