"""The order probe: a question-only model of textual cloze that knows the corpus's order of step titles.

The question-only models of the report and the pooled step (the learned, tree and words probes, GM3C
question-only) learn from the questions: a few thousand labelled examples. A reviewer's question-only model
need not. A language model trained on a recipe site knows, from every recipe it read, where in a recipe a
title stands ("Serve" last, "Preheat the oven" first) and which titles follow which ("Toasting" after
"Dicing"), without reading the question's recipe. This module gives that reviewer a probe:

- `TitleOrder` (title_order.py): over the train split's recipes, how often each step title (lower-cased, as
  a string) comes before each other title in one recipe, how often it stands in each fifth of its recipe, and
  how often it occurs; nothing is learned from questions or answers. Per choice it gives 6 figures, the
  question's own recipe and the choice's own left out (title_order.py says which).
- `order_features`: those figures for every choice of resolved textual cloze questions.
- `order_probe_rows` / `order_rows`: the linear learned question-only model (question_only.py) on those 6
  figures, every question scored by models that never saw its recipe (5 folds of recipes), over every
  question and on the test split, with 95% intervals. `mrqa order-probe` prints it; `mrqa report` stores it
  (bias_metrics.order_acc), a context-free figure of the reading gate.
- `order_verdicts`: its verdicts on every question, a list of the pooled step's drop (`mrqa af-pool --order`).
- AF's order members (features/datasets/adversarial.py ORDER_MEMBERS) score every candidate distractor of a
  textual cloze question with the same figures, so AF picks distractors the probe cannot reject.

Measured on the 1,000-recipe demo (docs/results.md, "The order probe"): it read 36.4-49.8% of the five
textual cloze datasets of the demo's reading benchmark, which every probe of the questions put at or below
34.5%; the blank's fifth alone (argmax of one count, no fitting) read 35.6-39.6%."""
from __future__ import annotations

import logging

import duckdb
import numpy as np

from features.diagnostics.look_probe import LookSpace
from features.diagnostics.title_order import N_ORDER_FEATURES, TitleOrder

log = logging.getLogger(__name__)

ORDER_COLUMNS = ("order_acc", "order_ci_low", "order_ci_high", "order_test_acc")


def order_space(order: TitleOrder) -> LookSpace:
    """The titled steps as a lookup (bias.VectorLookup's shape) that questions resolve to; its matrix is
    empty: the probe reads the counts, not a space."""
    return LookSpace(order.ids, np.zeros((len(order.ids), 0), np.float32), order.index)


def order_features(res, order: TitleOrder) -> np.ndarray:
    """(n, 4, N_ORDER_FEATURES) `TitleOrder.features` of every choice of resolved textual cloze questions
    (bias.ResolvedQuestions on `order_space(order)`); zeros where the blank is not known."""
    n = len(res.choice_rows)
    X = np.zeros((n, 4, N_ORDER_FEATURES), np.float32)
    blanks = np.array([res.blanks[i] if i < len(res.blanks) else -1 for i in range(n)], np.int64)
    length = np.array([len(s) for s in res.question_rows], np.int64)
    use = np.flatnonzero((blanks >= 0) & (blanks <= length) & np.array([len(c) == 4 for c in res.choice_rows]))
    if len(use) == 0:
        return X
    shown = np.full((len(use), max(1, int(length[use].max()))), -1, np.int64)
    for k, i in enumerate(use):
        shown[k, :length[i]] = res.question_rows[i]
    choice = np.array([res.choice_rows[i] for i in use], np.int64)
    recipe = np.array([order.recipe_index.get(res.recipe_ids[i], -1) for i in use], np.int64)
    X[use] = order.batch(shown, length[use], blanks[use], choice, recipe)
    return X


def _probed(con: duckdb.DuckDBPyConnection, order: TitleOrder, rows: list[dict], seed: int, n_folds: int):
    """(row, its resolved questions, the probe's result or None when it has no questions) per textual cloze
    dataset row of `rows`, on the counts `order`."""
    from features.diagnostics.bias import resolve_dataset
    from features.diagnostics.question_only import one_blas_thread, question_only_probe
    space = order_space(order)
    for r in rows:
        res = resolve_dataset(con, r["dataset_id"], space, "textual_cloze")
        p = None
        if res.qids:
            with one_blas_thread():
                p = question_only_probe(order_features(res, order), res.answers, res.recipe_ids, res.splits,
                                        n_folds, seed)
        yield r, res, p


def order_probe_rows(con: duckdb.DuckDBPyConnection, dataset_ids: list[str] | None = None, seed: int = 0,
                     n_folds: int = 5) -> dict:
    """The order probe on `dataset_ids` (default: every textual cloze dataset). Returns {"datasets": [one row
    per dataset, look_probe.format_table's shape, its "linear" model the order probe], "recipes": the train
    recipes counted, "titles": distinct titles, "seed": seed}."""
    from features.diagnostics.bias import list_datasets, r4
    rows = list_datasets(con, dataset_ids)
    other = [r["dataset_id"] for r in rows if r["task"] != "textual_cloze"]
    if dataset_ids and other:
        raise ValueError(f"{', '.join(other)}: the order probe reads step titles; only textual cloze shows them")
    rows = [r for r in rows if r["task"] == "textual_cloze"]
    order = TitleOrder(con)
    out = []
    for r, res, p in _probed(con, order, rows, seed, n_folds):
        ok = p is not None and p.accuracy is not None
        out.append({"dataset_id": r["dataset_id"], "task": r["task"], "setting": r.get("setting"),
                    "n_questions": res.n_questions, "n_scored": len(res.qids), "n_left_out": res.n_missing_vectors,
                    "chance": 0.25,
                    "linear": {"accuracy": r4(p.accuracy) if ok else None,
                               "ci": [r4(x) for x in p.ci] if ok and p.ci else None,
                               "test_accuracy": r4(p.test_accuracy) if ok else None,
                               "test_ci": [r4(x) for x in p.test_ci] if ok and p.test_ci else None,
                               "n_test": p.n_test if ok else 0}})
    return {"datasets": out, "recipes": order.n_recipes, "titles": len(order.tables[1]), "seed": seed}


def format_table(res: dict) -> str:
    """The printed table: one line per dataset, every question and the test split."""
    lines = ["dataset                              scored  order probe, every question   order probe, test"]
    for r in res["datasets"]:
        p = r["linear"]

        def cell(acc, ci):
            return "–" if acc is None else f"{100 * acc:.1f}% [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"
        lines.append(f"{r['dataset_id']:36s} {r['n_scored']:6d}  {cell(p['accuracy'], p['ci']):>26s}  "
                     f"{cell(p['test_accuracy'], p['test_ci']):>20s}")
    lines.append(f"chance 25.0%; the order of {res['titles']} distinct titles counted over {res['recipes']} train "
                 "recipes (each question's and each choice's own recipe left out)")
    return "\n".join(lines)


def order_rows(con: duckdb.DuckDBPyConnection, rows: list[dict], seed: int = 0, n_folds: int = 5) -> None:
    """The report's order probe on every textual cloze dataset of `rows` (bias_metrics rows of
    `bias.compute_bias_metrics`), written into each row as order_acc, order_ci_low, order_ci_high,
    order_test_acc (None for the visual tasks): the figures of `mrqa order-probe`."""
    from features.diagnostics.bias import r4
    for r in rows:
        r.update(dict.fromkeys(ORDER_COLUMNS))
    text = [r for r in rows if r["task"] == "textual_cloze"]
    if not text:
        return
    for r, _, p in _probed(con, TitleOrder(con), text, seed, n_folds):
        if p is not None and p.accuracy is not None:
            r.update({"order_acc": r4(p.accuracy), "order_ci_low": r4(p.ci[0]), "order_ci_high": r4(p.ci[1]),
                      "order_test_acc": r4(p.test_accuracy)})


def order_verdicts(con: duckdb.DuckDBPyConnection, ids: list[str], seed: int) -> dict[str, dict[str, tuple]]:
    """The order probe's verdicts on every question of the textual cloze datasets `ids` (dataset_id -> qid ->
    (the probability it gives the answer, whether the answer is its pick)), cross-fitted on each dataset with
    folds and model seeded `seed`: a list of the pooled step's drop. A dataset too small to cross-fit has none."""
    from training.af_pooled import linear_verdicts
    rows = [{"dataset_id": d, "task": "textual_cloze"} for d in ids]
    scores, answers = {}, {}
    for r, res, p in _probed(con, TitleOrder(con), rows, seed, 5):
        if p is not None and p.accuracy is not None:
            scores[r["dataset_id"]] = dict(zip(res.qids, p.scores))
            answers[r["dataset_id"]] = dict(zip(res.qids, res.answers.tolist()))
    return linear_verdicts(scores, answers)
