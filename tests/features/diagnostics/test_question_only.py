"""The learned question-only probe on hand-made vector worlds: near 100% on a planted giveaway and
near chance without one, for every task; folds never split a recipe; seeded determinism; intervals."""
from __future__ import annotations

import numpy as np
import pytest

from features.diagnostics.question_only import (
    QuestionOnlyModel,
    accuracy_interval,
    cross_fitted_scores,
    fill_set_features,
    pair_distance,
    pair_features,
    pair_sequence_features,
    question_only_probe,
    recipe_folds,
    sequence_features,
    task_features,
    unit,
    wilson_interval,
)

DIM = 16


class World:
    """A vector matrix and question rows in the shape bias.resolve_dataset gives them."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.vectors: list[np.ndarray] = []

    def add(self, v: np.ndarray) -> int:
        self.vectors.append(unit(v))
        return len(self.vectors) - 1

    def noise(self) -> np.ndarray:
        return self.rng.normal(size=DIM)

    @property
    def mat(self) -> np.ndarray:
        return np.array(self.vectors, dtype=np.float32)


def _cloze_world(n: int, planted: bool, seed: int = 0):
    """Each recipe has a kitchen look (a random direction): the shown items and, when planted, the
    answer carry it; distractors come from other kitchens. Without the plant the answer is one more
    other-kitchen image."""
    w = World(seed)
    q_rows, c_rows, answers, groups = [], [], [], []
    for i in range(n):
        kitchen = w.noise()
        q_rows.append([w.add(1.5 * kitchen + w.noise()) for _ in range(3)])
        ans = int(w.rng.integers(0, 4))
        c_rows.append([w.add((1.5 * kitchen if planted and j == ans else 1.5 * w.noise()) + w.noise())
                       for j in range(4)])
        answers.append(ans)
        groups.append(f"r{i // 2}")
    return q_rows, c_rows, np.array(answers), groups, w.mat


def _coherence_world(n: int, planted: bool, seed: int = 0):
    """Three images of one kitchen and, when planted, the answer from another kitchen; without the
    plant all four share the kitchen and the answer index is arbitrary."""
    w = World(seed)
    c_rows, answers, groups = [], [], []
    for i in range(n):
        kitchen, other = w.noise(), w.noise()
        ans = int(w.rng.integers(0, 4))
        c_rows.append([w.add(1.5 * (other if planted and j == ans else kitchen) + w.noise()) for j in range(4)])
        answers.append(ans)
        groups.append(f"r{i // 2}")
    return [[] for _ in c_rows], c_rows, np.array(answers), groups, w.mat


def _ordering_world(n: int, planted: bool, seed: int = 0, length: int = 4):
    """A recipe's images drift along one 'progress' direction step by step (planted) or not at all.
    The candidate orders: the true one and three permutations that move its first or last image."""
    w = World(seed)
    progress = w.noise()
    c_rows, answers, groups = [], [], []
    for i in range(n):
        imgs = [w.add(w.noise() + (3.0 * t * progress / np.linalg.norm(progress) if planted else 0))
                for t in range(length)]
        true = list(range(length))
        wrong = []
        while len(wrong) < 3:
            p = [int(x) for x in w.rng.permutation(length)]
            if (p[0], p[-1]) != (0, length - 1) and p not in wrong:
                wrong.append(p)
        ans = int(w.rng.integers(0, 4))
        orders = wrong[:ans] + [true] + wrong[ans:]
        c_rows.append([[imgs[k] for k in o] for o in orders])
        answers.append(ans)
        groups.append(f"r{i // 2}")
    return [[] for _ in c_rows], c_rows, np.array(answers), groups, w.mat


WORLDS = {"visual_cloze": _cloze_world, "textual_cloze": _cloze_world,
          "visual_coherence": _coherence_world, "visual_ordering": _ordering_world}


@pytest.mark.parametrize("task", list(WORLDS))
def test_planted_giveaway_is_found_and_no_signal_stays_near_chance(task):
    q, c, y, g, mat = WORLDS[task](400, planted=True)
    X = task_features(task, q, c, mat)
    assert X.shape[:2] == (400, 4)
    res = question_only_probe(X, y, g, seed=0)
    assert res.accuracy > 0.95, res
    assert res.chance == 0.25 and res.n == 400 and res.n_folds == 5
    q, c, y, g, mat = WORLDS[task](400, planted=False)
    res = question_only_probe(task_features(task, q, c, mat), y, g, seed=0)
    assert 0.15 < res.accuracy < 0.35, res


@pytest.mark.parametrize("task", ["visual_cloze", "visual_coherence"])
def test_shuffled_answers_leave_only_chance(task):
    """The same planted vectors with the answer index drawn at random: nothing to learn."""
    q, c, _, g, mat = WORLDS[task](400, planted=True)
    y = np.random.default_rng(7).integers(0, 4, size=400)
    res = question_only_probe(task_features(task, q, c, mat), y, g, seed=0)
    assert 0.15 < res.accuracy < 0.35, res


def test_the_probe_sees_a_cue_no_fixed_distance_shows():
    """The giveaway lives in two dimensions of 16 (a 'kitchen look'): the cosine to the question
    mixes it with fourteen dimensions of noise, the learned metric weighs those two. The learned
    probe beats both the nearest choice and the distance probe by a clear margin."""
    from features.diagnostics.bias import distance_probe
    from features.diagnostics.hasty import cloze_distances
    rng = np.random.default_rng(1)
    n = 600
    look = np.zeros((n, DIM))
    look[:, :2] = rng.normal(size=(n, 2))
    q = unit(rng.normal(size=(n, 3, DIM)) + look[:, None, :])
    c = rng.normal(size=(n, 4, DIM))
    y = rng.integers(0, 4, size=n)
    c[np.arange(n), y] += look
    c = unit(c)
    groups = [f"r{i}" for i in range(n)]
    dist = cloze_distances(q, c)[1]
    nearest = float((dist.argmin(1) == y).mean())
    probe = distance_probe(dist, y, groups).accuracy
    learned = question_only_probe(task_features("visual_cloze", *_as_rows(q, c)), y, groups).accuracy
    assert learned > max(nearest, probe) + 0.08, (learned, nearest, probe)


def test_the_probe_also_learns_the_distance_rank_cue():
    """'The answer is always the second nearest choice' is not monotone in any similarity; the
    distance probe learns it from the rank, and so must the learned probe (it carries those features)."""
    from features.diagnostics.hasty import cloze_distances
    rng = np.random.default_rng(2)
    n = 400
    q = unit(rng.normal(size=(n, 3, DIM)))
    c = unit(rng.normal(size=(n, 4, DIM)) + 0.8 * q.mean(1, keepdims=True))
    y = np.argsort(cloze_distances(q, c)[1], axis=1)[:, 1]
    learned = question_only_probe(task_features("visual_cloze", *_as_rows(q, c)), y, [f"r{i}" for i in range(n)])
    assert learned.accuracy > 0.95


def test_the_probe_learns_the_centre_of_the_choice_set_cue():
    """Distractors drawn around the answer (knob 2 picks them close to it) make the answer the centre
    of the choice set, whatever the question shows: the choice nearest the question is chance here, the
    distance probe sees little, and the learned probe finds the answer from the spread among the choices."""
    from features.diagnostics.bias import distance_probe
    from features.diagnostics.hasty import cloze_distances
    from features.diagnostics.question_only import choice_spread
    rng = np.random.default_rng(3)
    n = 600
    q = unit(rng.normal(size=(n, 3, DIM)))
    y = rng.integers(0, 4, size=n)
    answer = rng.normal(size=(n, DIM))
    c = answer[:, None, :] + 0.9 * rng.normal(size=(n, 4, DIM))   # distractors around the answer
    c[np.arange(n), y] = answer
    c = unit(c)
    groups = [f"r{i}" for i in range(n)]
    dist = cloze_distances(q, c)[1]
    centre = float((choice_spread(c).argmin(1) == y).mean())
    assert centre > 0.9, centre                     # the planted cue is there
    assert float((dist.argmin(1) == y).mean()) < 0.32   # the question tells nothing
    probe = distance_probe(dist, y, groups).accuracy
    learned = question_only_probe(task_features("visual_cloze", *_as_rows(q, c)), y, groups).accuracy
    assert learned > 0.85 and learned > probe + 0.4, (learned, probe)


def test_the_probe_sees_a_choice_that_looks_like_one_shown_item():
    """The answer is a near copy of one of six shown items, the distractors of none, and every choice
    has the same cosine to the mean of the shown items: nothing measured against that mean tells them
    apart, the nearest single shown item does. The learned probe reads it through the item
    similarities (`item_similarity`), the distance probe cannot."""
    from features.diagnostics.bias import distance_probe
    from features.diagnostics.hasty import cloze_distances
    rng = np.random.default_rng(6)
    n = 600
    q = unit(rng.normal(size=(n, 6, DIM)))
    y = rng.integers(0, 4, size=n)
    m = unit(q.mean(1))
    answer = unit(q[np.arange(n), rng.integers(0, 6, size=n)] + 0.1 * rng.normal(size=(n, DIM)))
    a = (answer * m).sum(-1)                                       # the answer's cosine to the mean
    noise = rng.normal(size=(n, 4, DIM))
    noise = unit(noise - (noise * m[:, None]).sum(-1, keepdims=True) * m[:, None])   # orthogonal to it
    c = a[:, None, None] * m[:, None] + np.sqrt(1 - a ** 2)[:, None, None] * noise
    c[np.arange(n), y] = answer
    c = unit(c)
    np.testing.assert_allclose((c * m[:, None]).sum(-1), np.repeat(a[:, None], 4, 1), atol=1e-5)
    groups = [f"r{i}" for i in range(n)]
    probe = distance_probe(cloze_distances(q, c)[1], y, groups).accuracy
    learned = question_only_probe(task_features("visual_cloze", *_as_rows(q, c)), y, groups).accuracy
    assert probe < 0.35 and learned > 0.9, (learned, probe)


def test_the_stage_cue_is_read_from_the_placeholders_neighbours():
    """Steps follow a fixed order of kinds (kind k is followed by kind k+1); the answer is the kind that
    fits between the placeholder's neighbours, the distractors are other kinds, and no choice is like
    any shown photo. Against the mean of the shown photos a linear probe reads the transition only in
    part (about 53% here); the outer products with the neighbours (`sequence_features`) hold it, and a
    linear model on them reads it (about 99%)."""
    from features.diagnostics.question_only import sequence_basis, sequence_features
    rng = np.random.default_rng(7)
    n_kinds, n, slots = 12, 900, 4
    kinds = unit(rng.normal(size=(n_kinds, DIM)))
    look = lambda k: unit(kinds[k] + 0.15 * rng.normal(size=k.shape + (DIM,)))
    start = rng.integers(0, n_kinds, size=n)
    seq_kinds = (start[:, None] + np.arange(slots + 1)[None, :]) % n_kinds       # 5 steps, in order
    slot = rng.integers(0, slots, size=n)                                          # placeholder among 4
    steps = look(seq_kinds)
    shown_cols = np.array([[c for c in range(slots) if c != s] for s in slot])   # 3 shown of the first 4
    answer_kind = seq_kinds[np.arange(n), slot]
    y = rng.integers(0, 4, size=n)
    other = (answer_kind[:, None] + rng.choice(np.arange(1, n_kinds), size=(n, 3), replace=True)) % n_kinds
    ck = np.array([np.insert(o, j, a) for o, j, a in zip(other, y, answer_kind)])   # the answer at y
    choices = look(ck)
    prev = np.where((slot > 0)[:, None], steps[np.arange(n), np.maximum(slot - 1, 0)], 0)
    nxt = steps[np.arange(n), slot + 1]
    shown = steps[np.arange(n)[:, None], shown_cols]
    context = np.broadcast_to(unit(shown.mean(1))[:, None, :], choices.shape)
    pair = pair_features(context, choices)
    basis = sequence_basis(kinds.repeat(20, 0) + 0.1 * rng.normal(size=(240, DIM)), r=DIM)
    seq = sequence_features(prev, nxt, slot, slots, choices, basis)
    assert seq.shape == (n, 4, 2 * DIM * DIM + slots * DIM)
    groups = [f"r{i}" for i in range(n)]
    plain = question_only_probe(pair, y, groups).accuracy
    staged = question_only_probe(np.concatenate([pair, seq], -1), y, groups).accuracy
    assert (ck[np.arange(n), y] == answer_kind).all()
    assert staged > 0.85 and plain < staged - 0.3, (plain, staged)


def test_sequence_basis_is_the_same_on_every_run_and_orthonormal():
    from features.diagnostics.question_only import sequence_basis
    v = np.random.default_rng(3).normal(size=(300, DIM)).astype(np.float32)
    b1, b2 = sequence_basis(v, r=5), sequence_basis(v.copy(), r=5)
    assert b1.shape == (DIM, 5) and np.array_equal(b1, b2)
    np.testing.assert_allclose(b1.T @ b1, np.eye(5), atol=1e-5)
    assert (b1[np.abs(b1).argmax(0), np.arange(5)] > 0).all()           # signed: largest loading positive


def test_item_similarity_is_max_min_std_of_the_cosines_to_the_shown_items():
    from features.diagnostics.question_only import item_similarity, others_similarity
    rng = np.random.default_rng(7)
    shown, ch = rng.normal(size=(3, 5, DIM)), rng.normal(size=(3, 4, DIM))
    got = item_similarity(shown, ch)
    cos = np.einsum("ncd,nkd->nck", unit(ch), unit(shown))
    np.testing.assert_allclose(got, np.stack([cos.max(-1), cos.min(-1), cos.std(-1)], -1), atol=1e-6)
    others = others_similarity(ch)
    for i in range(4):                      # coherence: each image against the other three
        rest = np.delete(ch, i, axis=1)
        np.testing.assert_allclose(others[:, i], item_similarity(rest, ch[:, i:i + 1])[:, 0], atol=1e-6)


def test_spread_after_a_swap_is_the_spread_of_the_swapped_set():
    """AF scores every candidate in every slot from the current set's cosines: the same figures as
    `choice_spread` of each swapped set, built one by one."""
    from features.diagnostics.question_only import choice_spread, spread_after_swap
    rng = np.random.default_rng(4)
    ch = unit(rng.normal(size=(5, 4, DIM)))
    cand = unit(rng.normal(size=(5, 7, DIM)))
    col = rng.integers(0, 4, size=5)
    gram = np.einsum("ncd,nkd->nck", ch, ch)
    got = spread_after_swap(gram, np.einsum("nmd,ncd->nmc", cand, ch), col)
    for i in range(5):
        for m in range(7):
            swapped = ch[i].copy()
            swapped[col[i]] = cand[i, m]
            np.testing.assert_allclose(got[i, m], choice_spread(swapped), atol=1e-5)


def _as_rows(q: np.ndarray, c: np.ndarray):
    """Dense arrays -> (question rows, choice rows, matrix), the resolved-rows form."""
    n, k, d = q.shape
    mat = np.concatenate([q.reshape(-1, d), c.reshape(-1, d)]).astype(np.float32)
    q_rows = np.arange(n * k).reshape(n, k).tolist()
    c_rows = (n * k + np.arange(n * 4)).reshape(n, 4).tolist()
    return q_rows, c_rows, mat


def test_pair_features_layout():
    ctx = unit(np.random.default_rng(0).normal(size=(2, 4, 3)))
    ch = unit(np.random.default_rng(1).normal(size=(2, 4, 3)))
    f = pair_features(ctx, ch)
    assert f.shape == (2, 4, 12) and f.dtype == np.float32
    assert np.allclose(f[..., :3], ch) and np.allclose(f[..., 3:6], ctx)
    assert np.allclose(f[..., 6:9], ch * ctx) and np.allclose(f[..., 9:], np.abs(ch - ctx))


@pytest.mark.parametrize("ctx_dtype", [np.float32, np.float64])
def test_pair_and_sequence_features_written_in_place_are_the_concatenation_bit_for_bit(ctx_dtype):
    """The pair and stage features are written part by part into one array; they must be exactly what
    concatenating the plain numpy expressions gives (and `pair_features`, `sequence_features` each
    their part), bit for bit and laid out the same, or the adversary's float sums (and so the
    distractors it picks) and the probes' figures would change."""
    rng = np.random.default_rng(3)
    n, c, d, r, n_slots = 7, 11, 12, 5, 4
    V = unit(rng.normal(size=(n, c, d))).astype(np.float32)
    ctx = unit(rng.normal(size=(n, d))).astype(ctx_dtype)
    prev, nxt = (rng.normal(size=(n, d)).astype(np.float32) for _ in range(2))
    prev[0] = 0.0                                              # a placeholder with no shown photo before it
    slot = rng.integers(0, n_slots, n)
    basis = rng.normal(size=(d, r)).astype(np.float32)
    # the features as plain concatenations of numpy expressions, the way they were first written
    C = np.broadcast_to(ctx.astype(np.float32)[:, None, :], (n, c, d))
    cp, pp, npj = V @ basis, prev @ basis, nxt @ basis
    oh = np.eye(n_slots, dtype=np.float32)[slot]
    outer = [(a[:, None, :, None] * cp[:, :, None, :]).reshape(n, c, -1) for a in (pp, npj, oh)]
    pairs = np.concatenate([V, C, V * C, np.abs(V - C)], axis=-1)
    want = np.concatenate([pairs] + outer, axis=-1)
    assert pair_features(C, V).tobytes() == pairs.tobytes()
    assert sequence_features(prev, nxt, slot, n_slots, V, basis).tobytes() == np.concatenate(outer, -1).tobytes()
    got = pair_sequence_features(ctx, V, prev, nxt, slot, n_slots, basis)
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape == (n, c, 4 * d + 2 * r * r + n_slots * r)
    assert got.strides == want.strides and got.tobytes() == want.tobytes()
    w = rng.normal(size=(n, want.shape[-1])).astype(np.float32)
    assert np.einsum("ncf,nf->nc", got, w).tobytes() == np.einsum("ncf,nf->nc", want, w).tobytes()


@pytest.mark.parametrize("staged", [False, True])
def test_set_features_filled_in_place_are_the_concatenation_bit_for_bit(staged):
    """AF's judge writes the pair (and stage) features with room for the set-level cues and fills that room
    (`fill_set_features`) instead of concatenating: the values, the layout and a model's products on them
    must be those of `with_set_features`, bit for bit, and the pair distance read from the wider array the
    same, or the distractors AF picks would change."""
    from features.diagnostics.question_only import (
        N_SET_FEATURES,
        choice_spread,
        item_similarity,
        set_features,
        with_set_features,
    )
    rng = np.random.default_rng(5)
    n, c, d, r, n_slots = 9, 4, 16, 4, 5
    V = unit(rng.normal(size=(n, c, d))).astype(np.float32)
    ctx = unit(rng.normal(size=(n, d))).astype(np.float32)
    shown = unit(rng.normal(size=(n, 3, d))).astype(np.float32)
    if staged:
        prev, nxt = (rng.normal(size=(n, d)).astype(np.float32) for _ in range(2))
        slot, basis = rng.integers(0, n_slots, n), rng.normal(size=(d, r)).astype(np.float32)
        plain = pair_sequence_features(ctx, V, prev, nxt, slot, n_slots, basis)
        roomy = pair_sequence_features(ctx, V, prev, nxt, slot, n_slots, basis, room=N_SET_FEATURES)
    else:
        C = np.broadcast_to(ctx[:, None, :], (n, c, d))
        plain, roomy = pair_features(C, V), pair_features(C, V, room=N_SET_FEATURES)
    f = plain.shape[-1]
    assert roomy.shape == (n, c, f + N_SET_FEATURES) and roomy[..., :f].tobytes() == plain.tobytes()
    assert pair_distance(roomy, d).tobytes() == pair_distance(plain, d).tobytes()
    cues = (pair_distance(plain, d), choice_spread(V), item_similarity(shown, V))
    want = np.concatenate([plain, set_features(*cues)], axis=-1)          # the plain expression
    assert with_set_features(plain, *cues).tobytes() == want.tobytes()
    got = fill_set_features(roomy, pair_distance(roomy, d), choice_spread(V), item_similarity(shown, V))
    assert got is roomy and got.dtype == want.dtype == np.float32
    assert got.strides == want.strides and got.tobytes() == want.tobytes()
    w = rng.normal(size=(want.shape[-1],)).astype(np.float32)
    assert (got @ w).tobytes() == (want @ w).tobytes() and got.sum(-1).tobytes() == want.sum(-1).tobytes()


def test_model_is_slot_invariant():
    """One weight vector for every choice: permuting a question's choices permutes its scores."""
    q, c, y, _, mat = _cloze_world(200, planted=True)
    X = task_features("visual_cloze", q, c, mat)
    m = QuestionOnlyModel().fit(X, y)
    perm = [3, 1, 0, 2]
    assert np.allclose(m.scores(X)[:, perm], m.scores(X[:, perm]), atol=1e-5)


def test_folds_never_put_a_recipe_on_both_sides():
    rng = np.random.default_rng(0)
    groups = [f"r{int(x)}" for x in rng.integers(0, 57, size=500)]
    fold = recipe_folds(groups, n_folds=5, seed=3)
    assert sorted(set(fold.tolist())) == [0, 1, 2, 3, 4]
    for k in range(5):
        test = {g for g, f in zip(groups, fold) if f == k}
        train = {g for g, f in zip(groups, fold) if f != k}
        assert test and train and not test & train
    # the folds depend on the set of recipes and the seed, not on the row order
    order = rng.permutation(500)
    again = recipe_folds([groups[i] for i in order], n_folds=5, seed=3)
    assert again.tolist() == fold[order].tolist()
    assert recipe_folds(["a"] * 10, 5).tolist() == [0] * 10            # one recipe: nothing to hold out


def test_each_question_is_scored_by_the_model_of_the_other_recipes():
    q, c, y, g, mat = _cloze_world(150, planted=True)
    X = task_features("visual_cloze", q, c, mat)
    scores = cross_fitted_scores(X, y, g, n_folds=4, seed=2)
    fold = recipe_folds(g, 4, 2)
    for k in range(4):
        held = fold == k
        direct = QuestionOnlyModel(1.0, 2).fit(X[~held], y[~held]).scores(X[held])
        assert np.allclose(scores[held], direct, atol=1e-5)


def test_same_seed_same_scores_other_seed_other_folds():
    q, c, y, g, mat = _coherence_world(200, planted=True)
    X = task_features("visual_coherence", q, c, mat)
    a = cross_fitted_scores(X, y, g, seed=5)
    b = cross_fitted_scores(X, y, g, seed=5)
    assert np.array_equal(a, b)
    assert not np.array_equal(recipe_folds(g, 5, 5), recipe_folds(g, 5, 6))
    r1 = question_only_probe(X, y, g, ["test" if i % 3 == 0 else "train" for i in range(200)], seed=5)
    r2 = question_only_probe(X, y, g, ["test" if i % 3 == 0 else "train" for i in range(200)], seed=5)
    assert (r1.accuracy, r1.ci, r1.test_accuracy, r1.test_ci) == (r2.accuracy, r2.ci, r2.test_accuracy, r2.test_ci)


def test_test_split_figure_counts_only_test_questions():
    q, c, y, g, mat = _cloze_world(300, planted=False, seed=4)
    X = task_features("visual_cloze", q, c, mat)
    splits = ["test" if int(gr[1:]) % 4 == 0 else "train" for gr in g]
    res = question_only_probe(X, y, g, splits, seed=0)
    test = np.array([s == "test" for s in splits])
    correct = res.scores.argmax(1) == y
    assert res.n_test == int(test.sum()) > 0
    assert res.test_accuracy == pytest.approx(correct[test].mean())
    assert res.accuracy == pytest.approx(correct.mean())
    assert question_only_probe(X, y, g, None).test_accuracy is None


def test_interval_holds_the_estimate_and_shrinks_with_more_recipes():
    rng = np.random.default_rng(0)
    widths = []
    for n in (40, 400, 4000):
        correct = rng.random(n) < 0.6
        groups = [f"r{i // 2}" for i in range(n)]
        lo, hi = accuracy_interval(correct, groups, seed=0)
        assert lo <= correct.mean() <= hi
        widths.append(hi - lo)
    assert widths[0] > widths[1] > widths[2]
    assert accuracy_interval(np.zeros(0), []) is None


def test_interval_is_wider_when_a_recipes_questions_move_together():
    """Recipes answered all-right or all-wrong: the recipe bootstrap widens the interval beyond
    Wilson's (which treats questions as independent)."""
    n = 600
    groups = [f"r{i // 10}" for i in range(n)]
    together = np.array([int(g[1:]) % 2 == 0 for g in groups])
    lo, hi = accuracy_interval(together, groups, seed=0)
    wlo, whi = wilson_interval(float(together.sum()), n)
    assert lo <= wlo and hi >= whi and (hi - lo) > 1.5 * (whi - wlo)


def test_too_few_questions_give_no_figure():
    q, c, y, g, mat = _cloze_world(10, planted=True)
    res = question_only_probe(task_features("visual_cloze", q, c, mat), y, g)
    assert res.accuracy is None and res.ci is None and res.n == 10


def test_unknown_task_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown task"):
        task_features("visual_riddle", [], [], np.zeros((0, DIM), np.float32))


def test_column_mean_std_is_numpys_bit_for_bit():
    """The probe's and AF's fits standardise with `column_mean_std`: the same float64 mean and spread as
    numpy's, bit for bit, whatever the shape and chunk (AF's choices, and so the datasets, depend on them)."""
    from features.diagnostics.question_only import column_mean_std
    rng = np.random.default_rng(0)
    for trial in range(120):
        n, f = int(rng.integers(1, 9000)), int(rng.integers(1, 200))
        x = (rng.normal(size=(n, f)) * rng.uniform(0.01, 100, size=f) + rng.normal(size=f) * 10).astype(np.float32)
        if trial % 10 == 0:
            x = np.asfortranarray(x)
        mu, sd = column_mean_std(x, chunk_rows=int(rng.integers(1, 3000)))
        assert mu.tobytes() == x.mean(0, dtype=np.float64).tobytes()
        assert sd.tobytes() == x.std(0, dtype=np.float64).tobytes(), (n, f)
