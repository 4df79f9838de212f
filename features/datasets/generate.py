"""Meta-RecipeQA dataset generation: the engine that turns question families + knob params into rows.

Set-based work runs as SQL files of sql/queries/ inside DuckDB (feature-space items, seeded
representatives, eligible recipes, the neighbour relation joined to item rows); everything per
question is vectorised numpy over dense (questions x candidates) arrays (features/datasets/distractors.py):
knob 1 in features/datasets/tasks.py, knob-2 balls, knob-3 filters, seeded picks, the RecipeQA-style random
distractors and ordering. What does not depend on the knob-2/3 setting (neighbour statistics,
candidate lists in pick order, their distances to the question) is computed once per skeleton set
and shared by the knob settings. Questions are written as Arrow batches; provenance JSON is built
by DuckDB (to_json) from columns. Every random decision is a pure function of (seed, task, recipe
or question, item), so a dataset is byte-identical across runs and independent of iteration order.

    gen = Generator(con, encoder_id)                 # vectors from LanceDB (features.vectors.store)
    ds = gen.generate("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 0), seed=0)
    register_dataset(con, ds)
"""
from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field, replace

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl.warehouse import load_query, transaction, utcnow
from features.datasets.distractors import DenseKnn
from features.datasets.knobs import (
    AF_ALL_TASKS,
    AF_DEFAULT_ROUNDS,
    REDRAWN_KINDS,
    REDRAWN_RULE,
    KnobParams,
    dataset_id,
    parse_setting,
    previous_dataset_ids,
    splitmix64,
    stable_key,
    uniforms,
)
from features.datasets.tasks import FAMILIES, Skeletons, _variant, build_skeletons
from features.vectors.store import vector_rows, vectors_column, vectors_matrix

log = logging.getLogger(__name__)
PLACEHOLDER = "@placeholder"
PERMS = list(itertools.permutations(range(4)))          # PERMS[0] is the correct order
STREAM_K3, STREAM_POS, STREAM_ORDER, STREAM_FAR = 3, 5, 7, 11
POOLED_DROP_TASKS = ("visual_cloze", "visual_coherence", "visual_ordering",   # the tasks `mrqa af-pool` drops for
                     "textual_cloze")
CHUNK = 2048                                            # questions per block of (Q, K, d) gathers


def _r(x) -> np.ndarray:
    return np.round(np.asarray(x, dtype=np.float64), 6)


# ----------------------------------------------------------------------------- inputs (feature spaces)

@dataclass
class Space:
    """Items of one feature space (images or step titles) with unit vectors, as arrays + temp tables."""
    name: str                     # image | title
    item_ids: np.ndarray          # sorted (object)
    recipe_ids: np.ndarray
    splits: np.ndarray
    texts: list
    vecs: np.ndarray              # float32, L2-normalised
    item_keys: np.ndarray = field(repr=False, default=None)      # uint64 stable_key(item_id)
    recipe_code: np.ndarray = field(repr=False, default=None)
    text_code: np.ndarray = field(repr=False, default=None)      # case-folded text, -1 for none
    labels: np.ndarray = field(repr=False, default=None)         # what a question shows per item
    step_idx: np.ndarray = field(repr=False, default=None)       # the item's step in its recipe
    author_code: np.ndarray = field(repr=False, default=None)    # recipes.author code, -1 for none
    step_words: object = field(repr=False, default=None)         # twins.StepWords of the warehouse
    word_row: np.ndarray = field(repr=False, default=None)       # the item's step row in step_words
    item_twins: object = field(repr=False, default=None)         # twins.ItemTwins (a `--twin-rule items` run)
    step_text: np.ndarray = field(repr=False, default=None)      # image space: the unit body-text vector
                                                                 # of the item's step (0 where none)
    order: object = field(repr=False, default=None)              # title space: title_order.TitleOrder
    order_row: np.ndarray = field(repr=False, default=None)      # title space: the item's row in `order`

    def dots(self, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Inner products of items rows (Q, M) (-1 = padding) with n vectors per row q (Q, n, d) ->
        (Q, M, n) float64; blocked batched matmul, one gather of the candidates for all n."""
        out = np.empty(rows.shape + (q.shape[1],))
        for s in range(0, len(rows), CHUNK):
            g = self.vecs[np.maximum(rows[s:s + CHUNK], 0)]
            out[s:s + CHUNK] = np.matmul(g, q[s:s + CHUNK].astype(np.float32).transpose(0, 2, 1))
        return out

    def cos_to(self, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Cosine distance of items rows (Q, M) (-1 = padding -> nan) to vectors q (Q, d)."""
        qn = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
        return np.where(rows >= 0, 1.0 - self.dots(rows, qn[:, None, :])[..., 0], np.nan)


def _list(mat, typ=None) -> pa.ListArray:
    """A (n, m) array as an Arrow list<...> column (variable-size lists, as the schema has)."""
    mat = np.asarray(mat)
    n, m = mat.shape
    values = mat.reshape(-1)
    arr = pa.array(values.tolist() if values.dtype == object else values, typ)
    return pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * m), arr)


def read_store_vectors(lance_uri: str, encoder_id: str, space: str) -> tuple[list[str], np.ndarray]:
    """(ids, matrix) from the feature store."""
    from features.vectors.store import FeatureStore
    store = FeatureStore(lance_uri)
    if space == "image":
        return store.image_vectors(encoder_id)
    return store.text_vectors(encoder_id, "title")


@dataclass
class Prepared:
    """Inputs of (space, seed, K) shared by every task and knob setting."""
    recipes: list                 # (recipe_id, split, [eligible steps]) sorted by recipe_id
    recipe_keys: np.ndarray       # md5_key(recipe_id) per recipe (uint64)
    rep_of: np.ndarray            # (n_recipes, max_step + 1) item row of each step's representative
    knn: DenseKnn


@dataclass
class Batch:
    """The questions of one skeleton set (task, seed, knob-1 variant) as arrays."""
    sk: Skeletons
    qids: np.ndarray
    qkeys: np.ndarray             # uint64
    recipe_ids: np.ndarray
    splits: np.ndarray
    items: np.ndarray             # (Q, n_shown) item rows
    answer_col: np.ndarray        # (Q,)
    pos: np.ndarray               # (Q,) answer slot among the choices
    u_k3: np.ndarray              # (Q,) knob-3 uniform
    pools: dict = field(default_factory=dict)


class Generator:
    """Generates datasets for one encoder on one warehouse connection; caches shared inputs."""

    def __init__(self, con: duckdb.DuckDBPyConnection, encoder_id: str, lance_uri: str | None = None,
                 af_pooled_drop: tuple[str, ...] = (), twin_rule: str = "words"):
        from etl.config import Paths
        from features.datasets.twins import TWIN_RULES
        if twin_rule not in TWIN_RULES:
            raise ValueError(f"--twin-rule {twin_rule}: one of {', '.join(TWIN_RULES)}")
        self.con = con
        self.af_pooled_drop = frozenset(af_pooled_drop) & set(POOLED_DROP_TASKS)
        self.twin_rule = twin_rule      # AF's cloze twin rule for the visual cloze AF settings (twins.py)
        self.encoder_id = encoder_id
        self.lance_uri = lance_uri or Paths.from_env().lance
        self._spaces: dict[str, Space] = {}
        self._step_words = None
        self._prepared: dict[tuple, Prepared] = {}
        self._batches: dict[tuple, Batch] = {}

    # -- spaces ---------------------------------------------------------------------------------
    def space(self, name: str) -> Space:
        if name in self._spaces:
            return self._spaces[name]
        ids, mat = read_store_vectors(self.lance_uri, self.encoder_id, name)
        if len(ids) == 0:
            raise LookupError(f"no {name} vectors for encoder {self.encoder_id} in {self.lance_uri}; "
                              "run `mrqa embed` first")
        mat = np.asarray(mat, dtype=np.float32)
        store_tbl = vector_rows(list(ids), mat, id_column="item_id", vector_column="vec")
        self.con.register("gen_store_vectors", store_tbl)
        items = self.con.sql(load_query("items_images" if name == "image" else "items_titles")).to_arrow_table()
        self.con.unregister("gen_store_vectors")
        vecs = vectors_matrix(items.column("vec"), mat.shape[1])
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        vecs = vecs / np.where(norms > 0, norms, 1.0)
        tbl = items.set_column(items.schema.get_field_index("vec"), "vec", vectors_column(vecs))
        tbl = tbl.append_column("idx", pa.array(np.arange(items.num_rows, dtype=np.int64)))
        self.con.register(f"gen_items_{name}_arrow", tbl)
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE gen_items_{name} AS SELECT * FROM gen_items_{name}_arrow")
        self.con.unregister(f"gen_items_{name}_arrow")
        item_ids = np.array(items.column("item_id").to_pylist(), dtype=object)
        recipe_ids = np.array(items.column("recipe_id").to_pylist(), dtype=object)
        texts = items.column("item_text").to_pylist()
        _, recipe_code = np.unique(recipe_ids, return_inverse=True)
        folded = np.array(["" if t is None else t.strip().lower() for t in texts], dtype=object)
        _, text_code = np.unique(folded, return_inverse=True)
        text_code = np.where(np.array([t is None for t in texts]), -1, text_code)
        sp = Space(name, item_ids, recipe_ids, np.array(items.column("split").to_pylist(), dtype=object),
                   texts, vecs, self.con.execute(f"SELECT md5_number_lower(item_id) AS k FROM gen_items_{name} "
                                                 "ORDER BY idx").fetchnumpy()["k"].astype(np.uint64),
                   recipe_code.astype(np.int64), text_code.astype(np.int64),
                   item_ids if name == "image" else np.array(texts, dtype=object),
                   np.asarray(items.column("step_idx").to_numpy(), dtype=np.int64),
                   self._author_codes(name))
        if self._step_words is None:
            from features.datasets.twins import StepWords
            self._step_words = StepWords.from_warehouse(self.con)
        sp.step_words = self._step_words
        sp.word_row = self._step_words.rows(recipe_ids, sp.step_idx)
        if name == "image":
            sp.step_text = self._step_text(recipe_ids, sp.step_idx, vecs.shape[1])
        else:                   # the corpus's order of titles: AF's order members (adversarial.ORDER_MEMBERS)
            from features.diagnostics.title_order import TitleOrder
            sp.order = TitleOrder(self.con)
            sp.order_row = np.array([sp.order.index.get(i, -1) for i in item_ids], dtype=np.int64)
        self._spaces[name] = sp
        log.info("generate: %d %s items with vectors (encoder %s)", len(item_ids), name, self.encoder_id)
        return sp

    def _step_text(self, recipe_ids: np.ndarray, step_idx: np.ndarray, dim: int) -> np.ndarray | None:
        """Per image item, the unit body-text vector of its step in the encoder's joint space (zeros where
        the step has none): what AF's answerability rule reads (adversarial.readable). None when the
        encoder embedded no step text (the rule is then off, and the datasets record it)."""
        from features.vectors.store import FeatureStore
        ids, mat = FeatureStore(self.lance_uri).text_vectors(self.encoder_id, "body")
        if len(ids) == 0 or np.asarray(mat).shape[1] != dim:
            log.warning("generate: no step-text vectors of encoder %s in its image space: AF's answerability "
                        "rule is off", self.encoder_id)
            return None
        out = np.zeros((len(recipe_ids), dim), dtype=np.float32)
        mat = np.asarray(mat, dtype=np.float32)
        mat = mat / np.maximum(np.linalg.norm(mat, axis=1, keepdims=True), 1e-12)
        row = {k: i for i, k in enumerate(ids)}
        at = np.array([row.get(f"{r}_{int(i)}_body", -1) for r, i in zip(recipe_ids.tolist(), step_idx.tolist())])
        out[at >= 0] = mat[at[at >= 0]]
        return out

    def _author_codes(self, name: str) -> np.ndarray:
        """Per item of the space (idx order), a code of its recipe's author (-1: none recorded)."""
        rows = self.con.execute(f"""SELECT coalesce(trim(r.author), '') FROM gen_items_{name} i
                                    LEFT JOIN recipes r USING (recipe_id) ORDER BY i.idx""").fetchall()
        names = np.array([a for a, in rows], dtype=object)
        _, code = np.unique(names, return_inverse=True)
        return np.where(names == "", -1, code).astype(np.int64)

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

    def prepare(self, space: str, seed: int, k: int) -> Prepared:
        """Representatives, eligible recipes and the dense KNN arrays of (space, seed, k)."""
        key = (space, seed, k)
        if key in self._prepared:
            return self._prepared[key]
        sp = self.space(space)
        if space == "title":
            ensure_text_neighbours(self.con, self.encoder_id, sp, k)
        con = self.con
        con.execute(f"CREATE OR REPLACE TEMP VIEW gen_items AS SELECT * FROM gen_items_{space}")
        con.execute(f"CREATE OR REPLACE TEMP VIEW gen_knn AS {self._knn_relation(space)}")
        con.execute(f"CREATE OR REPLACE TEMP TABLE gen_reps AS {load_query('representative_items')}", {"seed": seed})
        con.execute("CREATE OR REPLACE TEMP VIEW gen_targets AS SELECT item_id FROM gen_reps")
        rows = con.execute(f"SELECT *, md5_number_lower(recipe_id) AS k FROM ({load_query('eligible_recipes')}) "
                           "ORDER BY recipe_id").fetchall()
        recipes = [(r, s, list(st)) for r, s, st, _ in rows]
        recipe_keys = np.array([k for *_, k in rows], dtype=np.uint64)
        reps = con.execute("SELECT r.recipe_id, r.step_idx, i.idx FROM gen_reps r "
                           "JOIN gen_items i USING (item_id)").fetchnumpy()
        rpos = {r[0]: i for i, r in enumerate(recipes)}
        rp = np.array([rpos.get(r, -1) for r in reps["recipe_id"]], dtype=np.int64)
        st = np.asarray(reps["step_idx"], dtype=np.int64)
        ok = rp >= 0
        rep_of = np.full((len(recipes), int(st.max()) + 1 if len(st) else 1), -1, dtype=np.int64)
        rep_of[rp[ok], st[ok]] = np.asarray(reps["idx"], dtype=np.int64)[ok]
        nb = con.execute(load_query("knn_index"), {"k": k}).fetchnumpy()
        knn = DenseKnn.build(np.asarray(nb["target_idx"], dtype=np.int64),
                             np.asarray(nb["cand_idx"], dtype=np.int64), len(sp.item_ids), sp.vecs, k)
        self._prepared[key] = Prepared(recipes, recipe_keys, rep_of, knn)
        return self._prepared[key]

    def batch(self, task: str, params: KnobParams, seed: int) -> Batch:
        fam = FAMILIES[task]
        key = (task, seed, params.k, _variant(params))
        if key in self._batches:
            return self._batches[key]
        prep = self.prepare(fam.space, seed, params.k)
        sk, skips = build_skeletons(prep.recipes, fam, params, seed, prep.recipe_keys)
        rid = np.array([r[0] for r in prep.recipes], dtype=object)
        rsplit = np.array([r[1] for r in prep.recipes], dtype=object)
        base = splitmix64(prep.recipe_keys ^ np.uint64(stable_key(seed, task)))
        with np.errstate(over="ignore"):
            qkeys = splitmix64(base[sk.recipe_pos] + sk.q_index.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        qids = np.array([f"{r}-q{i}" for r, i in zip(rid[sk.recipe_pos], sk.q_index.tolist())], dtype=object)
        items = prep.rep_of[sk.recipe_pos[:, None], sk.steps]
        answer_col = np.argmax(sk.steps == sk.answer_step[:, None], axis=1)
        pos = np.minimum((uniforms(qkeys, STREAM_POS, 1)[:, 0] * 4).astype(np.int64), 3)
        b = Batch(sk, qids, qkeys, rid[sk.recipe_pos], rsplit[sk.recipe_pos], items, answer_col, pos,
                  uniforms(qkeys, STREAM_K3, 1)[:, 0])
        b.pools["skips"] = skips
        self._batches[key] = b
        return b

    def _twin_rule(self, task: str, params: KnobParams) -> str:
        """The cloze twin rule of one dataset: the run's for a visual cloze AF setting of the knob-2 ball
        (the distractors AF picks), the words rule for every other."""
        items = task == "visual_cloze" and params.af_rounds > 0 and params.distractors == "ball"
        return self.twin_rule if items else "words"

    def _item_twins(self, sp: Space):
        """twins.ItemTwins of the warehouse's steps, from the sample kitchen build that knows its recipes
        (ValueError naming the way out when there is none: a real site's steps have no ground truth)."""
        from etl.config import Paths
        from features.datasets.ground_truth import find_truth
        from features.datasets.twins import ItemTwins
        try:
            truth = find_truth(Paths.from_env(), set(sp.recipe_ids.tolist()))
        except ValueError as e:
            raise ValueError(f"--twin-rule items reads the sample kitchen's ground truth of the steps ({e}); "
                             "leave it out for the words rule") from None
        return ItemTwins(sp.step_words, truth.photos)

    # -- datasets -------------------------------------------------------------------------------
    def generate(self, task: str, params: KnobParams, seed: int) -> GeneratedDataset:
        params.validate(task)
        if params.distractors in REDRAWN_KINDS:
            raise ValueError(REDRAWN_RULE)
        fam = FAMILIES[task]
        b = self.batch(task, params, seed)
        prep = self._prepared[(fam.space, seed, params.k)]
        ds = GeneratedDataset(dataset_id(task, params, seed, self.encoder_id), task, params, seed,
                              self.encoder_id, skips=dict(b.pools["skips"]),
                              af_drop="pooled" if task in self.af_pooled_drop else "linear",
                              twin_rule=self._twin_rule(task, params))
        sp = self._spaces[fam.space]
        if ds.twin_rule == "items" and sp.item_twins is None:
            sp.item_twins = self._item_twins(sp)
        if task in ("visual_cloze", "textual_cloze"):
            from features.datasets.questions import cloze
            cloze(ds, b, sp, prep.knn)
        elif task == "visual_coherence":
            from features.datasets.questions import coherence
            coherence(ds, b, sp, prep.knn)
        else:
            from features.datasets.questions import ordering
            ordering(ds, b, sp)
        ds.n_skeletons = len(b.qids)
        log.info("generate: %s %d questions from %d recipes, skipped %s", ds.dataset_id,
                 ds.n_questions, ds.n_recipes, ds.skips or "none")
        return ds


# ----------------------------------------------------------------------------- datasets

@dataclass
class GeneratedDataset:
    dataset_id: str
    task: str
    params: KnobParams
    seed: int
    encoder_id: str
    skips: dict[str, int] = field(default_factory=dict)
    n_skeletons: int = 0
    columns: dict = field(default_factory=dict)        # question columns (Arrow)
    prov: dict = field(default_factory=dict)           # provenance fields: Arrow column or constant
    answers: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    probe_hits: int = 0
    n_recipes: int = 0
    notes: dict = field(default_factory=dict)          # e.g. knob-3 balanced draw statistics
    adversarial: dict = field(default_factory=dict)    # AF: rounds, pools, ensemble and what it measured
    af_drop: str = "linear"          # AF's drop: its own linear ensemble's cap, or "pooled": left to `mrqa af-pool`
    twin_rule: str = "words"         # AF's cloze twin rule (twins.py): "items" by the sample kitchen's ground truth

    @property
    def n_questions(self) -> int:
        return len(self.answers)

    def skip(self, reason: str, n: int = 1) -> None:
        n = int(n)
        if n:
            self.skips[reason] = self.skips.get(reason, 0) + n

    def set_rows(self, b: Batch, keep: np.ndarray, question: np.ndarray, choices: np.ndarray,
                 answer: np.ndarray, probe_choice: np.ndarray, prov: dict) -> None:
        """The kept questions (rows `keep` of the batch) with their per-question provenance."""
        sk = b.sk
        n_shown = sk.steps.shape[1]
        self.answers = np.asarray(answer, dtype=np.int64)
        self.columns = {
            "qid": pa.array(b.qids[keep].tolist(), pa.string()),
            "recipe_id": pa.array(b.recipe_ids[keep].tolist(), pa.string()),
            "split": pa.array(b.splits[keep].tolist(), pa.string()),
            "question": _list(question, pa.string()),
            "choice_list": _list(choices, pa.string()),
            "answer": pa.array(self.answers, pa.int32()),
            "question_step_ids": _list(sk.steps[keep].reshape(-1, n_shown), pa.int32()),
        }
        p = self.params
        extra = sk.extra_removed[keep]
        self.prov = {"seed": self.seed, "encoder_id": self.encoder_id, "task": self.task,
                     "knobs": [p.knob1, p.knob2, p.knob3], "preset": p.preset, "k3_mode": p.k3_mode,
                     "answer_step": pa.array(sk.answer_step[keep]),
                     "extra_removed_step": pa.array(extra, mask=extra < 0), **prov}
        self.probe_hits = int((np.asarray(probe_choice) == self.answers).sum())
        self.n_recipes = len(np.unique(b.recipe_ids[keep])) if len(keep) else 0

    def summary(self) -> dict:
        pos = np.bincount(self.answers, minlength=4).tolist()
        n = self.n_questions
        return {"dataset_id": self.dataset_id, "task": self.task, "knobs": self.params.knobs_label,
                "k3_mode": self.params.k3_mode, "seed": self.seed, "encoder_id": self.encoder_id,
                "n_questions": n, "n_recipes": self.n_recipes,
                "n_skeletons": self.n_skeletons, "skips": dict(sorted(self.skips.items())),
                "answer_positions": pos, **({"k3_balanced": self.notes} if self.notes else {}),
                **({"adversarial": self.adversarial} if self.adversarial else {}),
                "distance_probe_accuracy": round(self.probe_hits / n, 4) if n else None}


# ----------------------------------------------------------------------------- registration

def _literal(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        if not np.isfinite(v):
            raise ValueError(f"no SQL literal for the non-finite number {float(v)!r}")
        return f"CAST({float(v)!r} AS DOUBLE)"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_literal(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_literal(str(k))}: {_literal(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"no SQL literal for {v!r}")


def register_dataset(con: duckdb.DuckDBPyConnection, ds: GeneratedDataset) -> dict:
    """Replace the dataset's rows (idempotent): questions (one Arrow batch; provenance JSON built by
    DuckDB with keys in sorted order), datasets row, generation_skips."""
    cols = dict(ds.columns) or {"qid": pa.array([], pa.string())}
    fields = []
    for name in sorted(ds.prov):
        v = ds.prov[name]
        if isinstance(v, (pa.Array, pa.ChunkedArray)):
            cols[f"p_{name}"] = v
            fields.append(f'"{name}" := "p_{name}"')
        else:
            fields.append(f'"{name}" := {_literal(v)}')
    tbl = pa.table(cols)
    if tbl.num_rows and pc.count_distinct(tbl.column("qid")).as_py() != tbl.num_rows:
        raise ValueError(f"dataset {ds.dataset_id} repeats a qid; nothing was registered")
    summary = ds.summary()
    # the same dataset under the ids it had before (vc-k001-..., matched ones with -p<hash>) is replaced too
    ids = sorted({ds.dataset_id, *previous_dataset_ids(ds.task, ds.params, ds.seed, ds.encoder_id)})
    with transaction(con):
        for t in ("questions", "datasets", "generation_skips"):
            con.execute(f"DELETE FROM {t} WHERE dataset_id IN (SELECT unnest(?))", [ids])
        if ds.n_questions:
            con.register("gen_new_questions", tbl)
            con.execute(f"""INSERT INTO questions SELECT ?, qid, ?, recipe_id, split, question, choice_list,
                            answer, question_step_ids, to_json(struct_pack({', '.join(fields)}))
                            FROM gen_new_questions""", [ds.dataset_id, ds.task])
            con.unregister("gen_new_questions")
        sha = con.execute(load_query("questions_content_hash"), {"dataset_id": ds.dataset_id}).fetchall()[0][0]
        import json
        params = {**ds.params.to_json(), "skips": summary["skips"], "n_skeletons": ds.n_skeletons,
                  "answer_positions": summary["answer_positions"],
                  "distance_probe_accuracy": summary["distance_probe_accuracy"],
                  **({"k3_balanced": ds.notes} if ds.notes else {}),
                  **({"adversarial": ds.adversarial} if ds.adversarial else {})}
        p = ds.params
        con.execute("""INSERT INTO datasets (dataset_id, task, knob1, knob2, knob3, k3_mode, adversarial, setting,
                       preset, seed, encoder_id, params, created_at, n_questions, n_recipes, content_sha256)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                    [ds.dataset_id, ds.task, p.knob1, p.knob2, p.knob3, p.k3_mode, p.af_rounds > 0,
                     p.setting.name, p.preset, ds.seed, ds.encoder_id, json.dumps(params, sort_keys=True),
                     utcnow(), ds.n_questions, ds.n_recipes, sha])
        if ds.skips:
            con.executemany("INSERT INTO generation_skips VALUES (?, ?, ?)",
                            [[ds.dataset_id, k, v] for k, v in sorted(ds.skips.items())])
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
    from features.vectors.exact import exact_knn
    con.execute("DELETE FROM text_neighbours WHERE encoder_id = ? AND field = 'title'", [encoder_id])
    total = 0
    for split in sorted(set(sp.splits)):
        idx = np.flatnonzero(sp.splits == split)
        rec = sp.recipe_ids[idx]
        groups = np.unique(rec, return_inverse=True)[1]
        nn, dist = exact_knn(sp.vecs[idx], sp.vecs[idx], k, query_groups=groups, base_groups=groups)
        valid = nn >= 0
        qi = np.repeat(np.arange(len(idx)), valid.sum(1))
        cand = nn[valid]
        tbl = pa.table({"item_id": pa.array(sp.item_ids[idx][qi].tolist(), pa.string()),
                        "rank": pa.array(np.cumsum(valid, axis=1)[valid], pa.int32()),
                        "neighbour_id": pa.array(sp.item_ids[idx][cand].tolist(), pa.string()),
                        "neighbour_recipe_id": pa.array(rec[cand].tolist(), pa.string()),
                        "distance": pa.array(dist[valid].astype(np.float64))})
        con.register("gen_text_nn", tbl)
        con.execute("""INSERT INTO text_neighbours SELECT ?, 'title', item_id, rank, neighbour_id,
                       neighbour_recipe_id, distance FROM gen_text_nn""", [encoder_id])
        con.unregister("gen_text_nn")
        total += tbl.num_rows
    log.info("generate: built text_neighbours for %d titles (k=%d, exact)", len(sp.item_ids), k)
    return total


# ----------------------------------------------------------------------------- settings and runs

def default_encoder(con: duckdb.DuckDBPyConnection) -> str:
    """The most recent encoder (features.embed.encoders.latest_encoder_id), or a clear error."""
    from features.embed.encoders import latest_encoder_id
    enc = latest_encoder_id(con)
    if enc is None:
        raise LookupError("no encoder in the warehouse; run `mrqa embed` first")
    return enc


def stored_neighbour_k(con: duckdb.DuckDBPyConnection, encoder_id: str) -> int:
    """How many neighbours per image the `neighbours` table holds for `encoder_id` (its largest rank,
    the k `mrqa embed --k` built it with unless the splits are smaller; 0: no neighbour lists)."""
    return int(con.execute("SELECT coalesce(max(rank), 0) FROM neighbours WHERE encoder_id = ?",
                           [encoder_id]).fetchall()[0][0])


def check_neighbour_k(con: duckdb.DuckDBPyConnection, encoder_id: str,
                      settings: list[tuple[str, KnobParams]]) -> None:
    """Refuse (ValueError) a requested k above the stored neighbour lists for a task over images: the
    lists cap it, so it would register the questions of the stored k under another dataset id. Title
    tasks are not capped (ensure_text_neighbours rebuilds their lists for a larger k); an encoder with
    no lists is left to the generation's own error."""
    stored = stored_neighbour_k(con, encoder_id)
    for task, params in settings:
        if stored and FAMILIES[task].space == "image" and params.k > stored:
            raise ValueError(f"--k {params.k} is more than the {stored} neighbours per image stored for encoder "
                             f"{encoder_id} (the neighbours table of `mrqa embed --k`), so it would give the "
                             f"questions of --k {stored} under another dataset id; give --k {stored} or less")


def generation_settings(all_settings: bool = True, balanced: bool = True, adversarial: bool = False,
                        af_rounds: int = AF_DEFAULT_ROUNDS) -> list[tuple[str, KnobParams]]:
    """`--all`: 8 knob settings for cloze, coherence and textual cloze, 4 for ordering (knob 3 is
    not defined there), plus the RecipeQA-style preset of each task; with `balanced`, also the 4
    k3=1 settings in knob-3 `balanced` mode (beyond the paper: the paper's coin flip leaves the
    answer's distance rank informative, so a distance probe stays near 50%; balanced brings it to chance).
    With `adversarial`, after those: the adversarially filtered variant (features/datasets/adversarial.py)
    of every knob setting of the AF tasks (visual cloze, coherence, textual cloze), each a dataset of its own."""
    out = []
    for task in FAMILIES:
        for k1, k2, k3 in itertools.product((0, 1), repeat=3):
            if task == "visual_ordering" and k3:
                continue
            out.append((task, KnobParams.preset_for(task, k1, k2, k3)))
        if balanced and task != "visual_ordering":
            out += [(task, KnobParams.preset_for(task, k1, k2, 1, k3_mode="balanced"))
                    for k1, k2 in itertools.product((0, 1), repeat=2)]
        out.append((task, KnobParams.recipeqa_preset()))
    if adversarial:
        out += [(t, replace(p, af_rounds=af_rounds)) for t, p in list(out) if t in AF_ALL_TASKS and not p.preset]
    return out


def settings_for(task: str | None = None, knobs: tuple[int, int, int] | str | None = None,
                 preset: str | None = None, k3_mode: str | None = None, overrides: dict | None = None,
                 all_settings: bool = False, adversarial: bool | None = None,
                 af_rounds: int = AF_DEFAULT_ROUNDS) -> list[tuple[str, KnobParams]]:
    """The (task, params) list of a request; raises ValueError with a clear message on bad input.
    `knobs`: (k1, k2, k3), or a setting name in any spelling `parse_setting` accepts (`0-0-1-balanced`,
    `0-0-1:balanced`, `0-1-1-af`, `recipeqa`); `k3_mode` beside it must agree with the name.
    `adversarial`: None = with `all_settings` the AF variants too, else none; True = the AF variant
    (of one setting) / the AF variants too (all); False = none."""
    if af_rounds < 1:
        raise ValueError(f"--af-rounds must be at least 1, got {af_rounds}")
    if all_settings:
        return generation_settings(adversarial=adversarial is not False, af_rounds=af_rounds)
    if task not in FAMILIES:
        raise ValueError(f"task must be one of {', '.join(FAMILIES)}")
    if preset == "recipeqa":
        params = KnobParams.recipeqa_preset(**(overrides or {}))
    elif preset:
        raise ValueError(f"unknown preset {preset!r} (only 'recipeqa')")
    else:       # a setting name or an older spelling (features.datasets.knobs.parse_setting)
        text = knobs if isinstance(knobs, str) else ",".join(str(k) for k in (knobs or (0, 0, 0)))
        setting = parse_setting(text, k3_mode, adversarial, (overrides or {}).get("distractors"))
        if setting.preset:
            params = KnobParams.recipeqa_preset(**(overrides or {}))
        else:
            params = setting.params(task, af_rounds, **(overrides or {}))
    if adversarial:
        params = replace(params, af_rounds=af_rounds)
    params.validate(task)
    if params.distractors in REDRAWN_KINDS:          # drawn by `mrqa redraw` from the AF dataset, not generated
        raise ValueError(REDRAWN_RULE)
    return [(task, params)]


def generate_datasets(con: duckdb.DuckDBPyConnection, settings: list[tuple[str, KnobParams]],
                      seed: int = 0, encoder_id: str | None = None, lance_uri: str | None = None,
                      progress: bool = True, generator: Generator | None = None,
                      workers: int | None = None, register=None, af_pooled_drop: tuple[str, ...] = (),
                      twin_rule: str = "words") -> list[dict]:
    """Generate and register every (task, params) setting; returns one summary per dataset, in the
    order of `settings`, with `seconds` (its generation + registration; the first dataset of a space
    also pays for preparing the shared inputs).

    Shared inputs (vectors, representatives, KNN arrays, skeletons, candidate pools) are prepared
    once per run, in this thread (they read DuckDB), group by group: a group's questions are
    assembled while the next group's inputs load. The question assembly is numpy work that
    releases the GIL, so settings run on `workers` threads (default: the CPU count, at most 4);
    settings that share a skeleton batch (and its lazily filled candidate pools) stay on one thread,
    in order. Registration is serial, in the order of `settings`, on this thread's connection, so the
    warehouse and every dataset's content are the same whatever `workers` is. `register(con, ds)`
    (default register_dataset) stores one dataset; the generate flow passes a Prefect task per
    dataset (with retries) there. `af_pooled_drop`: the tasks (visual cloze, coherence) whose AF datasets skip AF's own
    drop of the questions its linear ensemble still solves (`af_predictable`): `mrqa af-pool` drops by
    the stronger pooled adversary instead, with the room that drop would have used. `twin_rule`: AF's cloze
    twin rule for the visual cloze AF settings of the knob-2 ball (twins.py: words, or items by the sample
    kitchen's ground truth)."""
    import os
    import time
    from concurrent.futures import Future, ThreadPoolExecutor

    from tqdm import tqdm

    from features.datasets.knobs import check_seed
    check_seed(seed)                                   # before any work: nothing registered for a bad seed
    encoder_id = encoder_id or default_encoder(con)
    gen = generator or Generator(con, encoder_id, lance_uri, af_pooled_drop, twin_rule)
    if generator is not None and af_pooled_drop:
        gen.af_pooled_drop = frozenset(af_pooled_drop) & set(POOLED_DROP_TASKS)
    if generator is not None:
        gen.twin_rule = twin_rule
    workers = max(1, workers if workers is not None else min(4, os.cpu_count() or 1))
    groups: dict[tuple, list[int]] = {}
    for i, (task, params) in enumerate(settings):      # bad settings fail before any work
        params.validate(task)
        groups.setdefault((task, seed, params.k, _variant(params)), []).append(i)
    prep_s: dict[int, float] = {}
    results = {i: Future() for i in range(len(settings))}

    def run_group(idx: list[int]) -> None:
        for n, i in enumerate(idx):
            t0 = time.perf_counter()
            try:
                results[i].set_result((gen.generate(*settings[i], seed), time.perf_counter() - t0))
            except BaseException as e:  # noqa: BLE001 - re-raised in the registering thread, in order
                for j in idx[n:]:
                    results[j].set_exception(e)
                return

    out = []
    # one checkpoint at the end instead of one every 16 MiB of WAL (each rewrote the questions
    # table's row groups: ~60% of the CPU time of `generate --all` before)
    threshold = con.execute("SELECT current_setting('checkpoint_threshold')").fetchall()[0][0]
    con.execute("SET checkpoint_threshold = '8GB'")
    # one BLAS thread for the whole run, on every thread: AF's blocks set that process-wide limit while
    # they run, so without it what this thread computes meanwhile ran on one BLAS thread or on all of
    # them, as the timing fell (threaded sums change the last digits, and AF, which learns over several
    # rounds, can then pick other distractors): 2 of 3 fresh demo runs agreed, the slower one did not
    from features.diagnostics.question_only import one_blas_thread
    try:
        with one_blas_thread(), ThreadPoolExecutor(workers, thread_name_prefix="generate") as pool:
            for idx in groups.values():         # DuckDB reads on this thread; a group starts as soon
                for i in idx:                     # as its inputs are ready, while the next one loads
                    t0 = time.perf_counter()
                    gen.batch(*settings[i], seed)
                    prep_s[i] = time.perf_counter() - t0
                pool.submit(run_group, idx)
            for i in tqdm(range(len(settings)), desc="datasets", disable=not progress or len(settings) < 2):
                ds, gen_s = results[i].result()
                t0 = time.perf_counter()
                summary = (register or register_dataset)(con, ds)
                summary["seconds"] = round(prep_s[i] + gen_s + time.perf_counter() - t0, 3)
                out.append(summary)
    finally:
        con.execute(f"SET checkpoint_threshold = '{threshold.replace(' ', '')}'")
    t0 = time.perf_counter()
    try:
        con.execute("CHECKPOINT")
    except duckdb.Error as e:            # another transaction is open: DuckDB checkpoints later
        log.info("generate: checkpoint deferred (%s)", e)
    log.info("generate: %d dataset(s) registered (%d threads); checkpoint %.1fs", len(out), workers,
             time.perf_counter() - t0)
    return out
