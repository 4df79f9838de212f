"""The slot rule of `mrqa af-report` (features/datasets/af_report.py `slot_rule_accuracy`): a visual cloze
question read from the recipe without being told the answer step. Planted recipes whose photos match
their own steps' texts: the rule places the shown photos among the steps and picks the photo of a step
the placeholder's place allows over an equally good photo of a step it does not."""
from __future__ import annotations

import numpy as np

from features.datasets.af_report import slot_rule_accuracy


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _questions(n: int, seed: int, shown_readable: bool = True):
    """n recipes of 10 steps. A question shows the photos of 4 steps in order; one of them, not the first
    or the last, is the placeholder (the answer). Choices: the answer's photo; the photo of a step of the
    same recipe outside the placeholder's place (between its neighbours' steps), which matches its own
    step as well as the answer does; two photos of another recipe. With `shown_readable` false the shown
    photos match no step, so nothing says where the placeholder's step lies but its place in the question."""
    rng = np.random.default_rng(seed)
    rows, img, body = [], {}, {}
    for r in range(n):
        rid = f"r{r}"
        steps = _unit(rng.normal(size=(10, 32)))
        body[rid] = steps
        for s in range(10):
            img[f"{rid}_{s}"] = _unit(steps[s] + 0.3 * rng.normal(size=32) / np.sqrt(32))
        for k in range(2):
            img[f"{rid}_other{k}"] = _unit(rng.normal(size=32))
        outside: list[int] = []
        while not outside:                       # a same-recipe photo outside the place must exist
            shown = sorted(rng.choice(10, 4, replace=False).tolist())
            slot = int(rng.integers(1, 3))
            outside = [s for s in range(10) if s not in shown and not shown[slot - 1] < s < shown[slot + 1]]
        question = [f"{rid}_{s}" for s in shown]
        question[slot] = "@placeholder"
        if not shown_readable:
            for s in shown:
                img[f"{rid}_{s}"] = _unit(rng.normal(size=32)) if s != shown[slot] else img[f"{rid}_{s}"]
        choices = [f"{rid}_{shown[slot]}", f"{rid}_{rng.choice(outside)}", f"{rid}_other0", f"{rid}_other1"]
        order = rng.permutation(4)
        rows.append((rid, question, [choices[i] for i in order], int(np.where(order == 0)[0][0])))
    return rows, img, body


def test_the_slot_rule_reads_the_step_the_placeholder_stands_for():
    rows, img, body = _questions(200, 0)
    assert slot_rule_accuracy(rows, img, body) >= 0.95


def test_without_the_shown_photos_places_the_rule_falls_back_on_the_placeholders_place_alone():
    readable = slot_rule_accuracy(*_questions(300, 1))
    unreadable = slot_rule_accuracy(*_questions(300, 1, shown_readable=False))
    assert readable >= 0.95 and unreadable <= readable - 0.2


def test_questions_without_vectors_are_left_out():
    rows, img, body = _questions(10, 2)
    del body["r0"]
    del img[rows[1][2][0]]               # a choice's photo
    assert slot_rule_accuracy(rows[:2], img, body) is None
    assert slot_rule_accuracy(rows, img, body) == slot_rule_accuracy(rows[2:], img, body)
