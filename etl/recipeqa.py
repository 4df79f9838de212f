"""RecipeQA importer: train/val/test.json -> recipes, steps, images and the original questions.

A RecipeQA file is `{"data": [record, ...]}` with the four tasks mixed. Every record carries the
context (the recipe's steps) of its recipe, in the shape of its task: visual tasks give step titles
(`{id, body, title, videos}`), textual cloze gives image lists (`{id, body, images, videos}`).
The importer

1. reads and validates EVERY file and record first (`read_recipeqa`, with the schema of
   etl/recipeqa_schema.py: types, ranges, safe ids, a JSON nesting limit), raising
   `RecipeQAFormatError` naming the file, record (index + qid) and field on the first problem, so
   nothing partial is loaded;
2. merges the recipes across records (`merge_recipes`): titles from visual-task records, image
   lists from textual-cloze records (plus images the questions reference), RecipeQA's split kept;
3. optionally maps image files of an images directory (`map_images`): status ok + path + sha256 +
   width/height when the file exists and decodes, `missing` with a reason otherwise (files are never
   copied);
4. loads everything in ONE transaction (`load_recipeqa`) with Arrow bulk inserts (executemany is the
   measured alternative, see `mrqa bench import`), as idempotent upserts. The original questions
   become the datasets `recipeqa-original-<task>` (preset `recipeqa-original`).

Re-importing a recipe that is already in the warehouse never drops its rows silently: steps,
images and step titles the warehouse has and the new files lack are kept (and counted under
`kept` in the summary) unless `replace=True`, which makes the new files the whole truth.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from etl.recipeqa_schema import (
    TASKS,
    RecipeQAFormatError,
    read_document,
    validate_record,
    where,
)
from etl.warehouse import transaction, utcnow

log = logging.getLogger(__name__)

VISUAL_TASKS = TASKS[1:]
OPTIONAL_KEYS = ("question_text", "context_modality", "question_modality")
PRESET = "recipeqa-original"
SOURCE = "recipeqa"
IMAGE_RE = re.compile(r"^(?P<recipe>.+)_(?P<step>\d+)_(?P<ord>\d+)\.jpg$")
QID_STEPS_RE = re.compile(r"^\d+-\d+((?:-\d+)+)$")


def dataset_id(task: str) -> str:
    return f"{PRESET}-{task}"


# ----------------------------------------------------------------------------- extract + validate

@dataclass
class RecipeQARecord:
    file: str
    index: int
    raw: dict


def read_recipeqa(files: Sequence[str | os.PathLike]) -> list[RecipeQARecord]:
    """Read and validate all files; raises RecipeQAFormatError before anything is loaded."""
    out: list[RecipeQARecord] = []
    seen_qids: dict[str, RecipeQARecord] = {}
    split_of: dict[str, RecipeQARecord] = {}
    for f in files:
        f = Path(f)
        name = str(f)
        doc = read_document(f)
        for i, rec in enumerate(doc["data"]):
            validate_record(rec, name, i)
            qid = rec["qid"]
            if qid in seen_qids:
                if seen_qids[qid].raw == rec:
                    continue   # the same record twice (e.g. a file given twice): load it once
                raise RecipeQAFormatError(f"{where(name, i, rec)}: qid also used by a different "
                                          f"record ({seen_qids[qid].file} record {seen_qids[qid].index})")
            seen_qids[qid] = out_rec = RecipeQARecord(name, i, rec)
            first = split_of.setdefault(rec["recipe_id"], out_rec)
            if first.raw["split"] != rec["split"]:
                raise RecipeQAFormatError(f"{where(name, i, rec)}: recipe {rec['recipe_id']} is in split "
                                          f"{rec['split']!r} here but {first.raw['split']!r} in "
                                          f"{first.file} record {first.index}")
            out.append(out_rec)
    return out


# ----------------------------------------------------------------------------- transform

@dataclass
class MergedStep:
    step_idx: int
    body: str
    title: str | None = None
    images: set[str] = field(default_factory=set)
    n_videos: int = 0
    kept: bool = False          # only in the warehouse (kept by a re-import without replace)
    kept_images: set[str] = field(default_factory=set)   # images only the warehouse has


@dataclass
class MergedRecipe:
    recipe_id: str
    split: str
    steps: dict[int, MergedStep] = field(default_factory=dict)


def _parse_image(name: str) -> tuple[str, int, int] | None:
    """(recipe, step, ord) of a RecipeQA image name `<recipe>_<step>_<ord>.jpg`; None for other
    names, including ones whose numbers are not written plainly (`_01_`), which would not
    round-trip to the same name."""
    m = IMAGE_RE.match(name)
    if not m:
        return None
    parsed = (m["recipe"], int(m["step"]), int(m["ord"]))
    return parsed if f"{parsed[0]}_{parsed[1]}_{parsed[2]}.jpg" == name else None


def merge_recipes(records: Iterable[RecipeQARecord]) -> dict[str, MergedRecipe]:
    """Merge every record's context into one recipe per recipe_id (see module docstring)."""
    records = list(records)
    recipes: dict[str, MergedRecipe] = {}
    for r in records:
        rec = r.raw
        rid = rec["recipe_id"]
        mr = recipes.get(rid)
        if mr is None:
            mr = recipes[rid] = MergedRecipe(rid, rec["split"])
        elif mr.split != rec["split"]:
            raise RecipeQAFormatError(f"{where(r.file, r.index, rec)}: recipe {rid} is in split "
                                      f"{rec['split']!r} here but {mr.split!r} in another record")
        for s in rec["context"]:
            st = mr.steps.get(s["id"])
            if st is None:
                st = mr.steps[s["id"]] = MergedStep(s["id"], s["body"])
            if s.get("title") is not None and st.title is None:
                st.title = s["title"]
            if len(s["body"]) > len(st.body):
                st.body = s["body"]
            st.n_videos = max(st.n_videos, len(s.get("videos") or []))
            for img in s.get("images") or []:
                st.images.add(img)
    # images referenced by questions/choices of any record, for recipes we import
    for r in records:
        for item in _flat(r.raw["question"]) + _flat(r.raw["choice_list"]):
            p = _parse_image(item)
            if p and p[0] in recipes and p[1] in recipes[p[0]].steps:
                recipes[p[0]].steps[p[1]].images.add(item)
    return recipes


def _flat(xs: list) -> list[str]:
    out: list[str] = []
    for x in xs:
        if isinstance(x, list):
            out.extend(str(y) for y in x)
        else:
            out.append(str(x))
    return out


def keep_existing(con: duckdb.DuckDBPyConnection, recipes: dict[str, MergedRecipe]) -> dict:
    """Fold what the warehouse already has for these recipes into them, so a re-import that
    lacks some steps, images or step titles keeps them; returns what was kept."""
    staged_ids = pa.table({"recipe_id": list(recipes)})  # noqa: F841 (scanned by DuckDB by name)
    kept = {"recipes": set(), "steps": 0, "images": 0, "titles": 0}
    for rid, idx, title, body, n_videos in con.execute(
            "SELECT recipe_id, step_idx, title_raw, body_raw, n_videos FROM steps "
            "WHERE recipe_id IN (SELECT recipe_id FROM staged_ids)").fetchall():
        st = recipes[rid].steps.get(idx)
        if st is None:
            recipes[rid].steps[idx] = MergedStep(idx, body or "", title, n_videos=n_videos, kept=True)
            kept["steps"] += 1
            kept["recipes"].add(rid)
        elif st.title is None and title is not None:
            st.title = title
            kept["titles"] += 1
            kept["recipes"].add(rid)
    for image_id, rid, idx in con.execute(
            "SELECT image_id, recipe_id, step_idx FROM images "
            "WHERE recipe_id IN (SELECT recipe_id FROM staged_ids)").fetchall():
        st = recipes[rid].steps.get(idx)
        if st is not None and image_id in st.images:
            continue
        if st is not None:
            st.kept_images.add(image_id)
        kept["images"] += 1        # not deleted either way; counted so the summary says so
        kept["recipes"].add(rid)
    return {**kept, "recipes": len(kept["recipes"])}


def question_rows(records: Iterable[RecipeQARecord]) -> list[dict]:
    """One questions-table row per record (the original RecipeQA question)."""
    rows = []
    for r in records:
        rec = r.raw
        choices = [json.dumps(c) if isinstance(c, list) else str(c) for c in rec["choice_list"]]
        rows.append({
            "dataset_id": dataset_id(rec["task"]), "qid": str(rec["qid"]), "task": rec["task"],
            "recipe_id": rec["recipe_id"], "split": rec["split"],
            "question": [str(q) for q in rec["question"]], "choice_list": choices,
            "answer": rec["answer"], "question_step_ids": _question_steps(rec),
            "provenance": json.dumps({
                "source": SOURCE, "file": Path(r.file).name, "index": r.index,
                **{k: rec[k] for k in (*OPTIONAL_KEYS, "original_split") if k in rec}}, sort_keys=True),
        })
    return rows


def _question_steps(rec: dict) -> list[int] | None:
    """RecipeQA qids end in the 0-based context indices of the question steps ('2000-14613-0-1-2-3')."""
    m = QID_STEPS_RE.match(str(rec["qid"]))
    if not m:
        return None
    idx = [int(x) for x in m.group(1).strip("-").split("-")]
    ctx = rec["context"]
    if any(i >= len(ctx) for i in idx):
        return None
    return [ctx[i]["id"] for i in idx]


# ----------------------------------------------------------------------------- images

def index_images_dir(images_dir: Path) -> dict[str, Path]:
    """image file name -> path, for a flat dir or RecipeQA's images-qa/<split>/images-qa/ layout."""
    found: dict[str, Path] = {}
    for root, _dirs, files in os.walk(images_dir):
        for f in files:
            if f.endswith(".jpg"):
                found.setdefault(f, Path(root) / f)
    return found


def describe_image(path: Path) -> dict:
    """sha256, width, height of a decodable image; raises OSError/ValueError otherwise."""
    from PIL import Image
    data = path.read_bytes()
    from io import BytesIO
    with Image.open(BytesIO(data)) as im:
        w, h = im.size
        im.load()       # full decode: catches truncated files
    return {"sha256": hashlib.sha256(data).hexdigest(), "width": w, "height": h}


def map_images(names: Iterable[str], images_dir: Path, home: Path | None) -> dict[str, dict]:
    """image_id -> {path, sha256, width, height, status, status_reason} for the files of images_dir."""
    index = index_images_dir(images_dir)
    out = {}
    for name in names:
        p = index.get(name)
        if p is None:
            out[name] = {"path": None, "sha256": None, "width": None, "height": None,
                         "status": "missing", "status_reason": f"not in {images_dir}"}
            continue
        p = p.resolve()
        try:
            meta = describe_image(p)
        except Exception as e:  # noqa: BLE001 - PIL raises many types for broken files
            out[name] = {"path": _store_path(p, home), "sha256": None, "width": None,
                         "height": None, "status": "broken",
                         "status_reason": f"image_decode_error: {type(e).__name__}: {e}"[:300]}
            continue
        out[name] = {"path": _store_path(p, home), **meta, "status": "ok", "status_reason": None}
    return out


def _store_path(p: Path, home: Path | None) -> str:
    if home is not None:
        try:
            return str(p.relative_to(home.resolve()))
        except ValueError:
            pass
    return str(p)


# ----------------------------------------------------------------------------- load

def recipe_rows(recipes: dict[str, MergedRecipe], fetched_at) -> tuple[list, list, list]:
    """recipes, steps and images rows to write; steps and images kept from the warehouse count
    in the content hash but are not rewritten."""
    r_rows, s_rows, i_rows = [], [], []
    for rid in sorted(recipes):
        mr = recipes[rid]
        steps = [mr.steps[k] for k in sorted(mr.steps)]
        content = json.dumps([[s.step_idx, s.title, s.body, sorted(s.images | s.kept_images), s.n_videos]
                              for s in steps], sort_keys=True)
        r_rows.append({
            "recipe_id": rid, "source": SOURCE,
            "url": f"https://www.instructables.com/id/{rid}/",
            "title": rid.replace("-", " "),   # RecipeQA has no recipe title: the slug, readable
            "category": "cooking", "channel": None, "author": None, "license": None,
            "split": mr.split, "fetched_at": fetched_at,
            "content_sha256": hashlib.sha256(content.encode()).hexdigest(),
            "status": "ok", "status_reason": None})
        for s in steps:
            if s.kept:
                continue
            s_rows.append({"recipe_id": rid, "step_idx": s.step_idx, "title_raw": s.title,
                           "body_raw": s.body, "title": s.title, "body": s.body,
                           "n_videos": s.n_videos})
            for name in sorted(s.images):
                p = _parse_image(name)
                if p is None or p[0] != rid or p[1] != s.step_idx:
                    continue   # a file name not in RecipeQA naming for this step: not ours to key
                i_rows.append({"image_id": name, "recipe_id": rid, "step_idx": s.step_idx,
                               "ord": p[2], "url": None})
    return r_rows, s_rows, i_rows


STEP_COLS = ("recipe_id", "step_idx", "title_raw", "body_raw", "title", "body", "n_videos")
RECIPE_COLS = ("recipe_id", "source", "url", "title", "category", "channel", "author", "license",
               "split", "fetched_at", "content_sha256", "status", "status_reason")
IMAGE_COLS = ("image_id", "recipe_id", "step_idx", "ord", "url", "path", "sha256", "width",
              "height", "status", "status_reason")
QUESTION_COLS = ("dataset_id", "qid", "task", "recipe_id", "split", "question", "choice_list",
                 "answer", "question_step_ids", "provenance")
_TYPES = {"step_idx": pa.int32(), "n_videos": pa.int32(), "ord": pa.int32(), "width": pa.int32(),
          "height": pa.int32(), "answer": pa.int32(), "fetched_at": pa.timestamp("us"),
          "question": pa.list_(pa.string()), "choice_list": pa.list_(pa.string()),
          "question_step_ids": pa.list_(pa.int32())}


def _arrow(rows: list[dict], cols: Sequence[str]) -> pa.Table:
    schema = pa.schema([(c, _TYPES.get(c, pa.string())) for c in cols])
    return pa.Table.from_pydict({c: [r[c] for r in rows] for c in cols}, schema=schema)


def _insert(con, table: str, rows: list[dict], cols: Sequence[str], method: str,
            conflict: str = "OR REPLACE") -> None:
    if not rows:
        return
    cl = ", ".join(cols)
    if method == "arrow":
        staged = _arrow(rows, cols)  # noqa: F841  (scanned by DuckDB by variable name)
        con.execute(f"INSERT {conflict} INTO {table} ({cl}) SELECT {cl} FROM staged")
    elif method == "executemany":
        ph = ", ".join("?" for _ in cols)
        con.executemany(f"INSERT {conflict} INTO {table} ({cl}) VALUES ({ph})",
                        [[r[c] for c in cols] for r in rows])
    else:
        raise ValueError(f"unknown load method {method!r} (arrow | executemany)")


def load_recipeqa(con: duckdb.DuckDBPyConnection, records: list[RecipeQARecord],
                  images_dir: Path | None = None, home: Path | None = None,
                  method: str = "arrow", replace: bool = False) -> dict:
    """Load validated records in one transaction (idempotent upserts); returns counts.

    Without `replace`, rows of these recipes that the warehouse has and the records lack are
    kept (summary["kept"]); with it they are deleted (summary["dropped"])."""
    recipes = merge_recipes(records)
    kept = None if replace else keep_existing(con, recipes)
    now = utcnow()
    r_rows, s_rows, i_rows = recipe_rows(recipes, now)
    q_rows = question_rows(records)     # qids are unique (read_recipeqa checks)
    if images_dir is not None:
        mapped = map_images([r["image_id"] for r in i_rows], Path(images_dir), home)
        for r in i_rows:
            r.update(mapped[r["image_id"]])
    else:
        for r in i_rows:
            r.update({"path": None, "sha256": None, "width": None, "height": None,
                      "status": "pending", "status_reason": None})
    rids = [r["recipe_id"] for r in r_rows]
    tasks = sorted({q["task"] for q in q_rows})
    staged_ids = pa.table({"recipe_id": rids})   # scanned by DuckDB by name
    staged_steps = pa.table({"recipe_id": [r["recipe_id"] for r in s_rows],
                             "step_idx": pa.array([r["step_idx"] for r in s_rows], pa.int32())})
    in_ids = "recipe_id IN (SELECT recipe_id FROM staged_ids)"   # a hash join, not a list scan
    with transaction(con):
        _insert(con, "recipes", r_rows, RECIPE_COLS, method)
        dropped = _drop_missing(con, staged_ids, staged_steps, i_rows) if replace else None
        con.execute("""DELETE FROM steps USING staged_steps s
                       WHERE steps.recipe_id = s.recipe_id AND steps.step_idx = s.step_idx""")
        _insert(con, "steps", s_rows, STEP_COLS, method, conflict="")
        # without an images dir, keep whatever an earlier import mapped (only add new rows)
        _insert(con, "images", i_rows, IMAGE_COLS, method,
                conflict="OR REPLACE" if images_dir is not None else "OR IGNORE")
        staged_qids = pa.table({"dataset_id": [q["dataset_id"] for q in q_rows],  # noqa: F841
                                "qid": [q["qid"] for q in q_rows]})
        con.execute("""DELETE FROM questions USING staged_qids s
                       WHERE questions.dataset_id = s.dataset_id AND questions.qid = s.qid""")
        _insert(con, "questions", q_rows, QUESTION_COLS, method, conflict="")
        for task in tasks:
            _register_dataset(con, task, now)
    by_status = dict(con.execute(f"SELECT status, count(*) FROM images WHERE {in_ids} "
                                 "GROUP BY status ORDER BY status").fetchall())
    summary = {"records": len(records), "recipes": len(r_rows), "steps": len(s_rows),
               "images": len(i_rows), "images_by_status": by_status, "questions": len(q_rows),
               "datasets": [dataset_id(t) for t in tasks]}
    if kept is not None:
        summary["kept"] = kept
        if kept["recipes"]:
            summary["note"] = (f"kept {kept['steps']} step(s), {kept['images']} image(s) and "
                               f"{kept['titles']} step title(s) of {kept['recipes']} recipe(s) that "
                               "the warehouse has and these files lack; replace (--replace) drops them")
            log.warning("recipeqa: %s", summary["note"])
    else:
        summary["dropped"] = dropped
    return summary


def _drop_missing(con, staged_ids: pa.Table, staged_steps: pa.Table, i_rows: list[dict]) -> dict:
    """replace=True: delete the steps and images of these recipes that the new rows lack.
    (DuckDB finds the staged Arrow tables among this function's locals by name.)"""
    in_ids = "recipe_id IN (SELECT recipe_id FROM staged_ids)"
    n_steps = con.execute(f"""SELECT count(*) FROM steps WHERE {in_ids} AND NOT EXISTS (
        SELECT 1 FROM staged_steps s WHERE s.recipe_id = steps.recipe_id
                                       AND s.step_idx = steps.step_idx)""").fetchall()[0][0]
    con.execute(f"DELETE FROM steps WHERE {in_ids}")
    keep = {r["image_id"] for r in i_rows}
    stale = [i for (i,) in con.execute(f"SELECT image_id FROM images WHERE {in_ids}").fetchall()
             if i not in keep]
    if stale:
        staged_stale = pa.table({"image_id": stale})  # noqa: F841
        con.execute("DELETE FROM images WHERE image_id IN (SELECT image_id FROM staged_stale)")
    return {"steps": n_steps, "images": len(stale)}


def _register_dataset(con, task: str, now) -> None:
    did = dataset_id(task)
    n_q, n_r, sha = con.execute("""
        SELECT count(*), count(DISTINCT recipe_id),
               sha256(coalesce(string_agg(qid || '|' || answer || '|' || array_to_string(choice_list, ','),
                                          '\n' ORDER BY qid), ''))
        FROM questions WHERE dataset_id = ?""", [did]).fetchall()[0]
    con.execute("""
        INSERT INTO datasets (dataset_id, task, preset, setting, k3_mode, adversarial, params, created_at,
                              n_questions, n_recipes, content_sha256)
        VALUES (?, ?, ?, ?, 'off', false, ?, ?, ?, ?, ?)
        ON CONFLICT (dataset_id) DO UPDATE SET n_questions = excluded.n_questions,
            n_recipes = excluded.n_recipes, content_sha256 = excluded.content_sha256""",
                [did, task, PRESET, PRESET, json.dumps({"source": SOURCE}), now, n_q, n_r, sha])


def parse_resplit(text: str) -> tuple[float, float, float]:
    """`--resplit` "0.6,0.2,0.2": the train, val and test shares (three numbers >= 0 summing to 1)."""
    try:
        shares = tuple(float(x) for x in text.split(","))
    except ValueError:
        shares = ()
    if len(shares) != 3 or any(not 0 <= x <= 1 for x in shares) or abs(sum(shares) - 1) > 1e-9:
        raise ValueError(f"--resplit takes the train, val and test shares, three numbers >= 0 that sum to 1 "
                         f"(e.g. 0.6,0.2,0.2); got {text!r}")
    return shares    # type: ignore[return-value]


def split_of_recipe(recipe_id: str, shares: tuple[float, float, float]) -> str:
    """The split `--resplit` gives a recipe: a fixed hash of its id against the cumulative shares, so a
    recipe's split depends on its id alone (not on the file, the record order or the other recipes)."""
    u = int(hashlib.sha256(f"mrqa-resplit:{recipe_id}".encode()).hexdigest()[:15], 16) / 16 ** 15
    return "train" if u < shares[0] else "val" if u < shares[0] + shares[1] else "test"


def resplit_records(records: list[RecipeQARecord], shares: tuple[float, float, float]) -> list[RecipeQARecord]:
    """The records with every recipe (and so its original questions) in the split `split_of_recipe` gives
    it; the file's split is kept as `original_split` in the questions' provenance. For a corpus whose
    records all come from one split (RecipeQA's validation file alone), which no model can train on."""
    return [RecipeQARecord(r.file, r.index, {**r.raw, "split": split_of_recipe(r.raw["recipe_id"], shares),
                                             "original_split": r.raw["split"]}) for r in records]


def import_recipeqa(con: duckdb.DuckDBPyConnection, files: Sequence[str | os.PathLike],
                    images_dir: Path | None = None, home: Path | None = None,
                    method: str = "arrow", replace: bool = False,
                    resplit: tuple[float, float, float] | None = None) -> dict:
    """Validate all files, then load them in one transaction. The plain function behind the flow.
    `replace`: see load_recipeqa. `resplit`: (train, val, test) shares that replace the files' splits
    (`resplit_records`)."""
    if images_dir is not None and not Path(images_dir).is_dir():
        what = "is a file, not a folder" if Path(images_dir).exists() else "does not exist"
        raise RecipeQAFormatError(f"{images_dir}: images directory {what}")
    records = read_recipeqa(files)
    if resplit is not None:
        records = resplit_records(records, resplit)
    summary = load_recipeqa(con, records, images_dir, home, method, replace=replace)
    if resplit is not None:
        summary["resplit"] = dict(zip(("train", "val", "test"), resplit))
    log.info("recipeqa: %d records -> %d recipes, %d steps, %d images %s, %d questions",
             summary["records"], summary["recipes"], summary["steps"], summary["images"],
             summary["images_by_status"], summary["questions"])
    return summary


# ----------------------------------------------------------------------------- benchmark

def synthesise_records(records: list[RecipeQARecord], n: int) -> list[RecipeQARecord]:
    """`n` records made from `records` by renaming recipes/qids/images (for `mrqa bench import`)."""
    out = []
    for k in range(n):
        base = records[k % len(records)]
        copy = k // len(records)
        rid = base.raw["recipe_id"]
        new_rid = f"{rid}-syn{copy}"
        text = json.dumps(base.raw).replace(f'"{rid}_', f'"{new_rid}_')
        rec = json.loads(text)
        rec["recipe_id"] = new_rid
        rec["qid"] = f"{rec['qid']}-syn{copy}"
        out.append(RecipeQARecord(base.file, k, rec))
    return out


def sample_kitchen_records(n_recipes: int = 20, seed: int = 0) -> list[RecipeQARecord]:
    """RecipeQA-format visual cloze records made from the embedded sample kitchen's recipe plans (text
    and image names, no image files): the default input of `mrqa bench import`, so the benchmark needs
    no third-party file. One record per recipe with at least four steps; they pass `validate_record`."""
    from etl.sample.generate import plan_all
    out = []
    for plan in plan_all(n_recipes, seed):
        if plan.kind != "recipe" or len(plan.steps) < 4:
            continue
        rid = plan.slug or f"sample-{plan.index}"
        context = [{"id": s.step_idx + 1, "title": s.title, "body": "\n".join(s.paragraphs), "videos": []}
                   for s in plan.steps]
        names = [f"{rid}_{s.step_idx}_0.jpg" for s in plan.steps[:4]]
        rec = {"recipe_id": rid, "qid": f"{rid}-vc", "split": "val", "task": "visual_cloze",
               "context_modality": ["body", "title", "videos"], "question_modality": ["image"],
               "context": context, "question": names[:3] + ["@placeholder"],
               "choice_list": [names[3], names[0], names[1], names[2]], "answer": 0}
        validate_record(rec, "sample-kitchen", len(out))
        out.append(RecipeQARecord("sample-kitchen", len(out), rec))
    return out


def bench_import(records: list[RecipeQARecord], n: int = 20000, n_baseline: int = 1000) -> dict:
    """records/s of the Arrow bulk load vs executemany, each into a fresh in-memory warehouse.

    executemany is ~100x slower, so it runs on the first `n_baseline` synthetic records only; the
    ratio compares rates (records/s). Both include merging, row building and the transaction.
    """
    import time

    from etl.warehouse import connect
    if n < 1 or n_baseline < 1:
        raise ValueError(f"records and baseline records must be >= 1, got {n} and {n_baseline}")
    synth = synthesise_records(records, n)
    out = {"records": n, "recipes": len(merge_recipes(synth))}
    for method, k in (("arrow", n), ("executemany", min(n, n_baseline))):
        con = connect(database=":memory:")
        t0 = time.perf_counter()
        load_recipeqa(con, synth[:k], method=method)
        dt = time.perf_counter() - t0
        out[f"{method}_records"] = k
        out[f"{method}_s"] = round(dt, 3)
        out[f"{method}_records_per_s"] = round(k / dt, 1)
        con.close()
    out["ratio_arrow_vs_executemany"] = round(out["arrow_records_per_s"]
                                              / out["executemany_records_per_s"], 1)
    return out
