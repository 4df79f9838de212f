"""Load an exported Meta-RecipeQA dataset (Parquet, features/datasets/export.py) into tensors for GM3C.

    ds = load_qa_dataset(export_dir, "vc-k010-s0-...", text_features="tokens")
    batch = ds.batch("train", np.arange(16))      # dict of tensors, see `QADataset.batch`

Context = the recipe's steps (first `max_steps`), each as title + body text: token ids
(`tokens`: vocabulary from the TRAIN split's steps, min frequency, <pad>=0, <unk>=1) or a
precomputed step-text vector (`vectors`: body vectors from the feature store, else the export's
title vectors). Queries, one per choice (the paper's construction): cloze = the question images
with @placeholder replaced by the choice; coherence = the question minus the choice's image;
ordering = the choice's image sequence. Image vectors come from OUT/image_vectors.parquet (export
--with-vectors) or, when absent, from LanceDB (features.vectors.store). Questions whose images have no
vector are dropped and counted in `dropped` (never silently).

Textual cloze (RecipeQA's: the question is the step titles with one @placeholder, the choices are
titles, the context is the recipe's step **images**) is read the same way with the modalities swapped:
the query items are the title vectors of the question's and choices' steps (their item ids are in the
provenance, `question_items` / `choice_items`), and each context step is the normalised mean of its
images' vectors (a step without an image vector is a zero row). Both live in the encoder's joint
space, so the readers' step alignment compares a title with the steps' photos. It needs
`text_features="vectors"` (the context is vectors); `text_source` says "images".
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import torch

from etl.config import sql_glob, sql_path
from training.config import CLOZE_TASKS, READER_TASKS

log = logging.getLogger(__name__)
PLACEHOLDER = "@placeholder"
PAD, UNK = 0, 1
_TOKEN = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")


class DatasetError(ValueError):
    """The export or dataset cannot be used (missing, empty, unsupported task)."""


def tokenize(text: str | None) -> list[str]:
    """Lower-cased word/punctuation tokens (the same rule for vocabulary and lookup)."""
    return _TOKEN.findall((text or "").lower())


@dataclass
class Split:
    qids: list[str]
    recipe_row: np.ndarray          # (Q,) row of the recipe in the context tensors
    query: np.ndarray               # (Q, C, M) rows of the item matrix `images` (0 = padding)
    answer: np.ndarray              # (Q,)
    target_ctx: np.ndarray          # (Q,) context position of the cloze placeholder's step (-1: n/a)

    def __len__(self) -> int:
        return len(self.qids)


@dataclass
class QADataset:
    dataset_id: str
    task: str
    encoder_id: str
    dataset_hash: str
    text_features: str
    splits: dict[str, Split]
    images: torch.Tensor            # (N + 1, d_img) float32 query items (textual cloze: titles), row 0 = zeros
    ctx: torch.Tensor               # tokens: (R, S, T) int64 ; vectors: (R, S, d_text) float32 (textual: photos)
    ctx_len: torch.Tensor           # (R,) number of steps
    vocab: list[str] | None
    knobs: str = ""
    dropped: dict[str, int] = field(default_factory=dict)
    text_source: str = ""

    @property
    def image_dim(self) -> int:
        return int(self.images.shape[1])

    @property
    def text_dim(self) -> int:
        return int(self.ctx.shape[-1]) if self.text_features == "vectors" else 0

    def batch(self, split: str, idx: np.ndarray, device: torch.device | str = "cpu",
              ctx_rows: np.ndarray | None = None) -> dict:
        """Tensors of questions `idx` of `split`: ctx (B, S, ...), ctx_mask (B, S) True = real step,
        query (B, C, M, d_img), query_mask (B, C, M), answer (B,), target_ctx (B,).
        `ctx_rows` (Q,) replaces each question's recipe context row (see `foreign_context_rows`)."""
        sp = self.splits[split]
        rows = torch.as_tensor((sp.recipe_row if ctx_rows is None else ctx_rows)[idx])
        q = torch.as_tensor(sp.query[idx])
        s_max = int(self.ctx_len[rows].max())
        ctx = self.ctx[rows, :s_max]
        ctx_mask = torch.arange(s_max)[None, :] < self.ctx_len[rows][:, None]
        out = {"ctx": ctx, "ctx_mask": ctx_mask, "query": self.images[q], "query_mask": q > 0,
               "answer": torch.as_tensor(sp.answer[idx]), "target_ctx": torch.as_tensor(sp.target_ctx[idx])}
        return {k: v.to(device) for k, v in out.items()}


# ----------------------------------------------------------------------------- reading the export

def _questions(con, export_dir: Path, dataset_id: str) -> list[dict]:
    qdir = export_dir / "questions"
    if not qdir.is_dir():
        raise DatasetError(f"{export_dir} is not a Parquet export (no questions/); run "
                           "`mrqa export --all --with-vectors`")
    glob = sql_glob(qdir, "**/*.parquet")
    with unreadable_export(export_dir):
        cur = con.execute(f"SELECT qid, recipe_id, split, task, knobs, question, choice_list, answer, "
                          f"question_step_ids, encoder_id, CASE WHEN task = 'textual_cloze' THEN provenance END "
                          f"AS provenance FROM read_parquet({glob}, hive_partitioning = false) "
                          f"WHERE dataset_id = ? ORDER BY qid", [dataset_id])
        cols = [d[0] for d in cur.description]
        rows = [dict(zip(cols, r)) for r in cur.fetchall()]
        if not rows:
            known = [r[0] for r in con.execute(f"SELECT DISTINCT dataset_id FROM read_parquet({glob}, "
                                               "hive_partitioning = false) ORDER BY 1").fetchall()]
            raise DatasetError(f"dataset {dataset_id!r} is not in {export_dir} (it has: "
                               f"{', '.join(known) or 'none'})")
    return rows


@contextmanager
def unreadable_export(export_dir: Path):
    """A DuckDB error reading an export's questions (a file cut short or damaged, one an export still
    writing has removed) as a DatasetError naming the export, not a traceback."""
    try:
        yield
    except duckdb.Error as e:
        raise DatasetError(f"{export_dir}: its questions cannot be read ({str(e).splitlines()[0]}); write it "
                           "again with `mrqa export`") from None


def dataset_hash(rows: list[dict]) -> str:
    """sha256 over what defines the questions (qid, split, question, choices, answer, encoder)."""
    h = hashlib.sha256()
    for r in sorted(rows, key=lambda r: r["qid"]):
        h.update(json.dumps([r["qid"], r["split"], list(r["question"]), list(r["choice_list"]),
                             int(r["answer"]), r["encoder_id"]]).encode())
    return h.hexdigest()


def list_datasets(export_dir: Path) -> list[dict]:
    """Datasets of an export: dataset_id, task, knobs, n_questions."""
    glob = sql_glob(Path(export_dir) / "questions", "**/*.parquet")
    with duckdb.connect() as con, unreadable_export(export_dir):
        cur = con.execute(f"SELECT dataset_id, any_value(task), any_value(knobs), count(*) FROM "
                          f"read_parquet({glob}, hive_partitioning = false) GROUP BY 1 ORDER BY 2, 3, 1")
        return [dict(zip(["dataset_id", "task", "knobs", "n_questions"], r)) for r in cur.fetchall()]


def training_export(dataset_id: str, export: Path | None = None, paths=None) -> Path:
    """The Parquet export to train or score `dataset_id` on: `export` when given (it must be an
    export), else MRQA_HOME/exports/all when it holds the dataset as the warehouse has it, else
    MRQA_HOME/exports/<dataset_id>, which is written now (with vectors) from the warehouse when it does not
    hold the dataset yet, or holds an older generation of it (the content hashes differ: the dataset was
    generated or filtered again, e.g. by `mrqa af-pool`, after the export). Without a warehouse an export
    that holds the dataset is taken as it is.

    Raises DatasetError when `export` is not an export or the warehouse has no such dataset, or one
    without questions."""
    from etl.config import Paths
    paths = paths or Paths.from_env()             # no folder is made before there is something to write
    if export is not None:
        if not (Path(export) / "questions").is_dir():
            raise DatasetError(f"{export} is not a Parquet export; run `mrqa export --all --with-vectors`")
        return Path(export)
    cands = [c for c in (paths.exports / "all", paths.exports / dataset_id) if (c / "questions").is_dir()]
    from etl.warehouse import connect_reader
    from features.datasets.export import export_freshness, export_parquet
    if not paths.warehouse.exists():            # never a new empty warehouse for a mistyped --home
        for c in cands:                         # an export that holds it is taken as it is
            try:
                if any(d["dataset_id"] == dataset_id for d in list_datasets(c)):
                    return c
            except DatasetError as e:           # a damaged export is passed over
                log.warning("%s", e)
        raise DatasetError(f"no dataset {dataset_id!r}: no export holds it and there is no warehouse at "
                           f"{paths.warehouse}; give --export, or run `mrqa demo` (or check --home)")
    con = connect_reader(paths)
    try:
        held = []                               # the exports holding it, as the warehouse has it or not
        for cand in cands:
            try:
                fr = export_freshness(con, cand, [dataset_id])
            except ValueError as e:             # a damaged exports/all is passed over; exports/<id> written again
                log.warning("%s", e)
                continue
            if fr["current"] == [dataset_id] and not fr["missing"]:
                return cand
            if fr["current"] or fr["changed"] or fr["gone"]:
                held.append(cand)
                why = (f"lacks {', '.join(fr['missing'])}" if fr["current"] else
                       "holds an older generation of it than the warehouse")
                log.info("%s %s (%s): not used", cand, why, dataset_id)
        if not con.execute("SELECT 1 FROM datasets WHERE dataset_id = ?", [dataset_id]).fetchall():
            if held:
                raise DatasetError(f"dataset {dataset_id!r} is no longer in the warehouse; {held[0]} holds an older "
                                   f"generation of it: give --export {held[0]} to use that one, or generate it again")
            raise DatasetError(f"no dataset {dataset_id!r} in the warehouse or exports; `mrqa datasets` lists them")
        if not con.execute("SELECT 1 FROM questions WHERE dataset_id = ? LIMIT 1", [dataset_id]).fetchall():
            # its export would hold no questions/ folder: say why instead of "not a Parquet export"
            raise DatasetError(f"dataset {dataset_id!r} has no questions (its setting left none; `mrqa datasets` "
                               "shows its skips): nothing to train or score")
        try:
            export_parquet(con, [dataset_id], paths.exports / dataset_id, with_vectors=True, lance_uri=paths.lance)
        except ValueError as e:             # e.g. exports/<id> holds files of a user's: train has no --out
            raise DatasetError(f"cannot write the training export: {str(e).removesuffix('; choose another --out')}"
                               f"; move them away, or give --export DIR") from None
    finally:
        con.close()
    return paths.exports / dataset_id


def _parquet_vectors(con, f: Path, id_column: str, encoder_id: str,
                     extra: str | None = None) -> tuple[list[str], list, np.ndarray]:
    """(ids, the `extra` column's values or [], (n, d) float32 matrix) of an export's vector file for one
    encoder, ordered by id; read through Arrow (no Python float per element)."""
    cols = f"{id_column}{', ' + extra if extra else ''}, vector"
    tbl = con.sql(f"SELECT {cols} FROM read_parquet({sql_path(f)}) WHERE encoder_id = $enc "
                  f"ORDER BY {id_column}", params={"enc": encoder_id}).to_arrow_table()
    from features.vectors.store import vectors_matrix
    return tbl[id_column].to_pylist(), (tbl[extra].to_pylist() if extra else []), vectors_matrix(tbl["vector"])


def _image_rows(con, export_dir: Path, encoder_id: str, lance_uri: str | None):
    """The encoder's image rows (id, recipe_id, step_idx, vector) in id order, as an Arrow table: the
    export's OUT/image_vectors.parquet (`mrqa export --with-vectors`), else the feature store's."""
    f = export_dir / "image_vectors.parquet"
    if f.exists():
        tbl = con.sql(f"SELECT image_id AS id, recipe_id, step_idx, vector FROM read_parquet({sql_path(f)}) "
                      "WHERE encoder_id = $enc ORDER BY image_id", params={"enc": encoder_id}).to_arrow_table()
        if tbl.num_rows:
            return tbl
    from features.vectors.store import FeatureStore
    tbl = FeatureStore(lance_uri).image_rows(encoder_id)
    if not tbl.num_rows:
        raise DatasetError(f"no image vectors for encoder {encoder_id}: export with --with-vectors "
                           "or point MRQA_HOME at the feature store that made the dataset")
    return tbl


def _image_vectors(con, export_dir: Path, encoder_id: str, lance_uri: str | None) -> dict[str, np.ndarray]:
    """image_id -> vector: the export's, else the feature store's, with the photos drawn again in another
    kitchen (`mrqa redraw`) that redrawn datasets show."""
    from features.vectors.store import FeatureStore, vectors_matrix
    tbl = _image_rows(con, export_dir, encoder_id, lance_uri)
    out = dict(zip(tbl["id"].to_pylist(), vectors_matrix(tbl["vector"])))
    if not (export_dir / "image_vectors.parquet").exists():
        out.update(zip(*FeatureStore(lance_uri).redrawn_vectors(encoder_id)))
    return out


def _title_vectors(con, export_dir: Path, encoder_id: str, lance_uri: str | None) -> dict[str, np.ndarray]:
    """Step-title vectors keyed by their item id ("<recipe_id>_<step_idx>_title", the id textual cloze's
    provenance names): the export's (`mrqa export --with-vectors`), else the feature store's."""
    f = export_dir / "text_vectors.parquet"
    if f.exists():
        ids, fields, mat = _parquet_vectors(con, f, "item_id", encoder_id, "field")
        got = {i: v for i, field, v in zip(ids, fields, mat) if field == "title"}
        if got:
            return got
    from features.vectors.store import FeatureStore
    ids, mat = FeatureStore(lance_uri).text_vectors(encoder_id, "title")
    if not len(ids):
        raise DatasetError(f"no step-title vectors for encoder {encoder_id}: export with --with-vectors "
                           "or point MRQA_HOME at the feature store that made the dataset")
    return dict(zip(ids, np.asarray(mat, dtype=np.float32)))


def _step_image_vectors(con, export_dir: Path, encoder_id: str, lance_uri: str | None) -> dict[tuple, np.ndarray]:
    """Each step's image vector, the normalised mean of its images' vectors (in image id order), keyed by
    (recipe_id, step_idx): the context textual cloze reads (`_image_rows`)."""
    from features.vectors.store import vectors_matrix
    tbl = _image_rows(con, export_dir, encoder_id, lance_uri)
    mat = vectors_matrix(tbl["vector"])
    from etl.records import is_redrawn_image
    rows: dict[tuple, list[int]] = {}
    for k, (iid, *key) in enumerate(zip(tbl["id"].to_pylist(), tbl["recipe_id"].to_pylist(),
                                       tbl["step_idx"].to_pylist())):
        if not is_redrawn_image(iid):             # a step's own photos only (an export carries redrawn ones too)
            rows.setdefault((key[0], int(key[1])), []).append(k)
    out = {}
    for key, ks in rows.items():
        v = mat[ks].mean(0, dtype=np.float64)
        out[key] = (v / max(float(np.linalg.norm(v)), 1e-12)).astype(np.float32)
    return out


def _textual_context(con, export_dir: Path, encoder_id: str, lance_uri: str | None) -> tuple[dict, str]:
    """What textual cloze's readers read, keyed by (recipe_id, step_idx), and its name: each step's photos
    ("images", RecipeQA's textual cloze), or, for the words encoder of a home without photos (text only,
    told by its id: features/embed/words_encoder.py), each step's body text ("bodies": the recipe's
    instructions, in the space of the titles the question shows)."""
    from features.embed.words_encoder import is_words_encoder
    if not is_words_encoder(encoder_id):
        return _step_image_vectors(con, export_dir, encoder_id, lance_uri), "images"
    tvec, source = _text_vectors(con, export_dir, encoder_id, lance_uri)
    if not source.endswith(":body"):
        raise DatasetError(f"the readers of textual cloze in the words encoder {encoder_id}'s space read the step "
                           "bodies, and there are no body vectors: re-export with `mrqa export --with-vectors`, or "
                           "point MRQA_HOME at the feature store that made the dataset")
    log.info("textual cloze: encoder %s is a words encoder (no photos); the readers read the step bodies (%s)",
             encoder_id, source)
    return tvec, "bodies"


def _text_vectors(con, export_dir: Path, encoder_id: str, lance_uri: str | None) -> tuple[dict, str]:
    """Step-text vectors keyed by (recipe_id, step_idx), and where they came from: the step bodies of
    the export (`mrqa export --with-vectors`, "export:body"), else of the feature store ("store:body";
    the same vectors), else the export's step titles ("export:title", from an export written before it
    carried the bodies: a title says far less than its step, so the readers read far less; logged as a
    warning)."""
    f = export_dir / "text_vectors.parquet"
    by_field: dict[str, dict] = {}
    if f.exists():
        ids, fields, mat = _parquet_vectors(con, f, "item_id", encoder_id, "field")
        for i, field, v in zip(ids, fields, mat):
            by_field.setdefault(field, {})[(i.rsplit("_", 2)[0], int(i.rsplit("_", 2)[1]))] = v
    if by_field.get("body"):
        return by_field["body"], "export:body"
    try:
        from features.vectors.store import FeatureStore
        ids, mat = FeatureStore(lance_uri).text_vectors(encoder_id, "body")
        if len(ids):
            return {(i.rsplit("_", 2)[0], int(i.rsplit("_", 2)[1])): v for i, v in
                    zip(ids, np.asarray(mat, np.float32))}, "store:body"
    except Exception as e:  # noqa: BLE001 - no store here (any LanceDB error): fall back to the export
        log.info("no body vectors in the feature store (%s); trying the export's title vectors", e)
    if by_field.get("title"):
        log.warning("step-text vectors of %s: the step titles only (%s has no body vectors and the feature "
                    "store at %s none for this encoder); the readers read far less from a title than from its "
                    "step. Re-export with `mrqa export --with-vectors`, or point MRQA_HOME at the feature store "
                    "that made the dataset", encoder_id, f, lance_uri)
        return by_field["title"], "export:title"
    raise DatasetError(f"no step-text vectors for encoder {encoder_id}; use --text-features tokens")


# ----------------------------------------------------------------------------- building tensors

def build_vocab(texts: list[str], min_freq: int, max_size: int) -> list[str]:
    counts = Counter(t for text in texts for t in tokenize(text))
    words = sorted((w for w, c in counts.items() if c >= min_freq), key=lambda w: (-counts[w], w))
    return ["<pad>", "<unk>"] + words[: max_size - 2]


def _queries(task: str, r: dict) -> list[list[str]]:
    q, choices = list(r["question"]), list(r["choice_list"])
    if task == "textual_cloze":      # item ids of the titles: the provenance's, the placeholder's by each choice's
        prov = json.loads(r["provenance"] or "{}")
        items, picks = prov.get("question_items"), prov.get("choice_items")
        if not items or not picks or len(items) != len(q) or len(picks) != len(choices):
            raise DatasetError(f"textual cloze question {r['qid']} has no title item ids in its provenance "
                               "(question_items / choice_items); generate it again with this version")
        p = q.index(PLACEHOLDER)
        return [items[:p] + [c] + items[p + 1:] for c in picks]
    if task == "visual_cloze":
        return [[c if x == PLACEHOLDER else x for x in q] for c in choices]
    if task == "visual_coherence":
        return [q[:i] + q[i + 1:] for i in range(len(q))]
    return [json.loads(c) for c in choices]


def load_for_training(export_dir: Path | str, dataset_id: str, text_features: str, cfg,
                      lance_uri: str | None = None) -> QADataset:
    """`load_qa_dataset` with the context and vocabulary limits of a TrainConfig (the feature store of
    MRQA_HOME unless `lance_uri`)."""
    if lance_uri is None:
        from etl.config import Paths
        lance_uri = Paths.from_env().lance
    return load_qa_dataset(export_dir, dataset_id, text_features, max_steps=cfg.max_steps_per_recipe,
                           max_tokens=cfg.max_tokens_per_step, min_token_freq=cfg.min_token_freq,
                           max_vocab=cfg.max_vocab, lance_uri=lance_uri,
                           max_train_questions=cfg.max_train_questions)


def load_qa_dataset(export_dir: Path | str, dataset_id: str, text_features: str = "tokens",
                    vocab: list[str] | None = None, max_steps: int = 20, max_tokens: int = 60,
                    min_token_freq: int = 2, max_vocab: int = 20000, lance_uri: str | None = None,
                    max_train_questions: int | None = None) -> QADataset:
    """The dataset's questions per split with image queries and recipe contexts as tensors.
    `vocab` (from a checkpoint) replaces building one from the train split."""
    export_dir = Path(export_dir)
    con = duckdb.connect()
    rows = _questions(con, export_dir, dataset_id)
    task, encoder_id = rows[0]["task"], rows[0]["encoder_id"]
    if task not in READER_TASKS:
        raise DatasetError(f"task {task} is not supported by the trainer (it reads: {', '.join(READER_TASKS)})")
    textual = task == "textual_cloze"
    if textual and text_features != "vectors":
        raise DatasetError("textual cloze reads the recipe's step images as its context, as vectors: "
                           "use --text-features vectors")
    d_hash = dataset_hash(rows)
    steps_f = export_dir / "steps.parquet"
    if not steps_f.exists():
        raise DatasetError(f"{steps_f} missing; re-run `mrqa export`")
    steps: dict[str, list[tuple[int, str, str]]] = {}
    split_of: dict[str, str] = {}
    for rid, split, idx, title, body in con.execute(
            f"SELECT recipe_id, split, step_idx, title, body FROM read_parquet({sql_path(steps_f)}) "
            "ORDER BY recipe_id, step_idx").fetchall():
        steps.setdefault(rid, []).append((idx, title or "", body or ""))
        split_of[rid] = split
    # the query items: images, or for textual cloze the step titles (module docstring)
    image_vecs = (_title_vectors if textual else _image_vectors)(con, export_dir, encoder_id, lance_uri)

    used = sorted({r["recipe_id"] for r in rows})
    missing = [rid for rid in used if rid not in steps]
    if missing:
        raise DatasetError(f"{len(missing)} recipes of {dataset_id} have no steps in {steps_f} (e.g. {missing[0]})")
    rrow = {rid: i for i, rid in enumerate(used)}
    n_steps = [min(len(steps[rid]), max_steps) for rid in used]
    s_max = max(n_steps)
    text_source = "tokens"
    if textual:                       # the context: each step's photos (a text-only encoder: its bodies)
        svec, text_source = _textual_context(con, export_dir, encoder_id, lance_uri)
        ctx = torch.zeros(len(used), s_max, len(next(iter(svec.values()))))
        for rid in used:
            for s, (idx, _, _) in enumerate(steps[rid][:max_steps]):
                v = svec.get((rid, idx))
                if v is not None:
                    ctx[rrow[rid], s] = torch.from_numpy(np.array(v, dtype=np.float32))
        vocab = None
    elif text_features == "tokens":
        if vocab is None:
            vocab = build_vocab([f"{t} {b}" for rid, st in steps.items() if split_of[rid] == "train"
                                 for _, t, b in st], min_token_freq, max_vocab)
        index = {w: i for i, w in enumerate(vocab)}
        ctx = torch.zeros(len(used), s_max, max_tokens, dtype=torch.long)
        for rid in used:
            for s, (_, t, b) in enumerate(steps[rid][:max_steps]):
                ids = [index.get(w, UNK) for w in tokenize(f"{t} {b}")][:max_tokens] or [UNK]
                ctx[rrow[rid], s, :len(ids)] = torch.tensor(ids)
    elif text_features == "vectors":
        tvec, text_source = _text_vectors(con, export_dir, encoder_id, lance_uri)
        dim = len(next(iter(tvec.values())))
        ctx = torch.zeros(len(used), s_max, dim)
        for rid in used:
            for s, (idx, _, _) in enumerate(steps[rid][:max_steps]):
                v = tvec.get((rid, idx))
                if v is not None:   # a copy: vectors read from Arrow are read-only arrays
                    ctx[rrow[rid], s] = torch.from_numpy(np.array(v, dtype=np.float32))
        vocab = None
    else:
        raise DatasetError("text features must be tokens or vectors")

    queries_of = [_queries(task, r) for r in rows]
    img_ids = sorted({i for qs in queries_of for q in qs for i in q if i in image_vecs})
    img_row = {iid: k + 1 for k, iid in enumerate(img_ids)}
    dim = len(next(iter(image_vecs.values())))
    images = torch.zeros(len(img_ids) + 1, dim)
    if img_ids:
        images[1:] = torch.from_numpy(np.stack([image_vecs[i] for i in img_ids]))

    by_split: dict[str, list] = {}
    dropped: dict[str, int] = {}
    for r, queries in zip(rows, queries_of):
        if any(i not in img_row for q in queries for i in q):
            dropped["missing_image_vector"] = dropped.get("missing_image_vector", 0) + 1
            continue
        target = -1
        if task in CLOZE_TASKS:
            p = list(r["question"]).index(PLACEHOLDER)
            step = int(r["question_step_ids"][p])
            pos = [i for i, (idx, _, _) in enumerate(steps[r["recipe_id"]][:max_steps]) if idx == step]
            target = pos[0] if pos else -1
        by_split.setdefault(r["split"], []).append(
            (r["qid"], rrow[r["recipe_id"]], [[img_row[i] for i in q] for q in queries], int(r["answer"]), target))
    if max_train_questions and len(by_split.get("train", [])) > max_train_questions:
        dropped["train_cap"] = len(by_split["train"]) - max_train_questions
        by_split["train"] = by_split["train"][:max_train_questions]
    splits = {}
    for name, items in by_split.items():
        m = max(len(q) for it in items for q in it[2])
        query = np.zeros((len(items), len(items[0][2]), m), dtype=np.int64)
        for k, it in enumerate(items):
            for c, q in enumerate(it[2]):
                query[k, c, :len(q)] = q
        splits[name] = Split([it[0] for it in items], np.array([it[1] for it in items], np.int64), query,
                             np.array([it[3] for it in items], np.int64), np.array([it[4] for it in items], np.int64))
    if dropped.get("missing_image_vector"):
        log.warning("%s: dropped %d questions whose %s have no vector", dataset_id, dropped["missing_image_vector"],
                    "titles" if textual else "images")
    return QADataset(dataset_id, task, encoder_id, d_hash, text_features, splits, images, ctx,
                     torch.tensor(n_steps), vocab, knobs=rows[0]["knobs"], dropped=dropped, text_source=text_source)
