"""Meta-RecipeQA dataset generation: the engine that turns question families + knob params into rows.

Set-based work (items, representatives, neighbour statistics, knob-2 balls, knob-3 filters and the
seeded picks) runs as SQL files of sql/queries/ inside DuckDB; knob 1 (iterative per-recipe
sampling) is in features/tasks.py; ordering and the RecipeQA-style random distractors are numpy.
Every random decision is a pure function of (seed, task, recipe or question, item), so a dataset is
byte-identical across runs and independent of iteration order.

    gen = Generator(con, encoder_id)                 # vectors from LanceDB (features.store)
    ds = gen.generate("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 0), seed=0)
    register_dataset(con, ds)
"""
from __future__ import annotations

import itertools
import json
import logging
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pyarrow as pa

from etl.config import SQL_DIR
from etl.warehouse import utcnow
from features.knobs import KnobParams, dataset_id, stable_key, uniforms
from features.tasks import FAMILIES, Skeleton, TaskFamily, build_skeletons

log = logging.getLogger(__name__)
QUERIES = SQL_DIR / "queries"
PLACEHOLDER = "@placeholder"
PERMS = list(itertools.permutations(range(4)))          # PERMS[0] is the correct order
STREAM_K3, STREAM_POS, STREAM_ORDER, STREAM_FAR = 3, 5, 7, 11


def load_query(name: str) -> str:
    """The text of sql/queries/<name>.sql."""
    path = QUERIES / f"{name}.sql"
    if not path.exists():
        raise FileNotFoundError(f"no query {path}")
    return path.read_text().strip().rstrip(";")


def _r(x) -> float:
    return round(float(x), 6)


# ----------------------------------------------------------------------------- inputs (feature spaces)

@dataclass
class Space:
    """Items of one feature space (images or step titles) with unit vectors, as arrays + temp tables."""
    name: str                     # image | title
    item_ids: np.ndarray          # sorted
    recipe_ids: np.ndarray
    splits: np.ndarray
    texts: list
    vecs: np.ndarray              # float32, L2-normalised
    index: dict = field(repr=False, default_factory=dict)


def _fixed_list(mat: np.ndarray) -> pa.FixedSizeListArray:
    mat = np.ascontiguousarray(mat, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(mat.ravel()), mat.shape[1])


def read_store_vectors(lance_uri: str, encoder_id: str, space: str) -> tuple[list[str], np.ndarray]:
    """(ids, matrix) from the feature store (contract C6)."""
    from features.store import FeatureStore
    store = FeatureStore(lance_uri)
    if space == "image":
        return store.image_vectors(encoder_id)
    return store.text_vectors(encoder_id, "title")


class Generator:
    """Generates datasets for one encoder on one warehouse connection; caches shared inputs."""

    def __init__(self, con: duckdb.DuckDBPyConnection, encoder_id: str, lance_uri: str | None = None):
        from etl.config import Paths
        self.con = con
        self.encoder_id = encoder_id
        self.lance_uri = lance_uri or Paths.from_env().lance
        self._spaces: dict[str, Space] = {}
        self._prepared: dict[tuple, tuple] = {}
        self._skeletons: dict[tuple, tuple] = {}
        self._active: tuple | None = None

    # -- spaces ---------------------------------------------------------------------------------
    def space(self, name: str) -> Space:
        if name in self._spaces:
            return self._spaces[name]
        ids, mat = read_store_vectors(self.lance_uri, self.encoder_id, name)
        if len(ids) == 0:
            raise LookupError(f"no {name} vectors for encoder {self.encoder_id} in {self.lance_uri}; "
                              "run `mrqa embed` first")
        mat = np.asarray(mat, dtype=np.float32)
        store_tbl = pa.table({"item_id": pa.array(list(ids), pa.string()), "vec": _fixed_list(mat)})
        self.con.register("gen_store_vectors", store_tbl)
        query = load_query("items_images" if name == "image" else "items_titles")
        items = self.con.sql(query).to_arrow_table()
        self.con.unregister("gen_store_vectors")
        vecs = np.asarray(items.column("vec").combine_chunks().flatten().to_numpy(zero_copy_only=False),
                          dtype=np.float32).reshape(items.num_rows, mat.shape[1])
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        vecs = vecs / np.where(norms > 0, norms, 1.0)
        tbl = items.set_column(items.schema.get_field_index("vec"), "vec", _fixed_list(vecs))
        self.con.register(f"gen_items_{name}_arrow", tbl)
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE gen_items_{name} AS "
                         f"SELECT * FROM gen_items_{name}_arrow")
        self.con.unregister(f"gen_items_{name}_arrow")
        item_ids = np.array(items.column("item_id").to_pylist(), dtype=object)
        sp = Space(name, item_ids, np.array(items.column("recipe_id").to_pylist(), dtype=object),
                   np.array(items.column("split").to_pylist(), dtype=object),
                   items.column("item_text").to_pylist(), vecs,
                   {iid: i for i, iid in enumerate(item_ids)})
        self._spaces[name] = sp
        log.info("generate: %d %s items with vectors (encoder %s)", len(item_ids), name, self.encoder_id)
        return sp

    def _knn_relation(self, space: str) -> str:
        enc = self.encoder_id.replace("'", "''")
        if space == "image":
            n = self.con.execute("SELECT count(*) FROM neighbours WHERE encoder_id = ?",
                                 [self.encoder_id]).fetchall()[0][0]
            if n == 0:
                raise LookupError(f"no neighbours for encoder {self.encoder_id}; "
                                  "run `mrqa embed` (it builds the neighbour table) first")
            return (f"SELECT image_id AS item_id, rank, neighbour_id AS cand_id FROM neighbours "
                    f"WHERE encoder_id = '{enc}'")
        return (f"SELECT item_id, rank, neighbour_id AS cand_id FROM text_neighbours "
                f"WHERE encoder_id = '{enc}' AND field = 'title'")

    def prepare(self, space: str, seed: int, k: int):
        """Representatives, eligible recipes and KNN statistics of (space, seed, k); activates them
        as the temp views gen_items / gen_reps / gen_knn / gen_knn_stats."""
        key = (space, seed, k)
        sp = self.space(space)
        if space == "title":
            ensure_text_neighbours(self.con, self.encoder_id, sp, k)
        tag = f"{space}_{seed}_{k}".replace("-", "m")
        if key not in self._prepared:
            self.con.execute(f"CREATE OR REPLACE TEMP VIEW gen_items AS SELECT * FROM gen_items_{space}")
            self.con.execute(f"CREATE OR REPLACE TEMP VIEW gen_knn AS {self._knn_relation(space)}")
            self.con.execute(f"CREATE OR REPLACE TEMP TABLE gen_reps_{tag} AS "
                             f"{load_query('representative_items')}", {"seed": seed})
            self.con.execute(f"CREATE OR REPLACE TEMP VIEW gen_reps AS SELECT * FROM gen_reps_{tag}")
            self.con.execute("CREATE OR REPLACE TEMP VIEW gen_targets AS SELECT item_id FROM gen_reps")
            self.con.execute(f"CREATE OR REPLACE TEMP TABLE gen_knn_stats_{tag} AS "
                             f"{load_query('knn_stats')}", {"k": k})
            recipes = [(r, s, list(st)) for r, s, st in
                       self.con.execute(load_query("eligible_recipes")).fetchall()]
            reps = {(r, s): i for r, s, i in
                    self.con.execute("SELECT recipe_id, step_idx, item_id FROM gen_reps").fetchall()}
            dk = dict(self.con.execute(f"SELECT DISTINCT item_id, d_k FROM gen_knn_stats_{tag}").fetchall())
            self._prepared[key] = (recipes, reps, dk)
        self.con.execute(f"CREATE OR REPLACE TEMP VIEW gen_items AS SELECT * FROM gen_items_{space}")
        self.con.execute(f"CREATE OR REPLACE TEMP VIEW gen_reps AS SELECT * FROM gen_reps_{tag}")
        self.con.execute(f"CREATE OR REPLACE TEMP VIEW gen_knn_stats AS SELECT * FROM gen_knn_stats_{tag}")
        return self._prepared[key]

    # -- datasets -------------------------------------------------------------------------------
    def generate(self, task: str, params: KnobParams, seed: int) -> "GeneratedDataset":
        params.validate(task)
        fam = FAMILIES[task]
        recipes, reps, dk = self.prepare(fam.space, seed, params.k)
        skey = (task, seed, params.preset, params.min_steps, params.questions_per_step,
                params.remove_answer_step, params.extra_step_removal, fam.space)
        if skey not in self._skeletons:
            self._skeletons[skey] = build_skeletons(recipes, fam, params, seed)
        skeletons, recipe_skips = self._skeletons[skey]
        ds = GeneratedDataset(dataset_id(task, params, seed, self.encoder_id), task, params, seed,
                              self.encoder_id, skips=dict(recipe_skips))
        sp = self._spaces[fam.space]
        qs = _QuestionBatch.build(skeletons, reps, sp, task, seed)
        if task in ("visual_cloze", "textual_cloze"):
            _cloze(self.con, ds, qs, sp, fam, dk)
        elif task == "visual_coherence":
            _coherence(self.con, ds, qs, sp, dk)
        else:
            _ordering(ds, qs, sp)
        ds.n_skeletons = len(skeletons)
        ds.finish()
        log.info("generate: %s %d questions from %d recipes, skipped %s", ds.dataset_id,
                 len(ds.rows), ds.n_recipes, ds.skips or "none")
        return ds


# ----------------------------------------------------------------------------- question batches

@dataclass
class _QuestionBatch:
    sk: list[Skeleton]
    qids: list[str]
    qkeys: np.ndarray             # uint64
    items: np.ndarray             # (Q, n_shown) row indices into the space
    answer_col: np.ndarray        # (Q,) column of the answer step among the shown steps

    @classmethod
    def build(cls, skeletons: list[Skeleton], reps: dict, sp: Space, task: str, seed: int):
        qids = [f"{s.recipe_id}-q{s.q_index}" for s in skeletons]
        qkeys = np.array([stable_key(seed, task, q) for q in qids], dtype=np.uint64)
        n = FAMILIES[task].n_shown
        items = np.array([[sp.index[reps[(s.recipe_id, st)]] for st in s.steps] for s in skeletons],
                         dtype=np.int64).reshape(len(skeletons), n)
        answer_col = np.array([s.steps.index(s.answer_step) for s in skeletons], dtype=np.int64)
        return cls(skeletons, qids, qkeys, items, answer_col)


@dataclass
class GeneratedDataset:
    dataset_id: str
    task: str
    params: KnobParams
    seed: int
    encoder_id: str
    rows: list[dict] = field(default_factory=list)
    skips: dict[str, int] = field(default_factory=dict)
    n_skeletons: int = 0
    probe_hits: int = 0
    n_recipes: int = 0

    def skip(self, reason: str, n: int = 1) -> None:
        if n:
            self.skips[reason] = self.skips.get(reason, 0) + n

    def add(self, sk: Skeleton, qid: str, question: list, choices: list, answer: int,
            provenance: dict, probe_choice: int) -> None:
        prov = {"seed": self.seed, "encoder_id": self.encoder_id, "task": self.task,
                "knobs": [self.params.knob1, self.params.knob2, self.params.knob3],
                "preset": self.params.preset, "k3_mode": self.params.k3_mode,
                "answer_step": sk.answer_step, "extra_removed_step": sk.extra_removed, **provenance}
        self.rows.append({"dataset_id": self.dataset_id, "qid": qid, "task": self.task,
                          "recipe_id": sk.recipe_id, "split": sk.split, "question": question,
                          "choice_list": choices, "answer": int(answer),
                          "question_step_ids": list(sk.steps),
                          "provenance": json.dumps(prov, sort_keys=True, separators=(",", ":"))})
        self.probe_hits += int(probe_choice == answer)

    def finish(self) -> None:
        self.rows.sort(key=lambda r: r["qid"])
        self.n_recipes = len({r["recipe_id"] for r in self.rows})

    def summary(self) -> dict:
        pos = np.bincount([r["answer"] for r in self.rows], minlength=4).tolist()
        return {"dataset_id": self.dataset_id, "task": self.task, "knobs": self.params.knobs_label,
                "k3_mode": self.params.k3_mode, "seed": self.seed, "encoder_id": self.encoder_id,
                "n_questions": len(self.rows), "n_recipes": self.n_recipes,
                "n_skeletons": self.n_skeletons, "skips": dict(sorted(self.skips.items())),
                "answer_positions": pos,
                "distance_probe_accuracy": round(self.probe_hits / len(self.rows), 4) if self.rows else None}


def _k3_requirements(qkeys: np.ndarray, params: KnobParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per question: (n_closer required, exact?, coin heads?) from the knob-3 mode."""
    u = uniforms(qkeys, STREAM_K3, 1)[:, 0]
    q = len(qkeys)
    heads = np.zeros(q, dtype=bool)
    exact = np.zeros(q, dtype=bool)
    need = np.zeros(q, dtype=np.int64)
    if params.k3_mode == "coin":
        heads = u < params.k3_prob
        need = np.where(heads, params.k3_n_constrained, 0)
    elif params.k3_mode == "all":
        heads[:] = True
        need[:] = params.k3_n_constrained
    elif params.k3_mode == "balanced":
        need = np.minimum((u * 4).astype(np.int64), 3)
        exact[:] = True
        heads[:] = True
    return need, exact, heads


def _positions(qkeys: np.ndarray) -> np.ndarray:
    return np.minimum((uniforms(qkeys, STREAM_POS, 1)[:, 0] * 4).astype(np.int64), 3)


def _cos_dist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    na = np.linalg.norm(a, axis=-1)
    nb = np.linalg.norm(b, axis=-1)
    return 1.0 - (a * b).sum(-1) / np.maximum(na * nb, 1e-12)


# ----------------------------------------------------------------------------- cloze (visual + textual)

def _labels(sp: Space, rows: np.ndarray) -> list[str]:
    """What a question/choice shows: the image id, or the title text."""
    if sp.name == "image":
        return [sp.item_ids[i] for i in rows]
    return [sp.texts[i] for i in rows]


def _cloze(con, ds: GeneratedDataset, qs: _QuestionBatch, sp: Space, fam: TaskFamily, dk: dict) -> None:
    p = ds.params
    n_q = len(qs.qids)
    if n_q == 0:
        return
    ans = qs.items[np.arange(n_q), qs.answer_col]
    ctx_mask = np.ones(qs.items.shape, dtype=bool)
    ctx_mask[np.arange(n_q), qs.answer_col] = False
    ctx = qs.items[ctx_mask].reshape(n_q, 3)
    qmean = sp.vecs[ctx].mean(axis=1)
    d_ans_q = _cos_dist(qmean, sp.vecs[ans])
    need, exact, heads = _k3_requirements(qs.qkeys, p)
    pos = _positions(qs.qkeys)

    if p.distractors == "random_far":
        picks = _random_far(qs, sp, [ans], dk, p.k, 3)
        for i in range(n_q):
            if picks[i] is None:
                ds.skip("no_far_random_candidate")
                continue
            dist = _cos_dist(sp.vecs[ans[i]][None], sp.vecs[picks[i]])
            dq = _cos_dist(qmean[i][None], sp.vecs[picks[i]])
            distractors = [{"item": sp.item_ids[c], "recipe_id": sp.recipe_ids[c], "distance": _r(d),
                            "dist_q": _r(e), "closer": bool(e < d_ans_q[i])}
                           for c, d, e in zip(picks[i], dist, dq)]
            extra = {"rule": "random_far", "d_k": _r(dk.get(sp.item_ids[ans[i]], float("nan")))}
            _emit_cloze(ds, qs, sp, i, ans[i], list(picks[i]), distractors, pos[i], d_ans_q[i],
                        qmean[i], extra, 0, False)
        return

    qtbl = pa.table({"qid": qs.qids, "qkey": pa.array(qs.qkeys, pa.uint64()),
                     "answer_id": [sp.item_ids[a] for a in ans], "qvec": _fixed_list(qmean),
                     "d_answer_q": d_ans_q.astype(np.float64), "n_closer": need, "exact": exact})
    con.register("gen_questions_arrow", qtbl)
    con.execute("CREATE OR REPLACE TEMP TABLE gen_questions AS SELECT * FROM gen_questions_arrow")
    con.unregister("gen_questions_arrow")
    res = con.execute(load_query("cloze_distractors"),
                      {"lo_sd": p.ball_lo_sd, "hi_sd": p.ball_hi_sd}).fetchall()
    cols = ["qid", "cand_id", "cand_recipe_id", "distance", "m_d", "s_d", "ball_lo", "ball_hi",
            "dist_q", "is_closer", "pick_key", "n_cands", "n_closer_cands"]
    by_q: dict[str, list[dict]] = {}
    for row in res:
        d = dict(zip(cols, row))
        by_q.setdefault(d["qid"], []).append(d)
    for i, qid in enumerate(qs.qids):
        chosen = by_q.get(qid, [])
        n_cands = chosen[0]["n_cands"] if chosen else 0
        n_closer = chosen[0]["n_closer_cands"] if chosen else 0
        if n_cands < 3:
            ds.skip("too_few_ball_candidates")
            continue
        if n_closer < need[i]:
            ds.skip("too_few_closer_candidates")
            continue
        if len(chosen) < 3:
            ds.skip("too_few_farther_candidates" if exact[i] else "too_few_ball_candidates")
            continue
        picks = [sp.index[c["cand_id"]] for c in chosen]
        distractors = [{"item": c["cand_id"], "recipe_id": c["cand_recipe_id"],
                        "distance": _r(c["distance"]), "dist_q": _r(c["dist_q"]),
                        "closer": bool(c["is_closer"])} for c in chosen]
        c0 = chosen[0]
        extra = {"rule": "ball", "m_d": _r(c0["m_d"]), "s_d": _r(c0["s_d"]),
                 "ball": [_r(c0["ball_lo"]), _r(c0["ball_hi"])],
                 "ball_sd": [p.ball_lo_sd, p.ball_hi_sd], "k": p.k,
                 "n_ball_candidates": int(n_cands), "n_closer_candidates": int(n_closer)}
        _emit_cloze(ds, qs, sp, i, ans[i], picks, distractors, pos[i], d_ans_q[i], qmean[i], extra,
                    int(need[i]), bool(heads[i]))


def _emit_cloze(ds, qs, sp, i, ans, picks, distractors, pos, d_ans_q, qmean, extra, need, heads):
    sk = qs.sk[i]
    choice_rows = list(picks)
    choice_rows.insert(int(pos), ans)
    question = _labels(sp, qs.items[i])
    question[int(qs.answer_col[i])] = PLACEHOLDER
    probe = int(np.argmin(_cos_dist(qmean[None], sp.vecs[choice_rows])))
    ds.add(sk, qs.qids[i], question, _labels(sp, choice_rows), int(pos),
           {**extra, "answer_item": sp.item_ids[ans], "choice_items": [sp.item_ids[c] for c in choice_rows],
            "question_items": [sp.item_ids[c] for c in qs.items[i]],
            "placeholder_index": int(qs.answer_col[i]), "d_answer_q": _r(d_ans_q),
            "k3_heads": heads, "n_closer_required": need,
            "n_closer": sum(d["closer"] for d in distractors), "distractors": distractors}, probe)


def _random_far(qs: _QuestionBatch, sp: Space, refs: list[np.ndarray], dk: dict, k: int, n_pick: int,
                n_try: int = 32) -> list[list[int] | None]:
    """RecipeQA-style distractors: random items of the same split from other recipes, each farther
    from every reference item than that item's K-th nearest neighbour ("away from" the answer)."""
    by_split = {s: np.flatnonzero(sp.splits == s) for s in np.unique(sp.splits)}
    u = uniforms(qs.qkeys, STREAM_FAR, n_try)
    out: list[list[int] | None] = []
    for i, sk in enumerate(qs.sk):
        pool = by_split[sk.split]
        cands = pool[np.minimum((u[i] * len(pool)).astype(np.int64), len(pool) - 1)]
        picked: list[int] = []
        used = {sk.recipe_id}
        for c in cands:
            rec = sp.recipe_ids[c]
            if rec in used:
                continue
            if all(1.0 - float(sp.vecs[r[i]] @ sp.vecs[c]) > dk.get(sp.item_ids[r[i]], 2.0) for r in refs):
                text = sp.texts[c]
                if text is not None and any(sp.texts[p] == text for p in picked):
                    continue
                picked.append(int(c))
                used.add(rec)
                if len(picked) == n_pick:
                    break
        out.append(picked if len(picked) == n_pick else None)
    return out


# ----------------------------------------------------------------------------- coherence

def _coherence(con, ds: GeneratedDataset, qs: _QuestionBatch, sp: Space, dk: dict) -> None:
    p = ds.params
    n_q = len(qs.qids)
    if n_q == 0:
        return
    v = sp.vecs[qs.items]                                   # (Q, 3, d)
    qsum = v.sum(axis=1)
    gram = np.einsum("qid,qjd->qij", v, v)
    pair = 1.0 - gram[:, [0, 0, 1], [1, 2, 2]]
    min_pair = pair.min(axis=1)
    others = [(1, 2), (0, 2), (0, 1)]
    cs = np.stack([gram[:, i, j] + gram[:, i, k] for i, (j, k) in enumerate(others)], axis=1)
    ss = np.stack([(v[:, j] + v[:, k]) ** 2 for j, k in others], axis=1).sum(-1)
    need, exact, heads = _k3_requirements(qs.qkeys, p)
    pos = _positions(qs.qkeys)
    mode = np.where(p.k3_mode == "balanced", "rank", np.where(heads, "paper", "none")) \
        if p.k3_mode != "off" else np.full(n_q, "none")
    target = need if p.k3_mode == "balanced" else np.zeros(n_q, dtype=np.int64)

    if p.distractors == "random_far":
        picks = _random_far(qs, sp, [qs.items[:, 0], qs.items[:, 1], qs.items[:, 2]], dk, p.k, 1)
        for i in range(n_q):
            if picks[i] is None:
                ds.skip("no_far_random_candidate")
                continue
            f = picks[i][0]
            dists = _cos_dist(sp.vecs[f][None], v[i])
            _emit_coherence(ds, qs, sp, i, f, pos[i], {"rule": "random_far",
                            "anchor_distances": [_r(x) for x in dists]}, min_pair[i], heads[i], None)
        return

    qtbl = pa.table({"qid": qs.qids, "qkey": pa.array(qs.qkeys, pa.uint64()),
                     "c1": [sp.item_ids[x] for x in qs.items[:, 0]],
                     "c2": [sp.item_ids[x] for x in qs.items[:, 1]],
                     "c3": [sp.item_ids[x] for x in qs.items[:, 2]],
                     "c1v": _fixed_list(v[:, 0]), "c2v": _fixed_list(v[:, 1]), "c3v": _fixed_list(v[:, 2]),
                     "qsum": _fixed_list(qsum), "min_pair": min_pair.astype(np.float64),
                     "cs1": cs[:, 0].astype(np.float64), "cs2": cs[:, 1].astype(np.float64),
                     "cs3": cs[:, 2].astype(np.float64), "ss1": ss[:, 0].astype(np.float64),
                     "ss2": ss[:, 1].astype(np.float64), "ss3": ss[:, 2].astype(np.float64),
                     "mode": mode.tolist(), "target_rank": target})
    con.register("gen_coherence_arrow", qtbl)
    con.execute("CREATE OR REPLACE TEMP TABLE gen_coherence AS SELECT * FROM gen_coherence_arrow")
    con.unregister("gen_coherence_arrow")
    cur = con.execute(load_query("coherence_foreign"), {"lo_sd": p.ball_lo_sd, "hi_sd": p.ball_hi_sd})
    cols = [d[0] for d in cur.description]
    by_q = {r[0]: dict(zip(cols, r)) for r in cur.fetchall()}
    for i, qid in enumerate(qs.qids):
        c = by_q.get(qid)
        if c is None:
            ds.skip("too_few_ball_candidates")
            continue
        if not c["is_eligible"]:
            ds.skip("no_candidate_meets_knob3")
            continue
        extra = {"rule": "ball", "m_d": _r(c["m_d"]), "s_d": _r(c["s_d"]),
                 "ball": [_r(c["ball_lo"]), _r(c["ball_hi"])], "ball_sd": [p.ball_lo_sd, p.ball_hi_sd],
                 "k": p.k, "anchor_item": c["anchor_id"], "distance": _r(c["distance"]),
                 "dist_q": _r(c["dist_q"]), "foreign_rank": int(c["foreign_rank"]),
                 "n_ball_candidates": int(c["n_cands"]), "n_eligible": int(c["n_eligible"]),
                 "k3_rule": str(mode[i]), "target_rank": int(target[i]) if mode[i] == "rank" else None}
        _emit_coherence(ds, qs, sp, i, sp.index[c["cand_id"]], pos[i], extra, min_pair[i], heads[i],
                        c["cand_recipe_id"])


def _emit_coherence(ds, qs, sp, i, foreign, pos, extra, min_pair, heads, foreign_recipe):
    rows = list(qs.items[i])
    rows.insert(int(pos), foreign)
    vv = sp.vecs[rows]
    loo = _cos_dist(vv, vv.sum(0)[None] - vv)          # each image vs the mean of the other three
    labels = _labels(sp, rows)
    ds.add(qs.sk[i], qs.qids[i], labels, list(labels), int(pos),
           {**extra, "foreign_item": sp.item_ids[foreign], "foreign_recipe_id": sp.recipe_ids[foreign],
            "question_items": [sp.item_ids[c] for c in qs.items[i]], "min_pair": _r(min_pair),
            "k3_heads": bool(heads)}, int(np.argmax(loo)))


# ----------------------------------------------------------------------------- ordering

def _ordering(ds: GeneratedDataset, qs: _QuestionBatch, sp: Space) -> None:
    """3 wrong orderings of the 23: uniform (power 0, k2=0) or weighted by S**power where S is the
    summed cosine distance of consecutive images (k2=1). Large-S orderings have visible jumps, so
    weighting by S makes the wrong orderings easier to reject: k2=0 (uniform) is the harder one."""
    p = ds.params
    n_q = len(qs.qids)
    if n_q == 0:
        return
    v = sp.vecs[qs.items]                                               # (Q, 4, d)
    dmat = 1.0 - np.einsum("qid,qjd->qij", v, v)
    perms = np.array(PERMS)
    s = sum(dmat[:, perms[:, t], perms[:, t + 1]] for t in range(3))    # (Q, 24)
    w = np.power(np.maximum(s[:, 1:], 1e-12), p.ordering_weight_power)
    u = uniforms(qs.qkeys, STREAM_ORDER, 23)
    keys = np.log(np.maximum(u, 1e-300)) / w                            # Efraimidis-Spirakis
    wrong = np.argsort(-keys, axis=1, kind="stable")[:, :3] + 1
    pos = _positions(qs.qkeys)
    for i in range(n_q):
        order = list(wrong[i])
        order.insert(int(pos[i]), 0)
        choices = [json.dumps([sp.item_ids[qs.items[i, j]] for j in perms[o]]) for o in order]
        sums = [_r(s[i, o]) for o in order]
        ds.add(qs.sk[i], qs.qids[i], [FAMILIES["visual_ordering"].instruction], choices, int(pos[i]),
               {"rule": "uniform" if p.ordering_weight_power == 0 else "weighted_by_summed_distance",
                "weight_power": p.ordering_weight_power, "choice_perms": [list(map(int, perms[o])) for o in order],
                "choice_summed_distance": sums,
                "question_items": [sp.item_ids[c] for c in qs.items[i]]}, int(np.argmin(sums)))


# ----------------------------------------------------------------------------- registration

def register_dataset(con: duckdb.DuckDBPyConnection, ds: GeneratedDataset) -> dict:
    """Replace the dataset's rows (idempotent): questions, datasets row, generation_skips."""
    rows = ds.rows
    tbl = pa.table({
        "dataset_id": pa.array([r["dataset_id"] for r in rows], pa.string()),
        "qid": pa.array([r["qid"] for r in rows], pa.string()),
        "task": pa.array([r["task"] for r in rows], pa.string()),
        "recipe_id": pa.array([r["recipe_id"] for r in rows], pa.string()),
        "split": pa.array([r["split"] for r in rows], pa.string()),
        "question": pa.array([r["question"] for r in rows], pa.list_(pa.string())),
        "choice_list": pa.array([r["choice_list"] for r in rows], pa.list_(pa.string())),
        "answer": pa.array([r["answer"] for r in rows], pa.int32()),
        "question_step_ids": pa.array([r["question_step_ids"] for r in rows], pa.list_(pa.int32())),
        "provenance": pa.array([r["provenance"] for r in rows], pa.string()),
    })
    summary = ds.summary()
    con.execute("BEGIN")
    try:
        for t in ("questions", "datasets", "generation_skips"):
            con.execute(f"DELETE FROM {t} WHERE dataset_id = ?", [ds.dataset_id])
        con.register("gen_new_questions", tbl)
        con.execute("""INSERT INTO questions SELECT dataset_id, qid, task, recipe_id, split, question,
                       choice_list, answer, question_step_ids, CAST(provenance AS JSON)
                       FROM gen_new_questions""")
        con.unregister("gen_new_questions")
        sha = con.execute(load_query("questions_content_hash"), {"dataset_id": ds.dataset_id}).fetchall()[0][0]
        params = {**ds.params.to_json(), "skips": summary["skips"], "n_skeletons": ds.n_skeletons,
                  "answer_positions": summary["answer_positions"],
                  "distance_probe_accuracy": summary["distance_probe_accuracy"]}
        p = ds.params
        con.execute("""INSERT INTO datasets (dataset_id, task, knob1, knob2, knob3, preset, seed, encoder_id,
                       params, created_at, n_questions, n_recipes, content_sha256)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                    [ds.dataset_id, ds.task, p.knob1, p.knob2,
                     None if p.knob3 is None else (str(p.knob3) if p.k3_mode in ("off", "coin")
                                                   else f"{p.knob3}:{p.k3_mode}"),
                     p.preset, ds.seed, ds.encoder_id, json.dumps(params, sort_keys=True), utcnow(),
                     len(rows), ds.n_recipes, sha])
        if ds.skips:
            con.executemany("INSERT INTO generation_skips VALUES (?, ?, ?)",
                            [[ds.dataset_id, k, v] for k, v in sorted(ds.skips.items())])
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    return {**summary, "content_sha256": sha}


# ----------------------------------------------------------------------------- text neighbours

def ensure_text_neighbours(con: duckdb.DuckDBPyConnection, encoder_id: str, sp: Space, k: int) -> int:
    """Build text_neighbours for the title space of `encoder_id` once (exact search per split)."""
    have = con.execute("""SELECT count(DISTINCT item_id), coalesce(min(max_rank), 0), coalesce(max(max_rank), 0) FROM (
                            SELECT item_id, max(rank) AS max_rank FROM text_neighbours
                            WHERE encoder_id = ? AND field = 'title' GROUP BY item_id)""",
                       [encoder_id]).fetchall()[0]
    max_per_recipe = int(np.unique(sp.recipe_ids, return_counts=True)[1].max())
    largest = max(int((sp.splits == s).sum()) for s in set(sp.splits)) - max_per_recipe
    if have[0] == len(sp.item_ids) and have[2] >= min(k, largest):
        return 0
    from features.exact import exact_knn
    con.execute("DELETE FROM text_neighbours WHERE encoder_id = ? AND field = 'title'", [encoder_id])
    rows_i, rows_r, rows_n, rows_nr, rows_d = [], [], [], [], []
    for split in sorted(set(sp.splits)):
        idx = np.flatnonzero(sp.splits == split)
        rec = sp.recipe_ids[idx]
        groups = np.unique(rec, return_inverse=True)[1]
        nn, dist = exact_knn(sp.vecs[idx], sp.vecs[idx], k, query_groups=groups, base_groups=groups)
        for a in range(len(idx)):
            keep = nn[a] >= 0
            cand, dd = nn[a][keep], dist[a][keep]
            rows_i.extend([sp.item_ids[idx[a]]] * len(cand))
            rows_r.extend(range(1, len(cand) + 1))
            rows_n.extend(sp.item_ids[idx[cand]])
            rows_nr.extend(rec[cand])
            rows_d.extend(dd.astype(np.float64))
    tbl = pa.table({"item_id": pa.array(rows_i, pa.string()), "rank": pa.array(rows_r, pa.int32()),
                    "neighbour_id": pa.array(list(rows_n), pa.string()),
                    "neighbour_recipe_id": pa.array(list(rows_nr), pa.string()),
                    "distance": pa.array(rows_d, pa.float64())})
    con.register("gen_text_nn", tbl)
    con.execute("""INSERT INTO text_neighbours SELECT ?, 'title', item_id, rank, neighbour_id,
                   neighbour_recipe_id, distance FROM gen_text_nn""", [encoder_id])
    con.unregister("gen_text_nn")
    log.info("generate: built text_neighbours for %d titles (k=%d, exact)", len(sp.item_ids), k)
    return tbl.num_rows


def default_encoder(con: duckdb.DuckDBPyConnection) -> str:
    """The most recent encoder (features.encoders.latest_encoder_id), or a clear error."""
    from features.encoders import latest_encoder_id
    enc = latest_encoder_id(con)
    if enc is None:
        raise LookupError("no encoder in the warehouse; run `mrqa embed` first")
    return enc


def generation_settings(all_settings: bool = True) -> list[tuple[str, KnobParams]]:
    """`--all`: 8 knob settings for cloze, coherence and textual cloze, 4 for ordering (knob 3 is
    not defined there), plus the RecipeQA-style preset of each task."""
    out = []
    for task in FAMILIES:
        for k1, k2, k3 in itertools.product((0, 1), repeat=3):
            if task == "visual_ordering" and k3:
                continue
            out.append((task, KnobParams.preset_for(task, k1, k2, k3)))
        out.append((task, KnobParams.recipeqa_preset()))
    return out


def settings_for(task: str | None = None, knobs: tuple[int, int, int] | None = None,
                 preset: str | None = None, k3_mode: str = "coin", overrides: dict | None = None,
                 all_settings: bool = False) -> list[tuple[str, KnobParams]]:
    """The (task, params) list of a request; raises ValueError with a clear message on bad input."""
    if all_settings:
        return generation_settings()
    if task not in FAMILIES:
        raise ValueError(f"task must be one of {', '.join(FAMILIES)}")
    if preset == "recipeqa":
        params = KnobParams.recipeqa_preset(**(overrides or {}))
    elif preset:
        raise ValueError(f"unknown preset {preset!r} (only 'recipeqa')")
    else:
        k1, k2, k3 = knobs or (0, 0, 0)
        params = KnobParams.preset_for(task, k1, k2, k3, k3_mode=k3_mode, **(overrides or {}))
    params.validate(task)
    return [(task, params)]


def generate_datasets(con: duckdb.DuckDBPyConnection, settings: list[tuple[str, KnobParams]],
                      seed: int = 0, encoder_id: str | None = None, lance_uri: str | None = None,
                      progress: bool = True) -> list[dict]:
    """Generate and register every (task, params) setting; returns one summary per dataset
    (with `seconds`). Shared inputs (vectors, representatives, KNN statistics, skeletons) are
    computed once per run."""
    import time

    from tqdm import tqdm
    encoder_id = encoder_id or default_encoder(con)
    gen = Generator(con, encoder_id, lance_uri)
    out = []
    for task, params in tqdm(settings, desc="datasets", disable=not progress or len(settings) < 2):
        t0 = time.perf_counter()
        ds = gen.generate(task, params, seed)
        summary = register_dataset(con, ds)
        summary["seconds"] = round(time.perf_counter() - t0, 3)
        out.append(summary)
    return out
