"""Exact match and token F1 with SQuAD normalisation (lower case, punctuation and the articles
a/an/the removed, whitespace collapsed), as R2VQ scores its open answers. An unanswerable question's
answer is "N/A" (normalised "na"): only the same prediction scores on it."""
from __future__ import annotations

import re
import string
from collections import Counter

_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
    p, g = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not p or not g:
        return float(p == g)
    common = Counter(p) & Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def score(predictions: list[str], golds: list[str]) -> dict:
    """Mean EM and F1 (in %) over aligned lists."""
    if len(predictions) != len(golds):
        raise ValueError(f"{len(predictions)} predictions for {len(golds)} answers")
    n = len(golds)
    if n == 0:
        return {"n": 0, "em": 0.0, "f1": 0.0}
    return {"n": n, "em": 100 * sum(map(exact_match, predictions, golds)) / n,
            "f1": 100 * sum(map(f1, predictions, golds)) / n}
