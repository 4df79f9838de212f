"""Visual coherence beyond the paper: a foreign image matched to one of the recipe's own photos.

The knob-2 ball draws the foreign image from a shown image's nearest neighbours, so on the
1,000-recipe demo it is one of the closest pair of the four images in 9 questions in 10
(`bias.pair_rule`): a question-only model has half the answer from that pair alone, and a learned
one reads 69-73% of the AF coherence settings. With `distractors = "matched"` (`mrqa generate --task
visual_coherence --distractors matched`) the foreign image is instead drawn from the images of
other recipes of the question's split whose cosines to the 3 shown images, sorted, are nearest
those of a *reference*: a photo of the question's own recipe from a step it does not show (picked
by the question's seeded key). The foreign image then sits among the shown ones the way a photo of
the recipe would: not closer, not farther, so no rule on the encoder's distances tells it apart.
Knobs 2 and 3 are not applied (their distances are what it replaces); knob 1 is. The setting is
named `K1-0-0-matched` (`-af` for its AF variant): its own dataset id, Parquet partition and card
config, never a paper setting's.

With `distractors = "author"` (`K1-0-0-author[-af]`) the candidates are only the photos of the other recipes
of the question's author in its split. Every photo of a recipe shares its kitchen (counter, light, framing),
and on a recipe site an author's kitchen is the same from recipe to recipe, so a foreign photo from another
author's kitchen is told from the shown ones by its pixels alone (the look probe, `mrqa look-probe`, reads 97%
of the matched AF questions so); one from the author's own kitchen differs only by the small per-recipe
change of light and framing. Questions whose author has no other recipe in the split get no candidate.

`matched_pool` returns per question its `MATCHED_POOL` best-matched candidates in that order; text
twins and photos the shown steps' texts cannot tell apart are left out by the caller (questions.py),
as for the ball.
"""
from __future__ import annotations

import numpy as np

from features.datasets.knobs import splitmix64, stable_key

MATCHED_POOL = 48            # candidates kept per question (AF's pool; the first valid one is the plain pick)
BLOCK = 64                   # questions per matrix product


def reference_items(sp, items: np.ndarray, shown_steps: np.ndarray, qkeys: np.ndarray) -> np.ndarray:
    """(Q,) per question an image of its recipe from a step it does not show (items: the 3 shown
    images; shown_steps: the steps it shows), picked by the seeded question key; -1 when there is none."""
    order = np.lexsort((sp.item_keys, sp.recipe_code))
    codes = sp.recipe_code[order]
    starts = np.searchsorted(codes, sp.recipe_code[items[:, 0]], side="left")
    ends = np.searchsorted(codes, sp.recipe_code[items[:, 0]], side="right")
    salt = np.uint64(stable_key("matched-reference"))
    out = np.full(len(items), -1, dtype=np.int64)
    for k in range(len(items)):
        own = order[starts[k]:ends[k]]
        own = own[~np.isin(sp.step_idx[own], shown_steps[k]) & ~np.isin(own, items[k])]
        if len(own):
            out[k] = own[np.argmin(splitmix64(sp.item_keys[own] ^ qkeys[k] ^ salt))]
    return out


def profile(sims: np.ndarray) -> np.ndarray:
    """Cosines to the 3 shown images, sorted high to low (the last axis)."""
    return -np.sort(-sims, axis=-1)


def matched_pool(sp, items: np.ndarray, ref: np.ndarray, m: int = MATCHED_POOL, same_author: bool = False
                 ) -> np.ndarray:
    """(Q, m) candidate items, best match first (-1 padding): by the L1 distance between a candidate's
    sorted cosines to the 3 shown images and the reference's. Candidates:
    images of other recipes of the question's split (`same_author`: only those of the recipes of the question
    recipe's author; a recipe without an author gets none). Rows without a reference get none. Ties go to the
    lower item row (a stable order: the same inputs give the same pool)."""
    V = sp.vecs
    Q = len(items)
    cand = np.full((Q, m), -1, dtype=np.int64)
    split_of = sp.splits[items[:, 0]]
    for s in np.unique(split_of):
        pool = np.flatnonzero(sp.splits == s)
        rows = np.flatnonzero((split_of == s) & (ref >= 0))
        if not len(pool) or not len(rows):
            continue
        Vp = V[pool].astype(np.float32)
        for b in range(0, len(rows), BLOCK):
            r = rows[b:b + BLOCK]
            shown = V[items[r]].astype(np.float32)                              # (B, 3, d)
            S = np.einsum("nd,bjd->bnj", Vp, shown)                              # (B, N, 3)
            target = profile(np.einsum("bd,bjd->bj", V[ref[r]].astype(np.float32), shown))   # (B, 3)
            c = np.abs(profile(S) - target[:, None, :]).sum(-1).astype(np.float64)          # (B, N)
            c[sp.recipe_code[pool][None, :] == sp.recipe_code[items[r, 0]][:, None]] = np.inf
            if same_author:
                a = sp.author_code[items[r, 0]][:, None]
                c[(a < 0) | (sp.author_code[pool][None, :] != a)] = np.inf
            k = min(m, len(pool))
            if k < len(pool):
                part = np.argpartition(c, k - 1, axis=1)[:, :k]
            else:
                part = np.tile(np.arange(len(pool)), (len(r), 1))
            pc = np.take_along_axis(c, part, 1)
            o = np.lexsort((part, pc), axis=1)
            part, pc = np.take_along_axis(part, o, 1), np.take_along_axis(pc, o, 1)
            cand[r, :k] = np.where(np.isfinite(pc), pool[part], -1)
    return cand
