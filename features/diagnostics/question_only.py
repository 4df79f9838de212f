"""Learned question-only probe: how well a model that never reads the recipe answers the questions.

The Hasty Student and the distance probe (features/diagnostics/bias.py) only see distances in one
fixed feature space. A model that learns its own metric on the frozen vectors finds cues they cannot
see (every photo of a recipe shares one kitchen look; on real sites the same holds per author). This
module is that model, the hypothesis-only baseline of NLI, in the role Adversarial Filtering (SWAG)
and AFLite give it:

- `pair_features(context, choice)`: per choice [choice, context, choice*context, |choice-context|].
- `QuestionOnlyModel`: a conditional logit over a question's choices -- one weight vector shared by
  every choice, so the choice's slot means nothing; the choice with the highest score is picked.
- `cross_fitted_scores`: every question scored by a model fitted on the other recipes only
  (sklearn GroupKFold by recipe, groups shuffled with the seed).

Everything works on frozen vectors only (LanceDB image_vectors / step_text_vectors of the dataset's
encoder), never on the recipe text. The per-task features and the probe built on these pieces are
further down in this module.
"""
from __future__ import annotations

import numpy as np


def pair_features(context: np.ndarray, choice: np.ndarray) -> np.ndarray:
    """context, choice: (n, c, d) float32 unit vectors -> (n, c, 4d): [choice, context, choice*context,
    |choice-context|]. `context` is what the question shows for that choice (cloze: the normalised
    mean of the question's shown items, the same for every choice; coherence: the normalised mean of
    the other three images; ordering: the previous image of the sequence, see `ordering_features`)."""
    context = np.asarray(context, dtype=np.float32)
    choice = np.asarray(choice, dtype=np.float32)
    return np.concatenate([choice, context, choice * context, np.abs(choice - context)], axis=-1)


class QuestionOnlyModel:
    """Conditional logit over a question's choices: P(answer = j) = softmax_j(w . z_j) with one weight
    vector for every choice, z the standardised features and an L2 penalty |w|^2 / (2C). Fitted by
    L-BFGS from zero (or from a fitted model passed as `init`), so it is deterministic; `seed` is
    kept for the shared signature and for callers that draw folds from it."""

    def __init__(self, C: float = 1.0, seed: int = 0, max_iter: int = 60):
        self.C, self.seed, self.max_iter = C, seed, max_iter

    def fit(self, X: np.ndarray, y: np.ndarray, init: QuestionOnlyModel | None = None) -> QuestionOnlyModel:
        """Fit on X (n, c, f) choice features and y (n,) the answer's index."""
        X = np.asarray(X, dtype=np.float32)
        y = np.asarray(y, dtype=np.int64)
        n, c, f = X.shape
        if n == 0:
            raise ValueError("QuestionOnlyModel.fit needs at least one question")
        flat = X.reshape(-1, f)
        self.mu = flat.mean(0, dtype=np.float64)
        self.sd = flat.std(0, dtype=np.float64) + 1e-6
        Z = ((flat - self.mu.astype(np.float32)) / self.sd.astype(np.float32)).astype(np.float32)
        pick = np.arange(n) * c + y
        z_true = Z[pick].sum(0, dtype=np.float64)

        def loss_grad(w):
            s = (Z @ w.astype(np.float32)).reshape(n, c)
            s = s - s.max(1, keepdims=True)
            e = np.exp(s)
            tot = e.sum(1, keepdims=True)
            loss = -(s.reshape(-1)[pick] - np.log(tot[:, 0])).sum(dtype=np.float64) + (w @ w) / (2 * self.C)
            grad = ((e / tot).reshape(1, -1) @ Z)[0].astype(np.float64) - z_true + w / self.C
            return float(loss), grad

        self.w = lbfgs(loss_grad, np.zeros(f) if init is None else init.w.copy(), self.max_iter)
        return self

    def scores(self, X: np.ndarray) -> np.ndarray:
        """(n, c) choice scores, higher = more plausible as the answer."""
        v = (self.w / self.sd).astype(np.float32)
        return np.asarray(X, dtype=np.float32) @ v - np.float32(self.mu @ (self.w / self.sd))


def lbfgs(loss_grad, w: np.ndarray, max_iter: int, memory: int = 10, rtol: float = 1e-6) -> np.ndarray:
    """Minimise a smooth convex function: L-BFGS (two-loop recursion) with a backtracking Armijo step;
    stops after max_iter steps, or when a step lowers the loss by less than rtol of it (the float32
    loss cannot tell smaller gains apart)."""
    loss, g = loss_grad(w)
    S, Y = [], []
    for _ in range(max_iter):
        q = g.copy()
        alphas = []
        for s_, y_ in reversed(list(zip(S, Y))):
            a = (s_ @ q) / (y_ @ s_)
            alphas.append(a)
            q -= a * y_
        q *= (S[-1] @ Y[-1]) / (Y[-1] @ Y[-1]) if S else 1.0 / max(np.linalg.norm(g), 1.0)
        for (s_, y_), a in zip(zip(S, Y), reversed(alphas)):
            q += s_ * (a - (y_ @ q) / (y_ @ s_))
        step, slope = 1.0, -(g @ q)
        while True:
            w_new = w - step * q
            loss_new, g_new = loss_grad(w_new)
            if loss_new <= loss + 1e-4 * step * slope or step < 1e-6:
                break
            step *= 0.5
        if loss_new > loss:
            break
        s_, y_ = w_new - w, g_new - g
        if s_ @ y_ > 1e-12:
            S, Y = (S + [s_])[-memory:], (Y + [y_])[-memory:]
        done = loss - loss_new <= rtol * abs(loss)
        w, loss, g = w_new, loss_new, g_new
        if done:
            break
    return w


def recipe_folds(groups, n_folds: int = 5, seed: int = 0) -> np.ndarray:
    """Fold index of every row from sklearn GroupKFold over its group (recipe id): a recipe sits in
    exactly one test fold. Groups are shuffled with `seed`, so the folds depend on the set of
    groups and the seed, not on the row order. Fewer groups than folds -> one fold per group."""
    from sklearn.model_selection import GroupKFold
    groups = np.asarray([str(g) for g in groups], dtype=object)
    fold = np.zeros(len(groups), dtype=np.int64)
    k = min(n_folds, len(set(groups.tolist())))
    if k < 2:
        return fold
    splitter = GroupKFold(n_splits=k, shuffle=True, random_state=seed)
    for f, (_, test) in enumerate(splitter.split(np.zeros(len(groups)), groups=groups)):
        fold[test] = f
    return fold


def cross_fitted_scores(X, y, groups, n_folds: int = 5, seed: int = 0, C: float = 1.0) -> np.ndarray:
    """(n, c) scores where each question is scored by a model that never saw its recipe (GroupKFold by
    `groups` = recipe ids). Deterministic for a given seed. With a single recipe nothing can be held
    out: every score is zero (no prediction better than chance)."""
    X = np.asarray(X, dtype=np.float32)
    y = np.asarray(y, dtype=np.int64)
    fold = recipe_folds(groups, n_folds, seed)
    out = np.zeros(X.shape[:2])
    for k in np.unique(fold):
        test = fold == k
        if (~test).any():
            out[test] = QuestionOnlyModel(C, seed).fit(X[~test], y[~test]).scores(X[test])
    return out
