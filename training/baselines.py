"""Model-free reference figures on a loaded QADataset, next to a trained model's accuracy.

- Hasty Student (`hasty_student_accuracy`): the context-free rule of features/diagnostics/hasty.py,
  applied to the dataset's own image vectors; it reads only the question and the choices.
- The step-text match (`step_text_match_accuracy`), its recipe-reading counterpart for visual cloze.

The adapters here only rebuild, from the dataset's per-choice queries, the arrays the rule takes.
"""
from __future__ import annotations

import numpy as np
import torch

from features.diagnostics.hasty import cloze_distances, coherence_distances, hasty_student, ordering_distances
from training.config import CLOZE_TASKS
from training.data import QADataset


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp(min=1e-12)


def _placeholder_column(query: np.ndarray) -> np.ndarray:
    """Visual cloze queries (Q, C, M): the column where the choices differ (the placeholder's)."""
    return (query != query[:, :1]).any(1).argmax(1)


def hasty_student_picks(ds: QADataset, split: str = "test") -> np.ndarray:
    """The choice Hasty Student picks for each question of `split`.

    The dataset holds one query per choice (training/data.py); the rule wants the question's items
    and the choices: cloze = the placeholder column gives the choices, the other columns the
    question; coherence = query c is the question minus image c, so the four images are rebuilt
    from queries 0 and 1; ordering = the queries are the candidate orderings."""
    sp = ds.splits[split]
    q = ds.images[torch.as_tensor(sp.query)].numpy()           # (Q, C, M, d)
    if ds.task in CLOZE_TASKS:          # textual cloze: the items are the titles' vectors
        p = _placeholder_column(sp.query)
        rows = np.arange(len(sp))
        choices = q[rows, :, p]                                    # (Q, 4, d)
        keep = np.array([[j for j in range(q.shape[2]) if j != pi] for pi in p])
        question = q[rows[:, None], 0, keep]                       # (Q, M-1, d)
        scores, _ = cloze_distances(question, choices)
    elif ds.task == "visual_coherence":
        images = np.stack([q[:, 1, 0], q[:, 0, 0], q[:, 0, 1], q[:, 0, 2]], axis=1)
        scores, _ = coherence_distances(images)
    else:
        scores, _ = ordering_distances(q)
    return hasty_student(scores)


def hasty_student_accuracy(ds: QADataset, split: str = "test") -> float:
    """Share of the questions of `split` that Hasty Student answers correctly."""
    return float((hasty_student_picks(ds, split) == ds.splits[split].answer).mean())


def step_text_match_accuracy(ds: QADataset, split: str = "test",
                             ctx_rows: np.ndarray | None = None) -> dict[str, float]:
    """A recipe-reading reference for cloze, the counterpart of Hasty Student (which never reads the
    recipe): pick the choice most similar (cosine, the encoder's shared image-text space) to the
    recipe's steps: for visual cloze a choice image against the step texts, for textual cloze a choice
    title against the steps' photos. `placeholder_step` compares with the step the placeholder stands
    for (an oracle alignment no model is given); `any_step` with the best-matching step of the recipe
    (no oracle). Needs context vectors (`text_features="vectors"`); `ctx_rows` substitutes other
    recipes' steps (`training.data.foreign_context_rows`)."""
    if ds.task not in CLOZE_TASKS or ds.text_features != "vectors":
        raise ValueError("the step-text match needs a cloze dataset loaded with text_features='vectors'")
    sp = ds.splits[split]
    rows = torch.as_tensor(sp.recipe_row if ctx_rows is None else ctx_rows)
    place = _placeholder_column(sp.query)
    choices = _unit(ds.images[torch.as_tensor(sp.query[np.arange(len(sp)), :, place])])   # (Q, C, d)
    text = _unit(ds.ctx[rows].float())                                  # (Q, S, d); padding rows are 0
    steps = torch.arange(text.shape[1])[None, :] < ds.ctx_len[rows][:, None]
    sims = torch.einsum("qcd,qsd->qcs", choices, text)
    any_step = sims.masked_fill(~steps[:, None, :], -2.0).max(-1).values.argmax(-1).numpy()
    out = {"any_step": float((any_step == sp.answer).mean()), "n": int(len(sp))}
    tgt = torch.as_tensor(sp.target_ctx)
    ok = (tgt >= 0).numpy()
    if ok.any() and ctx_rows is None:
        at = sims[torch.arange(len(sp)), :, tgt.clamp(min=0)].argmax(-1).numpy()
        out["placeholder_step"] = float((at[ok] == sp.answer[ok]).mean())
    return out


def reference_scores(ds: QADataset, split: str = "test") -> dict:
    """The model-free references of `split` (which must be one of `ds.splits`): chance, Hasty Student
    and, for visual cloze, the step-text match with the question's own recipe and with another
    recipe's steps (`step_text_match_foreign_recipe`), rounded to 4 places, as `mrqa baselines` prints them."""
    from training.ablation import foreign_context_rows
    sp = ds.splits[split]
    res = {"dataset_id": ds.dataset_id, "task": ds.task, "split": split, "n": len(sp),
           "chance": round(1 / sp.query.shape[1], 4),
           "hasty_student": round(hasty_student_accuracy(ds, split), 4)}
    if ds.task in CLOZE_TASKS:
        match = step_text_match_accuracy(ds, split)
        res["step_text_match"] = {k: round(v, 4) if isinstance(v, float) else v for k, v in match.items()}
        foreign = step_text_match_accuracy(ds, split, foreign_context_rows(sp.recipe_row)[0])
        res["step_text_match_foreign_recipe"] = round(foreign["any_step"], 4)
    return res
