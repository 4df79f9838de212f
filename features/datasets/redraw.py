"""Visual cloze beyond the paper: the AF distractors drawn again in the question's kitchen (`mrqa redraw`).

On the sample kitchen every photo of a recipe shares its kitchen (counter, light, framing; an author's
recipes share the counter), and the knob-2 ball draws distractors from other recipes: a model that reads
only the photos' pixels tells the answer from them (the look probe reads 95-98% of every AF visual cloze
setting). The kitchen's renderer can draw any step's content in any kitchen from the ground truth, so a
`redrawn` dataset is made from an AF dataset of a knob setting (`0-1-1-af` -> `0-1-1-redrawn-af`):

1. Candidates: per question its 3 distractors, then its recorded alternates (`af_alternates`: the
   knob-valid candidates AF did not pick). Each one from another recipe is drawn again by the renderer of
   the question's recipe (its author's counter, the recipe's light and framing) from its step's ground
   truth (`depicts`: action, vessel, items and their states, tool) with a jitter of its own, seeded by
   (seed, question, source photo). Photos of the question's own recipe are its kitchen's already.
2. The new photos are written under MRQA_HOME/images/redrawn/, registered in `redrawn_images` (source
   photo, kitchen, jitter, sha256) and embedded with the dataset's encoder into the feature store's
   `redrawn_image_vectors`; no other stage takes them for a recipe's photos.
3. The knob-2 ball is measured again in the question's kitchen: BALL_SAMPLE of the answer's K nearest photos
   (the `neighbours` table; seeded by question), drawn there too, give m_d and s_d, and the setting's bounds
   (`ball_sd`, e.g. m_d +- s_d) give the ball (provenance: `ball`, `m_d`, `s_d`, `ball_sample`; the source's in
   `source_ball`). A ball measured among other kitchens' photos would keep only the redrawn photos whose
   content is farther from the answer (a photo in the answer's kitchen comes nearer it), a cue trees read.
   The knobs are checked on the new photos' vectors: a distractor is kept where its new photo lies in
   that ball around the answer; a slot whose photo left it
   takes the next alternate that did not; knob 3's closer-than-the-answer count is met again (exactly in
   balanced mode). A question that cannot meet them is dropped and counted (`redrawn_outside_knobs`).
   The answer and the question's photos are never changed.
4. The dataset is registered under its own setting name and id (`vc-0-1-1-redrawn-af-s0-<enc8>`); each
   distractor and alternate in its provenance names its `source` photo (null: a photo of the question's own
   recipe), `redrawn.kitchen_recipe_id` the kitchen; the valid candidates not shown stay its alternates,
   so `mrqa af-pool --distractors redrawn` swaps among photos drawn in the same kitchen.

Photos of a real site cannot be drawn again without an image model that moves a step's content into
another kitchen; a home without the sample kitchen's ground truth is refused with that reason.
"""
from __future__ import annotations

import hashlib
import json
import logging
import random
from dataclasses import fields, replace
from pathlib import Path

import duckdb
import numpy as np

from etl.config import Paths
from etl.records import REDRAWN_ORD
from etl.warehouse import transaction, utcnow
from features.datasets.ground_truth import NO_TRUTH, Truth, find_truth, read_truth  # noqa: F401 (re-exported)
from features.datasets.knobs import KnobParams, dataset_id, parse_setting, stable_key
from features.vectors.store import REDRAWN_TABLE, FeatureStore, vector_rows

log = logging.getLogger(__name__)

ORD_SPAN = 2 ** 31 - 1 - REDRAWN_ORD   # the ord stays an INTEGER
BALL_SAMPLE = 16                       # the answer's neighbours drawn in the question's kitchen to measure its ball
BALL_SAMPLE_MIN = 8                    # fewer (a tiny split): the question is dropped
SKIP_OUTSIDE = "redrawn_outside_knobs"
SAMPLE_POOL = "sample"                 # `ball_candidates`: a distractor that is one of the ball sample's photos
SKIP_NO_TRUTH = "redrawn_no_ground_truth"
TASK = "visual_cloze"
TASKS = ("visual_cloze", "visual_coherence")


def jitter_for(key: int) -> dict:
    """A photo's own jitter, drawn as the sample kitchen draws one (etl/sample/recipes.py `_images`)."""
    rng = random.Random(key)
    return {"dx": rng.randint(-4, 4), "dy": rng.randint(-4, 4), "scale": round(rng.uniform(0.94, 1.06), 3),
            "brightness": round(rng.uniform(0.94, 1.06), 3)}


def redrawn_id(source_image_id: str, source_recipe: str, source_step: int, key: int) -> str:
    return f"{source_recipe}_{int(source_step)}_{REDRAWN_ORD + key % ORD_SPAN}.jpg"


def photo_for(photos: dict, truth: Truth, seed: int, rid: str, qid: str, item: str, split: str) -> str:
    """The id of `item` drawn again in recipe `rid`'s kitchen for question `qid`, added to `photos` (one photo
    per (question, source): a candidate that is also in the ball's sample is the same photo)."""
    key = stable_key("redraw", seed, rid, qid, item)
    src_recipe, src_step, depicts = truth.photos[item]
    nid = redrawn_id(item, src_recipe, src_step, key)
    if nid in photos and (photos[nid]["source"], photos[nid]["kitchen_recipe_id"]) != (item, rid):
        raise RuntimeError(f"two redrawn photos share the id {nid}; draw with another --seed")
    photos[nid] = {"source": item, "recipe_id": src_recipe, "step_idx": src_step, "kitchen_recipe_id": rid,
                   "jitter": jitter_for(key), "seed": seed, "depicts": depicts, "split": split,
                   "path": f"images/redrawn/{rid}/{nid}"}
    return nid


def ball_sample(neighbours: list[str], seed: int, qid: str, n: int = BALL_SAMPLE) -> list[str]:
    """`n` of the answer's K nearest photos (the `neighbours` table's, other recipes of its split), picked by a
    seeded key of (question, photo), in that order: drawn in the question's kitchen, they measure its ball."""
    return sorted(neighbours, key=lambda i: stable_key("redraw-ball", seed, qid, i))[:n]


# ----------------------------------------------------------------------------- choosing again

def choose(valid: list[bool], closer: list[bool], need: int, exact: bool) -> list[int] | None:
    """The candidates of the 3 distractor slots, or None. Candidates 0..2 are the source's distractors (in
    slot order), the rest its alternates in their recorded order; `valid`: the candidate's photo lies in the
    knob-2 ball; `closer`: it is closer to the question than the answer. A valid source distractor keeps its
    slot; the other slots take the first valid alternates; then, while fewer than `need` (knob 3) are closer,
    the latest-chosen far one gives its slot to the next closer alternate (with `exact`, while more than
    `need` are, the latest closer one to the next far one)."""
    n = len(valid)
    slots = [j if valid[j] else None for j in range(3)]
    pool = [i for i in range(3, n) if valid[i]]
    for s in range(3):
        if slots[s] is None:
            if not pool:
                return None
            slots[s] = pool.pop(0)

    def fix(want_closer: bool) -> bool:
        spare = [i for i in pool if closer[i] == want_closer]
        while True:                                    # each turn takes one spare: it ends
            count = sum(closer[i] for i in slots)
            if (count >= need) if want_closer else (count <= need):
                return True
            victims = [s for s in range(3) if closer[slots[s]] != want_closer]
            if not victims or not spare:
                return False
            s = max(victims, key=lambda s: slots[s])
            new = spare.pop(0)
            pool.remove(new)
            pool.append(slots[s])
            slots[s] = new

    if not fix(True):
        return None
    if exact and not fix(False):
        return None
    return slots


# ----------------------------------------------------------------------------- the stage

def source_dataset(con: duckdb.DuckDBPyConnection, setting: str, seed: int, encoder_id: str | None,
                   task: str = TASK) -> dict:
    """The registered AF dataset of `task` (visual cloze or coherence) and `setting` (ball distractors) to draw
    again; ValueError with what to run when there is none, several (name --encoder), or it was filtered by the
    pooled step."""
    if task not in TASKS:
        raise ValueError(f"--task {task}: redraw draws visual cloze distractors or visual coherence foreign photos "
                         f"again ({', '.join(TASKS)})")
    st = parse_setting(setting)
    matched = st.distractors == "matched" and task == "visual_coherence"
    if not st.adversarial or (st.distractors != "ball" and not matched) or st.preset:
        raise ValueError(f"--knobs {setting}: redraw starts from an AF setting of the knobs (e.g. 0-1-1-af; visual "
                         "coherence: or K1-0-0-matched-af); its result is named K1-K2-K3-redrawn-af "
                         "(K1-0-0-matched-redrawn-af)")
    rows = con.execute("SELECT dataset_id, encoder_id, params, content_sha256 FROM datasets WHERE task = ? "
                       "AND setting = ? "
                       "AND seed = ? AND (? IS NULL OR encoder_id = ?) "
                       "AND NOT regexp_matches(dataset_id, '-p[0-9a-f]{6}$') "
                       "ORDER BY dataset_id", [task, st.name, seed, encoder_id, encoder_id]).fetchall()
    if not rows:
        raise ValueError(f"no {task} dataset {st.name} (seed {seed}) in the warehouse: run "
                         f"`mrqa generate --task {task} --knobs {st.name} --seed {seed}` first")
    if len(rows) > 1:
        raise ValueError(f"{len(rows)} datasets of {st.name} (seed {seed}), one per encoder: name one with --encoder "
                         f"({', '.join(r[1] for r in rows)})")
    did, enc, params, sha = rows[0]
    params = json.loads(params)
    if "af_pooled" in params:
        raise ValueError(f"{did} was filtered by the pooled step (mrqa af-pool) already: regenerate it "
                         f"(`mrqa generate --task {task} --knobs {st.name} --af-drop pooled`), redraw, then "
                         f"run the pooled step on the redrawn datasets (`mrqa af-pool --task {task} "
                         "--distractors redrawn`)")
    return {"dataset_id": did, "encoder_id": enc, "params": params, "setting": st, "task": task,
            "content_sha256": sha}


def load_source(con: duckdb.DuckDBPyConnection, src: dict, anchors, paths: Paths,
                sample: Path | None) -> tuple[list[tuple], Truth, dict[str, list[str]]]:
    """The source dataset's questions (qid, recipe_id, split, question, choice_list, answer, question_step_ids,
    provenance), the ground truth that draws them and the K nearest photos (`neighbours`, rank order) of the
    photos `anchors(provenance)` names (whose ball is measured again)."""
    qs = con.execute("SELECT qid, recipe_id, split, question, choice_list, answer, question_step_ids, provenance "
                     "FROM questions WHERE dataset_id = ? ORDER BY qid", [src["dataset_id"]]).fetchall()
    truth = find_truth(paths, {q[1] for q in qs}, sample)
    k = int(src["params"].get("k", 100))
    ids = sorted({a for q in qs for a in anchors(json.loads(q[7]))})
    nbrs: dict[str, list[str]] = {}
    for a, n in con.execute("SELECT image_id, neighbour_id FROM neighbours WHERE encoder_id = ? AND rank <= ? AND "
                            "list_contains(?, image_id) ORDER BY image_id, rank",
                            [src["encoder_id"], k, ids]).fetchall():
        nbrs.setdefault(a, []).append(n)
    return qs, truth, nbrs


def draw_and_embed(con, paths: Paths, truth: Truth, photos: dict[str, dict], encoder_id: str, need_ids,
                   progress: bool) -> tuple[dict, dict[str, np.ndarray]]:
    """Draw and embed `photos` where needed; returns the photo counts and the unit vectors of `need_ids`
    (LookupError naming what to run when one has none)."""
    drawn, reused = _draw(con, paths, truth, photos, progress)
    store = FeatureStore(paths.lance)
    embedded = _embed(con, store, paths, encoder_id, photos, progress)
    need_ids = sorted(set(need_ids))
    ids, mat = store.image_vectors(encoder_id, ids=need_ids)
    vec = {i: _unit(v) for i, v in zip(ids, mat)}
    lacking = [i for i in need_ids if i not in vec]
    if lacking:
        raise LookupError(f"no vector of {lacking[0]} (and {len(lacking) - 1} more) for encoder {encoder_id}: run "
                          "`mrqa embed` and regenerate the source dataset")
    return {"photos": len(photos), "drawn": drawn, "reused": reused, "embedded": embedded}, vec


def _unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    return v / max(float(np.linalg.norm(v)), 1e-12)


def _embed(con, store: FeatureStore, paths: Paths, encoder_id: str, photos: dict[str, dict],
           progress: bool) -> int:
    """Vectors of the redrawn photos the store lacks (or holds for other bytes); returns how many it made."""
    from features.embed.decode import image_loader, image_size_of
    from features.embed.encoders import load_encoder
    from features.embed.words_encoder import is_words_encoder
    have = store.keys(REDRAWN_TABLE, encoder_id)
    todo = sorted(i for i, ph in photos.items() if have.get(i) != ph["sha256"])
    if not todo:
        return 0
    if is_words_encoder(encoder_id):
        raise ValueError(f"encoder {encoder_id} is a words encoder: it has no image tower to embed photos")
    import torch
    from tqdm import tqdm
    enc = load_encoder(con, encoder_id, paths=paths)
    files = [paths.home / photos[i]["path"] for i in todo]
    loader = image_loader(files, enc.preprocess, image_size_of(enc.model), 256, 0)
    vecs = np.zeros((len(todo), enc.dim), np.float32)
    bar = tqdm(total=len(todo), desc="embed redrawn photos", unit="img", disable=not progress)
    with torch.no_grad():
        for pos, x, err, detail in loader:
            bad = [(files[int(p)], d) for p, e, d in zip(pos, err, detail) if e]
            if bad:
                raise RuntimeError(f"a redrawn photo could not be decoded: {bad[0][0]}: {bad[0][1]}; run "
                                   "`mrqa redraw` again (it draws missing or changed files again)")
            vecs[np.asarray(pos, dtype=np.int64)] = enc.encode_image_tensors(x)
            bar.update(len(pos))
    bar.close()
    store.upsert(REDRAWN_TABLE, vector_rows(
        todo, vecs, recipe_id=[photos[i]["recipe_id"] for i in todo],
        step_idx=np.array([photos[i]["step_idx"] for i in todo], dtype=np.int32),
        split=[photos[i]["split"] for i in todo], encoder_id=encoder_id,
        sha256=[photos[i]["sha256"] for i in todo]))
    store.finish_writes(REDRAWN_TABLE, encoder_id)
    return len(todo)


def _draw(con, paths: Paths, truth: Truth, photos: dict[str, dict], progress: bool) -> tuple[int, int]:
    """Render the photos whose file is missing or other than its row says; write them and their rows.
    Returns (drawn, reused)."""
    from tqdm import tqdm
    rows = {i: (sha, path) for i, sha, path in con.execute(
        "SELECT image_id, sha256, path FROM redrawn_images WHERE list_contains(?, image_id)",
        [sorted(photos)]).fetchall()}
    drawn, new_rows = 0, []
    for iid in tqdm(sorted(photos), desc="redraw photos", unit="img", disable=not progress):
        ph = photos[iid]
        f = paths.home / ph["path"]
        old = rows.get(iid)
        if old and old[1] == ph["path"] and f.is_file() and hashlib.sha256(f.read_bytes()).hexdigest() == old[0]:
            ph["sha256"] = old[0]
            continue
        depicts = dict(ph["depicts"], jitter=ph["jitter"])
        data = truth.renderer(ph["kitchen_recipe_id"]).render(depicts)
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_name(f.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(f)
        ph["sha256"] = hashlib.sha256(data).hexdigest()
        if old and old[0] != ph["sha256"]:
            log.warning("redraw: %s was drawn again with other bytes than its row said (%s)", iid, f)
        drawn += 1
        new_rows.append((iid, ph["source"], ph["recipe_id"], ph["step_idx"], ph["kitchen_recipe_id"],
                         json.dumps(ph["jitter"], sort_keys=True), ph["seed"], ph["path"], ph["sha256"], utcnow()))
    if new_rows:
        import pyarrow as pa
        names = ["image_id", "source_image_id", "recipe_id", "step_idx", "kitchen_recipe_id", "jitter", "seed", "path",
                 "sha256", "created_at"]
        tbl = pa.table({n: [r[k] for r in new_rows] for k, n in enumerate(names)})
        with transaction(con):
            con.register("redrawn_new", tbl)
            con.execute(f"INSERT OR REPLACE INTO redrawn_images ({', '.join(names)}) SELECT {', '.join(names)} "
                        "FROM redrawn_new")
            con.unregister("redrawn_new")
    return drawn, len(photos) - drawn


def sample_candidates(truth: Truth, words, rid: str, answer_item: str, taken: set[str],
                      sample: list[str]) -> list[tuple[str, str, str]]:
    """The source photos of the answer's neighbours that may stand as distractors once drawn in the question's
    kitchen (`ball_candidates`), in `sample`'s order, as (source photo, pool "sample", source recipe): photos of
    other recipes than the question's and than `taken` (the recipes of its candidates already), one per recipe,
    never of an intro (step 0), never a twin of the answer's step (`words`: the source's twin rule, twins.py).
    Whether their new photos lie in the ball and the answer step's text tells them from the answer are checked
    on the new photos' vectors (`redraw`)."""
    a_rec, a_step, _ = truth.photos[answer_item]
    out, seen = [], set(taken) | {rid}
    rows = words.rows([truth.photos[src][0] for src in sample], [truth.photos[src][1] for src in sample])
    twin = words.twins(words.rows([a_rec], [a_step])[0], rows) if len(sample) else np.zeros(0, bool)
    for src, tw in zip(sample, twin):
        r, step, _ = truth.photos[src]
        if r in seen or int(step) == 0 or tw:
            continue
        seen.add(r)
        out.append((src, SAMPLE_POOL, r))
    return out


def answer_texts(paths: Paths, encoder_id: str, truth: Truth, answer_items: list[str]) -> dict[str, np.ndarray]:
    """answer item -> the unit body-text vector of its step in the encoder's space (AF's answerability rule,
    adversarial.readable); absent where the step has none."""
    keys = {a: f"{truth.photos[a][0]}_{int(truth.photos[a][1])}_body" for a in answer_items}
    ids, mat = FeatureStore(paths.lance).text_vectors(encoder_id, "body", ids=sorted(set(keys.values())))
    row = {i: _unit(v) for i, v in zip(ids, mat)}
    return {a: row[k] for a, k in keys.items() if k in row}


def redraw(con: duckdb.DuckDBPyConnection, setting: str, seed: int = 0, encoder_id: str | None = None,
           paths: Paths | None = None, sample: Path | None = None, progress: bool = True,
           ball_candidates: bool | None = None, candidate_sample: int = BALL_SAMPLE) -> dict:
    """Make and register the redrawn dataset of one visual cloze AF setting (see the module's doc); returns
    its summary. Idempotent: the same inputs give the same photos, vectors and questions. `ball_candidates`
    (default: at knob 2 = 0): the ball sample's own photos that lie inside the ball are candidates too, after
    the source's (`sample_candidates`; the paper's rule, whose ball and candidates are the same K neighbours).
    `candidate_sample` (at least BALL_SAMPLE; with `ball_candidates`): that many of the answer's neighbours are
    drawn in the question's kitchen as candidates, the first BALL_SAMPLE of them (the same photos as by default)
    still measuring the ball; more give a question whose few candidates left the ball measured there a chance to
    meet the knobs (knob 2 = 0 keeps only the ball's near tail)."""
    paths = paths or Paths.from_env()
    src = source_dataset(con, setting, seed, encoder_id, TASK)
    enc = src["encoder_id"]
    if ball_candidates is None:
        ball_candidates = src["setting"].k2 == 0
    if candidate_sample < BALL_SAMPLE or (candidate_sample > BALL_SAMPLE and not ball_candidates):
        raise ValueError(f"candidate_sample {candidate_sample}: at least {BALL_SAMPLE} (the photos that measure "
                         "the ball), and more only with the ball sample's photos as candidates (ball_candidates)")
    qs, truth, nbrs = load_source(con, src, lambda p: [p["answer_item"]], paths, sample)
    words = None
    if ball_candidates:             # no twin of the answer's step by the source's twin rule (`--twin-rule`)
        from features.datasets.twins import ItemTwins, StepWords
        words = StepWords.from_warehouse(con)
        if (src["params"].get("adversarial") or {}).get("twin_rule") == "items":
            words = ItemTwins(words, truth.photos)
    photos: dict[str, dict] = {}
    plan = []                       # per question: (row, provenance, candidates [(item, source, pool, recipe)])
    no_truth = 0
    for row in qs:
        qid, rid, split = row[0], row[1], row[2]
        p = json.loads(row[7])
        answer = row[5]
        cols = [c for c in range(len(p["choice_items"])) if c != answer]
        cands = [(d["item"], d["recipe_id"], p["af_pools"][c]) for d, c in zip(p["distractors"], cols)]
        cands += [(a["item"], a["recipe_id"], a["pool"]) for a in p.get("af_alternates") or ()]
        if rid not in truth.recipes or any(r != rid and it not in truth.photos for it, r, _ in cands[:3]):
            no_truth += 1
            continue
        out = []
        for item, r, pool in cands:
            if r == rid:                               # the question's own kitchen already
                out.append((item, None, pool, r))
            elif item in truth.photos:
                out.append((photo_for(photos, truth, seed, rid, qid, item, split), item, pool, r))
        drawn_src = ball_sample(nbrs.get(p["answer_item"], []), seed, qid, candidate_sample)
        smp_src = [item for item in drawn_src[:BALL_SAMPLE] if item in truth.photos]    # they measure the ball
        sample_ids = [photo_for(photos, truth, seed, rid, qid, item, split) for item in smp_src]
        n_source = len(out)
        if ball_candidates and p["answer_item"] in truth.photos:
            taken = {c[3] for c in out} | {c[1] for c in cands}
            have = {c[1] or c[0] for c in out}
            cand = [item for item in drawn_src if item in truth.photos and item not in have]
            out += [(photo_for(photos, truth, seed, rid, qid, s, split), s, pool, r)     # drawn if it may stand
                    for s, pool, r in sample_candidates(truth, words, rid, p["answer_item"], taken, cand)]
        plan.append((row, p, out, sample_ids, n_source))
    counts, vec = draw_and_embed(con, paths, truth, photos, enc,
                                 [i for row, p, out, smp, _ in plan
                                  for i in [*p["question_items"], *(c[0] for c in out), *smp]], progress)
    texts = answer_texts(paths, enc, truth, [p["answer_item"] for _, p, out, _, n in plan if len(out) > n]) \
        if ball_candidates else {}
    new_q, outside, used, from_sample = [], 0, set(), 0
    for row, p, out, smp, n_source in plan:
        qid, rid, split, question, choices, answer, steps, _ = row
        a = vec[p["answer_item"]]
        ctx = [vec[i] for j, i in enumerate(p["question_items"]) if j != p["placeholder_index"]]
        qm = _unit(np.mean(ctx, axis=0))
        d_aq = 1.0 - float(a @ qm)
        if abs(d_aq - p["d_answer_q"]) > 1e-4:
            raise ValueError(f"{src['dataset_id']} {qid}: the answer's distance to the question is {d_aq:.6f} now "
                             f"against {p['d_answer_q']} when it was generated: the vectors changed; regenerate it")
        if len(smp) < BALL_SAMPLE_MIN:
            outside += 1
            continue
        nd = np.array([1.0 - float(a @ vec[i]) for i in smp])
        m_d, s_d = float(nd.mean()), float(nd.std())           # the ball measured in the question's kitchen
        lo_sd, hi_sd = p["ball_sd"]
        lo, hi = (0.0 if lo_sd is None else m_d + lo_sd * s_d), m_d + hi_sd * s_d
        dist = [1.0 - float(a @ vec[c[0]]) for c in out]
        dq = [1.0 - float(qm @ vec[c[0]]) for c in out]
        valid = [lo <= d <= hi for d in dist]
        if len(out) > n_source:                       # the sample's photos: AF's answerability rule too
            t = texts.get(p["answer_item"])
            for i in range(n_source, len(out)):
                valid[i] = valid[i] and t is not None and float(t @ vec[out[i][0]]) < float(t @ a)
        closer = [x < d_aq for x in dq]
        exact = p["k3_mode"] == "balanced"
        slots = choose(valid, closer, int(p["n_closer_required"] or 0), exact) if len(out) >= 3 else None
        if slots is None:
            outside += 1
            continue
        cols = [c for c in range(len(choices)) if c != answer]
        items, pools = list(p["choice_items"]), list(p["af_pools"])
        scores = list(p.get("af_scores") or [None] * len(choices))
        dis = []
        for s, c in zip(slots, cols):
            item, source, pool, r = out[s]
            items[c], pools[c] = item, pool
            scores[c] = None                           # the ensemble scored the source's photo, not this one
            dis.append({"closer": closer[s], "dist_q": round(dq[s], 6), "distance": round(dist[s], 6),
                        "item": item, "recipe_id": r, "source": source})
            used.add(item)
            from_sample += s >= n_source
        alts = [{"closer": closer[i], "dist_q": round(dq[i], 6), "distance": round(dist[i], 6), "item": out[i][0],
                 "pool": out[i][2], "recipe_id": out[i][3], "source": out[i][1]}
                for i in range(len(out)) if valid[i] and i not in slots]
        used.update(x["item"] for x in alts)
        q = dict(p, choice_items=items, af_pools=pools, af_scores=scores, distractors=dis, af_alternates=alts,
                 n_closer=sum(x["closer"] for x in dis), ball=[round(lo, 6), round(hi, 6)], m_d=round(m_d, 6),
                 s_d=round(s_d, 6), ball_sample=smp,
                 source_ball={"ball": p["ball"], "m_d": p["m_d"], "s_d": p["s_d"]},
                 redrawn={"kitchen_recipe_id": rid, "source_dataset_id": src["dataset_id"]})
        new_q.append((qid, rid, split, list(question), items, answer, list(steps) if steps is not None else None,
                      json.dumps(q, sort_keys=True, separators=(",", ":"))))
    counts["shown"] = len(used & set(photos))
    if ball_candidates:                               # (absent otherwise: the datasets made before stay as they were)
        counts["ball_candidates"] = True
        counts["distractors_from_sample"] = int(from_sample)
        if candidate_sample != BALL_SAMPLE:          # (absent at the default: the datasets made before stay)
            counts["candidate_sample"] = candidate_sample
    return register(con, src, new_q, truth, counts, {SKIP_OUTSIDE: outside, SKIP_NO_TRUTH: no_truth}, seed)


def register(con, src: dict, rows: list[tuple], truth: Truth, photos: dict, skips: dict, seed: int) -> dict:
    """Register the redrawn dataset of `src` (its task, its knobs with distractors `redrawn`): its questions
    `rows`, its params (the source's, with the redraw's provenance and skips), its counts, content hash and
    distance probe (af_pooled.rewrite_dataset); a dataset of that id before it is replaced, its metrics with it."""
    from features.datasets.af_pooled import rewrite_dataset
    task, sp, enc = src["task"], src["params"], src["encoder_id"]
    names = {f.name for f in fields(KnobParams)}
    kind = "matched-redrawn" if sp.get("distractors") == "matched" else "redrawn"
    kp = replace(KnobParams(**{k: v for k, v in sp.items() if k in names}), distractors=kind)
    kp.validate(task)
    did = dataset_id(task, kp, seed, enc)
    all_skips = {**(sp.get("skips") or {}), **{k: v for k, v in skips.items() if v}}
    positions = [0] * 4
    for r in rows:
        positions[r[5]] += 1
    params = {**sp, **kp.to_json(), "skips": all_skips, "answer_positions": positions,
              "distance_probe_accuracy": None,
              "redraw": {"source_dataset_id": src["dataset_id"], "source_content_sha256": src.get("content_sha256"),
                         "seed": seed, "sample": truth.folder.name,
                         "sample_content_sha256": truth.content_sha256,
                         "source_questions": len(rows) + sum(skips.values()), **photos}}
    with transaction(con):
        for t in ("questions", "datasets", "generation_skips", "bias_metrics"):
            con.execute(f"DELETE FROM {t} WHERE dataset_id = ?", [did])
        if rows:
            import pyarrow as pa
            cols = list(zip(*rows))
            tbl = pa.table({"qid": pa.array(cols[0], pa.string()), "recipe_id": pa.array(cols[1], pa.string()),
                            "split": pa.array(cols[2], pa.string()),
                            "question": pa.array(cols[3], pa.list_(pa.string())),
                            "choice_list": pa.array(cols[4], pa.list_(pa.string())),
                            "answer": pa.array(cols[5], pa.int32()),
                            "question_step_ids": pa.array(cols[6], pa.list_(pa.int32())),
                            "provenance": pa.array(cols[7], pa.string())})
            con.register("redrawn_questions", tbl)
            con.execute("INSERT INTO questions SELECT ?, qid, ?, recipe_id, split, question, choice_list, answer, "
                        "question_step_ids, provenance::JSON FROM redrawn_questions", [did, task])
            con.unregister("redrawn_questions")
        con.execute("""INSERT INTO datasets (dataset_id, task, knob1, knob2, knob3, k3_mode, adversarial, setting,
                       preset, seed, encoder_id, params, created_at, n_questions, n_recipes, content_sha256)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, '')""",
                    [did, task, kp.knob1, kp.knob2, kp.knob3, kp.k3_mode, True, kp.setting.name, None, seed, enc,
                     json.dumps(params, sort_keys=True), utcnow()])
        rewrite_dataset(con, did)           # counts, content hash, distance probe from the questions just written
        if all_skips:
            con.executemany("INSERT INTO generation_skips VALUES (?, ?, ?)",
                            [[did, k, v] for k, v in sorted(all_skips.items())])
        sha, probe = con.execute("SELECT content_sha256, json_extract(params, '$.distance_probe_accuracy')::DOUBLE "
                                 "FROM datasets WHERE dataset_id = ?", [did]).fetchall()[0]
    log.info("redraw: %s %d of %d questions (%s); %d photos, %d drawn", did, len(rows),
             len(rows) + sum(skips.values()), ", ".join(f"{k} {v}" for k, v in skips.items()),
             photos["photos"], photos["drawn"])
    return {"dataset_id": did, "task": task, "setting": kp.setting.name, "source_dataset_id": src["dataset_id"],
            "n_questions": len(rows), "source_questions": len(rows) + sum(skips.values()), "skips": skips,
            "content_sha256": sha, **{f"photos_{k}": v for k, v in photos.items()},
            "distance_probe_accuracy": probe}
