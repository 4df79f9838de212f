"""The order probe: a question-only model of textual cloze that knows the corpus's order of step titles.

The question-only models of the report and the pooled step (the learned, tree and words probes, GM3C
question-only) learn from the questions: a few thousand labelled examples. A reviewer's question-only model
need not. A language model trained on a recipe site knows, from every recipe it read, where in a recipe a
title stands ("Serve" last, "Preheat the oven" first) and which titles follow which ("Toasting" after
"Dicing"), without reading the question's recipe. This module gives that reviewer a probe:

- `TitleOrder`: over the train split's recipes, how often each step title (lower-cased, as a string) comes
  before each other title in one recipe, how often it stands in each fifth of its recipe, and how often it
  occurs. Nothing is learned from questions or answers.
- `order_features`: per choice of a textual cloze question, 6 figures from those counts, with two recipes
  left out: the question's own and the choice's own (a distractor is another recipe's title), so every
  choice is scored as a title of recipes the counts never saw, as the val and test splits' titles are.
  The log share of the choice's occurrences that follow the titles shown before the blank, that precede
  those after it, the same for the title just before and just after the blank alone, the log share of its
  occurrences in the blank's fifth (its place among the question's items), and the log of its count.
- `order_probe_rows` / `order_rows`: the linear learned question-only model (question_only.py) on those 6
  figures, every question scored by models that never saw its recipe (5 folds of recipes), over every
  question and on the test split, with 95% intervals. `mrqa order-probe` prints it; `mrqa report` stores it
  (bias_metrics.order_acc), a context-free figure of the reading gate.
- `order_verdicts`: its verdicts on every question, a list of the pooled step's drop (`mrqa af-pool --order`).

Measured on the 1,000-recipe demo (docs/results.md, "The order probe"): it read 36.4-49.8% of the five
textual cloze datasets of the demo's reading benchmark, which every probe of the questions put at or below
34.5%; the blank's fifth alone (argmax of one count, no fitting) read 35.6-39.6%."""
from __future__ import annotations

import logging
from collections import Counter

import duckdb
import numpy as np

from features.diagnostics.bias import TITLE_SUFFIX
from features.diagnostics.look_probe import LookSpace

log = logging.getLogger(__name__)

ORDER_BINS = 5                 # a title's place in its recipe, in fifths (first fifth ... last fifth)
ORDER_ALPHA = 0.5              # add-alpha smoothing of the counts
N_ORDER_FEATURES = 6
ORDER_COLUMNS = ("order_acc", "order_ci_low", "order_ci_high", "order_test_acc")


def title_key(title: str) -> str:
    """A title as the counts key it: lower-cased, runs of white space as one space."""
    return " ".join(title.lower().split())


def place_bin(i: int, n: int) -> int:
    """The fifth of a sequence of n that place i (0-based) falls in."""
    return min(ORDER_BINS - 1, int(ORDER_BINS * i / max(n, 1)))


class TitleOrder:
    """The title-order counts of the train split's recipes (module doc), and a lookup of the titled steps
    (bias.VectorLookup's shape, keyed by the title item ids textual cloze questions resolve to; its matrix
    is empty: the probe reads the counts, not a space)."""

    def __init__(self, con: duckdb.DuckDBPyConnection):
        rows = con.execute("SELECT s.recipe_id, s.step_idx, trim(s.title), coalesce(r.split, '') FROM steps s "
                           "LEFT JOIN recipes r USING (recipe_id) WHERE s.title IS NOT NULL "
                           "AND trim(s.title) <> '' ORDER BY s.recipe_id, s.step_idx").fetchall()
        ids = [f"{r}_{i}{TITLE_SUFFIX}" for r, i, _, _ in rows]
        self.space = LookSpace(ids, np.zeros((len(ids), 0), np.float32), {i: n for n, i in enumerate(ids)})
        self.key = [title_key(t) for _, _, t, _ in rows]
        self.recipe = [r for r, *_ in rows]
        by_recipe: dict[str, list[str]] = {}
        split: dict[str, str] = {}
        for (rid, _, _, sp), k in zip(rows, self.key):
            by_recipe.setdefault(rid, []).append(k)
            split[rid] = sp
        # per train recipe its own counts (left out when it is the question's or a choice's recipe)
        self.own: dict[str, tuple[Counter, Counter, Counter]] = {}
        self.tables: tuple[Counter, Counter, Counter] = (Counter(), Counter(), Counter())   # pairs, count, place
        for rid, ts in by_recipe.items():
            if split[rid] != "train":
                continue
            pairs, count, place = Counter(), Counter(), Counter()
            for i, a in enumerate(ts):
                count[a] += 1
                place[(a, place_bin(i, len(ts)))] += 1
                for b in ts[i + 1:]:
                    pairs[(a, b)] += 1
            self.own[rid] = (pairs, count, place)
            for t, c in zip(self.tables, (pairs, count, place)):
                t.update(c)
        self.n_recipes = len(self.own)

    def _n(self, table: int, key, out: list) -> float:
        return self.tables[table][key] - sum(o[table].get(key, 0) for o in out)

    def features(self, shown: list[int], blank: int, choice: int, recipe_id: str) -> list[float]:
        """The 6 order features (module doc) of the choice at row `choice` at place `blank` among the items
        of a question of recipe `recipe_id` whose shown titles are rows `shown` (in order, the blank's place
        excluded)."""
        c = self.key[choice]
        out = [o for o in (self.own.get(r) for r in sorted({recipe_id, self.recipe[choice]})) if o is not None]
        nc = self._n(1, c, out)
        denom = np.log(nc + 2 * ORDER_ALPHA)
        before = [self.key[r] for r in shown[:blank]]
        after = [self.key[r] for r in shown[blank:]]
        f_before = sum(np.log(self._n(0, (s, c), out) + ORDER_ALPHA) - denom for s in before)
        f_after = sum(np.log(self._n(0, (c, s), out) + ORDER_ALPHA) - denom for s in after)
        f_prev = np.log(self._n(0, (before[-1], c), out) + ORDER_ALPHA) - denom if before else 0.0
        f_next = np.log(self._n(0, (c, after[0]), out) + ORDER_ALPHA) - denom if after else 0.0
        f_place = (np.log(self._n(2, (c, place_bin(blank, len(shown) + 1)), out) + ORDER_ALPHA)
                   - np.log(nc + ORDER_BINS * ORDER_ALPHA))
        return [float(f_before), float(f_after), float(f_prev), float(f_next), float(f_place), float(np.log(nc + 1))]


def order_features(res, order: TitleOrder) -> np.ndarray:
    """(n, 4, N_ORDER_FEATURES) `TitleOrder.features` of every choice of resolved textual cloze questions
    (bias.ResolvedQuestions on `order.space`); zeros where the blank is not known."""
    X = np.zeros((len(res.choice_rows), 4, N_ORDER_FEATURES), np.float32)
    for i, (shown, choices) in enumerate(zip(res.question_rows, res.choice_rows)):
        b = res.blanks[i] if i < len(res.blanks) else -1
        if b < 0 or b > len(shown) or len(choices) != 4:
            continue
        X[i] = [order.features(list(shown), b, c, res.recipe_ids[i]) for c in choices]
    return X


def _probed(con: duckdb.DuckDBPyConnection, order: TitleOrder, rows: list[dict], seed: int, n_folds: int):
    """(row, its resolved questions, the probe's result or None when it has no questions) per textual cloze
    dataset row of `rows`, on the counts `order`."""
    from features.diagnostics.bias import resolve_dataset
    from features.diagnostics.question_only import one_blas_thread, question_only_probe
    for r in rows:
        res = resolve_dataset(con, r["dataset_id"], order.space, "textual_cloze")
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
