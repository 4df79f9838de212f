"""Visual coherence beyond the paper: the AF foreign photo drawn again in the question's kitchen (`mrqa redraw
--task visual_coherence`).

A coherence question shows 3 photos of one recipe and a foreign photo of another recipe; on the sample kitchen
the foreign one is the only photo of another kitchen (counter, light, framing), so a model that reads only the
pixels spots it. As for visual cloze (features/datasets/redraw.py), a `redrawn` dataset is made from the AF
dataset of a knob setting (`0-1-1-af` -> `0-1-1-redrawn-af`, id `vcoh-0-1-1-redrawn-af-s0-<enc8>`):

1. Candidates: per question its foreign photo, then its recorded alternates (`af_alternates`: the knob-valid
   foreign photos AF did not pick, no text twin of a step of the recipe, told apart by the shown steps' texts).
   Each is drawn again by the renderer of the question's recipe from its step's ground truth, with a jitter of
   its own seeded by (seed, question, source photo).
2. The knob-2 ball is measured again in the question's kitchen: COH_SAMPLE of each shown photo's K nearest
   photos (the `neighbours` table; seeded by question and photo), drawn there too, give m_d and s_d over their
   distances to that shown photo (as the source's ball pools the 3 shown photos' neighbour lists), and the
   setting's bounds (`ball_sd`) give the ball (provenance: `ball`, `m_d`, `s_d`, `ball_sample`; the source's in
   `source_ball`).
3. The knobs are checked on the new photos' vectors: a candidate is valid where its distance to the nearest
   shown photo lies in that ball and knob 3 holds (the question's rule: `paper`, closer to the shown photos'
   mean than their closest pair; `rank`, balanced mode, the foreign rank of the source's target; `none`). The
   first valid candidate (the source's foreign photo where it stays valid) is the foreign photo; the other
   valid ones are its alternates (so `mrqa af-pool --task visual_coherence --distractors redrawn` swaps among
   photos drawn in the same kitchen). A question with none is dropped and counted (`redrawn_outside_knobs`).
   The shown photos and the answer's position are never changed.
   From a matched source (`K1-0-0-matched-af`, features/datasets/matched.py: no ball, the foreign photo's
   sorted cosines to the 3 shown photos near those of a reference photo of the recipe) the rule is the
   match: a candidate is valid where its new photo's profile is at most `match_bound` (L1) from the
   reference's, the farthest of the source's own candidates in the source's space (`match_l1` per photo);
   the foreign photo is the best-matched valid one there (the matched rule's pick; AF's pick is no longer
   the source's), its alternates in order of the match; the result is `K1-0-0-matched-redrawn-af`.
   Then the ingredients: a candidate whose share of items another of the 4 photos shows too (its step's
   ground truth) is below every shown photo's share is the odd one out by its ingredients alone, which a
   model of the photos learns without reading (a rule on the ground truth reads 45-46% of the knob settings'
   questions so); with `items` it is left out, and a question left without a candidate is dropped
   (`redrawn_items_odd`). `items_share` and `items_shown_min` record both shares. Off by default: on the demo
   it dropped 17% more questions and GM3C question-only read as much after the pooled step (43-49%).
   With `pool` "steps" (`--foreign-pool steps`, features/datasets/step_matched.py) the candidates are not AF's
   but photos of other recipes that show what a held-out step of the recipe does (a matched source: its
   reference's step), no text twin of a step of the recipe; a candidate is valid only where, on the drawn
   photos, every shown step's text is closer to its own photo than to it (AF's answerability rule); a
   question with no candidate is dropped (`redrawn_no_step_match`), and each photo records `step_match`
   (the held-out step, how many of state, vessel and tool it matches); the foreign photos' actions are then
   balanced to the shown photos' (`pick_foreign`, `redrawn_action_quota`). With `unremarkable`, any pool, a
   candidate that a rule on the 4 photos' distances singles out is left out (`remarkable`,
   `redrawn_remarkable`).
4. Provenance: `foreign_item` is the new photo, `foreign_source` its source photo, `foreign_recipe_id` the
   source's recipe; `anchor_item`, `distance`, `dist_q`, `foreign_rank` and `distance_probe_hit` are measured
   on the new photos; `redrawn.kitchen_recipe_id` names the kitchen.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import duckdb
import numpy as np

from etl.config import Paths
from features.datasets.knobs import stable_key
from features.datasets.matched import profile
from features.datasets.redraw import (
    BALL_SAMPLE_MIN,
    SKIP_NO_TRUTH,
    SKIP_OUTSIDE,
    ball_sample,
    draw_and_embed,
    load_source,
    photo_for,
    register,
    source_dataset,
)
from features.datasets.step_matched import StepPool, item_names

TASK = "visual_coherence"
COH_SAMPLE = 6              # per shown photo: 18 of the 3 photos' neighbours measure the ball
SKIP_ITEMS = "redrawn_items_odd"
SKIP_NO_STEP = "redrawn_no_step_match"
SKIP_ACTIONS = "redrawn_action_quota"
SKIP_REMARKABLE = "redrawn_remarkable"
POOLS = ("af", "steps")


def action_of(truth, image_id: str) -> str | None:
    """The action a photo shows (its step's ground truth)."""
    return truth.photos[image_id][2].get("action")


def pick_foreign(pending: list[tuple], truth, matched: bool, seed: int, balance: bool) -> list[int | None]:
    """Per question (row, provenance, candidates, fields, valid, ...) the index of its foreign photo: the first
    valid candidate (matched: the best match). With `balance` (the step pool) the foreign photos' actions are
    distributed as the shown photos' are over the dataset: in a seeded order of the questions each takes the
    valid candidate whose action is furthest below its share (then the first), and then each action keeps at
    most its share of the questions kept (rounded up; the rest: None, dropped as `redrawn_action_quota`), so
    a model that learns which actions are foreign more often than shown learns nothing."""
    def valid_order(x):
        idx = [i for i, v in enumerate(x[4]) if v]
        return sorted(idx, key=lambda i: (x[3][i]["match_l1"], i)) if matched else idx
    if not balance:
        return [valid_order(x)[0] for x in pending]
    shown = Counter(action_of(truth, i) for x in pending for i in x[1]["question_items"])
    share = {a: c / max(sum(shown.values()), 1) for a, c in shown.items()}
    order = sorted(range(len(pending)), key=lambda k: stable_key("redraw-actions", seed, pending[k][0][0]))
    picks: list[int | None] = [None] * len(pending)
    got: Counter = Counter()
    for n, k in enumerate(order, start=1):
        idx = valid_order(pending[k])
        act = {i: action_of(truth, pending[k][2][i][1]) for i in idx}
        best = max(idx, key=lambda i: (share.get(act[i], 0.0) * n - got[act[i]], -idx.index(i)))
        picks[k] = best
        got[act[best]] += 1
    n_keep = len(order)
    while True:                 # the most questions with every action at most its share of them
        keep = {a: min(c, math.ceil(share.get(a, 0.0) * n_keep - 1e-9)) for a, c in got.items()}
        if sum(keep.values()) >= n_keep:
            break
        n_keep = sum(keep.values())
    seen: Counter = Counter()
    for k in order:
        a = action_of(truth, pending[k][2][picks[k]][1])
        seen[a] += 1
        if seen[a] > keep[a]:
            picks[k] = None
    return picks


def step_texts(con, paths: Paths, encoder_id: str) -> dict[tuple[str, int], np.ndarray]:
    """(recipe_id, step_idx) -> the unit body-text vector of the step in the encoder's joint space."""
    from features.vectors.store import FeatureStore
    ids, mat = FeatureStore(paths.lance).text_vectors(encoder_id, "body")
    if len(ids) == 0:
        raise LookupError(f"encoder {encoder_id} embedded no step text: --foreign-pool steps reads the shown "
                          "steps' texts (AF's answerability rule); run `mrqa embed`")
    out = {}
    for i, v in zip(ids, np.asarray(mat, dtype=np.float64)):
        r, s, _ = i.rsplit("_", 2)
        out[(r, int(s))] = v / max(float(np.linalg.norm(v)), 1e-12)
    return out


def readable(shown: list[np.ndarray], keys: list[tuple[str, int]], body: dict, c: np.ndarray) -> bool:
    """AF's answerability rule on drawn photos: every shown step's text (`keys`: (recipe_id, step_idx) of the
    shown photos) is closer to its own photo than to candidate `c` (adversarial.readable_coherence, READ_MARGIN
    0); a shown step without text: never."""
    for v, k in zip(shown, keys):
        t = body.get(k)
        if t is None or not float(c @ t) < float(v @ t):
            return False
    return True


def items_shares(truth, shown: list[str], cand: str) -> tuple[float, float]:
    """Of the 4 photos (3 shown, then `cand`, by their ground truth ids), each one's share of its items that
    another of the four shows too: (the candidate's, the least of the shown photos'). A candidate whose share
    is below every shown photo's is the odd one out by its ingredients alone, with no need to read a step."""
    sets = [item_names(truth, i) for i in shown] + [item_names(truth, cand)]
    sc = [len(sets[j] & set().union(*(sets[k] for k in range(4) if k != j))) / max(len(sets[j]), 1)
          for j in range(4)]
    return sc[3], min(sc[:3])


def measure_foreign(shown: list[np.ndarray], c: np.ndarray) -> dict:
    """What a coherence question records of foreign photo vector `c` among the 3 shown unit vectors: the
    nearest shown photo (`anchor`, its index) and its cosine distance, the distance to the shown photos' mean
    (`dist_q`), the foreign rank (how many shown photos look more out of place: leave-one-out distance above
    the foreign one's; features/datasets/distractors.py `coherence_scores`) and whether the distance probe (the
    photo farthest from the mean of the other three) picks it."""
    v = np.stack(shown)
    d3 = 1.0 - v @ c
    near = int(np.argmin(d3))
    qm = v.sum(0)
    dq = 1.0 - float(c @ qm) / max(float(np.linalg.norm(qm)), 1e-12)
    every = np.vstack([v, c[None, :]])
    total = every.sum(0)
    loo = []
    for i in range(4):
        rest = total - every[i]
        loo.append(1.0 - float(every[i] @ rest) / max(float(np.linalg.norm(every[i]) * np.linalg.norm(rest)), 1e-12))
    return {"anchor": near, "distance": float(d3[near]), "dist_q": dq,
            "foreign_rank": int(sum(x > dq for x in loo[:3])), "distance_probe_hit": int(np.argmax(loo)) == 3}


def remarkable(shown: list[np.ndarray], c: np.ndarray) -> bool:
    """Does a rule on the distances among the 4 photos (3 shown unit vectors, then `c`) single out `c`: is it in
    the closest pair, the photo nearest the mean of the other three (the centre rule) or the farthest from it
    (the distance probe)?"""
    v = np.vstack([np.stack(shown), c[None, :]])
    g = v @ v.T
    iu = np.triu_indices(4, 1)
    a, b = iu[0][np.argmax(g[iu])], iu[1][np.argmax(g[iu])]
    total = v.sum(0)
    loo = [float(v[i] @ (total - v[i])) / max(float(np.linalg.norm(total - v[i])), 1e-12) for i in range(4)]
    return 3 in (a, b) or int(np.argmax(loo)) == 3 or int(np.argmin(loo)) == 3


def match_l1(shown: list[np.ndarray], c: np.ndarray, ref: np.ndarray) -> float:
    """L1 distance between photo `c`'s cosines to the 3 shown unit vectors, sorted high to low, and those of
    the reference photo `ref` (features/datasets/matched.py `matched_pool`)."""
    v = np.stack(shown)
    return float(np.abs(profile(v @ c) - profile(v @ ref)).sum())


def knob3_holds(p: dict, f: dict) -> bool:
    """Knob 3 of a coherence question's rule (`k3_rule`) for a foreign photo's fields `f`."""
    rule = p.get("k3_rule")
    if rule == "paper":
        return f["dist_q"] < p["min_pair"]
    if rule == "rank":
        return f["foreign_rank"] == p["target_rank"]
    return True


def _entry(shown_ids: list[str], f: dict, cand: tuple) -> dict:
    """A foreign photo's provenance (the question's fields, an alternate's names) from its measured fields."""
    item, source, pool, r = cand
    return {**({"step_match": f["step_match"]} if "step_match" in f else {}),
            "anchor_item": shown_ids[f["anchor"]], "distance": round(f["distance"], 6), "dist_q": round(f["dist_q"], 6),
            "distance_probe_hit": f["distance_probe_hit"], "foreign_rank": f["foreign_rank"], "item": item,
            "pool": pool, "recipe_id": r, "source": source, "items_share": round(f["items_share"], 6),
            "items_shown_min": round(f["items_shown_min"], 6),
            **({"match_l1": round(f["match_l1"], 6)} if "match_l1" in f else {})}


def redraw_coherence(con: duckdb.DuckDBPyConnection, setting: str, seed: int = 0, encoder_id: str | None = None,
                     paths: Paths | None = None, sample: Path | None = None, progress: bool = True,
                     items: bool = False, pool: str = "af", twin_rule: str = "words",
                     unremarkable: bool = False) -> dict:
    """Make and register the redrawn dataset of one visual coherence AF setting (see the module's doc); returns
    its summary. `pool`: "af", the source's foreign photo and its alternates; "steps", photos of other
    recipes that show what a held-out step of the recipe does (features/datasets/step_matched.py).
    Idempotent: the same inputs give the same photos, vectors and questions."""
    if pool not in POOLS:
        raise ValueError(f"--foreign-pool {pool}: one of {', '.join(POOLS)}")
    paths = paths or Paths.from_env()
    src = source_dataset(con, setting, seed, encoder_id, TASK)
    matched = src["params"].get("distractors") == "matched"
    qs, truth, nbrs = load_source(con, src, lambda p: [] if matched else p["question_items"], paths, sample)
    spool = StepPool(con, truth, twin_rule=twin_rule) if pool == "steps" else None
    photos: dict[str, dict] = {}
    plan, no_truth, no_step = [], 0, 0
    for row in qs:
        qid, rid, split, answer = row[0], row[1], row[2], row[5]
        p = json.loads(row[7])
        cands = [(p["foreign_item"], p["foreign_recipe_id"], p["af_pools"][answer])]
        cands += [(a["item"], a["recipe_id"], a["pool"]) for a in p.get("af_alternates") or ()]
        if rid not in truth.recipes or cands[0][0] not in truth.photos or \
                any(i not in truth.photos for i in p["question_items"]):
            no_truth += 1
            continue
        bound_from = [c[0] for c in cands if c[0] in truth.photos] if matched else []
        if spool is not None:       # what a held-out step of the recipe would show, instead of AF's
            # matched: the reference's step (the photo the foreign one stands in for)
            only = truth.photos[p["reference_item"]][1] if matched else None
            got = spool.candidates(rid, p["question_items"], split, seed, qid, only=only)
            if not got:
                no_step += 1
                continue
            cands = [(c, r, "step") for c, r, _, _ in got]
            p = dict(p, _step_match={c: {"step_idx": hs, "fields": sc} for c, _, hs, sc in got})
        # (new photo, source photo, pool, source recipe): a foreign photo is always another recipe's
        out = [(photo_for(photos, truth, seed, rid, qid, item, split), item, pl, r)
               for item, r, pl in cands if item in truth.photos]
        smp = [] if matched else [(a, photo_for(photos, truth, seed, rid, qid, n, split))
                                  for a in p["question_items"]
                                  for n in ball_sample(nbrs.get(a, []), seed, f"{qid}/{a}", COH_SAMPLE)
                                  if n in truth.photos]
        plan.append((row, p, out, smp, bound_from))
    counts, vec = draw_and_embed(con, paths, truth, photos, src["encoder_id"],
                                 [i for _, p, out, smp, bf in plan
                                  for i in [*p["question_items"], *(c[0] for c in out), *(s[1] for s in smp),
                                            *([p["reference_item"], *bf] if matched else [])]],
                                 progress)
    body = step_texts(con, paths, src["encoder_id"]) if spool is not None else None
    new_q, outside, odd, marked, used, pending = [], 0, 0, 0, set(), []
    for row, p, out, smp, bound_from in plan:
        qid, rid, split, question, choices, answer, steps, _ = row
        shown = [vec[i] for i in p["question_items"]]
        gram = np.stack(shown) @ np.stack(shown).T
        min_pair = float(min(1.0 - gram[0, 1], 1.0 - gram[0, 2], 1.0 - gram[1, 2]))
        if abs(min_pair - p["min_pair"]) > 1e-4:
            raise ValueError(f"{src['dataset_id']} {qid}: the shown photos' closest pair is {min_pair:.6f} apart now "
                             f"against {p['min_pair']} when it was generated: the vectors changed; regenerate it")
        fs = [measure_foreign(shown, vec[c[0]]) for c in out]
        if matched:                 # the match to the reference, as good as the source's own candidates
            ref = vec[p["reference_item"]]
            bound = max(match_l1(shown, vec[i], ref) for i in bound_from)
            for f, c in zip(fs, out):
                f["match_l1"] = match_l1(shown, vec[c[0]], ref)
            in_ball = valid = [f["match_l1"] <= bound + 1e-9 for f in fs]
            extra = {"match_bound": round(bound, 6)}
        else:
            if len(smp) < BALL_SAMPLE_MIN:
                outside += 1
                continue
            pos = {a: j for j, a in enumerate(p["question_items"])}
            nd = np.array([1.0 - float(shown[pos[a]] @ vec[i]) for a, i in smp])
            m_d, s_d = float(nd.mean()), float(nd.std())       # the ball measured in the question's kitchen
            lo_sd, hi_sd = p["ball_sd"]
            lo, hi = (0.0 if lo_sd is None else m_d + lo_sd * s_d), m_d + hi_sd * s_d
            in_ball = [lo < f["distance"] < hi for f in fs]
            valid = [b and knob3_holds(p, f) for b, f in zip(in_ball, fs)]
            extra = {"ball": [round(lo, 6), round(hi, 6)], "m_d": round(m_d, 6), "s_d": round(s_d, 6),
                     "ball_sample": [list(x) for x in smp],
                     "source_ball": {"ball": p["ball"], "m_d": p["m_d"], "s_d": p["s_d"]}}
        if body is not None:        # the shown steps' texts tell it from the shown photos (AF's rule)
            keys = [(rid, int(truth.photos[i][1])) for i in p["question_items"]]
            valid = [v and readable(shown, keys, body, vec[c[0]]) for v, c in zip(valid, out)]
            for f, c in zip(fs, out):
                f["step_match"] = p["_step_match"][c[1]]
        if unremarkable and any(valid):     # no rule on the 4 photos' distances singles it out
            valid = [v and not remarkable(shown, vec[c[0]]) for v, c in zip(valid, out)]
            if not any(valid):
                marked += 1
                continue
        if not any(valid):
            outside += 1
            continue
        for f, c in zip(fs, out):
            f["items_share"], f["items_shown_min"] = items_shares(truth, p["question_items"], c[1])
        if items:                   # never the odd one out by its ingredients alone
            valid = [v and f["items_share"] >= f["items_shown_min"] for v, f in zip(valid, fs)]
            if not any(valid):
                odd += 1
                continue
        pending.append((row, p, out, fs, valid, in_ball, extra))
    picks = pick_foreign(pending, truth, matched, seed, balance=spool is not None)
    quota = sum(k is None for k in picks)
    for (row, p, out, fs, valid, in_ball, extra), pick in zip(pending, picks):
        if pick is None:
            continue
        qid, rid, split, question, choices, answer, steps, _ = row
        e = _entry(p["question_items"], fs[pick], out[pick])
        order = sorted(range(len(out)), key=lambda i: (fs[i]["match_l1"], i)) if matched else range(len(out))
        # the pooled step's swaps keep the balance of the actions (the step pool)
        act = action_of(truth, out[pick][1]) if spool is not None else None
        alts = [_entry(p["question_items"], fs[i], out[i]) for i in order if valid[i] and i != pick
                and (act is None or action_of(truth, out[i][1]) == act)]
        question, choices = list(question), list(choices)
        question[answer] = choices[answer] = e["item"]
        pools = list(p["af_pools"])
        pools[answer] = e["pool"]
        used.update([e["item"], *(x["item"] for x in alts)])
        p.pop("_step_match", None)
        q = dict(p, foreign_item=e["item"], foreign_source=e["source"], foreign_recipe_id=e["recipe_id"],
                 anchor_item=e["anchor_item"], distance=e["distance"], dist_q=e["dist_q"],
                 foreign_rank=e["foreign_rank"], distance_probe_hit=e["distance_probe_hit"], af_pools=pools,
                 af_scores=[None] * len(choices), af_alternates=alts, n_ball_candidates=sum(in_ball),
                 n_eligible=sum(valid), **extra,
                 redrawn={"kitchen_recipe_id": rid, "source_dataset_id": src["dataset_id"]})
        q.update(items_share=e["items_share"], items_shown_min=e["items_shown_min"])
        if matched:
            q["match_l1"] = e["match_l1"]
        if "step_match" in e:
            q["step_match"] = e["step_match"]
        new_q.append((qid, rid, split, question, choices, answer, list(steps) if steps is not None else None,
                      json.dumps(q, sort_keys=True, separators=(",", ":"))))
    counts["shown"] = len(used & set(photos))
    counts["items_rule"] = items
    counts["foreign_pool"] = pool
    if spool is not None:
        counts["twin_rule"] = twin_rule
    counts["unremarkable"] = unremarkable
    return register(con, src, new_q, truth, counts, {SKIP_OUTSIDE: outside, SKIP_NO_TRUTH: no_truth,
                                                     SKIP_ITEMS: odd, SKIP_NO_STEP: no_step,
                                                     SKIP_ACTIONS: quota, SKIP_REMARKABLE: marked}, seed)
