"""Question families as data, and knob 1 (the only procedural part): per-recipe question skeletons.

A skeleton is a question before its distractors: the recipe's steps it shows and its "answer step"
(cloze: the @placeholder step; coherence: one of the 3 coherent steps; ordering: one of the 4 steps,
drawn at random). Knob 1 removes the answer step from the pool after each question (and with
k1=1 one random other step of the question too), and caps questions per recipe at
floor(n_steps * ratio). The RecipeQA-style preset removes nothing, so steps repeat across questions.

Sampling is iterative per recipe but vectorised ACROSS recipes: round j draws question j of every
recipe at once from uniforms keyed by (seed, task, knob-1 variant, recipe_id, round), so a recipe's
questions never depend on the other recipes or on the order they are visited in.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from features.datasets.knobs import KnobParams, md5_key, splitmix64, stable_key, uniforms


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


@dataclass
class Skeletons:
    """Columnar skeletons (one row per question), sorted by (recipe position, q_index)."""
    recipe_pos: np.ndarray       # (Q,) index into the recipe list given to build_skeletons
    q_index: np.ndarray          # (Q,)
    steps: np.ndarray            # (Q, n_shown) step_idx in recipe order
    answer_step: np.ndarray      # (Q,)
    extra_removed: np.ndarray    # (Q,) -1 when none

    def __len__(self) -> int:
        return len(self.q_index)


def _variant(params: KnobParams) -> str:
    """Skeletons depend only on the knob-1 parameters, so k2/k3 variants share their questions."""
    return (f"{params.preset}|{params.min_steps}|{params.questions_per_step:.6f}|"
            f"{params.remove_answer_step}|{params.extra_step_removal}")


def build_skeletons(recipes: list[tuple[str, str, list[int]]], family: TaskFamily,
                    params: KnobParams, seed: int, recipe_keys: np.ndarray | None = None
                    ) -> tuple[Skeletons, dict[str, int]]:
    """Skeletons of every recipe ((recipe_id, split, eligible steps) sorted by id) + skip counts.
    recipe_keys: md5_key(recipe_id) per recipe when already computed in bulk (SQL)."""
    n_shown = family.n_shown
    lens = np.array([len(s) for _, _, s in recipes], dtype=np.int64)
    ok = lens >= max(params.min_steps, n_shown)
    skips = {"recipe_too_few_steps": int((~ok).sum())} if (~ok).any() else {}
    pos = np.flatnonzero(ok)
    width = int(lens[pos].max()) if len(pos) else 0
    pool_steps = np.full((len(pos), max(width, 1)), -1, dtype=np.int64)
    for row, p in enumerate(pos):
        pool_steps[row, :lens[p]] = recipes[p][2]
    in_pool = pool_steps >= 0
    variant = stable_key(seed, family.task, _variant(params))
    if recipe_keys is None:
        recipe_keys = np.array([md5_key(r[0]) for r in recipes], dtype=np.uint64)
    keys = splitmix64(np.asarray(recipe_keys, dtype=np.uint64)[pos] ^ np.uint64(variant))
    max_q = np.floor(lens[pos] * params.questions_per_step + 1e-9).astype(np.int64)
    out_rp, out_qi, out_steps, out_ans, out_extra = [], [], [], [], []
    rows = np.arange(len(pos))
    for j in range(int(max_q.max()) if len(pos) else 0):
        active = (j < max_q) & (in_pool.sum(1) >= n_shown)
        if not active.any():
            break
        a = rows[active]
        u = uniforms(keys[a] + np.uint64(j), 101, width + 2)
        draw = np.where(in_pool[a], u[:, :width], 2.0)
        cols = np.sort(np.argsort(draw, axis=1, kind="stable")[:, :n_shown], axis=1)   # recipe order
        shown = np.take_along_axis(pool_steps[a], cols, axis=1)
        ai = np.minimum((u[:, width] * n_shown).astype(np.int64), n_shown - 1)
        answer = shown[np.arange(len(a)), ai]
        extra = np.full(len(a), -1, dtype=np.int64)
        if params.remove_answer_step:
            in_pool[a, cols[np.arange(len(a)), ai]] = False
        if params.extra_step_removal:
            ei = np.minimum((u[:, width + 1] * (n_shown - 1)).astype(np.int64), n_shown - 2)
            ei = ei + (ei >= ai)                                  # one of the other shown steps
            extra = shown[np.arange(len(a)), ei]
            in_pool[a, cols[np.arange(len(a)), ei]] = False
        out_rp.append(pos[a]), out_qi.append(np.full(len(a), j)), out_steps.append(shown)
        out_ans.append(answer), out_extra.append(extra)
    if not out_rp:
        e = np.zeros(0, dtype=np.int64)
        return Skeletons(e, e, np.zeros((0, n_shown), dtype=np.int64), e, e), skips
    rp, qi = np.concatenate(out_rp), np.concatenate(out_qi)
    order = np.lexsort((qi, rp))
    return Skeletons(rp[order], qi[order], np.concatenate(out_steps)[order],
                     np.concatenate(out_ans)[order], np.concatenate(out_extra)[order]), skips


def recipe_skeletons(recipe_id: str, split: str, steps: list[int], family: TaskFamily,
                     params: KnobParams, seed: int) -> tuple[list[Skeleton], str | None]:
    """The questions of one recipe as Skeleton objects; returns (skeletons, skip reason or None)."""
    sk, skips = build_skeletons([(recipe_id, split, list(steps))], family, params, seed)
    if skips:
        return [], "too_few_steps"
    return [Skeleton(recipe_id, split, int(sk.q_index[i]), tuple(int(x) for x in sk.steps[i]),
                     int(sk.answer_step[i]), None if sk.extra_removed[i] < 0 else int(sk.extra_removed[i]))
            for i in range(len(sk))], None
