"""Bias diagnostics of a generated benchmark: Hasty Student, distance probe, learned probe, overlap.

Everything is measured in the dataset's own feature space (datasets.encoder_id), with cosine
distance, from the question rows alone -- no model of the recipe context:

- **Hasty Student** (RecipeQA §4.2, context-free; the rule and the per-task distances live in
  features/diagnostics/hasty.py): cloze picks the choice closest on average to the question items;
  coherence picks the image most dissimilar (mean distance) to the other three; ordering picks the
  ordering with the smallest mean distance between consecutive images.
- **Distance probe** (Meta-RecipeQA Fig. 2): each choice is described only by its distance from the
  question (cloze: from the mean of the question vectors; coherence: from the mean of the other three
  images; ordering: the mean consecutive distance of the ordering) -- the raw distance, its gap to
  the smallest and the mean distance of the question, and its distance rank (one-hot). A logistic
  regression scores choices; the prediction is the best-scored choice of each question. Because the
  rank is a feature it can learn "the answer is the nearest" and also "the answer is never the
  nearest". Accuracy is out-of-fold over K folds grouped by recipe (folds from a stable hash of
  recipe_id, so a recipe never sits on both sides and results do not depend on row order).
- **Learned question-only probe** (features/diagnostics/question_only.py): a conditional logit on
  the question's and the choices' vectors themselves plus the distance probe's features, each
  question scored by a model fitted on other recipes; overall and on the test split, with 95%
  intervals. It finds cues no fixed distance shows (a shared kitchen or author look).
- **Overlap** (bias 1): per recipe, the share of its steps (intro excluded) that the union of its
  questions shows, and the mean pairwise Jaccard overlap of the step sets of its questions.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

import duckdb
import numpy as np

from features.datasets.knobs import N_CHOICES, stable_key
from features.diagnostics.hasty import (
    cloze_distances,
    coherence_distances,
    hasty_student,
    ordering_distances,
    probe_features,
)
from features.diagnostics.question_only import (
    QuestionOnlyResult,
    by_question_length,
    question_only_probe,
    task_features,
    unit,
)
from features.diagnostics.title_order import TITLE_SUFFIX

log = logging.getLogger(__name__)
PLACEHOLDER = "@placeholder"


def answer_ranks(dist: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """0-based rank of the answer's distance among its question's choices (0 = nearest)."""
    d_ans = dist[np.arange(len(dist)), answers]
    return (dist < d_ans[:, None]).sum(axis=1)


# ----------------------------------------------------------------------------- distance probe


def recipe_folds(groups, n_folds: int) -> np.ndarray:
    """Fold of each row from a stable hash of its group (recipe_id): order-independent."""
    return np.array([stable_key("probe-fold", g) % n_folds for g in groups], dtype=np.int64)


@dataclass
class ProbeResult:
    accuracy: float | None       # out-of-fold accuracy over the questions scored (None: too few)
    n: int
    n_folds: int
    model: str
    predictions: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=np.int64))


def distance_probe(dist: np.ndarray, answers: np.ndarray, groups, n_folds: int = 5, seed: int = 0,
                   model: str = "logreg", min_questions: int = 20) -> ProbeResult:
    """Cross-validated probe that picks the answer from the choices' distances alone.

    dist (n, 4), answers (n,), groups (n,) recipe ids (folds never split a recipe). model: logreg
    (LogisticRegression) or svm (LinearSVC); both seeded and standardised. Returns out-of-fold
    accuracy; None when there are fewer than `min_questions` questions or fewer than 2 folds.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import LinearSVC

    dist = np.asarray(dist, dtype=np.float64)
    answers = np.asarray(answers, dtype=np.int64)
    n, c = dist.shape
    folds = recipe_folds(groups, n_folds)
    used = np.unique(folds)
    if n < min_questions or len(used) < 2:
        return ProbeResult(None, n, len(used), model)
    X = probe_features(dist).reshape(n, c, -1)
    y = np.zeros((n, c), dtype=np.int64)
    y[np.arange(n), answers] = 1
    pred = np.full(n, -1, dtype=np.int64)
    for f in used:
        train, test = folds != f, folds == f
        if not train.any():
            continue
        ytr = y[train].ravel()
        if ytr.min() == ytr.max():
            continue
        if model == "svm":
            clf = LinearSVC(C=1.0, random_state=seed, max_iter=5000)
        elif model == "logreg":
            clf = LogisticRegression(C=1.0, solver="newton-cholesky", random_state=seed, max_iter=200)
        else:
            raise ValueError(f"probe model must be logreg or svm, got {model!r}")
        pipe = make_pipeline(StandardScaler(), clf)
        pipe.fit(X[train].reshape(-1, X.shape[-1]), ytr)
        score = pipe.decision_function(X[test].reshape(-1, X.shape[-1])).reshape(-1, c)
        pred[test] = np.argmax(score, axis=1)
    ok = pred >= 0
    acc = float((pred[ok] == answers[ok]).mean()) if ok.any() else None
    return ProbeResult(acc, int(ok.sum()), len(used), model, pred)


# ----------------------------------------------------------------------------- overlap

def recipe_overlap(question_steps: dict[str, list[list[int]]], n_steps: dict[str, int]
                   ) -> tuple[float | None, float | None]:
    """(mean coverage, mean pairwise Jaccard) over recipes.

    question_steps: recipe_id -> the step sets of its questions; n_steps: recipe_id -> its number of
    question-eligible steps (intro excluded). Coverage = |union of question steps| / n_steps
    (capped at 1); Jaccard is averaged over the question pairs of a recipe, then over recipes with
    at least two questions (None when there are none)."""
    cov, jac = [], []
    for rid, sets in question_steps.items():
        sets = [set(s) for s in sets if s]
        if not sets:
            continue
        total = n_steps.get(rid) or len(set().union(*sets))
        cov.append(min(1.0, len(set().union(*sets)) / total))
        if len(sets) > 1:
            pairs = [len(a & b) / len(a | b) for i, a in enumerate(sets) for b in sets[i + 1:]]
            jac.append(float(np.mean(pairs)))
    return (float(np.mean(cov)) if cov else None, float(np.mean(jac)) if jac else None)


# ----------------------------------------------------------------------------- datasets -> arrays

@dataclass
class DatasetDistances:
    """The per-question distance views of one dataset (questions whose vectors all exist)."""
    dataset_id: str
    task: str
    qids: list[str]
    recipe_ids: list[str]
    answers: np.ndarray          # (n,)
    hasty: np.ndarray            # (n, 4) lowest = Hasty Student pick
    probe: np.ndarray            # (n, 4) distance of each choice from the question
    n_questions: int             # rows in the dataset
    n_missing_vectors: int       # rows left out: some item had no vector in the feature space


class VectorLookup:
    """All vectors of one encoder (image or title space), loaded once from the feature store."""

    def __init__(self, lance_uri: str, encoder_id: str, space: str):
        from features.vectors.store import FeatureStore
        store = FeatureStore(lance_uri)
        if space == "image":
            ids, mat = store.image_vectors(encoder_id)
        else:
            ids, mat = store.text_vectors(encoder_id, "title")
        if len(ids) == 0:       # a report on no vectors would store blank figures over the real ones
            raise LookupError(f"no {'image' if space == 'image' else 'step-title'} vectors of encoder {encoder_id} "
                              f"in {lance_uri}: run `mrqa embed` (or check --home) before measuring the datasets")
        self.mat = np.asarray(mat, dtype=np.float32)
        self.index = {i: n for n, i in enumerate(ids)}

    def rows(self, ids) -> list[int] | None:
        out = [self.index.get(i) for i in ids]
        return None if any(o is None for o in out) else out


def _title_index(con: duckdb.DuckDBPyConnection) -> tuple[dict, dict]:
    """For textual cloze rows without provenance: (recipe_id, title) -> item id, and title -> item id."""
    per_recipe, anywhere = {}, {}
    for rid, idx, title in con.execute("SELECT recipe_id, step_idx, trim(title) FROM steps "
                                       "WHERE title IS NOT NULL ORDER BY recipe_id, step_idx").fetchall():
        iid = f"{rid}_{idx}{TITLE_SUFFIX}"
        per_recipe.setdefault((rid, title), iid)
        anywhere.setdefault(title, iid)
    return per_recipe, anywhere


def _resolve(task: str, row: dict, titles) -> tuple[list[str], list] | None:
    """(question item ids, choice item ids) of a question row; ordering choices are id lists."""
    prov = row["provenance"]
    if task == "visual_cloze":
        return [q for q in row["question"] if q != PLACEHOLDER], list(row["choice_list"])
    if task == "visual_coherence":
        return [], list(row["question"])
    if task == "visual_ordering":
        return [], [json.loads(c) for c in row["choice_list"]]
    if task == "textual_cloze":
        if prov.get("question_items") and prov.get("choice_items"):
            ph = prov.get("placeholder_index")
            q = [x for i, x in enumerate(prov["question_items"]) if i != ph]
            return q, list(prov["choice_items"])
        per_recipe, anywhere = titles()
        q = [per_recipe.get((row["recipe_id"], t.strip())) for t in row["question"] if t != PLACEHOLDER]
        ch = [anywhere.get(c.strip()) for c in row["choice_list"]]
        return (q, ch) if None not in q and None not in ch else None
    raise ValueError(f"unknown task {task!r}")


@dataclass
class ResolvedQuestions:
    """The question rows of one dataset resolved to rows of a VectorLookup matrix (questions whose
    items all have vectors, in qid order). question_rows[i]: the question's shown items (cloze; empty
    for coherence and ordering); choice_rows[i]: one row per choice (ordering: one row list per
    candidate order). The one resolver behind the distance views and the learned probe."""
    dataset_id: str
    task: str
    qids: list[str]
    recipe_ids: list[str]
    splits: list[str]
    answers: np.ndarray          # (n,)
    question_rows: list[list[int]]
    choice_rows: list[list]
    n_questions: int             # rows in the dataset
    n_missing_vectors: int       # rows left out: some item had no vector in the feature space
    blanks: list[int] = field(default_factory=list)   # cloze: the blank's place among the question's items


def resolve_dataset(con: duckdb.DuckDBPyConnection, dataset_id: str, lookup: VectorLookup,
                    task: str) -> ResolvedQuestions:
    """Resolve every question of `dataset_id` to rows of `lookup` (see ResolvedQuestions)."""
    # only textual cloze reads the provenance (its items, its blank): the visual tasks' AF provenance is the
    # bulk of their rows, and decoding it was most of the report's reading time
    prov = "provenance" if task == "textual_cloze" else "NULL AS provenance"
    cur = con.execute(f"""SELECT qid, recipe_id, split, question, choice_list, answer, {prov}
                          FROM questions WHERE dataset_id = ? ORDER BY qid""", [dataset_id])
    cols = [d[0] for d in cur.description]
    rows = [dict(zip(cols, r)) for r in cur.fetchall()]
    cache: dict = {}

    def titles():
        if "t" not in cache:
            cache["t"] = _title_index(con)
        return cache["t"]

    keep, q_rows, c_rows, blanks = [], [], [], []
    for r in rows:
        r["provenance"] = json.loads(r["provenance"]) if isinstance(r["provenance"], str) else (r["provenance"] or {})
        res = _resolve(task, r, titles)
        if res is None or len(res[1]) != N_CHOICES:
            continue
        q, ch = res
        qr = lookup.rows(q)
        cr = [lookup.rows(c) for c in ch] if task == "visual_ordering" else lookup.rows(ch)
        if qr is None or cr is None or (task == "visual_ordering" and any(x is None for x in cr)):
            continue
        keep.append(r)
        q_rows.append(qr)
        c_rows.append(cr)
        blanks.append(_blank(task, r))
    if len(rows) - len(keep):
        log.warning("bias: %s: %d of %d questions have items without vectors in the feature space; "
                    "left out", dataset_id, len(rows) - len(keep), len(rows))
    return ResolvedQuestions(dataset_id, task, [r["qid"] for r in keep], [r["recipe_id"] for r in keep],
                             [r["split"] for r in keep], np.array([r["answer"] for r in keep], dtype=np.int64),
                             q_rows, c_rows, len(rows), len(rows) - len(keep), blanks)


def _blank(task: str, row: dict) -> int:
    """A cloze question's blank: its place among the question's items (the shown ones and the blank), so
    the shown items before it are question_rows[:blank]; -1 for the other tasks."""
    prov = row["provenance"]
    if task == "textual_cloze" and prov.get("question_items") and prov.get("placeholder_index") is not None:
        return int(prov["placeholder_index"])
    shown = list(row["question"]) if task in ("visual_cloze", "textual_cloze") else []
    return shown.index(PLACEHOLDER) if PLACEHOLDER in shown else -1


def resolved_distances(res: ResolvedQuestions, mat: np.ndarray) -> DatasetDistances:
    """Both distance views (Hasty Student, distance probe) of resolved questions."""
    task, n = res.task, len(res.qids)
    if n == 0:
        hasty = probe = np.zeros((0, N_CHOICES))
    elif task in ("visual_cloze", "textual_cloze"):
        hasty = np.zeros((n, N_CHOICES))
        probe = np.zeros((n, N_CHOICES))
        for idx in by_question_length(res.question_rows).values():
            h, p = cloze_distances(mat[np.array([res.question_rows[i] for i in idx])],
                                   mat[np.array([res.choice_rows[i] for i in idx])])
            hasty[idx], probe[idx] = h, p
    elif task == "visual_coherence":
        hasty, probe = coherence_distances(mat[np.array(res.choice_rows)])
    else:
        hasty, probe = ordering_distances(mat[np.array(res.choice_rows)])
    return DatasetDistances(res.dataset_id, task, res.qids, res.recipe_ids, res.answers,
                            np.asarray(hasty, dtype=np.float64), np.asarray(probe, dtype=np.float64),
                            res.n_questions, res.n_missing_vectors)


def learned_probe(res: ResolvedQuestions, mat: np.ndarray, n_folds: int = 5, seed: int = 0
                  ) -> QuestionOnlyResult | None:
    """The learned question-only probe on resolved questions (None when there are none)."""
    if not res.qids:
        return None
    X = task_features(res.task, res.question_rows, res.choice_rows, mat)
    return question_only_probe(X, res.answers, res.recipe_ids, res.splits, n_folds, seed)


def dataset_distances(con: duckdb.DuckDBPyConnection, dataset_id: str, lookup: VectorLookup,
                      task: str) -> DatasetDistances:
    """Resolve every question of `dataset_id` to vectors and compute both distance views."""
    return resolved_distances(resolve_dataset(con, dataset_id, lookup, task), lookup.mat)


# ----------------------------------------------------------------------------- metrics per dataset

def dataset_overlap(con: duckdb.DuckDBPyConnection, dataset_id: str) -> tuple[float | None, float | None]:
    """recipe_overlap of a dataset from the warehouse (question_step_ids; steps except the intro)."""
    rows = con.execute("""SELECT q.recipe_id, q.question_step_ids FROM questions q
                          WHERE q.dataset_id = ? ORDER BY q.qid""", [dataset_id]).fetchall()
    qs: dict[str, list[list[int]]] = {}
    for rid, steps in rows:
        qs.setdefault(rid, []).append(list(steps or []))
    n_steps = dict(con.execute("""SELECT s.recipe_id, count(*) FROM steps s
                                  WHERE s.step_idx > 0 AND s.recipe_id IN (
                                      SELECT DISTINCT recipe_id FROM questions WHERE dataset_id = ?)
                                  GROUP BY 1""", [dataset_id]).fetchall())
    return recipe_overlap(qs, n_steps)


def _latest_encoder(con, task: str = "textual_cloze") -> str | None:
    """The encoder a dataset without one (RecipeQA's own questions) is measured in: the latest registered,
    for a visual task the latest with an image tower (not a words encoder); None when there is none."""
    from features.embed.encoders import latest_encoder_id
    from features.embed.words_encoder import is_words_encoder
    enc = latest_encoder_id(con)        # one with an image tower first (a words encoder only where none)
    return None if enc is not None and task != "textual_cloze" and is_words_encoder(enc) else enc


def list_datasets(con: duckdb.DuckDBPyConnection, dataset_ids: list[str] | None = None) -> list[dict]:
    """datasets rows (all, or the given ids; unknown ids raise ValueError naming them)."""
    cur = con.execute("""SELECT dataset_id, task, knob1, knob2, knob3, k3_mode, adversarial, setting, preset,
                                seed, encoder_id, n_questions, n_recipes, content_sha256
                         FROM datasets ORDER BY task, dataset_id""")
    cols = [d[0] for d in cur.description]
    rows = [dict(zip(cols, r)) for r in cur.fetchall()]
    if dataset_ids:
        known = {r["dataset_id"] for r in rows}
        missing = [d for d in dataset_ids if d not in known]
        if missing:
            raise ValueError(f"unknown dataset(s): {', '.join(missing)}; `mrqa datasets` lists them")
        rows = [r for r in rows if r["dataset_id"] in set(dataset_ids)]
    return rows


def knobs_label(d: dict) -> str:
    """The setting's one name (datasets.setting, from features.datasets.knobs.setting_name:
    `0-0-1-balanced`, `0-1-1-af`, `recipeqa`), or the preset name of an imported dataset."""
    if d.get("setting"):
        return str(d["setting"])
    if d.get("preset"):
        return str(d["preset"])
    from features.datasets.knobs import setting_name
    return setting_name(d["knob1"], d["knob2"], d["knob3"], d.get("k3_mode"), bool(d.get("adversarial")))


def centre_rule(task: str, choice_rows: list, mat: np.ndarray, answers: np.ndarray) -> float | None:
    """Accuracy of the centre-of-the-choices rule: each question's choice with the highest mean cosine
    to its other choices (question_only.choice_spread lowest), the question itself unseen. Near 25%
    on RecipeQA's own distractors; far above when distractors are drawn around the answer. None for
    ordering (its choices are orders of the same images) and without questions."""
    if task == "visual_ordering" or len(choice_rows) == 0:
        return None
    picked, _ = centre_margins(mat[np.array(choice_rows)])
    return float((picked == np.asarray(answers)).mean())


def centre_margins(choices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, c, d) choices -> (the centre rule's pick (n,), its margin (n,): the second-lowest spread among the
    choices minus the lowest, how clearly the rule found its centre)."""
    from features.diagnostics.question_only import choice_spread
    spread = choice_spread(choices)
    s = np.sort(spread, axis=1)
    return spread.argmin(axis=1), (s[:, 1] - s[:, 0]).astype(np.float64)


def pair_rule(task: str, choice_rows: list, mat: np.ndarray, answers: np.ndarray) -> float | None:
    """Accuracy of the closest-pair rule on visual coherence: of the two images with the highest cosine
    to each other, pick the one with the lower mean cosine to the other two, the recipe unseen. The
    knob-2 ball draws the foreign image from a shown image's nearest neighbours, so it forms the
    closest pair of the four far more often than a random image of the four would (half the time),
    and the rule then has a coin flip left; on independent images it reads chance. None for the other
    tasks (their answer is not one of a pair drawn together) and without questions."""
    if task != "visual_coherence" or len(choice_rows) == 0:
        return None
    return float((closest_pair_pick(mat[np.array(choice_rows)]) == np.asarray(answers)).mean())


def closest_pair_pick(images: np.ndarray) -> np.ndarray:
    """(n, c, d) images of n questions -> (n,) the closest-pair rule's pick (`pair_rule`); ties go to the
    lower column."""
    u = images / np.maximum(np.linalg.norm(images, axis=-1, keepdims=True), 1e-12)
    n, c = u.shape[:2]
    gram = np.einsum("nid,njd->nij", u, u)
    off = np.where(np.eye(c, dtype=bool), -np.inf, gram)
    flat = off.reshape(n, -1).argmax(1)
    i, j = flat // c, flat % c
    rest = ~(np.eye(c, dtype=bool)[i] | np.eye(c, dtype=bool)[j])           # (n, c): the other images
    mean_to_rest = lambda k: (gram[np.arange(n), k] * rest).sum(1) / np.maximum(rest.sum(1), 1)
    mi, mj = mean_to_rest(i), mean_to_rest(j)
    return np.where(mj < mi, j, np.where(mi < mj, i, np.minimum(i, j)))


def pair_margins(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, c, d) images -> (the closest-pair rule's pick (n,), its margin (n,): the closest pair's cosine
    minus the next pair's, how clearly the rule found its pair)."""
    u = images / np.maximum(np.linalg.norm(images, axis=-1, keepdims=True), 1e-12)
    c = u.shape[1]
    iu = np.triu_indices(c, 1)
    pairs = np.sort(np.einsum("nid,njd->nij", u, u)[:, iu[0], iu[1]], axis=1)
    return closest_pair_pick(images), (pairs[:, -1] - pairs[:, -2]).astype(np.float64)


def compute_bias_metrics(con: duckdb.DuckDBPyConnection, dataset_ids: list[str] | None = None,
                         lance_uri: str | None = None, seed: int = 0, n_folds: int = 5,
                         model: str = "logreg", progress: bool = True,
                         keep_distances: bool = False, workers: int | None = None,
                         keep_resolved: bool = False) -> list[dict]:
    """One metrics dict per dataset (bias_metrics columns), in `list_datasets` order; with
    keep_distances the DatasetDistances are attached under "_distances" (for plots), with keep_resolved
    (ResolvedQuestions, its vector matrix) under "_resolved" (for the tree probe, which pools them) and
    its VectorLookup under "_lookup" (the look probe maps its rows back to item ids).

    This thread reads each dataset from DuckDB; the probes run on `workers` threads (default: the CPU
    count, at most 4), all with one BLAS thread, so the figures are the same whatever `workers` is."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    from tqdm import tqdm

    from etl.config import Paths
    from features.diagnostics.question_only import one_blas_thread
    lance_uri = lance_uri or Paths.from_env().lance
    workers = max(1, workers if workers is not None else min(4, os.cpu_count() or 1))
    lookups: dict[tuple[str, str], VectorLookup] = {}
    datasets = list_datasets(con, dataset_ids)
    with one_blas_thread(), ThreadPoolExecutor(workers, thread_name_prefix="bias") as pool:
        futures = []
        for d in datasets:                          # DuckDB reads here; each dataset's probes start
            task = d["task"]                        # while the next one loads
            enc = d["encoder_id"] or _latest_encoder(con, task)
            space = "title" if task == "textual_cloze" else "image"
            row = {"dataset_id": d["dataset_id"], "task": task, "knobs": knobs_label(d),
                   "knob1": d["knob1"], "knob2": d["knob2"], "knob3": d["knob3"], "k3_mode": d["k3_mode"],
                   "adversarial": d["adversarial"], "preset": d["preset"],
                   "seed": d["seed"], "encoder_id": enc, "n_questions": d["n_questions"],
                   "n_recipes": d["n_recipes"], "chance": 1.0 / N_CHOICES, "probe_model": model,
                   "probe_folds": n_folds}
            res = mat = None
            if enc is not None:
                key = (enc, space)
                if key not in lookups:
                    lookups[key] = VectorLookup(lance_uri, enc, space)
                res = resolve_dataset(con, d["dataset_id"], lookups[key], task)
                mat = lookups[key].mat
            overlap = dataset_overlap(con, d["dataset_id"])
            if keep_resolved:
                row["_resolved"] = None if res is None else (res, mat)
                row["_lookup"] = None if res is None else lookups[key]      # its rows' item ids (look probe)
            futures.append(pool.submit(_dataset_metrics, row, res, mat, overlap, n_folds, seed, model,
                                       keep_distances))
        out = [f.result() for f in tqdm(futures, desc="bias", disable=not progress)]
    return out


def _dataset_metrics(row: dict, res: ResolvedQuestions | None, mat: np.ndarray | None,
                     overlap: tuple[float | None, float | None], n_folds: int, seed: int, model: str,
                     keep_distances: bool) -> dict:
    """The metrics of one resolved dataset (numpy and sklearn only: no DuckDB, safe on any thread)."""
    task = row["task"]
    dist = qo = pr = None
    if res is not None:
        dist = resolved_distances(res, mat)
        qo = learned_probe(res, mat, n_folds, seed)
    if dist is None or len(dist.qids) == 0:
        row.update(n_scored=0, hasty_student_acc=None, probe_acc=None, answer_rank_share=None,
                   centre_rule_acc=None, pair_rule_acc=None)
    else:
        hs = float((hasty_student(dist.hasty) == dist.answers).mean())
        pr = distance_probe(dist.probe, dist.answers, dist.recipe_ids, n_folds, seed, model)
        ranks = np.bincount(answer_ranks(dist.probe, dist.answers), minlength=N_CHOICES)
        cr = centre_rule(task, res.choice_rows, mat, res.answers)
        cp = pair_rule(task, res.choice_rows, mat, res.answers)
        row.update(n_scored=len(dist.qids), hasty_student_acc=round(hs, 4),
                   centre_rule_acc=None if cr is None else round(cr, 4),
                   pair_rule_acc=None if cp is None else round(cp, 4),
                   probe_acc=None if pr.accuracy is None else round(pr.accuracy, 4),
                   answer_rank_share=[round(float(x), 4) for x in ranks / ranks.sum()])
    row.update(question_only_row(qo))
    row["split_metrics"] = None
    if dist is not None and len(dist.qids):
        row["split_metrics"] = split_metrics(res.splits, {
            "hasty_student": hasty_student(dist.hasty) == dist.answers,
            "probe": _scored(pr.predictions, dist.answers),
            "qo": _scored(qo.scores.argmax(1) if qo is not None and qo.accuracy is not None and len(qo.scores)
                          else None, dist.answers)})
    cov, jac = overlap
    row.update(recipe_coverage=None if cov is None else round(cov, 4),
               question_overlap=None if jac is None else round(jac, 4))
    if keep_distances:
        row["_distances"] = dist
    return row


SPLIT_ORDER = ("train", "val", "test")
SPLIT_METRICS = ("hasty_student", "probe", "qo")


def _scored(pred: np.ndarray | None, answers: np.ndarray) -> np.ndarray | None:
    """Per question: 1.0 right, 0.0 wrong, nan not scored (a prediction of -1, or no predictions)."""
    if pred is None or len(pred) != len(answers):
        return None
    pred = np.asarray(pred)
    return np.where(pred < 0, np.nan, (pred == answers).astype(np.float64))


def split_metrics(splits, correct: dict[str, np.ndarray | None], level: float = 0.95) -> list[dict]:
    """Accuracy of each diagnostic per split and over all questions, with the Wilson score interval.

    `correct`: per diagnostic (SPLIT_METRICS) one value per question (True/1 right, False/0 wrong, nan
    not scored) or None when it did not run. Returns one dict per split present (train, val, test order,
    then any other) and a last one for `all`: {split, n, <m>_acc, <m>_n, <m>_ci: [low, high]}."""
    from features.diagnostics.question_only import wilson_interval
    splits = np.asarray([str(s) for s in splits], dtype=object)
    present = [s for s in SPLIT_ORDER if (splits == s).any()]
    present += sorted(set(splits) - set(SPLIT_ORDER))
    out = []
    for name in [*present, "all"]:
        mask = np.ones(len(splits), dtype=bool) if name == "all" else splits == name
        entry: dict = {"split": name, "n": int(mask.sum())}
        for m in SPLIT_METRICS:
            c = correct.get(m)
            if c is None:
                entry.update({f"{m}_acc": None, f"{m}_n": 0, f"{m}_ci": None})
                continue
            v = np.asarray(c, dtype=np.float64)[mask]
            v = v[~np.isnan(v)]
            k, n = float(v.sum()), len(v)
            ci = wilson_interval(k, n, level)
            entry.update({f"{m}_acc": round(k / n, 4) if n else None, f"{m}_n": n,
                          f"{m}_ci": [round(ci[0], 4), round(ci[1], 4)] if ci else None})
        out.append(entry)
    return out


def learned_probe_rows(con: duckdb.DuckDBPyConnection, dataset_ids: list[str], lance_uri: str | None = None,
                       seed: int = 0, n_folds: int = 5) -> dict[str, dict]:
    """The learned question-only probe alone (the qo_* columns of `question_only_row`) for each of
    `dataset_ids`, e.g. for the summary `mrqa generate` prints right after generating."""
    from etl.config import Paths
    lance_uri = lance_uri or Paths.from_env().lance
    lookups: dict[tuple[str, str], VectorLookup] = {}
    out = {}
    for d in list_datasets(con, dataset_ids):
        enc = d["encoder_id"] or _latest_encoder(con, d["task"])
        qo = None
        if enc is not None:
            key = (enc, "title" if d["task"] == "textual_cloze" else "image")
            if key not in lookups:
                lookups[key] = VectorLookup(lance_uri, *key)
            res = resolve_dataset(con, d["dataset_id"], lookups[key], d["task"])
            qo = learned_probe(res, lookups[key].mat, n_folds, seed)
        out[d["dataset_id"]] = question_only_row(qo)
    return out


def r4(x) -> float | None:
    """A share as bias_metrics stores it: 4 decimals (None stays None)."""
    return None if x is None else round(float(x), 4)


def question_only_row(qo: QuestionOnlyResult | None) -> dict:
    """The learned probe's bias_metrics columns (qo_*), rounded; all None when it did not run."""
    ci, tci = (qo.ci, qo.test_ci) if qo else (None, None)
    return {"qo_acc": r4(qo and qo.accuracy), "qo_ci_low": r4(ci and ci[0]), "qo_ci_high": r4(ci and ci[1]),
            "qo_n_test": qo.n_test if qo else None, "qo_test_acc": r4(qo and qo.test_accuracy),
            "qo_test_ci_low": r4(tci and tci[0]), "qo_test_ci_high": r4(tci and tci[1])}


BIAS_COLUMNS = ["dataset_id", "task", "knobs", "encoder_id", "seed", "n_questions", "n_scored",
                "n_recipes", "chance", "hasty_student_acc", "probe_acc", "probe_model", "probe_folds",
                "recipe_coverage", "question_overlap", "answer_rank_share", "qo_acc", "qo_ci_low",
                "qo_ci_high", "qo_n_test", "qo_test_acc", "qo_test_ci_low", "qo_test_ci_high", "split_metrics",
                "centre_rule_acc", "pair_rule_acc", "tree_acc", "tree_ci_low", "tree_ci_high", "tree_test_acc",
                "look_acc", "look_ci_low", "look_ci_high", "look_test_acc", "words_acc", "words_ci_low",
                "words_ci_high", "words_test_acc", "words_tree_acc", "words_tree_ci_low", "words_tree_ci_high",
                "words_tree_test_acc", "order_acc", "order_ci_low", "order_ci_high", "order_test_acc"]


def write_bias_metrics(con: duckdb.DuckDBPyConnection, rows: list[dict]) -> int:
    """Replace the bias_metrics rows of these datasets (idempotent)."""
    from etl.warehouse import transaction, utcnow
    now = utcnow()
    with transaction(con):
        for r in rows:
            con.execute("DELETE FROM bias_metrics WHERE dataset_id = ?", [r["dataset_id"]])
            vals = [r.get(c) for c in BIAS_COLUMNS]
            vals[BIAS_COLUMNS.index("answer_rank_share")] = json.dumps(r.get("answer_rank_share"))
            vals[BIAS_COLUMNS.index("split_metrics")] = json.dumps(r.get("split_metrics"))
            con.execute(f"INSERT INTO bias_metrics ({', '.join(BIAS_COLUMNS)}, computed_at) "
                        f"VALUES ({', '.join('?' * len(BIAS_COLUMNS))}, ?)", vals + [now])
    return len(rows)


# ----------------------------------------------------------------------------- benchmark

def bench_bias(n_questions: int = 20000, repeats: int = 3, dim: int = 128, seed: int = 0) -> list[str]:
    """`mrqa bench report`: cloze distances vectorised vs a per-question loop (same numbers), the
    probe's cross-validated fit, on random unit vectors, and the learned question-only probe on one
    dataset-sized set (3,000 questions) against the distance probe on the same questions."""
    import time
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(n_questions, 3, dim)).astype(np.float32)
    c = rng.normal(size=(n_questions, 4, dim)).astype(np.float32)
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    c /= np.linalg.norm(c, axis=-1, keepdims=True)

    def loop():
        h, p = np.zeros((n_questions, 4)), np.zeros((n_questions, 4))
        for i in range(n_questions):
            qm = q[i].mean(0)
            for j in range(4):
                h[i, j] = np.mean([1.0 - float(c[i, j] @ x) for x in q[i]])
                p[i, j] = 1.0 - float(c[i, j] @ qm) / (np.linalg.norm(c[i, j]) * np.linalg.norm(qm))
        return h, p

    def best(fn, n):
        ts = []
        for _ in range(n):
            t = time.perf_counter()
            res = fn()
            ts.append(time.perf_counter() - t)
        return min(ts), res

    t_vec, (h1, p1) = best(lambda: cloze_distances(q, c), repeats)
    t_loop, (h2, p2) = best(loop, 1)
    assert np.allclose(h1, h2, atol=1e-4) and np.allclose(p1, p2, atol=1e-4)
    answers = rng.integers(0, 4, size=n_questions)
    groups = [f"r{i // 4}" for i in range(n_questions)]
    t_probe, pr = best(lambda: distance_probe(p1, answers, groups, seed=seed), 1)
    return [(f"bias distances, {n_questions:,d} cloze questions, dim {dim}: vectorised {t_vec * 1e3:.1f} ms "
             f"({n_questions / t_vec:,.0f} q/s) vs per-question loop {t_loop * 1e3:.0f} ms "
             f"({n_questions / t_loop:,.0f} q/s): {t_loop / t_vec:.0f}x faster, same numbers"),
            (f"distance probe (logreg, 5 folds by recipe): {t_probe:.2f} s "
             f"({n_questions / t_probe:,.0f} q/s), accuracy on random distances {pr.accuracy:.3f} (chance 0.25)"),
            *bench_question_only(3000, dim, seed)]


def bench_question_only(n_questions: int = 3000, dim: int = 128, seed: int = 0) -> list[str]:
    """`mrqa bench report`: seconds of the learned probe (5 folds by recipe) on one cloze dataset of
    random unit vectors with a planted cue, against the distance probe on the same questions."""
    import time

    rng = np.random.default_rng(seed)
    q = unit(rng.normal(size=(n_questions, 3, dim)))
    c = rng.normal(size=(n_questions, 4, dim)).astype(np.float32)
    answers = rng.integers(0, 4, size=n_questions)
    c[np.arange(n_questions), answers] += 0.3 * q.mean(1) / np.linalg.norm(q.mean(1), axis=-1, keepdims=True)
    c = unit(c)
    groups = [f"r{i // 3}" for i in range(n_questions)]
    mat = np.concatenate([q.reshape(-1, dim), c.reshape(-1, dim)])            # the resolved-rows form
    q_rows = np.arange(3 * n_questions).reshape(-1, 3).tolist()
    c_rows = (3 * n_questions + np.arange(4 * n_questions)).reshape(-1, 4).tolist()
    t = time.perf_counter()
    qo = question_only_probe(task_features("visual_cloze", q_rows, c_rows, mat), answers, groups, seed=seed)
    t_qo = time.perf_counter() - t
    t = time.perf_counter()
    dp = distance_probe(cloze_distances(q, c)[1], answers, groups, seed=seed)
    t_dp = time.perf_counter() - t
    line = (f"question-only probe, {n_questions:,d} cloze questions x {dim}-d (features + 5 folds by recipe): "
            f"{t_qo:.2f} s, accuracy {qo.accuracy:.3f}; distance probe on the same questions {t_dp:.2f} s, "
            f"accuracy {dp.accuracy:.3f}; ratio {t_qo / t_dp:.1f}x the distance probe's time")
    return [line]
