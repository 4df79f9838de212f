"""Train once on the pooled train/val questions of several datasets of one task, test on each.

The settings of one task share the recipe split (recipes are assigned to train/val/test once, by
id), so the union of their train splits never holds a test recipe of any of them. A small setting
(1-0-1-af has ~540 training questions) then trains on every setting's questions, and each setting
is still scored on its own test split. `pool(datasets)` builds the union as one QADataset: the image
and context tensors concatenated, each dataset's rows offset, the query image lists padded to the
widest. Step texts must be vectors (token vocabularies differ between datasets).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from training.data import QADataset, Split


def pool(datasets: list[QADataset], splits: tuple[str, ...] = ("train", "val")) -> QADataset:
    """One QADataset holding the given splits of every dataset (same task, encoder, text features)."""
    if not datasets:
        raise ValueError("nothing to pool")
    first = datasets[0]
    for ds in datasets[1:]:
        for attr in ("task", "encoder_id", "text_features"):
            if getattr(ds, attr) != getattr(first, attr):
                raise ValueError(f"cannot pool {ds.dataset_id} with {first.dataset_id}: different {attr} "
                                 f"({getattr(ds, attr)} vs {getattr(first, attr)})")
    if first.text_features != "vectors":
        raise ValueError("pooled training needs --text-features vectors (token vocabularies differ per dataset)")
    width = max(s.query.shape[2] for ds in datasets for s in ds.splits.values())
    steps = max(ds.ctx.shape[1] for ds in datasets)
    images, ctx, ctx_len = [], [], []
    img_off = ctx_off = 0
    parts: dict[str, list[Split]] = {s: [] for s in splits}
    for ds in datasets:
        images.append(ds.images)
        pad = steps - ds.ctx.shape[1]
        ctx.append(torch.nn.functional.pad(ds.ctx, (0, 0, 0, pad)) if pad else ds.ctx)
        ctx_len.append(ds.ctx_len)
        for name in splits:
            sp = ds.splits.get(name)
            if sp is None or not len(sp):
                continue
            q = np.where(sp.query > 0, sp.query + img_off, 0)
            if q.shape[2] < width:
                q = np.pad(q, ((0, 0), (0, 0), (0, width - q.shape[2])))
            parts[name].append(Split([f"{ds.dataset_id}/{x}" for x in sp.qids], sp.recipe_row + ctx_off, q,
                                     sp.answer, sp.target_ctx))
        img_off += ds.images.shape[0]
        ctx_off += ds.ctx.shape[0]
    merged = {name: Split([q for p in ps for q in p.qids], np.concatenate([p.recipe_row for p in ps]),
                          np.concatenate([p.query for p in ps]), np.concatenate([p.answer for p in ps]),
                          np.concatenate([p.target_ctx for p in ps]))
              for name, ps in parts.items() if ps}
    return replace(first, dataset_id="pooled:" + "+".join(ds.knobs or ds.dataset_id for ds in datasets),
                   dataset_hash="", splits=merged, images=torch.cat(images), ctx=torch.cat(ctx),
                   ctx_len=torch.cat(ctx_len), knobs="pooled", dropped={})
