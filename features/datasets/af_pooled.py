"""Apply the pooled adversary's verdict to the warehouse (training/af_pooled.py computes it).

`af_datasets(con, task, seed)` lists a task's AF datasets with their plain setting's question count;
`apply_drops(con, plan, ...)` deletes the named questions of each dataset in one transaction per
dataset, recomputes its question and recipe counts and content hash, records the step in
`datasets.params.af_pooled` (tau, folds, seed, the floor, what the adversary read before and after)
and the dropped count as the generation skip `af_pooled_predictable`, and removes the dataset's now
stale `bias_metrics` row (`mrqa report` recomputes it). A dataset filtered once is refused a second
time: regenerate it (`mrqa generate`) to filter again.
"""
from __future__ import annotations

import json

import duckdb

from etl.warehouse import load_query, transaction

SKIP_REASON = "af_pooled_predictable"


def af_datasets(con: duckdb.DuckDBPyConnection, task: str, seed: int = 0) -> list[dict]:
    """The AF datasets of `task` and `seed`: dataset_id, setting, params, n_questions, and n_plain (the
    question count of the same setting without AF, same seed and encoder; None when not generated)."""
    rows = con.execute("""
        SELECT a.dataset_id, a.setting, a.params, a.n_questions,
               (SELECT p.n_questions FROM datasets p WHERE p.task = a.task AND NOT coalesce(p.adversarial, false)
                  AND p.setting = regexp_replace(a.setting, '-af$', '') AND p.seed = a.seed
                  AND p.encoder_id IS NOT DISTINCT FROM a.encoder_id) AS n_plain
        FROM datasets a WHERE a.task = ? AND a.seed = ? AND coalesce(a.adversarial, false)
        ORDER BY a.dataset_id""", [task, seed]).fetchall()
    return [{"dataset_id": d, "setting": s, "params": json.loads(p) if p else {}, "n_questions": n, "n_plain": np_}
            for d, s, p, n, np_ in rows]


def apply_drops(con: duckdb.DuckDBPyConnection, plan: dict[str, list[str]],
                oof: dict[str, dict[str, tuple[float, bool]]], info: dict) -> list[dict]:
    """Delete each dataset's planned questions and record the step; returns one summary per dataset."""
    out = []
    for did, drop in sorted(plan.items()):
        qs, gone = oof[did], set(drop)
        kept = [q for q in qs if q not in gone]
        before = sum(r for _, r in qs.values()) / len(qs) if qs else None
        after = sum(qs[q][1] for q in kept) / len(kept) if kept else None
        with transaction(con):
            con.execute("DELETE FROM questions WHERE dataset_id = ? AND list_contains(?, qid)", [did, drop])
            n, n_rec = con.execute("SELECT count(*), count(DISTINCT recipe_id) FROM questions WHERE dataset_id = ?",
                                   [did]).fetchall()[0]
            sha = con.execute(load_query("questions_content_hash"), {"dataset_id": did}).fetchall()[0][0]
            params = json.loads(con.execute("SELECT params FROM datasets WHERE dataset_id = ?", [did]).fetchall()[0][0])
            step = {**info, "dropped": len(drop), "scored": len(qs),
                    "oof_question_only_acc": None if before is None else round(before, 4),
                    "oof_question_only_acc_kept": None if after is None else round(after, 4)}
            params["af_pooled"] = step
            params.setdefault("skips", {})[SKIP_REASON] = len(drop)
            con.execute("UPDATE datasets SET n_questions = ?, n_recipes = ?, content_sha256 = ?, params = ? "
                        "WHERE dataset_id = ?", [n, n_rec, sha, json.dumps(params, sort_keys=True), did])
            con.execute("INSERT OR REPLACE INTO generation_skips VALUES (?, ?, ?)", [did, SKIP_REASON, len(drop)])
            con.execute("DELETE FROM bias_metrics WHERE dataset_id = ?", [did])
        out.append({"dataset_id": did, "dropped": len(drop), "kept": n, **{k: step[k] for k in (
            "oof_question_only_acc", "oof_question_only_acc_kept")}})
    return out
