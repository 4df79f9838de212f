"""Every split held out in turn: the reading check's `--folds split` (flows/train.py `reading_check`).

The plain reading check trains its two models on the train split and scores the test split: on a small
home (538 real RecipeQA validation records re-split 0.6/0.2/0.2 give 44-72 test questions per dataset)
each figure's 95% interval spans 25 points or more. Held out in turn, every question is scored once, by
models that never saw its recipe:

- the test split: the plain check, on the export as it is (the same figures, byte for byte);
- the val split: trained on train, validated on test, scored on val;
- the train split: trained on the val and test splits' recipes, a quarter of them (those whose md5 starts
  with 0-3, so the same quarter for every dataset of a pool; `validating_recipes`) kept to validate, scored
  on train.

A fold is the export with the `split` column of its questions and steps relabelled; its vectors, recipes
and the rest are links to the export's files. Splits never share a recipe, nor, in the generated datasets,
a photo or a title, so a fold's models see no item of the questions they score.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import duckdb

from etl.config import sql_glob, sql_path
from training.sweep import ci95, difference_ci

FOLDS = ("test", "split")                 # --folds: the test split only, or every split in turn
HELD = ("test", "val", "train")             # the folds, each named by the split it scores
_RELABEL = {"val": "CASE split WHEN 'val' THEN 'test' WHEN 'test' THEN 'val' ELSE split END",
            "train": "CASE WHEN split = 'train' THEN 'test' WHEN recipe_id IN (SELECT recipe_id FROM validate) "
                     "THEN 'val' ELSE 'train' END"}


def validating_recipes(recipe_ids: list[str]) -> list[str]:
    """The recipes of the val and test splits that validate the fold scoring the train split: those whose
    md5 starts with 0-3, a quarter of them on average; where that picks none or all of them (a handful of
    recipes), the first quarter in md5 order (at least one). Fewer than 2 recipes leave none to train on: a
    ValueError that says so."""
    ids = sorted(set(recipe_ids))
    if len(ids) < 2:
        raise ValueError(f"the val and test splits hold {len(ids)} recipe(s): too few to train on while the "
                         "train split is held out; check the test split alone (--folds test)")
    md5 = {r: hashlib.md5(r.encode()).hexdigest() for r in ids}
    picked = [r for r in ids if md5[r][0] in "0123"]
    if not picked or len(picked) == len(ids):
        picked = sorted(ids, key=lambda r: (md5[r], r))[:max(1, len(ids) // 4)]
    return sorted(picked)


def fold_exports(export_dir: Path, root: Path) -> list[tuple[str, Path]]:
    """(held-out split, its export) for each split: the test split's is `export_dir` itself, the others
    are written under `root` (replaced when there)."""
    export_dir, root = Path(export_dir), Path(root)
    questions = f"read_parquet({sql_glob(export_dir / 'questions', '**/*.parquet')}, hive_partitioning = false)"
    out = [("test", export_dir)]
    with duckdb.connect() as con:
        held_out = [r for (r,) in con.execute(f"SELECT DISTINCT recipe_id FROM {questions} "
                                              "WHERE split IN ('val', 'test')").fetchall()]
        con.execute("CREATE TEMP TABLE validate (recipe_id VARCHAR)")      # read by the train split's relabel
        con.executemany("INSERT INTO validate VALUES (?)", [[r] for r in validating_recipes(held_out)])
        for held in HELD[1:]:
            d = root / f"held-{held}"
            if d.exists():
                shutil.rmtree(d)
            (d / "questions").mkdir(parents=True)
            expr = _RELABEL[held]
            con.execute(f"COPY (SELECT * REPLACE ({expr} AS split) FROM {questions} "
                        f"ORDER BY dataset_id, qid) TO {sql_path(d / 'questions' / 'data_0.parquet')} "
                        "(FORMAT parquet)")
            con.execute(f"COPY (SELECT * REPLACE ({expr} AS split) FROM read_parquet("
                        f"{sql_path(export_dir / 'steps.parquet')}) ORDER BY recipe_id, step_idx) "
                        f"TO {sql_path(d / 'steps.parquet')} (FORMAT parquet)")
            for f in sorted(export_dir.iterdir()):
                if f.name not in ("questions", "steps.parquet"):
                    os.symlink(f.resolve(), d / f.name)
            out.append((held, d))
    return out


def combine(per_fold: list[tuple[str, dict]]) -> dict:
    """One dataset's reading check over its folds, [(held-out split, its table row)]: the accuracies over
    every scored question (each fold's correct answers summed), their 95% intervals and those of the lead and
    the cost, and per fold its questions and figures (`folds`)."""
    n = sum(r["n_test"] for _, r in per_fold)
    acc = {k: round(sum(round(r[k] * r["n_test"]) for _, r in per_fold) / n, 4) if n else 0.0
           for k in ("reader", "question_only", "reader_other_recipe", "hasty_student")}
    first = per_fold[0][1]
    return {"task": first["task"], "setting": first["setting"], "dataset_id": first["dataset_id"], "n_test": n,
            **{k: acc[k] for k in ("reader", "question_only")},
            "reader_ci": ci95(acc["reader"], n), "question_only_ci": ci95(acc["question_only"], n),
            "reader_other_recipe": acc["reader_other_recipe"], "hasty_student": acc["hasty_student"],
            "lead": round(acc["reader"] - acc["question_only"], 4),
            "lead_ci": difference_ci(acc["reader"], acc["question_only"], n),
            "cost_ci": difference_ci(acc["reader"], acc["reader_other_recipe"], n),
            "folds": {held: {k: r[k] for k in ("n_test", "reader", "question_only", "reader_other_recipe")}
                      for held, r in per_fold}}
