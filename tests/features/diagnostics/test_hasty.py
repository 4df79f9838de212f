"""Hasty Student on tiny hand-made vector sets with known answers, one per task."""
from __future__ import annotations

import numpy as np

from features.diagnostics.hasty import cloze_distances, coherence_distances, cos_dist, hasty_student, ordering_distances


def unit(*v):
    a = np.asarray(v, dtype=np.float64)
    return a / np.linalg.norm(a)


E = np.eye(4)


def test_cosine_distance_of_zero_vectors_is_one():
    assert np.allclose(cos_dist(np.zeros(3), E[0, :3]), 1.0)
    assert np.allclose(cos_dist(E[0], E[0]), 0.0) and np.allclose(cos_dist(E[0], -E[0]), 2.0)


def test_cloze_hasty_student_picks_the_choice_closest_to_the_question():
    # question images all near axis 0; choice 2 is axis 0 itself, the others are orthogonal axes
    q = np.stack([unit(1, 0.1, 0, 0), unit(1, 0, 0.1, 0), unit(1, 0, 0, 0.1)])[None]
    choices = np.stack([E[1], E[2], E[0], E[3]])[None]
    hasty, probe = cloze_distances(q, choices)
    assert hasty.shape == probe.shape == (1, 4)
    assert hasty_student(hasty).tolist() == [2]
    assert int(np.argmin(probe[0])) == 2
    assert probe[0, 2] < 0.01 and probe[0, 0] > 0.9


def test_coherence_hasty_student_picks_the_odd_one_out():
    imgs = np.stack([unit(1, 0.1, 0, 0), unit(1, 0, 0.1, 0), E[3], unit(1, 0, 0, 0.1)])[None]
    hasty, probe = coherence_distances(imgs)
    assert hasty_student(hasty).tolist() == [2]
    assert int(np.argmax(probe[0])) == 2


def test_ordering_hasty_student_picks_the_smoothest_sequence():
    # a smooth path through 4 points: a -> b -> c -> d with small steps
    a, b, c, d = unit(1, 0, 0, 0), unit(1, 0.3, 0, 0), unit(1, 0.6, 0, 0), unit(1, 0.9, 0, 0)
    orders = np.stack([np.stack([a, c, b, d]), np.stack([d, a, c, b]), np.stack([a, b, c, d]),
                       np.stack([b, d, a, c])])[None]
    hasty, probe = ordering_distances(orders)
    assert hasty_student(hasty).tolist() == [2]
    assert np.allclose(hasty, probe)


