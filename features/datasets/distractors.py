"""Vectorised building blocks of distractor selection (features/datasets/generate.py uses them).

- `DenseKnn`: the neighbour relation of the question items as dense (T, K) index/distance arrays
  (exact distances recomputed from the vectors) with m_d, s_d, d_k per item -- computed once per
  (space, seed, K) and shared by every task and knob setting.
- `first_per_group`: per row, the first (lowest pick key) candidate of each group (recipe, text).
- `take_first`: per row, the first n candidates of a mask, in pick-key order.
- `balanced_targets`: knob 3 `balanced` -- a target rank per question with EXACTLY equal counts per
  rank (per split), among the ranks each question can realise; seeded draws are honoured where the
  quotas allow, the rest are redrawn; questions beyond the quotas are skipped (counted).
- `coherence_scores`: knob 3 of coherence -- a candidate foreign image's distance to the question and
  its rank among the coherent images' leave-one-out distances (used by the knob selection and by
  adversarial filtering).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from features.datasets.knobs import splitmix64

N_RANKS = 4


@dataclass
class DenseKnn:
    pos_of_item: np.ndarray      # (n_items,) row in the arrays below, -1 when not a target
    cand: np.ndarray             # (T, K) item rows, rank order, -1 padding
    dist: np.ndarray             # (T, K) float64 exact cosine distance, nan padding
    m_d: np.ndarray              # (T,)
    s_d: np.ndarray              # (T,)
    d_k: np.ndarray              # (T,)

    @classmethod
    def build(cls, target: np.ndarray, cand: np.ndarray, n_items: int, vecs: np.ndarray, k: int,
              block: int = 1 << 18) -> DenseKnn:
        """From (target, cand) rows ordered by (target, rank) -- already filtered to other recipes
        of the same split and rank <= k."""
        tgt, start = np.unique(target, return_index=True)
        pos_of_item = np.full(n_items, -1, dtype=np.int64)
        pos_of_item[tgt] = np.arange(len(tgt))
        row = pos_of_item[target]
        col = np.arange(len(target)) - np.repeat(start, np.diff(np.r_[start, len(target)]))
        width = int(col.max()) + 1 if len(col) else 1
        d = np.empty(len(target), dtype=np.float64)
        for s in range(0, len(target), block):
            a, b = target[s:s + block], cand[s:s + block]
            d[s:s + block] = 1.0 - np.einsum("ij,ij->i", vecs[a], vecs[b]).astype(np.float64)
        C = np.full((len(tgt), width), -1, dtype=np.int64)
        D = np.full((len(tgt), width), np.nan)
        C[row, col], D[row, col] = cand, d
        valid = C >= 0
        n = np.maximum(valid.sum(1), 1)
        m = np.where(valid, D, 0.0).sum(1) / n
        s = np.sqrt(np.where(valid, (D - m[:, None]) ** 2, 0.0).sum(1) / n)
        return cls(pos_of_item, C, D, m, s, np.where(valid, D, -np.inf).max(1))


def pick_keys(qkeys: np.ndarray, item_keys: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """Seeded pick key of each (question, candidate); padding (-1) gets the largest key."""
    with np.errstate(over="ignore"):
        k = splitmix64(qkeys[:, None] ^ splitmix64(item_keys[np.maximum(cand, 0)]))
    return np.where(cand >= 0, k, np.uint64(np.iinfo(np.uint64).max))


def first_per_group(mask: np.ndarray, group: np.ndarray) -> np.ndarray:
    """mask (Q, M) in pick order; keep per row only the first masked cell of each group value
    (group < 0 = no group, always kept)."""
    rows, cols = np.nonzero(mask)
    g = group[rows, cols]
    has = g >= 0
    key = rows[has].astype(np.int64) * (int(group.max()) + 2) + g[has]
    _, first = np.unique(key, return_index=True)            # stable: first in row-major order
    keep = ~has
    keep[np.flatnonzero(has)[first]] = True
    out = np.zeros_like(mask)
    out[rows[keep], cols[keep]] = True
    return out


def take_first(mask: np.ndarray, n: np.ndarray | int) -> np.ndarray:
    """Per row, the first n[row] True cells of mask."""
    n = np.broadcast_to(np.asarray(n), (mask.shape[0],))
    return mask & (np.cumsum(mask, axis=1) <= n[:, None])


def rows_cols(sel: np.ndarray, per_row: int) -> np.ndarray:
    """Column indices of the selected cells, (n_rows_with_selection, per_row) in column order."""
    r, c = np.nonzero(sel)
    return c.reshape(-1, per_row)


# ----------------------------------------------------------------------------- knob 3 balanced

def _max_flow(cap: np.ndarray, s: int, t: int) -> np.ndarray:
    """Edmonds-Karp on a tiny dense graph; returns the flow matrix."""
    n = len(cap)
    flow = np.zeros_like(cap)
    while True:
        parent = np.full(n, -1)
        parent[s] = s
        queue = [s]
        while queue and parent[t] < 0:
            u = queue.pop(0)
            for v in np.flatnonzero(cap[u] - flow[u] > 0):
                if parent[v] < 0:
                    parent[v] = u
                    queue.append(v)
        if parent[t] < 0:
            return flow
        path, v = [], t
        while v != s:
            path.append((parent[v], v))
            v = parent[v]
        push = min(cap[u, v] - flow[u, v] for u, v in path)
        for u, v in path:
            flow[u, v] += push
            flow[v, u] -= push


def _quota_per_class(counts: np.ndarray) -> np.ndarray:
    """counts[m] = questions whose feasible-rank bitmask is m (0..15). Largest N such that every rank
    can get exactly N questions (Hall: every rank subset T is reachable by >= N*|T| questions), and
    x[m, r] = how many questions of class m take rank r."""
    masks = np.arange(1 << N_RANKS)
    n_max = min(int(counts[(masks & T) != 0].sum()) // bin(T).count("1") for T in range(1, 1 << N_RANKS))
    x = np.zeros((1 << N_RANKS, N_RANKS), dtype=np.int64)
    if n_max == 0:
        return x
    # nodes: 0 source, 1..16 classes, 17..20 ranks, 21 sink
    cap = np.zeros((22, 22), dtype=np.int64)
    big = int(counts.sum())
    for m in range(1, 1 << N_RANKS):
        cap[0, 1 + m] = counts[m]
        for r in range(N_RANKS):
            if m >> r & 1:
                cap[1 + m, 17 + r] = big
    cap[17:21, 21] = n_max
    flow = _max_flow(cap, 0, 21)
    for m in range(1, 1 << N_RANKS):
        x[m] = np.maximum(flow[1 + m, 17:21], 0)
    return x


def balanced_targets(feasible: np.ndarray, groups: np.ndarray, drawn: np.ndarray,
                     keys: np.ndarray) -> np.ndarray:
    """feasible (Q, 4) bool: ranks question q can realise; groups (Q,) e.g. split codes; drawn (Q,)
    the seeded uniform draw in 0..3; keys (Q,) seeded order. Returns target rank per question, -1
    when it is skipped (its ranks' quotas are full). Per group every rank gets exactly N questions,
    N as large as possible; within a feasibility class the drawn rank is kept where its quota has
    room (in key order), the others are redrawn into the class's remaining quotas (in key order)."""
    target = np.full(len(feasible), -1, dtype=np.int64)
    cls = (feasible.astype(np.int64) << np.arange(N_RANKS)).sum(1)
    for g in np.unique(groups):
        in_g = groups == g
        x = _quota_per_class(np.bincount(cls[in_g], minlength=1 << N_RANKS))
        for m in range(1, 1 << N_RANKS):
            members = np.flatnonzero(in_g & (cls == m))
            if not len(members) or not x[m].any():
                continue
            members = members[np.argsort(keys[members], kind="stable")]
            left = x[m].copy()
            for r in range(N_RANKS):                        # first pass: the drawn rank
                want = members[(drawn[members] == r) & (target[members] < 0)][:left[r]]
                target[want] = r
                left[r] -= len(want)
            rest = members[target[members] < 0]
            fill = np.repeat(np.arange(N_RANKS), left)      # second pass: redraw into the quotas
            target[rest[:len(fill)]] = fill[:len(rest)]
    return target


# ----------------------------------------------------------------------------- coherence knob 3

def coherence_scores(P: dict, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dist_q, foreign_rank, gap) of the candidate cells of `rows`: distance to the question mean,
    how many coherent images look MORE out of place (leave-one-out distance) than the candidate, and
    the gap to the nearest coherent image's leave-one-out distance."""
    dd, cs, ss = P["dd"][rows], P["cs"][rows], P["ss"][rows]
    dq = 1.0 - dd[..., 0]
    f = [dd[..., 1 + j] for j in range(3)]
    others = [(1, 2), (0, 2), (0, 1)]
    loo = [1 - (cs[:, i, None] + f[i]) / np.sqrt(ss[:, i, None] + 2 * (f[j] + f[k]) + 1)
           for i, (j, k) in enumerate(others)]
    frank = sum((x > dq).astype(np.int64) for x in loo)
    gap = np.min([np.abs(x - dq) for x in loo], axis=0)     # to the nearest coherent image's distance
    return dq, frank, gap
