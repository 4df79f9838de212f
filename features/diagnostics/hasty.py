"""Hasty Student (RecipeQA §4.2): the context-free rule that answers from the question alone.

It never reads the recipe; it looks only at the question's items and the choices, in a feature space
(the dataset's encoder), with cosine distance:

- visual / textual cloze: the choice closest on average to the question's other items;
- visual coherence: the image most dissimilar (mean distance) to the other three;
- visual ordering: the ordering with the smallest mean distance between consecutive images.

Each `*_distances` function returns the per-choice Hasty Student score (`hasty_student` picks the
lowest) together with the choice's distance from the question that the distance probe of
features/diagnostics/bias.py learns from, since both come from the same pairwise distances. This is
the one implementation: the bias report (question rows) and the trainer's reference figure
(training/baselines.py, a loaded QADataset) both call it.
"""
from __future__ import annotations

import numpy as np


def cos_dist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine distance 1 - cos along the last axis (broadcasting); zero vectors count as distance 1."""
    na = np.linalg.norm(a, axis=-1)
    nb = np.linalg.norm(b, axis=-1)
    return 1.0 - (a * b).sum(-1) / np.maximum(na * nb, 1e-12)


def cloze_distances(question: np.ndarray, choices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """question (n, k, d) context vectors, choices (n, 4, d) ->
    (hasty (n, 4): mean distance of each choice to the k question items -- lower is picked;
     probe (n, 4): distance of each choice from the mean question vector)."""
    hasty = cos_dist(choices[:, :, None, :], question[:, None, :, :]).mean(-1)
    probe = cos_dist(choices, question.mean(axis=1)[:, None, :])
    return hasty, probe


def coherence_distances(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """images (n, 4, d) -> (hasty (n, 4): minus the mean distance of each image to the other three,
    so the most dissimilar image has the lowest score; probe (n, 4): distance of each image from
    the mean of the other three)."""
    m = images.shape[1]
    pair = cos_dist(images[:, :, None, :], images[:, None, :, :])       # (n, 4, 4), zero diagonal
    hasty = -(pair.sum(-1) / (m - 1))
    loo = (images.sum(axis=1, keepdims=True) - images) / (m - 1)
    probe = cos_dist(images, loo)
    return hasty, probe


def ordering_distances(orderings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """orderings (n, 4 choices, L images, d) -> mean consecutive distance per choice (n, 4), used
    both as the Hasty Student score (lowest picked) and as the probe's distance."""
    steps = cos_dist(orderings[:, :, :-1, :], orderings[:, :, 1:, :])    # (n, 4, L-1)
    s = steps.mean(-1)
    return s, s.copy()


def hasty_student(scores: np.ndarray) -> np.ndarray:
    """The choice each question's Hasty Student picks: the lowest score (ties: the first)."""
    return np.argmin(scores, axis=1)


def probe_features(dist: np.ndarray) -> np.ndarray:
    """Per choice (rows n*4): [distance, distance - min, distance - mean, rank one-hot (4)].
    Depends only on the set of distances of the question, never on the choice's slot."""
    n, c = dist.shape
    order = np.argsort(dist, axis=1, kind="stable")
    rank = np.empty_like(order)
    rank[np.arange(n)[:, None], order] = np.arange(c)[None, :]
    onehot = np.eye(c)[rank]                                               # (n, c, c)
    feats = np.concatenate([dist[..., None], (dist - dist.min(1, keepdims=True))[..., None],
                            (dist - dist.mean(1, keepdims=True))[..., None], onehot], axis=-1)
    return feats.reshape(n * c, -1)
