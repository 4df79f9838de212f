"""Question families as data, and knob 1 (the only procedural part): per-recipe question skeletons.

A skeleton is a question before its distractors: the recipe's steps it shows and its "answer step"
(cloze: the @placeholder step; coherence: one of the 3 coherent steps; ordering: one of the 4 steps,
drawn at random). Knob 1 removes the answer step from the pool after each question (and with
k1=1 one random other step of the question too), and caps questions per recipe at
floor(n_steps * ratio). The RecipeQA-style preset removes nothing, so steps repeat across questions.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from features.knobs import KnobParams, recipe_rng


@dataclass(frozen=True)
class TaskFamily:
    """A question family: how many recipe steps a question shows and how it is phrased."""
    task: str
    n_shown: int             # steps of the recipe shown in the question
    space: str               # image | title
    question_modality: tuple
    context_modality: tuple
    instruction: str | None = None


FAMILIES = {
    "visual_cloze": TaskFamily("visual_cloze", 4, "image", ("images",), ("body", "title", "videos")),
    "visual_coherence": TaskFamily("visual_coherence", 3, "image", ("images",),
                                   ("body", "title", "videos")),
    "visual_ordering": TaskFamily("visual_ordering", 4, "image", ("images",),
                                  ("body", "title", "videos"),
                                  instruction="Choose the correct order of images to make a story"),
    "textual_cloze": TaskFamily("textual_cloze", 4, "title", ("title",),
                                ("body", "images", "videos")),
}


@dataclass
class Skeleton:
    recipe_id: str
    split: str
    q_index: int
    steps: tuple[int, ...]       # shown steps, in recipe order
    answer_step: int             # removed from the pool after this question (knob 1)
    extra_removed: int | None    # k1=1: the other step removed


def recipe_skeletons(recipe_id: str, split: str, steps: list[int], family: TaskFamily,
                     params: KnobParams, seed: int) -> tuple[list[Skeleton], str | None]:
    """Sample the questions of one recipe; returns (skeletons, skip reason or None)."""
    n = len(steps)
    if n < max(params.min_steps, family.n_shown):
        return [], "too_few_steps"
    rng = recipe_rng(seed, family.task, _variant(params), recipe_id)
    max_q = int(np.floor(n * params.questions_per_step + 1e-9))
    pool = list(steps)
    out: list[Skeleton] = []
    while len(out) < max_q and len(pool) >= family.n_shown:
        shown = sorted(rng.choice(pool, size=family.n_shown, replace=False).tolist())
        answer = shown[int(rng.integers(family.n_shown))]
        extra = None
        if params.remove_answer_step:
            pool.remove(answer)
        if params.extra_step_removal:
            others = [s for s in shown if s != answer and s in pool]
            if others:
                extra = others[int(rng.integers(len(others)))]
                pool.remove(extra)
        out.append(Skeleton(recipe_id, split, len(out), tuple(shown), answer, extra))
    return out, None


def _variant(params: KnobParams) -> str:
    """Skeletons depend only on the knob-1 parameters, so k2/k3 variants share their questions."""
    return (f"{params.preset}|{params.min_steps}|{params.questions_per_step:.6f}|"
            f"{params.remove_answer_step}|{params.extra_step_removal}")


def build_skeletons(recipes: list[tuple[str, str, list[int]]], family: TaskFamily,
                    params: KnobParams, seed: int) -> tuple[list[Skeleton], dict[str, int]]:
    """Skeletons of every recipe ((recipe_id, split, eligible steps) sorted by id) + skip counts."""
    skeletons: list[Skeleton] = []
    skips: dict[str, int] = {}
    for recipe_id, split, steps in recipes:
        sk, reason = recipe_skeletons(recipe_id, split, steps, family, params, seed)
        if reason:
            skips[f"recipe_{reason}"] = skips.get(f"recipe_{reason}", 0) + 1
        skeletons.extend(sk)
    return skeletons, skips
