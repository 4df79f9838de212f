"""The words probe: question-only models on the step titles' own words, outside the encoder's space.

Textual cloze shows step titles and offers titles as choices. The knobs, AF, the pooled adversary and
the report's probes read those titles through one space: the default encoder's title vectors. A
reviewer's question-only model need not: a bag of words sees what a small encoder blurs (which titles
are answers more often than distractors, which words go with which). This module measures that, as the
textual counterpart of the look probe (look_probe.py), next to the probes of the encoder's space:

- `WordsSpace`: every step title of the warehouse (`steps.title`) as TF-IDF over its lower-cased words
  and word pairs (terms in at least 2 titles, at most MAX_TERMS of the most frequent), centred and
  projected on its COMPONENTS principal axes, each row scaled to unit length: latent semantic analysis.
  The axes come from the term-by-term covariance, so the cost grows with the vocabulary, not with the
  titles, and they are exact and signed like the look probe's (`principal`), so the space does not
  depend on the machine's threads. One space for every title of the warehouse: a dataset's figure does
  not depend on which others are measured with it. Nothing is trained on the answers.
- `words_probe_rows`: per textual cloze dataset, the learned question-only probe (linear,
  question_only.py) and the tree probe (tree_probe.py) in that space, every question scored by models
  that never saw its recipe (folds of recipes), with 95% intervals, over every question and on the test
  split. `mrqa words-probe` prints it; `mrqa report` stores both (bias_metrics.words_acc, words_tree_acc).
- The linear model knows where the blank is (`placed_features`): a choice's words against the titles
  just before and after the blank, and whether the blank is the first or the last title. On the demo that
  reads 52% of the RecipeQA-style preset against 34% without it, and 38.5-43.7% of 135 real RecipeQA
  questions against 31.1-34.1% (which titles end a recipe, which follow which).
- The pooled adversary's drop reads both models in this space too (flows/af_pool.py `--words`), the linear
  one without the blank's place, so the report's placed model stays a check the drop did not aim at.

On the 1,000-recipe demo it read 39.3-43.4% (linear) and 38.9-44.5% (trees) of the textual cloze AF
datasets that every probe of the encoder's space and GM3C question-only put at or below 31.5%; the choice's
own words alone (no question) read 28-40% of them, in part because a recipe's intro title (its name) was a
distractor and never an answer (docs/results.md, "The words probe")."""
from __future__ import annotations

import logging
from collections import Counter

import duckdb
import numpy as np

from features.diagnostics.bias import TITLE_SUFFIX  # the item ids textual cloze questions resolve to
from features.diagnostics.look_probe import LookSpace
from features.embed.words_encoder import terms  # the titles' terms (words and word pairs)

log = logging.getLogger(__name__)

COMPONENTS = 64                # principal axes of the titles' TF-IDF the probes read
MAX_TERMS = 4096               # the most frequent terms kept (the covariance is MAX_TERMS x MAX_TERMS)
MIN_TITLES = 2                 # a term in fewer titles carries nothing across recipes




def vocabulary(docs: list[list[str]], min_titles: int = MIN_TITLES, max_terms: int = MAX_TERMS) -> dict[str, int]:
    """term -> column: terms in at least `min_titles` titles, the `max_terms` in most titles (ties by the
    term), in alphabetical order."""
    df = Counter(t for d in docs for t in set(d))
    kept = sorted((t for t, c in df.items() if c >= min_titles), key=lambda t: (-df[t], t))[:max_terms]
    return {t: n for n, t in enumerate(sorted(kept))}


def tfidf(docs: list[list[str]], vocab: dict[str, int]):
    """Sparse (titles x terms) TF-IDF: 1 + log(count) per term, times the smoothed inverse document
    frequency, each row scaled to unit length (a title with no kept term stays zero)."""
    from scipy import sparse
    rows, cols, vals = [], [], []
    for i, d in enumerate(docs):
        for t, c in Counter(x for x in d if x in vocab).items():
            rows.append(i)
            cols.append(vocab[t])
            vals.append(1.0 + np.log(c))
    m = sparse.csr_matrix((np.array(vals, dtype=np.float64), (rows, cols)), shape=(len(docs), len(vocab)))
    df = np.bincount(m.indices, minlength=len(vocab))
    m = m.multiply((np.log((1 + len(docs)) / (1 + df)) + 1.0)[None, :]).tocsr()
    norm = np.sqrt(np.asarray(m.multiply(m).sum(1))).ravel()
    return sparse.diags(1.0 / np.where(norm > 0, norm, 1.0)) @ m


def principal_sparse(m, k: int = COMPONENTS) -> np.ndarray:
    """The rows of sparse `m`, centred, on their first `k` principal axes (the eigenvectors of the
    terms' covariance, each signed so that its largest loading is positive), scaled to unit length."""
    from features.diagnostics.question_only import one_blas_thread
    n = m.shape[0]
    mu = np.asarray(m.mean(0)).ravel()
    with one_blas_thread():
        cov = np.asarray((m.T @ m).todense()) / max(n, 1) - np.outer(mu, mu)
        w, v = np.linalg.eigh(cov)
    v = v[:, np.argsort(-w, kind="stable")[:k]].T
    v *= np.where(v[np.arange(len(v)), np.abs(v).argmax(1)] < 0, -1.0, 1.0)[:, None]
    z = np.asarray(m @ v.T) - mu @ v.T
    norm = np.linalg.norm(z, axis=1, keepdims=True)
    return (z / np.where(norm > 0, norm, 1.0)).astype(np.float32)


def words_space(con: duckdb.DuckDBPyConnection, k: int = COMPONENTS) -> LookSpace:
    """Every titled step of the warehouse, in (recipe_id, step_idx) order, as a row of the words space
    (bias.VectorLookup's shape, keyed by the title item ids textual cloze questions resolve to)."""
    rows = con.execute("SELECT recipe_id, step_idx, trim(title) FROM steps WHERE title IS NOT NULL "
                       "AND trim(title) <> '' ORDER BY recipe_id, step_idx").fetchall()
    ids = [f"{r}_{i}{TITLE_SUFFIX}" for r, i, _ in rows]
    docs = [terms(t) for *_, t in rows]
    vocab = vocabulary(docs)
    if len(ids) < 2 or not vocab:
        return LookSpace(ids, np.zeros((len(ids), 1), np.float32), {i: n for n, i in enumerate(ids)})
    mat = principal_sparse(tfidf(docs, vocab), min(k, len(vocab)))
    log.info("words probe: %d titles, %d terms, %d axes", len(ids), len(vocab), mat.shape[1])
    return LookSpace(ids, mat, {i: n for n, i in enumerate(ids)})


def placed_features(res, mat: np.ndarray) -> np.ndarray:
    """The words probe's linear features: `task_features` with the blank's place added before the set-level
    features (which stay last, for the tree probe): per choice, its words on the blank's neighbours (the
    title before the blank and the one after it, product and cosine) and its words if the blank is the
    first or the last title. A choice's words with the blank's place read what the order-blind mean of the
    shown titles cannot: which titles end a recipe ("serve", "enjoy"), which follow which. Questions whose
    blank is not known (`res.blanks` empty or -1) get zeros there."""
    from features.diagnostics.question_only import N_SET_FEATURES, task_features
    X = task_features(res.task, res.question_rows, res.choice_rows, mat)
    n, d = len(res.choice_rows), mat.shape[1]
    prev, nxt = np.zeros((n, d), np.float32), np.zeros((n, d), np.float32)
    first, last = np.zeros((n, 1), np.float32), np.zeros((n, 1), np.float32)
    for i, shown in enumerate(res.question_rows):
        b = res.blanks[i] if i < len(res.blanks) else -1
        if b < 0 or b > len(shown):
            continue
        if b > 0:
            prev[i] = mat[shown[b - 1]]
        if b < len(shown):
            nxt[i] = mat[shown[b]]
        first[i], last[i] = b == 0, b == len(shown)
    C = mat[np.array(res.choice_rows)] if n else np.zeros((0, X.shape[1], d), np.float32)
    before, after = C * prev[:, None], C * nxt[:, None]
    place = np.concatenate([before, after, C * first[:, None], C * last[:, None],
                            before.sum(-1, keepdims=True), after.sum(-1, keepdims=True)], axis=-1).astype(np.float32)
    return np.concatenate([X[..., :-N_SET_FEATURES], place, X[..., -N_SET_FEATURES:]], axis=-1)


def words_probe_rows(con: duckdb.DuckDBPyConnection, dataset_ids: list[str] | None = None, seed: int = 0,
                     n_folds: int = 5) -> dict:
    """The words probe on `dataset_ids` (default: every textual cloze dataset). Returns {"datasets": [one
    row per dataset], "titles": titles in the space, "axes": its width, "seed": seed}."""
    from features.diagnostics.bias import list_datasets
    from features.diagnostics.look_probe import space_probe_rows
    rows = list_datasets(con, dataset_ids)
    other = [r["dataset_id"] for r in rows if r["task"] != "textual_cloze"]
    if dataset_ids and other:
        raise ValueError(f"{', '.join(other)}: the words probe reads step titles; only textual cloze shows them "
                         "(`mrqa look-probe` reads the photos of the visual tasks)")
    rows = [r for r in rows if r["task"] == "textual_cloze"]
    space = words_space(con)
    out = space_probe_rows(con, rows, space, seed, n_folds, placed_features)
    return {"datasets": out, "titles": len(space.ids), "axes": int(space.mat.shape[1]), "seed": seed}


def format_table(res: dict) -> str:
    """The printed table: one line per dataset, linear and tree probe, every question and test split."""
    from features.diagnostics.look_probe import format_table as look_table
    lines = look_table({"datasets": res["datasets"], "photos": 0, "photos_unreadable": {}}).splitlines()[:-1]
    return "\n".join(lines + [f"chance 25.0%; {res['titles']} titles on {res['axes']} axes; question-only models "
                              "on the titles' words (TF-IDF), outside the encoder's space"])


WORDS_COLUMNS = tuple(f"words{m}_{c}" for m in ("", "_tree") for c in ("acc", "ci_low", "ci_high", "test_acc"))


def words_rows(con: duckdb.DuckDBPyConnection, rows: list[dict], seed: int = 0, n_folds: int = 5) -> None:
    """The report's words probe: the linear model and the trees in the words space on every textual cloze
    dataset of `rows` (bias_metrics rows of `bias.compute_bias_metrics`), written into each row as
    words_acc, words_ci_low, words_ci_high, words_test_acc and the same of words_tree_* (None for the
    visual tasks): the figures of `mrqa words-probe`."""
    from features.diagnostics.look_probe import space_probe_rows
    for r in rows:
        r.update(dict.fromkeys(WORDS_COLUMNS))
    text = [r for r in rows if r["task"] == "textual_cloze"]
    if not text:
        return
    space = words_space(con)
    for r, got in zip(text, space_probe_rows(con, text, space, seed, n_folds, placed_features)):
        for name, model in (("words", "linear"), ("words_tree", "tree")):
            p = got[model]
            if p["accuracy"] is not None:
                r.update({f"{name}_acc": p["accuracy"], f"{name}_ci_low": p["ci"][0], f"{name}_ci_high": p["ci"][1],
                          f"{name}_test_acc": p["test_accuracy"]})
