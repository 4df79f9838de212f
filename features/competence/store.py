"""Write competence datasets and their metrics to the warehouse; export them as Parquet and
R2VQ-style JSON."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import duckdb

from etl.config import file_in_path, sql_path
from etl.warehouse import transaction, utcnow
from features.competence.generate import FAMILIES

QCOLS = ("dataset_id", "qid", "family", "template", "recipe_id", "split", "question", "answer", "answerable",
         "step_idx", "provenance")


def dataset_id(family: str, seed: int) -> str:
    return f"competence-{family}-s{seed}"


def content_hash(rows: list[dict]) -> str:
    h = hashlib.sha256()
    for r in sorted(rows, key=lambda r: r["qid"]):
        h.update(json.dumps([r[c] for c in QCOLS[1:]], sort_keys=True).encode())
    return h.hexdigest()


def write(con: duckdb.DuckDBPyConnection, generated: dict, seed: int) -> list[dict]:
    """Replace each family's dataset with the generated questions; returns the dataset summaries."""
    out = []
    with transaction(con):
        for fam in FAMILIES:
            rows = generated["families"].get(fam, [])
            did = dataset_id(fam, seed)
            con.execute("DELETE FROM competence_questions WHERE dataset_id = ?", [did])
            con.execute("DELETE FROM competence_metrics WHERE dataset_id = ?", [did])
            con.execute("DELETE FROM competence_datasets WHERE dataset_id = ?", [did])
            if rows:
                import pyarrow as pa
                batch = pa.table({"dataset_id": [did] * len(rows),  # noqa: F841 - read by DuckDB
                                  **{c: [r[c] for r in rows] for c in QCOLS[1:]}})
                con.execute(f"INSERT INTO competence_questions ({', '.join(QCOLS)}) SELECT {', '.join(QCOLS)} "
                            "FROM batch")
            params = {"source": generated["source"], "prior_cap": generated.get("prior_cap"),
                      "dropped_by_prior_cap": generated.get("dropped_by_prior_cap", {}).get(fam, 0)}
            summary = {"dataset_id": did, "family": fam, "n_questions": len(rows),
                       "n_recipes": len({r["recipe_id"] for r in rows}), "content_sha256": content_hash(rows),
                       "unanswerable": sum(not r["answerable"] for r in rows), **params}
            con.execute("INSERT INTO competence_datasets VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [did, fam, generated["source"], seed, json.dumps(params, sort_keys=True), utcnow(),
                         len(rows), summary["n_recipes"], summary["content_sha256"]])
            out.append(summary)
    return out


def write_metrics(con: duckdb.DuckDBPyConnection, results: dict, seed: int, split: str) -> None:
    now = utcnow()
    with transaction(con):
        for fam, m in results.items():
            did = dataset_id(fam, seed)
            for method, v in m.items():
                if isinstance(v, dict):
                    con.execute("INSERT OR REPLACE INTO competence_metrics VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                                [did, fam, method, split, v["n"], v["em"], v["f1"], now])


def load_questions(con: duckdb.DuckDBPyConnection, seed: int = 0) -> dict[str, list[dict]]:
    """family -> question rows of the stored datasets of one seed."""
    out: dict[str, list[dict]] = {}
    for fam in FAMILIES:
        cur = con.execute(f"SELECT {', '.join(QCOLS[1:])} FROM competence_questions WHERE dataset_id = ? "
                          "ORDER BY qid", [dataset_id(fam, seed)])
        cols = [d[0] for d in cur.description]
        rows = [dict(zip(cols, r)) for r in cur.fetchall()]
        if rows:
            out[fam] = rows
    if not out:
        raise ValueError(f"no competence datasets of seed {seed} in the warehouse: run `mrqa competence generate`")
    return out


def export(con: duckdb.DuckDBPyConnection, out: Path, seed: int = 0) -> dict:
    """OUT/competence/family=F/split=S/*.parquet and OUT/competence-r2vq.json (recipes -> questions,
    R2VQ-style: one entry per recipe with its questions, family and answer)."""
    out = Path(out)
    load_questions(con, seed)             # a clear error when there is nothing to export
    target = out / "competence"
    js = out / "competence-r2vq.json"
    blocked = file_in_path(out)
    if blocked is not None:
        raise ValueError(f"--out: {blocked} is a file, not a folder")
    if target.exists() and (not target.is_dir() or any(
            not (e.is_dir() and e.name.startswith("family=")) for e in target.iterdir())):
        raise ValueError(f"--out: {target} holds other files than an earlier competence export "
                         "(family=*/ folders); nothing replaced")
    if js.is_dir():
        raise ValueError(f"--out: {js} is a folder; nothing replaced")
    ids = [dataset_id(f, seed) for f in FAMILIES]
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    con.execute(f"""COPY (SELECT dataset_id, qid, family, template, recipe_id, split, question, answer, answerable,
                                 step_idx, provenance FROM competence_questions
                          WHERE list_contains(?, dataset_id) ORDER BY family, split, qid)
                    TO {sql_path(target)} (FORMAT parquet, PARTITION_BY (family, split))""", [ids])
    rows = con.execute("SELECT recipe_id, split, family, qid, question, answer FROM competence_questions "
                       "WHERE list_contains(?, dataset_id) ORDER BY recipe_id, family, qid", [ids]).fetchall()
    recipes: dict[str, dict] = {}
    for rid, split, fam, qid, q, a in rows:
        recipes.setdefault(rid, {"recipe_id": rid, "split": split, "questions": []})["questions"].append(
            {"qid": qid, "family": fam, "question": q, "answer": a})
    js.write_text(json.dumps({"version": 1, "seed": seed, "recipes": list(recipes.values())}, indent=1,
                             ensure_ascii=False) + "\n", encoding="utf-8")
    return {"out": str(out), "parquet": str(target), "json": str(js), "questions": len(rows),
            "recipes": len(recipes)}
