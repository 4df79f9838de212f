"""Distance probe and overlap on tiny hand-made vector sets with known answers (Hasty Student:
test_hasty.py)."""
from __future__ import annotations

import numpy as np
import pytest

from features.diagnostics.bias import answer_ranks, distance_probe, probe_features, recipe_overlap
from features.diagnostics.hasty import hasty_student


def test_answer_ranks_and_features_are_slot_invariant():
    dist = np.array([[0.4, 0.1, 0.3, 0.2]])
    assert answer_ranks(dist, np.array([1])).tolist() == [0]
    assert answer_ranks(dist, np.array([0])).tolist() == [3]
    f = probe_features(dist)
    perm = [2, 0, 3, 1]
    g = probe_features(dist[:, perm])
    assert np.allclose(f[perm], g)                       # the same choice gets the same features
    assert f[:, 3:].sum(axis=1).tolist() == [1, 1, 1, 1]  # one rank each


def _world(n, rank_of_answer, seed=0):
    """n questions whose answer always has the given distance rank; slots shuffled at random."""
    rng = np.random.default_rng(seed)
    d = np.sort(rng.uniform(0.2, 0.9, size=(n, 4)), axis=1)
    answers = rng.integers(0, 4, size=n)
    dist = np.empty_like(d)
    for i in range(n):
        others = [r for r in range(4) if r != rank_of_answer]
        rng.shuffle(others)
        slots = [s for s in range(4) if s != answers[i]]
        dist[i, answers[i]] = d[i, rank_of_answer]
        for s, r in zip(slots, others):
            dist[i, s] = d[i, r]
    groups = [f"r{i // 3}" for i in range(n)]
    return dist, answers, groups


@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("model", ["logreg", "svm"])
def test_probe_exploits_nearest_and_never_nearest(rank, model):
    """'The answer is the nearest' (Hasty Student 100%) and 'the answer is the second nearest'
    (Hasty Student 0%) are both learned from distances alone."""
    dist, answers, groups = _world(240, rank)
    res = distance_probe(dist, answers, groups, n_folds=5, seed=0, model=model)
    assert res.n == 240 and res.n_folds == 5
    assert res.accuracy > 0.95
    hs = float((hasty_student(dist) == answers).mean())
    assert hs == (1.0 if rank == 0 else 0.0)


def test_probe_sits_near_chance_without_a_cue():
    rng = np.random.default_rng(3)
    dist = rng.uniform(0.2, 0.9, size=(800, 4))
    answers = rng.integers(0, 4, size=800)
    res = distance_probe(dist, answers, [f"r{i // 4}" for i in range(800)], seed=0)
    assert 0.18 < res.accuracy < 0.32


def test_probe_is_deterministic_and_order_independent():
    dist, answers, groups = _world(200, 0, seed=5)
    noise = np.random.default_rng(9).normal(0, 0.2, size=dist.shape)
    dist = dist + noise                                   # make it imperfect
    a = distance_probe(dist, answers, groups, seed=1)
    b = distance_probe(dist, answers, groups, seed=1)
    perm = np.random.default_rng(2).permutation(len(answers))
    c = distance_probe(dist[perm], answers[perm], [groups[i] for i in perm], seed=1)
    assert a.accuracy == b.accuracy
    assert np.array_equal(a.predictions[perm], c.predictions)


def test_probe_with_too_few_questions_reports_none():
    dist, answers, groups = _world(8, 0)
    assert distance_probe(dist, answers, groups).accuracy is None
    assert distance_probe(dist[:30], answers[:30], ["one"] * 8).accuracy is None


def test_probe_rejects_unknown_model():
    dist, answers, groups = _world(60, 0)
    with pytest.raises(ValueError, match="logreg or svm"):
        distance_probe(dist, answers, groups, model="tree")


def test_overlap_coverage_and_jaccard():
    qs = {"a": [[1, 2, 3, 4], [1, 2, 3, 4]],          # same steps twice: coverage 4/8, jaccard 1
          "b": [[1, 2, 3, 4], [5, 6, 7, 8]],          # disjoint: coverage 1, jaccard 0
          "c": [[1, 2, 3, 4]]}                        # one question: coverage 4/5, no pairs
    cov, jac = recipe_overlap(qs, {"a": 8, "b": 8, "c": 5})
    assert cov == pytest.approx((0.5 + 1.0 + 0.8) / 3)
    assert jac == pytest.approx(0.5)
    assert recipe_overlap({}, {}) == (None, None)
    # Jaccard of {1,2,3,4} vs {3,4,5,6} is 2/6
    assert recipe_overlap({"x": [[1, 2, 3, 4], [3, 4, 5, 6]]}, {"x": 6})[1] == pytest.approx(1 / 3)


def test_pair_rule_finds_a_foreign_image_drawn_next_to_a_shown_one_and_nothing_else():
    """Coherence: a foreign image drawn from a shown image's neighbourhood forms the closest pair of the
    four, and it is the one of the pair less like the other two (its own recipe's look is missing):
    the rule finds it; independent images: chance; other tasks and no questions: not measured."""
    from features.diagnostics.bias import closest_pair_pick, pair_rule
    rng = np.random.default_rng(11)
    n, d = 1000, 64
    answers = rng.integers(0, 4, size=n)
    recipe = rng.normal(size=(n, 1, d))
    imgs = recipe + 1.5 * rng.normal(size=(n, 4, d))
    anchor = (answers + 1 + rng.integers(0, 3, size=n)) % 4           # a shown image, not the answer
    # the foreign photo: near its anchor's content, but without the recipe's shared look
    imgs[np.arange(n), answers] = imgs[np.arange(n), anchor] - recipe[:, 0] + 0.3 * rng.normal(size=(n, d))
    rows = np.arange(n * 4).reshape(n, 4).tolist()
    assert pair_rule("visual_coherence", rows, imgs.reshape(-1, d), answers) > 0.9
    independent = rng.normal(size=(n, 4, d))
    assert 0.2 < pair_rule("visual_coherence", rows, independent.reshape(-1, d), answers) < 0.3
    for task in ("visual_cloze", "textual_cloze", "visual_ordering"):
        assert pair_rule(task, rows, imgs.reshape(-1, d), answers) is None
    assert pair_rule("visual_coherence", [], imgs.reshape(-1, d), answers[:0]) is None
    # the pick is one of the closest pair, by hand on one question
    v = np.array([[[1.0, 0, 0], [0.9, 0.1, 0], [0, 1, 0], [0.6, 0.6, 0.2]]])
    # closest pair: 0 and 1; mean cosine to {2, 3}: image 1 is nearer them, so image 0 is picked
    assert closest_pair_pick(v).tolist() == [0]


def test_centre_rule_finds_distractors_drawn_around_the_answer_and_nothing_else():
    """Distractors drawn around the answer: the answer is the centre of its choice set, and the rule
    finds it; independent choices: chance; ordering: not measured (its choices share their images)."""
    from features.diagnostics.bias import centre_rule
    rng = np.random.default_rng(5)
    n, d = 800, 16
    answers = rng.integers(0, 4, size=n)
    around = rng.normal(size=(n, 1, d)) + 0.8 * rng.normal(size=(n, 4, d))
    others_mean = (around.sum(1) - around[np.arange(n), answers]) / 3
    around[np.arange(n), answers] = others_mean         # the answer sits amid its distractors
    independent = rng.normal(size=(n, 4, d))
    rows = np.arange(n * 4).reshape(n, 4).tolist()
    for task in ("visual_cloze", "textual_cloze", "visual_coherence"):
        assert centre_rule(task, rows, around.reshape(-1, d), answers) > 0.9
        assert 0.2 < centre_rule(task, rows, independent.reshape(-1, d), answers) < 0.3
    assert centre_rule("visual_ordering", rows, independent.reshape(-1, d), answers) is None
    assert centre_rule("visual_cloze", [], independent.reshape(-1, d), answers[:0]) is None
