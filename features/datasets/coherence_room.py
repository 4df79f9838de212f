"""The room the knobs leave a visual coherence question: can its foreign photo sit outside the closest pair?

The knob-2 ball draws a coherence question's foreign photo from the nearest neighbours of a shown photo
(docs/knobs.md, "Knob 2"), so the foreign photo tends to be one of the two most alike of the four, and
a question-only model reads that pair structure. This module counts, per paper setting, the questions
where the knobs would let the foreign photo lie *outside* the closest pair (farther from every shown
photo than the two closest shown photos are from each other):

- ``valid``: questions with at least one knob-valid foreign photo (in the ball; with knob 3's coin on
  heads also nearer the question than the closest coherent pair) -- the plain setting's questions;
- ``room_as_drawn``: of those, the questions with a knob-valid foreign photo outside the closest pair,
  the shown steps as knob 1 drew them;
- ``room_with_swaps``: the same when the question may also show other steps of its own recipe: every
  shown step but the answer step (and, at knob 1 = 1, the step the question removes from the pool)
  may be any step still in the recipe's pool at that question (not an earlier question's answer or
  removed step), so knob 1's overlap rules hold. These are photos of the same recipe from steps that
  are neither the answer's nor, before the swap, shown: the same-recipe candidate pool of adversarial
  filtering, applied to the photos a coherence question shows.

Both counts are upper bounds on what adversarial filtering could choose: its text-twin and answerability
rules only take candidates away. Figures: docs/results.md ("Coherence: the closest pair").

    python -m features.datasets.coherence_room --home H [--settings 0-0-0,1-0-0] [--seed 0]
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from features.datasets.knobs import parse_setting

TASK = "visual_coherence"
PAPER_SETTINGS = tuple(f"{a}-{b}-{c}" for a in (0, 1) for b in (0, 1) for c in (0, 1))


@dataclass
class Room:
    setting: str
    questions: int                 # knob-1 questions (skeletons) of the setting
    valid: np.ndarray              # (Q,) bool: some knob-valid foreign photo, shown steps as drawn
    room_as_drawn: np.ndarray      # (Q,) bool: one of them outside the closest pair
    room_with_swaps: np.ndarray    # (Q,) bool: some knob-1-valid choice of the free shown steps has one
    swap_steps: list               # per question: the shown steps of the first such choice, or None
    swap_foreign: np.ndarray       # (Q,) item row of that choice's first foreign photo outside, -1 if none
    min_pair: np.ndarray           # (Q,) smallest pairwise cosine distance of the shown photos as drawn
    ball_hi: np.ndarray            # (Q,) the ball's upper bound as drawn

    def summary(self) -> dict:
        n = int(self.valid.sum())
        share = (lambda m: round(float(m.sum()) / n, 4) if n else None)
        return {"setting": self.setting, "questions": n,
                "room_as_drawn": int(self.room_as_drawn.sum()), "room_as_drawn_share": share(self.room_as_drawn),
                "room_with_swaps": int((self.room_with_swaps & self.valid).sum()),
                "room_with_swaps_share": share(self.room_with_swaps & self.valid),
                "median_min_pair": _median(self.min_pair[self.valid]),
                "median_ball_hi": _median(self.ball_hi[self.valid])}


def _median(x: np.ndarray) -> float | None:
    return round(float(np.median(x)), 4) if len(x) else None


def _evaluate(items: np.ndarray, knn, vecs: np.ndarray, params, heads: bool) -> tuple[bool, int, float, float]:
    """(valid, first candidate row outside the closest pair or -1, min_pair, hi) of one set of 3 shown
    photos, with the ball built as `questions._coherence_pool` builds it: the union of the photos'
    neighbour lists, each candidate at its distance to the nearest photo whose list holds it."""
    t = knn.pos_of_item[items]
    v = vecs[items].astype(np.float64)
    gram = v @ v.T
    min_pair = float(min(1 - gram[0, 1], 1 - gram[0, 2], 1 - gram[1, 2]))
    if (t < 0).all():
        return False, -1, min_pair, float("nan")
    C = np.concatenate([knn.cand[x] for x in t if x >= 0])
    D = np.concatenate([knn.dist[x] for x in t if x >= 0])
    ok = C >= 0
    C, D = C[ok], D[ok]
    m_d, s_d = float(D.mean()), float(D.std())
    lo = 0.0 if params.ball_lo_sd is None else m_d + params.ball_lo_sd * s_d
    hi = m_d + params.ball_hi_sd * s_d
    order = np.lexsort((D, C))
    C, D = C[order], D[order]
    first = np.r_[True, C[1:] != C[:-1]]
    C, D = C[first], D[first]                      # one distance per candidate: its nearest listing photo
    elig = (D > lo) & (D < hi)
    cv = vecs[C].astype(np.float64)
    if heads:
        qn = v.sum(0)
        qn = qn / max(np.linalg.norm(qn), 1e-12)
        elig &= (1.0 - cv @ qn) < min_pair
    if not elig.any():
        return False, -1, min_pair, hi
    nearest = (1.0 - cv[elig] @ v.T).min(1)        # its true distance to the nearest shown photo
    out = np.flatnonzero(nearest > min_pair)
    return True, int(C[elig][out[0]]) if len(out) else -1, min_pair, hi


def coherence_room(gen, setting: str, seed: int = 0) -> Room:
    """The room of one paper setting (K1-K2-K3) on a `generate.Generator`'s warehouse and encoder."""
    from features.datasets.questions import _k3

    params = parse_setting(setting).params(TASK)
    b = gen.batch(TASK, params, seed)
    prep = gen._prepared[("image", seed, params.k)]
    sp, knn, sk = gen._spaces["image"], prep.knn, b.sk
    heads = _k3(SimpleNamespace(params=params), b)[1]           # _k3 reads only the dataset's params
    q = len(b.qids)
    removed: dict[int, list[tuple[int, set]]] = {}
    for i in range(q):
        gone = {int(sk.answer_step[i])} | ({int(sk.extra_removed[i])} if sk.extra_removed[i] >= 0 else set())
        removed.setdefault(int(sk.recipe_pos[i]), []).append((int(sk.q_index[i]), gone))
    valid, room0, room1 = (np.zeros(q, dtype=bool) for _ in range(3))
    foreign = np.full(q, -1, dtype=np.int64)
    min_pair, hi = np.full(q, np.nan), np.full(q, np.nan)
    swap_steps: list = [None] * q
    for i in range(q):
        rp, j = int(sk.recipe_pos[i]), int(sk.q_index[i])
        steps = [int(s) for s in sk.steps[i]]
        valid[i], f, min_pair[i], hi[i] = _evaluate(b.items[i], knn, sp.vecs, params, bool(heads[i]))
        room0[i] = f >= 0
        if room0[i]:
            room1[i], foreign[i], swap_steps[i] = True, f, steps
            continue
        fixed = {int(sk.answer_step[i])} | ({int(sk.extra_removed[i])} if sk.extra_removed[i] >= 0 else set())
        before = set().union(*[g for jj, g in removed[rp] if jj < j])
        pool = [s for s in prep.recipes[rp][2] if s not in before and s not in fixed]
        for free in itertools.combinations(pool, len(steps) - len(fixed)):
            new = sorted(fixed | set(free))
            if new == steps:
                continue
            items = prep.rep_of[rp, new]
            if (items < 0).any():
                continue
            ok, f, _, _ = _evaluate(items, knn, sp.vecs, params, bool(heads[i]))
            if ok and f >= 0:
                room1[i], foreign[i], swap_steps[i] = True, f, new
                break
    return Room(setting, q, valid, room0, room1, swap_steps, foreign, min_pair, hi)


def room_table(home: str, settings=PAPER_SETTINGS, seed: int = 0, encoder_id: str | None = None) -> list[dict]:
    """`coherence_room` of each setting on the warehouse of `home` (opened read-only)."""
    from pathlib import Path

    import duckdb

    from features.datasets.generate import Generator, default_encoder
    con = duckdb.connect(str(Path(home) / "warehouse.duckdb"), read_only=True)
    try:
        gen = Generator(con, encoder_id or default_encoder(con), lance_uri=str(Path(home) / "lance"))
        return [coherence_room(gen, s, seed).summary() for s in settings]
    finally:
        con.close()


if __name__ == "__main__":
    import argparse
    import json
    from pathlib import Path
    ap = argparse.ArgumentParser(description="Coherence questions whose foreign photo the knobs would let "
                                             "lie outside the closest pair, as drawn and with the free shown "
                                             "steps swapped.")
    ap.add_argument("--home", required=True)
    ap.add_argument("--settings", default=",".join(PAPER_SETTINGS), help="comma-separated paper settings")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not (Path(args.home) / "warehouse.duckdb").exists():
        ap.exit(2, f"error: no warehouse at {args.home}/warehouse.duckdb: run `mrqa --home {args.home} demo` first\n")
    names = [s.strip() for s in args.settings.split(",") if s.strip()]
    bad = [s for s in names if s not in PAPER_SETTINGS]
    if bad:
        ap.exit(2, f"error: not a paper setting: {', '.join(bad)} (expected K1-K2-K3, each 0 or 1)\n")
    try:
        rows = room_table(args.home, names, args.seed)
    except LookupError as e:                        # no encoder or no vectors yet: say which command to run
        ap.exit(2, f"error: {e}\n")
    for row in rows:
        print(json.dumps(row))
