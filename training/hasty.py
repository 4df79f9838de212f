"""Hasty Student accuracy (context-free heuristic, RecipeQA paper) from the dataset's own vectors, and
its recipe-reading counterpart for visual cloze, the step-text match (`step_text_match_accuracy`).

Uses helper F's features.diagnostics.bias distance functions when importable; otherwise the same rule
here: cloze = the choice most similar (cosine) to the question's other images; coherence = the
image least similar to the other three; ordering = the sequence with the smallest summed cosine
distance between consecutive images. It reads only the question and choices, never the recipe.
"""
from __future__ import annotations

import numpy as np
import torch

from training.data import QADataset


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp(min=1e-12)


def hasty_student_predictions(ds: QADataset, split: str = "test") -> np.ndarray:
    """Predicted choice per question of `split` (trainer-local rule, see module doc)."""
    sp = ds.splits[split]
    q = _unit(ds.images[torch.as_tensor(sp.query)])          # (Q, C, M, d)
    mask = torch.as_tensor(sp.query > 0)
    if ds.task == "visual_cloze":
        # query c = the question with the placeholder filled by choice c: mean pairwise cosine
        sims = torch.einsum("qcmd,qcnd->qcmn", q, q)
        pair = mask[..., :, None] & mask[..., None, :] & ~torch.eye(q.shape[2], dtype=torch.bool)
        score = (sims * pair).sum((-1, -2)) / pair.sum((-1, -2)).clamp(min=1)
    elif ds.task == "visual_coherence":
        # query c = the question minus image c: the most coherent remainder wins
        sims = torch.einsum("qcmd,qcnd->qcmn", q, q)
        pair = mask[..., :, None] & mask[..., None, :] & ~torch.eye(q.shape[2], dtype=torch.bool)
        score = (sims * pair).sum((-1, -2)) / pair.sum((-1, -2)).clamp(min=1)
    else:
        consecutive = (q[:, :, :-1] * q[:, :, 1:]).sum(-1)      # cosine of neighbours in the sequence
        score = consecutive.sum(-1)
    return score.argmax(-1).numpy()


def _placeholder_column(query: np.ndarray) -> np.ndarray:
    """Visual cloze queries (Q, C, M): the column where the choices differ (the placeholder's)."""
    return (query != query[:, :1]).any(1).argmax(1)


def _bias_predictions(ds: QADataset, split: str) -> np.ndarray:
    """The same rule through helper F's features.diagnostics.bias (cloze/coherence/ordering distances)."""
    from features.diagnostics import bias
    sp = ds.splits[split]
    q = ds.images[torch.as_tensor(sp.query)].numpy()           # (Q, C, M, d)
    if ds.task == "visual_cloze":
        p = _placeholder_column(sp.query)
        rows = np.arange(len(sp))
        choices = q[rows, :, p]                                    # (Q, 4, d)
        keep = np.array([[j for j in range(q.shape[2]) if j != pi] for pi in p])
        question = q[rows[:, None], 0, keep]                       # (Q, M-1, d)
        scores, _ = bias.cloze_distances(question, choices)
    elif ds.task == "visual_coherence":
        # query c is the question minus image c, in order: rebuild the 4 question images
        images = np.stack([q[:, 1, 0], q[:, 0, 0], q[:, 0, 1], q[:, 0, 2]], axis=1)
        scores, _ = bias.coherence_distances(images)
    else:
        scores, _ = bias.ordering_distances(q)
    return bias.hasty_student(scores)


def hasty_student_accuracy(ds: QADataset, split: str = "test") -> tuple[float, str]:
    """(accuracy, source): helper F's features.diagnostics.bias rule when importable, else ours (same rule)."""
    try:
        pred, src = _bias_predictions(ds, split), "features.diagnostics.bias"
    except ImportError:
        pred, src = hasty_student_predictions(ds, split), "training.hasty"
    return float((pred == ds.splits[split].answer).mean()), src


def step_text_match_accuracy(ds: QADataset, split: str = "test",
                             ctx_rows: np.ndarray | None = None) -> dict[str, float]:
    """A recipe-reading reference for visual cloze, the counterpart of Hasty Student (which never
    reads the recipe): pick the choice image most similar (cosine, the encoder's shared image-text
    space) to the recipe's step texts. `placeholder_step` compares with the text of the step the
    placeholder stands for (an oracle alignment no model is given); `any_step` with the best-matching
    step of the recipe (no oracle). Needs step-text vectors (`text_features="vectors"`); `ctx_rows`
    substitutes other recipes' steps (`training.data.foreign_context_rows`)."""
    if ds.task != "visual_cloze" or ds.text_features != "vectors":
        raise ValueError("the step-text match needs a visual_cloze dataset loaded with text_features='vectors'")
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
