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

import contextlib
import threading
from dataclasses import dataclass, field

import numpy as np


def pair_features(context: np.ndarray, choice: np.ndarray, room: int = 0) -> np.ndarray:
    """context, choice: (n, c, d) float32 unit vectors -> (n, c, 4d): [choice, context, choice*context,
    |choice-context|]. `context` is what the question shows for that choice (cloze: the normalised
    mean of the question's shown items, the same for every choice; coherence: the normalised mean of
    the other three images; ordering: the previous image of the sequence, see `ordering_features`).
    `room`: that many more columns after them, left unwritten (`fill_set_features` writes the set-level
    cues there, so the pair block is not copied again by a concatenation)."""
    choice = np.asarray(choice, dtype=np.float32)
    d = choice.shape[-1]
    out = np.empty(choice.shape[:-1] + (4 * d + room,), dtype=np.float32)
    _write_pairs(out[..., :4 * d], choice, np.asarray(context, dtype=np.float32))
    return out


def _write_pairs(out: np.ndarray, choice: np.ndarray, context: np.ndarray) -> None:
    """`pair_features` written into `out` (..., 4d), each part in its place; `context` broadcasts."""
    d = choice.shape[-1]
    out[..., :d] = choice
    out[..., d:2 * d] = context
    np.multiply(choice, context, out=out[..., 2 * d:3 * d])
    diff = out[..., 3 * d:4 * d]
    np.subtract(choice, context, out=diff)
    np.abs(diff, out=diff)


class QuestionOnlyModel:
    """Conditional logit over a question's choices: P(answer = j) = softmax_j(w . z_j) with one weight
    vector for every choice, z the standardised features and an L2 penalty |w|^2 / (2C). Fitted by
    L-BFGS from zero (or from a fitted model passed as `init`), so it is deterministic; `seed` is
    kept for the shared signature and for callers that draw folds from it."""

    def __init__(self, C: float = 1.0, seed: int = 0, max_iter: int = 60):
        self.C, self.seed, self.max_iter = C, seed, max_iter

    def fit(self, X: np.ndarray, y: np.ndarray, init: QuestionOnlyModel | None = None) -> QuestionOnlyModel:
        """Fit on X (n, c, f) choice features (float32) and y (n,) the answer's index."""
        X, y = np.asarray(X), np.asarray(y, dtype=np.int64)
        n, c, f = X.shape
        if n == 0:
            raise ValueError("QuestionOnlyModel.fit needs at least one question")
        flat = X.reshape(-1, f)
        self.mu, sd = column_mean_std(flat)
        self.sd = sd + 1e-6
        if flat.dtype == np.float32:        # the same float32 operations, without the two extra copies
            Z = flat - self.mu.astype(np.float32)
            Z /= self.sd.astype(np.float32)
        else:
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
        return np.asarray(X) @ v - np.float32(self.mu @ (self.w / self.sd))


def column_mean_std(flat: np.ndarray, chunk_rows: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """`flat.mean(0, dtype=float64)` and `flat.std(0, dtype=float64)` of a 2-d array, bit for bit, in row
    chunks that stay in the cache, and without the second pass over `flat` that `std` makes for its mean.
    numpy sums a C-ordered array over axis 0 one row after another into a running sum (when a row has 2 or
    more columns), so the running sum carried from chunk to chunk as the next chunk's first row adds the
    same numbers in the same order (tested against numpy on random shapes). A 1-column array, or one row,
    goes to numpy itself."""
    mu = flat.mean(0, dtype=np.float64)
    n, f = flat.shape
    if f < 2 or n < 2 or not flat.flags.c_contiguous:
        return mu, flat.std(0, dtype=np.float64)
    m = min(chunk_rows, n)
    buf = np.empty((m + 1, f), np.float64)           # row 0: the running sum of the chunks before
    acc = None
    for s in range(0, n, m):
        rows = flat[s:s + m]
        d = buf[1:1 + len(rows)]
        np.subtract(rows, mu, out=d)
        np.multiply(d, d, out=d)
        if acc is None:
            acc = np.add.reduce(d, axis=0)
        else:
            buf[0] = acc
            acc = np.add.reduce(buf[:1 + len(rows)], axis=0)
    return mu, np.sqrt(acc / n)


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


_blas = {"lock": threading.Lock(), "users": 0, "limits": None}


@contextlib.contextmanager
def one_blas_thread():
    """Run the block with one BLAS thread: results that do not depend on the threads the process runs
    (threaded sums change the last digits), and many small solves run faster on 2 busy cores. The
    limit is process-wide: set by the first block that enters, restored when the last one running ends,
    so blocks on several threads at once do not undo each other's limit."""
    from threadpoolctl import threadpool_limits
    with _blas["lock"]:
        if _blas["users"] == 0:
            _blas["limits"] = threadpool_limits(1, user_api="blas")
        _blas["users"] += 1
    try:
        yield
    finally:
        with _blas["lock"]:
            _blas["users"] -= 1
            if _blas["users"] == 0:
                _blas["limits"].restore_original_limits()


def cross_fitted_scores(X, y, groups, n_folds: int = 5, seed: int = 0, C: float = 1.0) -> np.ndarray:
    """(n, c) scores where each question is scored by a model that never saw its recipe (GroupKFold by
    `groups` = recipe ids). Deterministic for a given seed. With a single recipe nothing can be held
    out: every score is zero (no prediction better than chance). One BLAS thread: threaded sums change
    the last digits, and the pooled adversary's drop orders questions by these scores."""
    X = np.asarray(X, dtype=np.float32)
    y = np.asarray(y, dtype=np.int64)
    fold = recipe_folds(groups, n_folds, seed)
    out = np.zeros(X.shape[:2])
    with one_blas_thread():                         # the same scores whatever threads the process runs
        for k in np.unique(fold):
            test = fold == k
            if (~test).any():
                out[test] = QuestionOnlyModel(C, seed).fit(X[~test], y[~test]).scores(X[test])
    return out


# ----------------------------------------------------------------------------- features per task

def unit(v: np.ndarray) -> np.ndarray:
    """v scaled to unit length along the last axis (zero vectors stay zero), float32."""
    v = np.asarray(v, dtype=np.float32)
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), np.float32(1e-12))


def cloze_features(question: np.ndarray, choices: np.ndarray) -> np.ndarray:
    """Visual / textual cloze. question (n, k, d) the shown items, choices (n, c, d) -> (n, c, 4d):
    pair features of each choice against the normalised mean of the shown items."""
    choices = unit(choices)
    context = np.broadcast_to(unit(unit(question).mean(axis=1))[:, None, :], choices.shape)
    return pair_features(context, choices)


def coherence_features(images: np.ndarray) -> np.ndarray:
    """Visual coherence. images (n, c, d) -> (n, c, 4d): pair features of each image against the
    normalised mean of the other images of the question (the choice is the odd image out)."""
    images = unit(images)
    others = unit(images.sum(axis=1, keepdims=True) - images)
    return pair_features(others, images)


def ordering_features(orderings: np.ndarray) -> np.ndarray:
    """Visual ordering. orderings (n, c, L, d), one image sequence per candidate order -> (n, c, 4d + 3).

    Every consecutive pair (image t as the context, image t+1 as the choice) gets its pair features;
    a candidate order is described by their mean over the sequence (4d) and by the minimum, mean and
    maximum cosine between consecutive images (3). The mean keeps position: its `choice` part is the
    mean of images 2..L and its `context` part the mean of images 1..L-1, so their difference tells
    which image opens and which closes the order; the mean product is a learned, per-dimension
    similarity of neighbours, the cosines the Hasty Student's own cue."""
    seq = unit(orderings)
    pf = pair_features(seq[:, :, :-1, :], seq[:, :, 1:, :])              # (n, c, L-1, 4d)
    cos = (seq[:, :, :-1, :] * seq[:, :, 1:, :]).sum(-1)                  # (n, c, L-1)
    stats = np.stack([cos.min(-1), cos.mean(-1), cos.max(-1)], axis=-1)
    return np.concatenate([pf.mean(axis=2), stats], axis=-1).astype(np.float32)


def by_question_length(question_rows: list[list[int]]) -> dict[int, list[int]]:
    """Question indices grouped by how many items the question shows (cloze questions may differ)."""
    out: dict[int, list[int]] = {}
    for i, q in enumerate(question_rows):
        out.setdefault(len(q), []).append(i)
    return out


def task_features(task: str, question_rows: list[list[int]], choice_rows: list, mat: np.ndarray) -> np.ndarray:
    """(n, c, f) probe features of resolved questions (rows of `mat`, as bias.resolve_dataset gives
    them): cloze from the shown items and the choices, coherence from the four images, ordering from
    the candidate orders; then the set-level cues (`set_features`): the distance probe's own features of
    the choice's cosine distance to the question (value, gap to the nearest and to the mean, rank
    one-hot: hasty.probe_features), so the learned probe can use every cue the distance probe uses,
    including the non-linear "the answer is never the nearest"; and the same features of the choice's
    spread among the choices (`choice_spread`), so it can use "the answer is the centre of the choice
    set" too; and the choice's similarity to each shown item (`item_similarity`: the mean of the shown
    items blurs "it looks like one of the photos", a cue of its own). Cloze questions showing different
    numbers of items are built per length."""
    n, d = len(choice_rows), mat.shape[1]
    spread = sim = None
    if task in ("visual_cloze", "textual_cloze"):
        X = np.zeros((n, len(choice_rows[0]) if n else 4, 4 * d), dtype=np.float32)
        for idx in by_question_length(question_rows).values():
            X[idx] = cloze_features(mat[np.array([question_rows[i] for i in idx])],
                                    mat[np.array([choice_rows[i] for i in idx])])
        spread = choice_spread(mat[np.array(choice_rows)]) if n else None
        sim = np.zeros(X.shape[:2] + (N_ITEM_FEATURES,), np.float32)
        for idx in by_question_length(question_rows).values():
            sim[idx] = item_similarity(mat[np.array([question_rows[i] for i in idx])],
                                       mat[np.array([choice_rows[i] for i in idx])])
    elif task == "visual_coherence":
        X = coherence_features(mat[np.array(choice_rows)]) if n else np.zeros((0, 4, 4 * d), np.float32)
        spread = choice_spread(mat[np.array(choice_rows)]) if n else None
        sim = others_similarity(mat[np.array(choice_rows)]) if n else None
    elif task == "visual_ordering":
        X = ordering_features(mat[np.array(choice_rows)]) if n else np.zeros((0, 4, 4 * d + 3), np.float32)
    else:
        raise ValueError(f"unknown task {task!r}")
    if n == 0:
        return np.zeros(X.shape[:2] + (X.shape[2] + N_SET_FEATURES,), np.float32)
    # cosine distance of each choice: 1 - the summed product part (unit vectors), or for ordering
    # 1 - the mean consecutive cosine
    dist = 1.0 - X[..., -2] if task == "visual_ordering" else pair_distance(X)
    return with_set_features(X, dist, spread, sim)


N_DISTANCE_FEATURES = 7                 # hasty.probe_features: distance, 2 gaps, rank one-hot (4)
N_ITEM_FEATURES = 3                     # item_similarity: max, min, std of the cosines to the shown items
# the cues AF recomputes for every candidate set: those of the distance to the question, those of the
# spread among the choices, the similarity to each shown item
N_SET_FEATURES = 2 * N_DISTANCE_FEATURES + N_ITEM_FEATURES


def pair_distance(X: np.ndarray, d: int | None = None) -> np.ndarray:
    """Cosine distance of each choice to its context from its pair features (..., 4d) (unit vectors:
    1 - the summed product part). `d`: the vectors' width, when more features follow the pair block."""
    d = X.shape[-1] // 4 if d is None else d
    return 1.0 - X[..., 2 * d:3 * d].sum(-1)


SEQ_RANK = 16                           # principal directions the sequence cue is built in


def sequence_basis(vecs: np.ndarray, r: int = SEQ_RANK) -> np.ndarray:
    """(d, r): the top r principal directions of a space's vectors, each signed so that its largest
    loading is positive (the same basis on every run)."""
    X = np.asarray(vecs, dtype=np.float64)
    _, _, vt = np.linalg.svd(X - X.mean(0), full_matrices=False)
    B = vt[:r].T
    sign = np.sign(B[np.abs(B).argmax(0), np.arange(B.shape[1])])
    return (B * np.where(sign == 0, 1.0, sign)).astype(np.float32)


def sequence_features(prev: np.ndarray, nxt: np.ndarray, slot: np.ndarray, n_slots: int,
                      choices: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """The cloze stage cue: does a photo fit *between* the placeholder's neighbours? A sequence model
    (GM3C question-only: a BiLSTM over the photos with the choice inserted) reads from the photos alone
    which kind of step comes after the one before the placeholder and before the one after it ("bake"
    after "pour into the dish"); a linear model on the choice against the mean of the shown photos
    cannot. Here, in the space's top principal directions (`basis`, r): the outer products of the
    previous and the next shown photo with the choice (a learned transition matrix each, r*r) and the
    placeholder's slot one-hot with the choice (which kind of step opens or closes a question, n_slots*r).
    prev, nxt (n, d) (zero where the placeholder is first / last), slot (n,), choices (n, c, d)
    -> (n, c, 2r^2 + n_slots*r) float32."""
    choice = np.asarray(choices, dtype=np.float32)
    r = basis.shape[1]
    out = np.empty(choice.shape[:2] + ((2 * r + n_slots) * r,), dtype=np.float32)
    _write_sequence(out, prev, nxt, slot, n_slots, choice, basis)
    return out


def _write_sequence(out: np.ndarray, prev: np.ndarray, nxt: np.ndarray, slot: np.ndarray, n_slots: int,
                    choice: np.ndarray, basis: np.ndarray) -> None:
    """`sequence_features` written into `out` (n, c, 2r^2 + n_slots*r), each outer product in its place."""
    cp = choice @ basis                                                   # (n, c, r)
    pp, npj = np.asarray(prev, np.float32) @ basis, np.asarray(nxt, np.float32) @ basis
    n, c, r = cp.shape
    oh = np.zeros((n, n_slots), np.float32)
    oh[np.arange(n), slot] = 1.0
    at = 0
    for left, width in ((pp, r), (npj, r), (oh, n_slots)):
        block = out[..., at:at + width * r].reshape(n, c, width, r)       # a view: the last axis split
        np.multiply(left[:, None, :, None], cp[:, :, None, :], out=block)
        at += width * r


def pair_sequence_features(context: np.ndarray, choices: np.ndarray, prev: np.ndarray, nxt: np.ndarray,
                           slot: np.ndarray, n_slots: int, basis: np.ndarray, room: int = 0) -> np.ndarray:
    """`pair_features` of each choice against its question's context (n, d), then `sequence_features`, as
    one (n, c, 4d + 2r^2 + n_slots*r) float32 array: the same values, element for element, as
    concatenating the two, but each part is written once into its place (AF builds these for every
    candidate of every question in each round, and the copies of the concatenations were a fifth of it).
    `room`: as in `pair_features`."""
    choice = np.asarray(choices, dtype=np.float32)
    n, c, d = choice.shape
    r = basis.shape[1]
    f = 4 * d + (2 * r + n_slots) * r
    out = np.empty((n, c, f + room), dtype=np.float32)
    _write_pairs(out[..., :4 * d], choice, np.asarray(context, dtype=np.float32)[:, None, :])
    _write_sequence(out[..., 4 * d:f], prev, nxt, slot, n_slots, choice, basis)
    return out


def choice_spread(choices: np.ndarray) -> np.ndarray:
    """(..., c, d) the choices of questions -> (..., c): 1 - the mean cosine of each choice to the other
    choices. Low = the centre of the choice set. When distractors are drawn around the answer (knob 2:
    close to it), the answer is that centre far more often than 1 in 4, a cue no choice-to-question
    feature carries; ordering has none (its candidates are orders of the same images)."""
    u = unit(choices)
    c = u.shape[-2]
    gram = np.einsum("...id,...jd->...ij", u, u)
    own = np.einsum("...ii->...i", gram)
    return (1.0 - (gram.sum(-1) - own) / max(c - 1, 1)).astype(np.float32)


def spread_after_swap(gram: np.ndarray, cand_cos: np.ndarray, col: np.ndarray) -> np.ndarray:
    """The spread (`choice_spread`) of every choice after a candidate takes column `col`.
    gram (n, c, c): cosines among the current choices; cand_cos (n, m, c): each candidate's cosine to
    the current choices; col (n,) -> (n, m, c), the candidate's own spread at `col`."""
    n, c = gram.shape[:2]
    one = np.arange(c)[None, :] == col[:, None]                              # (n, c)
    to_col = np.take_along_axis(gram, col[:, None, None].repeat(c, 2), 1)[:, 0, :]   # (n, c) cos(col, j)
    own = np.einsum("nii->ni", gram)
    rest = gram.sum(-1) - own - to_col                                       # (n, c) sum over k != j, col
    others = rest[:, None, :] + cand_cos                                     # j != col: swap in the candidate
    mine = np.where(one[:, None, :], 0.0, cand_cos).sum(-1, keepdims=True)   # the candidate vs the others
    total = np.where(one[:, None, :], mine, others)
    return (1.0 - total / max(c - 1, 1)).astype(np.float32)


def distance_features(dist: np.ndarray) -> np.ndarray:
    """(..., c) choice distances of questions -> (..., c, 7) the distance probe's features of each
    choice within its question (hasty.probe_features: value, gap to the nearest and to the mean, rank
    one-hot). The set-level cue: it depends on the other choices, not on the choice alone."""
    from features.diagnostics.hasty import probe_features
    dist = np.asarray(dist, dtype=np.float64)
    c = dist.shape[-1]
    f = probe_features(dist.reshape(-1, c)) if dist.size else np.zeros((0, N_DISTANCE_FEATURES))
    return f.reshape(dist.shape + (N_DISTANCE_FEATURES,)).astype(np.float32)


def item_similarity(shown: np.ndarray, choices: np.ndarray) -> np.ndarray:
    """shown (..., k, d) the items a question shows, choices (..., c, d) -> (..., c, 3): the max, min and
    standard deviation of each choice's cosines to the shown items. The answer is a photo of the same
    recipe, often much like one shown photo (the same vessel a step later); the cosine to the mean of
    the shown items blurs that, the max keeps it."""
    sims = np.einsum("...cd,...kd->...ck", unit(choices), unit(shown))
    return np.stack([sims.max(-1), sims.min(-1), sims.std(-1)], axis=-1).astype(np.float32)


def others_similarity(images: np.ndarray) -> np.ndarray:
    """Coherence: images (..., c, d) -> (..., c, 3), `item_similarity` of each image against the other
    images of its question."""
    u = unit(images)
    c = u.shape[-2]
    gram = np.einsum("...id,...jd->...ij", u, u)
    off = ~np.eye(c, dtype=bool)
    sims = gram[..., off].reshape(gram.shape[:-2] + (c, c - 1))
    return np.stack([sims.max(-1), sims.min(-1), sims.std(-1)], axis=-1).astype(np.float32)


def set_features(dist: np.ndarray, spread: np.ndarray | None, sim: np.ndarray | None = None) -> np.ndarray:
    """(..., c) distances to the question, spreads among the choices and (..., c, 3) similarities to the
    shown items -> (..., c, 17): the `distance_features` of the first two, then the similarities (zeros
    for what a task has none of: ordering)."""
    shape = np.shape(dist)
    sf = (distance_features(spread) if spread is not None
          else np.zeros(shape + (N_DISTANCE_FEATURES,), np.float32))
    sim = (np.asarray(sim, dtype=np.float32) if sim is not None
           else np.zeros(shape + (N_ITEM_FEATURES,), np.float32))
    return np.concatenate([distance_features(dist), sf, sim], axis=-1)


def with_set_features(X: np.ndarray, dist: np.ndarray, spread: np.ndarray | None,
                      sim: np.ndarray | None = None) -> np.ndarray:
    """Pair features X (..., c, f) with `set_features` appended: the features of the learned probe
    (`task_features`) and of the adversarial filter's adversary."""
    X = np.asarray(X, dtype=np.float32)
    out = np.empty(X.shape[:-1] + (X.shape[-1] + N_SET_FEATURES,), dtype=np.float32)
    out[..., :X.shape[-1]] = X
    return fill_set_features(out, dist, spread, sim)


def fill_set_features(out: np.ndarray, dist: np.ndarray, spread: np.ndarray | None,
                      sim: np.ndarray | None = None) -> np.ndarray:
    """`with_set_features` without its copy: `out` (..., c, f + N_SET_FEATURES) float32 holds the pair features in
    its first f columns (`pair_features(..., room=N_SET_FEATURES)`); the set-level cues are written into
    its last columns and `out` is returned, the same values and layout as the concatenation. AF builds
    these for every candidate set in every round: the concatenation's copy of the pair block was a tenth
    of a coherence AF dataset's time."""
    out[..., out.shape[-1] - N_SET_FEATURES:] = set_features(dist, spread, sim)
    return out


# ----------------------------------------------------------------------------- the probe

def wilson_interval(k: float, n: int, level: float = 0.95) -> tuple[float, float] | None:
    """Wilson score interval of k successes in n independent trials; None for n = 0."""
    from scipy.stats import norm
    if n == 0:
        return None
    z = float(norm.ppf((1 + level) / 2))
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


def accuracy_interval(correct: np.ndarray, groups, level: float = 0.95, n_boot: int = 2000,
                      seed: int = 0) -> tuple[float, float] | None:
    """95% interval of an accuracy: the union of the Wilson score interval (questions as independent
    draws) and the percentile bootstrap that resamples whole recipes (a recipe's questions share its
    kitchen, so they are not independent). Each alone can be too narrow -- Wilson when a recipe's
    questions move together, the bootstrap when there are few recipes -- so the wider ends are kept.
    The bootstrap draws as many recipes as there are, with replacement, `n_boot` times (seeded) and
    takes sum(correct) / sum(questions). None for no questions."""
    correct = np.asarray(correct, dtype=np.float64)
    if len(correct) == 0:
        return None
    _, inv = np.unique(np.asarray([str(g) for g in groups], dtype=object), return_inverse=True)
    hits = np.bincount(inv, weights=correct)
    size = np.bincount(inv).astype(np.float64)
    draw = np.random.default_rng(seed).integers(0, len(size), size=(n_boot, len(size)))
    acc = hits[draw].sum(1) / size[draw].sum(1)
    lo, hi = np.quantile(acc, [(1 - level) / 2, (1 + level) / 2])
    wlo, whi = wilson_interval(float(correct.sum()), len(correct), level)
    return float(min(lo, wlo)), float(max(hi, whi))


@dataclass
class QuestionOnlyResult:
    """The learned probe on one dataset. accuracy/ci over every scored question; test_* over the
    questions of split = test. Every question is scored by a model that never saw its recipe."""
    accuracy: float | None
    ci: tuple[float, float] | None
    n: int
    test_accuracy: float | None
    test_ci: tuple[float, float] | None
    n_test: int
    chance: float
    n_folds: int
    scores: np.ndarray = field(repr=False, default_factory=lambda: np.zeros((0, 4)))


def question_only_probe(X: np.ndarray, answers: np.ndarray, groups, splits=None, n_folds: int = 5,
                        seed: int = 0, C: float = 1.0, min_questions: int = 20) -> QuestionOnlyResult:
    """Cross-fitted accuracy of the question-only model on X (n, c, f) with 95% intervals
    (`accuracy_interval`), overall and on the split = test questions (`splits`, one per question; None: no test
    figure). None accuracies when there are fewer than `min_questions` questions or than 2 recipes."""
    X = np.asarray(X, dtype=np.float32)
    answers = np.asarray(answers, dtype=np.int64)
    groups = [str(g) for g in groups]
    n, c = X.shape[:2]
    n_groups = len(set(groups))
    if n < min_questions or n_groups < 2:
        return QuestionOnlyResult(None, None, n, None, None, 0, 1.0 / c if c else 0.25, min(n_folds, n_groups))
    scores = cross_fitted_scores(X, answers, groups, n_folds, seed, C)
    correct = scores.argmax(1) == answers
    test = np.array([s == "test" for s in splits]) if splits is not None else np.zeros(n, dtype=bool)
    tg = [g for g, t in zip(groups, test) if t]
    return QuestionOnlyResult(float(correct.mean()), accuracy_interval(correct, groups, seed=seed), n,
                              float(correct[test].mean()) if test.any() else None,
                              accuracy_interval(correct[test], tg, seed=seed), int(test.sum()),
                              1.0 / c, min(n_folds, n_groups), scores)
