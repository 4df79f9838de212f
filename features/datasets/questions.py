"""Per-task question assembly for features/datasets/generate.py, vectorised over all questions of a batch.

cloze (visual + textual), coherence and ordering each take a Batch (skeletons of one knob-1
variant), the feature Space and the dense KNN arrays, and fill a GeneratedDataset with Arrow
columns. Candidate pools (neighbour lists in seeded pick order with their distances to the answer
and to the question) are cached on the Batch, so the knob-2/3 settings of a skeleton set share them.
"""
from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa

from features.datasets.distractors import (
    N_RANKS,
    DenseKnn,
    balanced_targets,
    coherence_scores,
    first_per_group,
    pick_keys,
    rows_cols,
    take_first,
)
from features.datasets.knobs import MATCHED_KINDS, uniforms

log = logging.getLogger(__name__)

PLACEHOLDER = "@placeholder"
STREAM_ORDER, STREAM_FAR = 7, 11


def _r(x) -> np.ndarray:
    return np.round(np.asarray(x, dtype=np.float64), 6)


def _lists(mat, typ=None) -> pa.ListArray:
    mat = np.asarray(mat)
    n, m = mat.shape[0], mat.shape[1]
    vals = mat.reshape(-1)
    arr = pa.array(vals.tolist() if vals.dtype == object else vals, typ)
    return pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * m), arr)


def _ragged(mask: np.ndarray) -> pa.ListArray:
    """Per row, the column numbers where mask is set, as list<int>."""
    offsets = np.r_[0, np.cumsum(mask.sum(1))].astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.nonzero(mask)[1].astype(np.int64)))


def _insert(others: np.ndarray, value: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """(Q, 3) + (Q,) -> (Q, 4) with value at column pos."""
    j = np.arange(4)[None, :]
    src = np.clip(j - (j > pos[:, None]), 0, others.shape[1] - 1)
    return np.where(j == pos[:, None], value[:, None], np.take_along_axis(others, src, axis=1))


def _split_codes(b) -> np.ndarray:
    return np.unique(b.splits, return_inverse=True)[1] if len(b.splits) else np.zeros(0, dtype=np.int64)


def _k3(ds, b):
    """(need, heads, drawn) per question from the knob-3 mode (balanced: need filled later)."""
    p, u = ds.params, b.u_k3
    q = len(u)
    drawn = np.minimum((u * N_RANKS).astype(np.int64), N_RANKS - 1)
    if p.k3_mode == "coin":
        heads = u < p.k3_prob
        return np.where(heads, p.k3_n_constrained, 0), heads, drawn
    if p.k3_mode == "all":
        return np.full(q, p.k3_n_constrained), np.ones(q, dtype=bool), drawn
    if p.k3_mode == "balanced":
        return np.zeros(q, dtype=np.int64), np.ones(q, dtype=bool), drawn
    return np.zeros(q, dtype=np.int64), np.zeros(q, dtype=bool), drawn


def _balanced(ds, b, feasible: np.ndarray, drawn: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Target ranks (or -1) for the questions `ok`; records the draw statistics on the dataset."""
    target = np.full(len(ok), -1, dtype=np.int64)
    idx = np.flatnonzero(ok)
    target[idx] = balanced_targets(feasible[idx], _split_codes(b)[idx], drawn[idx], b.qkeys[idx])
    kept = target >= 0
    ds.skip("balanced_rank_quota", (ok & ~kept).sum())
    ds.notes = {"rank_counts": np.bincount(target[kept], minlength=N_RANKS).tolist(),
                "drawn_rank_infeasible": int((~feasible[idx, drawn[idx]]).sum()),
                "redrawn": int((kept & (target != drawn)).sum())}
    return target


def _balanced_prov(b, keep, feasible, drawn, target) -> dict:
    return {"drawn_rank": pa.array(drawn[keep]), "feasible_ranks": _ragged(feasible[keep]),
            "rank_redrawn": pa.array(target[keep] != drawn[keep])}


# ----------------------------------------------------------------------------- cloze

def _fill(P: dict, sp, mask: np.ndarray, block: int = 2048) -> np.ndarray:
    """Compute the question-side dot products dd of every candidate of the rows where `mask` needs a
    cell not computed yet; returns those rows. Whole rows at a time (lazily: settings without a
    knob-3 rule only touch the rows of their picks): a candidate is gathered once and multiplied by
    its question's n_q vectors in one batched matmul, instead of gathering the (n_q, d) query block
    per cell; and a value depends on its row alone, whatever settings asked before."""
    rows = np.flatnonzero((mask & ~P["done"][:, None]).any(1))
    C, qv, dd = P["C"], P["qv"], P["dd"]
    for s in range(0, len(rows), block):
        r = rows[s:s + block]
        c = C[r]
        out = np.matmul(sp.vecs[np.maximum(c, 0)], qv[r].transpose(0, 2, 1))      # (B, W, n_q)
        dd[r] = np.where((c >= 0)[..., None], out, np.nan)
    P["done"][rows] = True
    return rows


def _cloze_pool(b, sp, knn: DenseKnn, candidates: bool = True) -> dict:
    P = b.pools.get("cloze")
    if P is None:
        q = len(b.qids)
        rows = np.arange(q)
        ans = b.items[rows, b.answer_col]
        ctx_mask = np.ones(b.items.shape, dtype=bool)
        ctx_mask[rows, b.answer_col] = False
        qmean = sp.vecs[b.items[ctx_mask].reshape(q, -1)].astype(np.float64).mean(axis=1)
        tp = knn.pos_of_item[ans]
        has = tp >= 0
        P = b.pools["cloze"] = {
            "ans": ans, "qmean": qmean, "tp": tp, "d_ans_q": sp.cos_to(ans[:, None], qmean)[:, 0],
            "m_d": np.where(has, knn.m_d[np.maximum(tp, 0)], np.nan),
            "s_d": np.where(has, knn.s_d[np.maximum(tp, 0)], np.nan),
            "d_k": np.where(has, knn.d_k[np.maximum(tp, 0)], 2.0)}
    if candidates and "C" not in P:
        ans, tp = P["ans"], P["tp"]
        C = np.where((tp >= 0)[:, None], knn.cand[np.maximum(tp, 0)], -1)
        if sp.name == "title":                      # never the answer's own text
            C = np.where((C >= 0) & (sp.text_code[np.maximum(C, 0)] == sp.text_code[ans][:, None]), -1, C)
        D = np.where(C >= 0, knn.dist[np.maximum(tp, 0)], np.nan)
        order = np.argsort(pick_keys(b.qkeys, sp.item_keys, C), axis=1, kind="stable")
        C, D = np.take_along_axis(C, order, 1), np.take_along_axis(D, order, 1)
        qn = P["qmean"] / np.maximum(np.linalg.norm(P["qmean"], axis=1, keepdims=True), 1e-12)
        P.update({"C": C, "D": D, "qv": qn[:, None, :].astype(np.float32),
                  "dd": np.full(C.shape + (1,), np.nan), "done": np.zeros(len(C), dtype=bool),
                  "rec": np.where(C >= 0, sp.recipe_code[np.maximum(C, 0)], -1),
                  "txt": np.where(C >= 0, sp.text_code[np.maximum(C, 0)], -1)})
    return P


def cloze(ds, b, sp, knn: DenseKnn) -> None:
    p = ds.params
    if not len(b.qids):
        return
    P = _cloze_pool(b, sp, knn, candidates=p.distractors not in ("random_far", "kitchen"))
    need, heads, drawn = _k3(ds, b)
    if p.distractors == "kitchen":
        _cloze_kitchen(ds, b, sp, P, need, heads)
        return
    if p.distractors == "random_far":
        sel, ok = _random_far(b, sp, knn, [P["ans"]], 3)
        ds.skip("no_far_random_candidate", (~ok).sum())
        keep = np.flatnonzero(ok)
        cand = sel["cand"][keep]
        cols = rows_cols(sel["mask"][keep], 3)
        picks = np.take_along_axis(cand, cols, 1)
        dist = 1.0 - np.einsum("qmd,qd->qm", sp.vecs[picks], sp.vecs[P["ans"][keep]]).astype(np.float64)
        dq = sp.cos_to(picks, P["qmean"][keep])
        _emit_cloze(ds, b, sp, P, keep, picks, dist, dq, dq < P["d_ans_q"][keep][:, None],
                    {"rule": "random_far", "d_k": pa.array(_r(P["d_k"][keep]))},
                    need, heads)
        return
    lo = np.zeros(len(b.qids)) if p.ball_lo_sd is None else P["m_d"] + p.ball_lo_sd * P["s_d"]
    hi = P["m_d"] + p.ball_hi_sd * P["s_d"]
    inball = (P["C"] >= 0) & (P["D"] > lo[:, None]) & (P["D"] < hi[:, None])
    S = first_per_group(inball, P["rec"])
    if sp.name == "title":
        S = first_per_group(S, P["txt"])
    if p.k3_mode != "off":
        _fill(P, sp, S)
    closer = (1.0 - P["dd"][..., 0]) < P["d_ans_q"][:, None]
    close, far = S & closer, S & ~closer
    n_c, n_close = S.sum(1), close.sum(1)
    ok = n_c >= 3
    ds.skip("too_few_ball_candidates", (~ok).sum())
    extra = {}
    if p.k3_mode == "balanced":
        t = np.arange(N_RANKS)[None, :]
        feasible = (t <= n_close[:, None]) & (3 - t <= (n_c - n_close)[:, None]) & ok[:, None]
        target = _balanced(ds, b, feasible, drawn, ok)
        need = np.maximum(target, 0)
        keep_mask = target >= 0
        # the distractors nearest to the answer in distance-to-the-question (just closer / just
        # farther), so the choices' distances say nothing beyond the (uniform) rank
        gap = np.where(S, np.abs((1.0 - P["dd"][..., 0]) - P["d_ans_q"][:, None]), np.inf)
        order = np.argsort(gap, axis=1, kind="stable")
        inv = np.argsort(order, axis=1)
        pick = lambda m, n: np.take_along_axis(take_first(np.take_along_axis(m, order, 1), n), inv, 1)
        sel = pick(close, need) | pick(far, 3 - need)
    else:
        keep_mask = ok & (n_close >= need)
        ds.skip("too_few_closer_candidates", (ok & ~keep_mask).sum())
        forced = take_first(close, need)
        sel = forced | take_first(S & ~forced, 3 - need)
    _fill(P, sp, sel & keep_mask[:, None])
    closer = (1.0 - P["dd"][..., 0]) < P["d_ans_q"][:, None]
    keep = np.flatnonzero(keep_mask)
    cols = rows_cols(sel[keep], 3)
    g = lambda a: np.take_along_axis(a[keep], cols, 1)
    picks, dist, dq, closer = g(P["C"]), g(P["D"]), 1.0 - g(P["dd"][..., 0]), g(closer)
    if p.af_rounds:                 # adversarial filtering: same knobs, distractors a probe cannot reject
        from features.datasets.adversarial import config, refine_cloze
        sub, picks, extra = refine_cloze(ds, b, sp, P, keep, picks, need[keep], p.k3_mode == "balanced",
                                         lo[keep], hi[keep])
        keep = keep[sub]
        dist = 1.0 - np.einsum("qmd,qd->qm", sp.vecs[picks], sp.vecs[P["ans"][keep]]).astype(np.float64)
        dq = sp.cos_to(picks, P["qmean"][keep])
        closer = dq < P["d_ans_q"][keep][:, None]
        extra["adversarial"] = config(ds)
    if p.k3_mode == "balanced":
        extra.update({**_balanced_prov(b, keep, feasible, drawn, target), "target_rank": pa.array(target[keep])})
    m, s = P["m_d"][keep], P["s_d"][keep]
    extra.update({"rule": "ball", "m_d": pa.array(_r(m)), "s_d": pa.array(_r(s)),
                  "ball": _lists(_r(np.stack([lo[keep], hi[keep]], 1))), "ball_sd": [p.ball_lo_sd, p.ball_hi_sd],
                  "k": p.k, "n_ball_candidates": pa.array(n_c[keep]),
                  # without a knob-3 rule the closeness of the candidates is computed lazily (only the rows
                  # of the picks, and those other settings of the same run asked for): not counted
                  "n_closer_candidates": pa.array(n_close[keep]) if p.k3_mode != "off" else None})
    _emit_cloze(ds, b, sp, P, keep, picks, dist, dq, closer, extra, need, heads)


def _cloze_kitchen(ds, b, sp, P, need, heads) -> None:
    """Visual cloze beyond the paper: the distractors are photos of the question's own recipe (its
    kitchen: counter, light, framing) from steps it neither shows nor could fill the placeholder with,
    that the answer step's text tells from the answer (adversarial.kitchen_candidates). The ball of
    knob 2 and the rule of knob 3 are not applied (the recipe replaces them); knob 1 is. The first 3
    candidates in the question's seeded order, or with AF those its adversary finds most plausible."""
    from features.datasets.adversarial import kitchen_candidates
    cand = kitchen_candidates(sp, b, np.arange(len(b.qids)), P["ans"])
    n_c = (cand >= 0).sum(1)
    ok = n_c >= 3
    ds.skip("too_few_kitchen_candidates", (~ok).sum())
    keep = np.flatnonzero(ok)
    picks = cand[keep, :3]
    extra = {}
    if ds.params.af_rounds:
        from features.datasets.adversarial import config, refine_cloze
        sub, picks, extra = refine_cloze(ds, b, sp, P, keep, picks, need[keep], False, None, None, kitchen=cand[keep])
        keep = keep[sub]
        extra["adversarial"] = config(ds)
    dist = 1.0 - np.einsum("qmd,qd->qm", sp.vecs[picks], sp.vecs[P["ans"][keep]]).astype(np.float64)
    dq = sp.cos_to(picks, P["qmean"][keep])
    extra.update({"rule": "kitchen", "n_kitchen_candidates": pa.array(n_c[keep])})
    _emit_cloze(ds, b, sp, P, keep, picks, dist, dq, dq < P["d_ans_q"][keep][:, None], extra, need, heads)


def _emit_cloze(ds, b, sp, P, keep, picks, dist, dq, closer, extra, need, heads) -> None:
    pos = b.pos[keep]
    ans = P["ans"][keep]
    choices = _insert(picks, ans, pos)
    choice_dq = _insert(dq, P["d_ans_q"][keep], pos)
    question = sp.labels[b.items[keep]].copy()
    question[np.arange(len(keep)), b.answer_col[keep]] = PLACEHOLDER
    k = len(keep)
    distractors = pa.StructArray.from_arrays(
        [pa.array(closer.reshape(-1)), pa.array(_r(dq).reshape(-1)), pa.array(_r(dist).reshape(-1)),
         pa.array(sp.item_ids[picks].reshape(-1).tolist(), pa.string()),
         pa.array(sp.recipe_ids[picks].reshape(-1).tolist(), pa.string())],
        names=["closer", "dist_q", "distance", "item", "recipe_id"])
    prov = {**extra, "answer_item": pa.array(sp.item_ids[ans].tolist(), pa.string()),
            "choice_items": _lists(sp.item_ids[choices], pa.string()),
            "question_items": _lists(sp.item_ids[b.items[keep]], pa.string()),
            "placeholder_index": pa.array(b.answer_col[keep]), "d_answer_q": pa.array(_r(P["d_ans_q"][keep])),
            "k3_heads": pa.array(heads[keep]), "n_closer_required": pa.array(need[keep]),
            "n_closer": pa.array(closer.sum(1)),
            "distractors": pa.ListArray.from_arrays(pa.array(np.arange(k + 1, dtype=np.int32) * 3), distractors)}
    ds.set_rows(b, keep, question, sp.labels[choices], pos, np.argmin(choice_dq, axis=1), prov)


def _random_far(b, sp, knn: DenseKnn, refs: list[np.ndarray], n_pick: int, n_try: int = 32):
    """RecipeQA-style distractors: random items of the same split from other recipes, each farther
    from every reference item than that item's K-th nearest neighbour ("away from" the answer);
    one per recipe (and text), the first n_pick in draw order."""
    q = len(b.qids)
    u = uniforms(b.qkeys, STREAM_FAR, n_try)
    cand = np.zeros((q, n_try), dtype=np.int64)
    for s in np.unique(b.splits):
        pool = np.flatnonzero(sp.splits == s)
        rows = b.splits == s
        cand[rows] = pool[np.minimum((u[rows] * len(pool)).astype(np.int64), len(pool) - 1)]
    valid = sp.recipe_code[cand] != sp.recipe_code[b.items[:, 0]][:, None]
    for r in refs:
        tp = knn.pos_of_item[r]
        dk = np.where(tp >= 0, knn.d_k[np.maximum(tp, 0)], 2.0)
        valid &= sp.cos_to(cand, sp.vecs[r].astype(np.float64)) > dk[:, None]
    S = first_per_group(valid, np.broadcast_to(sp.recipe_code[cand], cand.shape).copy())
    if sp.name == "title":
        S = first_per_group(S, sp.text_code[cand])
    sel = take_first(S, n_pick)
    return {"cand": cand, "mask": sel}, sel.sum(1) == n_pick


# ----------------------------------------------------------------------------- coherence

def _coherence_pool(b, sp, knn: DenseKnn) -> dict:
    if "coherence" in b.pools:
        return b.pools["coherence"]
    q = len(b.qids)
    v = sp.vecs[b.items].astype(np.float64)                    # (Q, 3, d)
    gram = np.einsum("qid,qjd->qij", v, v)
    min_pair = (1.0 - gram[:, [0, 0, 1], [1, 2, 2]]).min(axis=1)
    others = [(1, 2), (0, 2), (0, 1)]
    cs = np.stack([gram[:, i, j] + gram[:, i, k] for i, (j, k) in enumerate(others)], axis=1)
    ss = np.stack([((v[:, j] + v[:, k]) ** 2).sum(-1) for j, k in others], axis=1)
    tps = [knn.pos_of_item[b.items[:, j]] for j in range(3)]
    Ca = np.concatenate([np.where((t >= 0)[:, None], knn.cand[np.maximum(t, 0)], -1) for t in tps], 1)
    Da = np.concatenate([knn.dist[np.maximum(t, 0)] for t in tps], 1)
    Da = np.where(Ca >= 0, Da, np.nan)
    Aa = np.repeat(np.arange(3), knn.cand.shape[1])[None, :].repeat(q, 0)
    valid = Ca >= 0
    n = np.maximum(valid.sum(1), 1)
    m_d = np.where(valid, Da, 0.0).sum(1) / n
    s_d = np.sqrt(np.where(valid, (Da - m_d[:, None]) ** 2, 0.0).sum(1) / n)
    m_d = np.where(valid.any(1), m_d, np.nan)
    big = np.iinfo(np.int64).max
    order = np.lexsort((np.where(valid, Da, np.inf), np.where(valid, Ca, big)), axis=-1)
    Cs, Ds, As = (np.take_along_axis(x, order, 1) for x in (Ca, Da, Aa))
    first = np.ones_like(Cs, dtype=bool)
    first[:, 1:] = Cs[:, 1:] != Cs[:, :-1]
    Cs = np.where(first & (Cs >= 0), Cs, -1)             # one cell per candidate: its nearest anchor
    order = np.argsort(pick_keys(b.qkeys, sp.item_keys, Cs), axis=1, kind="stable")
    width = max(int((Cs >= 0).sum(1).max()), 1) if q else 1
    order = order[:, :width]
    Cu, Du, Au = (np.take_along_axis(x, order, 1) for x in (Cs, Ds, As))
    qsum = v.sum(1)
    qn = qsum / np.maximum(np.linalg.norm(qsum, axis=1, keepdims=True), 1e-12)
    pool = {"C": Cu, "D": Du, "anchor": np.take_along_axis(b.items, np.maximum(Au, 0), 1),
            "qv": np.concatenate([qn[:, None, :], v], axis=1).astype(np.float32),
            "dd": np.full(Cu.shape + (4,), np.nan), "done": np.zeros(q, dtype=bool),
            "dq": np.full(Cu.shape, np.nan), "frank": np.zeros(Cu.shape, dtype=np.int64),
            "gap": np.full(Cu.shape, np.nan), "cs": cs, "ss": ss, "m_d": m_d, "s_d": s_d, "min_pair": min_pair}
    b.pools["coherence"] = pool
    return pool


def coherence(ds, b, sp, knn: DenseKnn) -> None:
    p = ds.params
    q = len(b.qids)
    if not q:
        return
    need, heads, drawn = _k3(ds, b)
    if p.distractors == "random_far":
        v = sp.vecs[b.items].astype(np.float64)
        P = {"min_pair": (1.0 - np.einsum("qid,qjd->qij", v, v)[:, [0, 0, 1], [1, 2, 2]]).min(axis=1)}
        sel, ok = _random_far(b, sp, knn, [b.items[:, 0], b.items[:, 1], b.items[:, 2]], 1)
        ds.skip("no_far_random_candidate", (~ok).sum())
        keep = np.flatnonzero(ok)
        foreign = np.take_along_axis(sel["cand"][keep], rows_cols(sel["mask"][keep], 1), 1)[:, 0]
        dists = 1.0 - np.einsum("qd,qjd->qj", sp.vecs[foreign], sp.vecs[b.items[keep]]).astype(np.float64)
        _emit_coherence(ds, b, sp, keep, foreign, P, {"rule": "random_far", "anchor_distances": _lists(_r(dists))},
                        heads)
        return
    P = _coherence_pool(b, sp, knn)
    if p.distractors in MATCHED_KINDS:
        _coherence_matched(ds, b, sp, P, heads)
        return
    lo = np.zeros(q) if p.ball_lo_sd is None else P["m_d"] + p.ball_lo_sd * P["s_d"]
    hi = P["m_d"] + p.ball_hi_sd * P["s_d"]
    inball = (P["C"] >= 0) & (P["D"] > lo[:, None]) & (P["D"] < hi[:, None])
    n_c = inball.sum(1)
    new = _fill(P, sp, inball)              # whole rows: the same rows whatever knob 3 needs of them
    if len(new):
        P["dq"][new], P["frank"][new], P["gap"][new] = coherence_scores(P, new)
    gap = P["gap"]
    ok = n_c > 0
    ds.skip("too_few_ball_candidates", (~ok).sum())
    target = np.full(q, -1, dtype=np.int64)
    if p.k3_mode == "balanced":
        feasible = np.stack([(inball & (P["frank"] == t)).any(1) for t in range(N_RANKS)], 1)
        target = _balanced(ds, b, feasible, drawn, ok)
        elig = inball & (P["frank"] == target[:, None])
        rule = np.where(True, "rank", "")
    else:
        paper = heads if p.k3_mode != "off" else np.zeros(q, dtype=bool)
        elig = inball & np.where(paper[:, None], P["dq"] < P["min_pair"][:, None], True)
        rule = np.where(paper, "paper", "none")
    n_e = elig.sum(1)
    keep_mask = n_e > 0
    elig_all = elig
    if p.k3_mode == "balanced":       # the eligible candidate whose distance blends in the most
        elig = elig & (np.arange(elig.shape[1])[None, :] == np.argmin(np.where(elig, gap, np.inf), axis=1)[:, None])
    if p.k3_mode != "balanced":
        ds.skip("no_candidate_meets_knob3", (ok & ~keep_mask).sum())
    keep = np.flatnonzero(keep_mask)
    col = np.argmax(elig[keep], axis=1)[:, None]
    g = lambda a: np.take_along_axis(a[keep], col, 1)[:, 0]
    pick = {"foreign": g(P["C"]), "anchor": g(P["anchor"]), "D": g(P["D"]), "dq": g(P["dq"]), "frank": g(P["frank"])}
    af = {}
    if p.af_rounds:                 # adversarial filtering: same knobs, a foreign image a probe cannot spot
        from features.datasets.adversarial import config, refine_coherence
        rules = np.full(len(keep), "rank", dtype=object) if p.k3_mode == "balanced" else rule[keep]
        sub, pick, af = refine_coherence(ds, b, sp, P, keep, pick["foreign"], elig_all[keep], rules, target[keep],
                                         lo[keep], hi[keep], exact=p.k3_mode == "balanced")
        keep = keep[sub]
        af["adversarial"] = config(ds)
    extra = {"rule": "ball", "m_d": pa.array(_r(P["m_d"][keep])), "s_d": pa.array(_r(P["s_d"][keep])),
             "ball": _lists(_r(np.stack([lo[keep], hi[keep]], 1))), "ball_sd": [p.ball_lo_sd, p.ball_hi_sd],
             "k": p.k, "anchor_item": pa.array(sp.item_ids[pick["anchor"]].tolist(), pa.string()),
             "distance": pa.array(_r(pick["D"])), "dist_q": pa.array(_r(pick["dq"])),
             "foreign_rank": pa.array(pick["frank"]), "n_ball_candidates": pa.array(n_c[keep]),
             "n_eligible": pa.array(n_e[keep]), **af}
    if p.k3_mode == "balanced":
        extra.update({"k3_rule": "rank", "target_rank": pa.array(target[keep]),
                      **_balanced_prov(b, keep, feasible, drawn, target)})
    else:
        extra.update({"k3_rule": pa.array(rule[keep].tolist(), pa.string()), "target_rank": None})
    _emit_coherence(ds, b, sp, keep, pick["foreign"], P, extra, heads)


def _coherence_matched(ds, b, sp, P, heads) -> None:
    """Beyond the paper (features/datasets/matched.py): the foreign image whose cosines to the 3 shown
    images match those of a held-out photo of the question's recipe; no text twin of a step of the
    recipe, and one the shown steps' texts tell apart (as for the ball). The best-matched valid
    candidate, or with AF the one its adversary finds most plausible among them. The `author` setting: the
    candidates are photos of the other recipes of the question's author (its skips, rule and AF pool say
    `author`)."""
    from features.datasets.adversarial import foreign_fields, readable_coherence, twin_of_recipe
    from features.datasets.matched import matched_pool, reference_items
    kind = ds.params.distractors                   # matched | author
    same_author = kind == "author"
    ref = reference_items(sp, b.items, b.sk.steps, b.qkeys)
    ds.skip("no_reference_image", (ref < 0).sum())
    if same_author and len(sp.author_code) and (sp.author_code < 0).all():
        log.warning("%s: no recipe of the warehouse records its author, so no question has a foreign photo from "
                    "its author's kitchen (skipped: no_author_candidate); instructables pages carry the author, "
                    "RecipeQA's JSON does not", ds.dataset_id)
    cand = matched_pool(sp, b.items, ref, same_author=same_author)
    bad = (cand >= 0) & twin_of_recipe(sp, cand, b.recipe_ids)
    bad |= (cand >= 0) & ~readable_coherence(sp, b.items, np.maximum(cand, 0))
    valid = (cand >= 0) & ~bad
    ok = valid.any(1)
    ds.skip(f"no_{kind}_candidate", ((ref >= 0) & ~ok).sum())
    keep = np.flatnonzero(ok)
    col = np.argmax(valid[keep], axis=1)
    foreign = cand[keep, col]
    af = {}
    if ds.params.af_rounds:
        from features.datasets.adversarial import config, refine_coherence
        sub, pick, af = refine_coherence(ds, b, sp, P, keep, foreign, None, None, None, None, None, exact=False,
                                         matched=np.where(valid[keep], cand[keep], -1))
        keep, foreign = keep[sub], pick["foreign"]
        af["adversarial"] = config(ds)
    near, D, dq, frank = (x[:, 0] for x in foreign_fields(sp, P, keep, foreign[:, None]))
    anchor = b.items[keep][np.arange(len(keep)), near]
    extra = {"rule": kind, "reference_item": pa.array(sp.item_ids[ref[keep]].tolist(), pa.string()),
             "anchor_item": pa.array(sp.item_ids[anchor].tolist(), pa.string()), "distance": pa.array(_r(D)),
             "dist_q": pa.array(_r(dq)), "foreign_rank": pa.array(frank), "k3_rule": None, "target_rank": None,
             **af}
    _emit_coherence(ds, b, sp, keep, foreign, P, extra, heads)


def _emit_coherence(ds, b, sp, keep, foreign, P, extra, heads) -> None:
    pos = b.pos[keep]
    rows = _insert(b.items[keep], foreign, pos)
    vv = sp.vecs[rows].astype(np.float64)
    rest = vv.sum(1)[:, None, :] - vv
    loo = 1.0 - (vv * rest).sum(-1) / np.maximum(np.linalg.norm(vv, axis=-1) * np.linalg.norm(rest, axis=-1), 1e-12)
    labels = sp.labels[rows]
    prov = {**extra, "foreign_item": pa.array(sp.item_ids[foreign].tolist(), pa.string()),
            "foreign_recipe_id": pa.array(sp.recipe_ids[foreign].tolist(), pa.string()),
            "question_items": _lists(sp.item_ids[b.items[keep]], pa.string()),
            "min_pair": pa.array(_r(P["min_pair"][keep])), "k3_heads": pa.array(heads[keep])}
    ds.set_rows(b, keep, labels, labels, pos, np.argmax(loo, axis=1), prov)


# ----------------------------------------------------------------------------- ordering

def ordering(ds, b, sp, perms: np.ndarray | None = None, instruction: str | None = None) -> None:
    """3 wrong orderings of the 23: uniform (power 0, k2=0) or weighted by S**power where S is the
    summed cosine distance of consecutive images (k2=1). Large-S orderings have visible jumps, so
    weighting by S makes the wrong orderings easier to reject: k2=0 (uniform) is the harder one."""
    import itertools

    from features.datasets.tasks import FAMILIES
    p = ds.params
    q = len(b.qids)
    if not q:
        return
    perms = np.array(list(itertools.permutations(range(4))))
    v = sp.vecs[b.items].astype(np.float64)                             # (Q, 4, d)
    dmat = 1.0 - np.einsum("qid,qjd->qij", v, v)
    s = sum(dmat[:, perms[:, t], perms[:, t + 1]] for t in range(3))    # (Q, 24)
    w = np.power(np.maximum(s[:, 1:], 1e-12), p.ordering_weight_power)
    u = uniforms(b.qkeys, STREAM_ORDER, 23)
    keys = np.log(np.maximum(u, 1e-300)) / w                            # Efraimidis-Spirakis
    draw = np.argsort(-keys, axis=1, kind="stable") + 1                 # (Q, 23) wrong orders, drawn order
    wrong = draw[:, :3]
    keep = np.arange(q)
    af = {}
    if p.af_rounds:                 # adversarial filtering: wrong orders of the knob's draw a probe finds plausible
        from features.datasets.adversarial import config, refine_ordering
        keep, wrong, af = refine_ordering(ds, b, sp, perms, draw)
        af["adversarial"] = config(ds)
    q = len(keep)
    order = _insert(wrong, np.zeros(q, dtype=np.int64), b.pos[keep])    # (Q, 4) perm numbers
    items = b.items[keep]
    ids = sp.item_ids[np.take_along_axis(items[:, None, :].repeat(4, 1), perms[order], 2)]   # (Q, 4, 4)
    flat = ids.reshape(-1, 4).tolist()
    if any('"' in x or "\\" in x for x in sp.item_ids):
        import json
        choices = [json.dumps(x) for x in flat]
    else:
        choices = ['["' + '", "'.join(x) + '"]' for x in flat]
    sums = np.take_along_axis(s[keep], order, 1)
    cp = perms[order]                                                    # (Q, 4, 4)
    prov = {"rule": "uniform" if p.ordering_weight_power == 0 else "weighted_by_summed_distance",
            "weight_power": p.ordering_weight_power,
            "choice_perms": pa.ListArray.from_arrays(pa.array(np.arange(q + 1, dtype=np.int32) * 4),
                                                     _lists(cp.reshape(-1, 4))),
            "choice_summed_distance": _lists(_r(sums)),
            "question_items": _lists(sp.item_ids[items], pa.string()), **af}
    question = np.full((q, 1), FAMILIES["visual_ordering"].instruction, dtype=object)
    ds.set_rows(b, keep, question, np.array(choices, dtype=object).reshape(q, 4), b.pos[keep],
                np.argmin(_r(sums), axis=1), prov)
