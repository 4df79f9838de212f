"""The pooled adversary of adversarial filtering: a GM3C question-only model trained on every AF
setting of a task at once, scoring each question out of fold.

AF (features/datasets/adversarial.py) picks distractors against a linear ensemble trained per
setting. A nonlinear question-only model that sees all settings' questions (the settings share one
recipe split) still learns a cue AF leaves: on the 1,000-recipe demo it reads 37-52% of the AF visual
cloze questions (`mrqa sweep --pooled`). `out_of_fold` trains that model k times, each time on the
questions of the other folds of recipes (all splits; 10% of those recipes held out for early
stopping), and returns for every question the probability it gives the answer and whether the answer
is its pick. `drop_plan` then names the questions it solves with probability at least `tau`, never
taking a dataset below `min_kept` of its plain setting's questions. Deterministic for a seed.
"""
from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from training.config import resolve_configs
from training.data import QADataset, Split, load_for_training
from training.pooled import pool

FOLDS = 4
TAU = 0.5


def _unit(key: str) -> int:
    return int(hashlib.sha256(key.encode()).hexdigest()[:12], 16)


def out_of_fold(export_dir: Path, dataset_ids: list[str], recipe_of: dict[tuple[str, str], str],
                folds: int = FOLDS, seed: int = 0, size: str = "small", max_epochs: int = 30, patience: int = 5,
                lance_uri: str | None = None, progress: bool = True) -> dict[str, dict[str, tuple[float, bool]]]:
    """dataset_id -> qid -> (probability of the answer, answer is the argmax), each question scored by
    a question-only model that never trained on its recipe. `recipe_of`: (dataset_id, qid) -> recipe."""
    from training.ddp import init_distributed
    from training.train import autocast, build_model, fit, set_seed
    if folds < 2:
        raise ValueError("--folds must be at least 2")
    mc, tc = resolve_configs(size, text_features="vectors", max_epochs=max_epochs, patience=patience, seed=seed)
    dss = [load_for_training(export_dir, d, "vectors", tc, lance_uri) for d in dataset_ids]
    union = pool(dss, splits=("train", "val", "test"))
    parts = [union.splits[s] for s in ("train", "val", "test") if s in union.splits]
    qids = [q for p in parts for q in p.qids]
    rr, qq, aa, tt = (np.concatenate([getattr(p, f) for p in parts])
                      for f in ("recipe_row", "query", "answer", "target_ctx"))
    recipes = [recipe_of[tuple(q.split("/", 1))] for q in qids]
    fold = np.array([_unit(f"fold:{seed}:{r}") % folds for r in recipes])
    inner = np.array([_unit(f"stop:{seed}:{r}") % 10 == 0 for r in recipes])

    def sub(ix: np.ndarray) -> Split:
        return Split([qids[i] for i in ix], rr[ix], qq[ix], aa[ix], tt[ix])

    _, device = init_distributed(tc)
    p_answer, right = np.zeros(len(qids)), np.zeros(len(qids), dtype=bool)
    for f in range(folds):
        held = np.where(fold == f)[0]
        ds: QADataset = replace(union, splits={"train": sub(np.where((fold != f) & ~inner)[0]),
                                               "val": sub(np.where((fold != f) & inner)[0]), "test": sub(held)})
        set_seed(seed + f)
        model = build_model(ds, replace(mc, scorer="question_only", text_features="vectors", align=False))
        fit(model, ds, tc, device)
        model.eval()
        with torch.no_grad():
            for s in range(0, len(held), 256):
                idx = np.arange(s, min(s + 256, len(held)))
                b = ds.batch("test", idx, device)
                with autocast(device, tc.amp):
                    p = torch.softmax(model(b).float(), 1).cpu()
                ans = b["answer"].cpu()
                p_answer[held[idx]] = p[torch.arange(len(idx)), ans].numpy()
                right[held[idx]] = (p.argmax(1) == ans).numpy()
    out: dict[str, dict[str, tuple[float, bool]]] = {}
    for q, p, r in zip(qids, p_answer, right):
        d, qid = q.split("/", 1)
        out.setdefault(d, {})[qid] = (round(float(p), 6), bool(r))
    return out


def check_args(tau: float, min_kept: float) -> None:
    """The refusals of `drop_plan`, for a caller that wants them before any work."""
    if not 0 < tau <= 1:
        raise ValueError(f"--tau must be in (0, 1], got {tau}")
    if not 0 <= min_kept < 1:
        raise ValueError(f"--min-kept must be in [0, 1), got {min_kept}")


def drop_plan(oof: dict[str, dict[str, tuple[float, bool]]], n_plain: dict[str, int], tau: float = TAU,
              min_kept: float = 0.0) -> dict[str, list[str]]:
    """dataset_id -> the qids to drop: solved out of fold (the pick is the answer) with probability
    >= tau, most confident first, while the dataset keeps at least `min_kept` x its plain setting's
    questions (0: no floor)."""
    check_args(tau, min_kept)
    plan = {}
    for did, qs in sorted(oof.items()):
        cands = sorted(((p, q) for q, (p, r) in qs.items() if r and p >= tau), key=lambda x: (-x[0], x[1]))
        room = len(qs) - int(np.ceil(min_kept * n_plain.get(did, 0))) if min_kept else len(cands)
        plan[did] = sorted(q for _, q in cands[:max(0, room)])
    return plan
