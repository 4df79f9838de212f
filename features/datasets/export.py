"""Exports of generated datasets: hive-partitioned Parquet and RecipeQA JSON.

Parquet (`export_parquet`): OUT/questions/task=<task>/knobs=<k1-k2-k3|preset>/split=<split>/*.parquet
(`knobs=<k1-k2-k3>-af` for an adversarially filtered dataset, features/datasets/adversarial.py)
with qid, recipe_id, split, question, choice_list, answer, question_step_ids, encoder_id, seed,
dataset_id, knob columns and provenance; OUT/recipes.parquet and OUT/steps.parquet (every ok recipe
of the exported splits); with vectors, OUT/image_vectors.parquet (image_id, recipe_id, split,
encoder_id, vector) and OUT/text_vectors.parquet (title vectors) for those splits, so anyone can
recompute the distances. Written single-threaded with ORDER BY and a fixed row-group size, so the
bytes are the same on every run.

RecipeQA JSON (`export_recipeqa_json`): OUT/<split>.json = {"data": [record, ...]} with RecipeQA's
record keys; image ids already follow `<recipe_id>_<step>_<k>.jpg`; with images, the referenced
files are copied to OUT/images-qa/<split>/images-qa/ (RecipeQA's layout).
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from etl.warehouse import load_query

ROW_GROUP = 100_000


def _in(ids: list[str]) -> str:
    return "[" + ", ".join("'" + i.replace("'", "''") + "'" for i in ids) + "]"


def _copy(con: duckdb.DuckDBPyConnection, query: str, dest: Path, partition: bool = False) -> None:
    opts = f"FORMAT parquet, ROW_GROUP_SIZE {ROW_GROUP}, COMPRESSION zstd"
    if partition:
        opts += ", PARTITION_BY (task, knobs, split), OVERWRITE_OR_IGNORE true"
    con.execute(f"COPY ({query}) TO '{dest.as_posix()}' ({opts})")


def export_parquet(con: duckdb.DuckDBPyConnection, dataset_ids: list[str], out: Path,
                   with_vectors: bool = False, lance_uri: str | None = None) -> dict:
    """Write the Parquet export of `dataset_ids` into `out` (replaced); returns counts + hash.

    `out` may be a URI (s3://bucket/x, gs://bucket/x, file:///x; also the `s3:/bucket/x` a Path
    makes of it): the export is written locally, then copied with pyarrow.fs (credentials from the
    usual AWS_* / GOOGLE_* environment), replacing what is at the destination.
    """
    import re
    m = re.match(r"^([a-z][a-z0-9+.-]+):/+(.*)$", str(out))
    if m:
        import tempfile

        from pyarrow import fs as pafs
        uri = f"{m[1]}://{'/' if m[1] == 'file' else ''}{m[2]}"
        dest_fs, dest = pafs.FileSystem.from_uri(uri)
        with tempfile.TemporaryDirectory(prefix="mrqa-export-") as tmp:
            res = export_parquet(con, dataset_ids, Path(tmp) / "export", with_vectors, lance_uri)
            dest_fs.delete_dir_contents(dest, missing_dir_ok=True)
            pafs.copy_files(res["out"], dest, destination_filesystem=dest_fs)
        return {**res, "out": uri}
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    threads = con.execute("SELECT current_setting('threads')").fetchall()[0][0]
    con.execute("SET threads = 1")            # deterministic file layout and row order
    try:
        con.execute(f"CREATE OR REPLACE TEMP VIEW export_datasets AS SELECT unnest({_in(dataset_ids)}) AS dataset_id")
        _copy(con, load_query("export_questions"), out / "questions", partition=True)
        _copy(con, load_query("export_recipes"), out / "recipes.parquet")
        _copy(con, load_query("export_steps"), out / "steps.parquet")
        n_questions = con.execute("SELECT count(*) FROM (" + load_query("export_questions") + ")").fetchall()[0][0]
        counts = {"questions": n_questions}
        if with_vectors:
            counts.update(_export_vectors(con, out, lance_uri))
    finally:
        con.execute(f"SET threads = {threads}")
    return {"out": str(out), **counts, "sha256": tree_sha256(out)}


def _export_vectors(con, out: Path, lance_uri: str | None) -> dict:
    from features.vectors.store import FeatureStore, vector_rows
    store = FeatureStore(lance_uri)
    encs = [r[0] for r in con.execute("SELECT DISTINCT encoder_id FROM datasets JOIN export_datasets "
                                      "USING (dataset_id) ORDER BY 1").fetchall()]
    splits = {r[0] for r in con.execute("SELECT DISTINCT split FROM questions JOIN export_datasets "
                                        "USING (dataset_id)").fetchall()}
    meta = con.execute("SELECT i.image_id, i.recipe_id, r.split FROM images i JOIN recipes r USING (recipe_id) "
                       "WHERE i.status = 'ok' AND r.status = 'ok'").fetchall()
    img_meta = {a: (b, c) for a, b, c in meta if c in splits}
    counts = {}
    for kind, fetch in (("image_vectors", lambda e: store.image_vectors(e)),
                        ("text_vectors", lambda e: store.text_vectors(e, "title"))):
        parts = []
        for enc in encs:
            ids, mat = fetch(enc)
            if not len(ids):
                continue
            ids = np.asarray(ids, dtype=object)
            if kind == "image_vectors":
                recs = [img_meta.get(i, (None, None)) for i in ids]
            else:
                rsplit = dict(con.execute("SELECT recipe_id, split FROM recipes WHERE status = 'ok'").fetchall())
                recs = [(i.rsplit("_", 2)[0], rsplit.get(i.rsplit("_", 2)[0])) for i in ids]
            keep = np.array([s in splits for _, s in recs], dtype=bool)
            mat = np.ascontiguousarray(np.asarray(mat, np.float32)[keep])
            parts.append(vector_rows(ids[keep].tolist(), mat, id_column="item_id",
                                     recipe_id=pa.array([r for (r, s), k in zip(recs, keep) if k], pa.string()),
                                     split=pa.array([s for (r, s), k in zip(recs, keep) if k], pa.string()),
                                     encoder_id=enc))
        if parts:
            tbl = pa.concat_tables(parts)
            con.register("export_vec_arrow", tbl)
            id_col = "image_id" if kind == "image_vectors" else "item_id"
            _copy(con, f"SELECT item_id AS {id_col}, recipe_id, split, encoder_id, vector "
                       f"FROM export_vec_arrow ORDER BY encoder_id, item_id", out / f"{kind}.parquet")
            con.unregister("export_vec_arrow")
            counts[kind] = tbl.num_rows
    return counts


def tree_sha256(root: Path) -> str:
    """sha256 over (relative path, file bytes) of every file under root, in sorted order."""
    h = hashlib.sha256()
    for p in sorted(Path(root).rglob("*")):
        if p.is_file():
            h.update(p.relative_to(root).as_posix().encode() + b"\0")
            h.update(p.read_bytes())
    return h.hexdigest()


# ----------------------------------------------------------------------------- RecipeQA JSON

def export_recipeqa_json(con: duckdb.DuckDBPyConnection, dataset_ids: list[str], out: Path,
                         home: Path | None = None, with_images: bool = True) -> dict:
    """RecipeQA-format files OUT/{train,val,test}.json; records use RecipeQA's keys."""
    from features.datasets.tasks import FAMILIES
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    con.execute(f"CREATE OR REPLACE TEMP VIEW export_datasets AS SELECT unnest({_in(dataset_ids)}) AS dataset_id")
    rows = con.execute(load_query("export_questions") + " ").fetchall()
    cols = [d[0] for d in con.execute(load_query("export_questions")).description]
    recipes = {r[0] for r in rows}
    steps: dict[str, list] = {}
    for rid, idx, title, body in con.execute(
            "SELECT recipe_id, step_idx, title, body FROM steps WHERE list_contains(?, recipe_id) "
            "ORDER BY recipe_id, step_idx", [sorted(recipes)]).fetchall():
        steps.setdefault(rid, []).append((idx, title, body))
    imgs: dict[tuple, list] = {}
    paths: dict[str, str] = {}
    for iid, rid, idx, path in con.execute(
            "SELECT image_id, recipe_id, step_idx, path FROM images WHERE status = 'ok' AND "
            "list_contains(?, recipe_id) ORDER BY image_id", [sorted(recipes)]).fetchall():
        imgs.setdefault((rid, idx), []).append(iid)
        paths[iid] = path
    by_split: dict[str, list] = {}
    for row in rows:
        r = dict(zip(cols, row))
        fam = FAMILIES[r["task"]]
        textual = fam.space == "title"
        context = []
        for idx, title, body in steps.get(r["recipe_id"], []):
            c = {"id": idx, "body": body or "", "videos": []}
            if textual:
                c["images"] = imgs.get((r["recipe_id"], idx), [])
            else:
                c["title"] = title or ""
            context.append(c)
        choices = [json.loads(c) for c in r["choice_list"]] if r["task"] == "visual_ordering" \
            else list(r["choice_list"])
        by_split.setdefault(r["split"], []).append({
            "recipe_id": r["recipe_id"], "task": r["task"], "qid": r["qid"], "split": r["split"],
            "context": context, "question": list(r["question"]), "choice_list": choices,
            "answer": int(r["answer"]),
            "question_text": list(r["question"]) if textual else None,
            "context_modality": list(fam.context_modality),
            "question_modality": list(fam.question_modality)})
    written, copied, missing = {}, 0, 0
    for split, recs in sorted(by_split.items()):
        (out / f"{split}.json").write_text(json.dumps({"data": recs}, ensure_ascii=False, sort_keys=True))
        written[split] = len(recs)
        if with_images and home is not None:
            dest = out / "images-qa" / split / "images-qa"
            dest.mkdir(parents=True, exist_ok=True)
            for iid in sorted({i for rec in recs for i in _record_images(rec)}):
                src = paths.get(iid)
                src_path = Path(src) if src and Path(src).is_absolute() else Path(home) / (src or "")
                if src and src_path.is_file():
                    shutil.copyfile(src_path, dest / iid)
                    copied += 1
                else:
                    missing += 1
    return {"out": str(out), "records": written, "images_copied": copied, "images_missing": missing}


def _record_images(rec: dict) -> list[str]:
    if rec["task"] == "textual_cloze":
        return [i for c in rec["context"] for i in c.get("images", [])]
    items = rec["question"] + [x for c in rec["choice_list"] for x in (c if isinstance(c, list) else [c])]
    return [i for i in items if isinstance(i, str) and i.endswith(".jpg")]
