"""The reading check's folds (training/split_folds.py) on a hand-made export: which recipes validate the fold
that scores the train split, when the md5 rule picks a quarter and when it picks none or all of a handful of
recipes, and the refusal when the val and test splits hold too few recipes to train on."""
from __future__ import annotations

import duckdb
import pytest

from training.split_folds import fold_exports, validating_recipes

# md5 first hex digit: r0 c, r1 7, r2 d, r3 9, r4 4, r5 e, r7 3, r9 1, r13 0, r14 2
PLENTY = [f"r{i}" for i in range(40)]


def test_the_md5_rule_picks_a_quarter_of_the_recipes_whatever_their_order():
    picked = validating_recipes(list(reversed(PLENTY)))
    assert picked == validating_recipes(PLENTY) == sorted(picked)
    assert {"r7", "r9", "r13", "r14"} <= set(picked) and not {"r0", "r1", "r2", "r3", "r4"} & set(picked)
    assert 0.15 < len(picked) / len(PLENTY) < 0.35


def test_a_handful_of_recipes_still_gets_one_to_validate_and_one_to_train_on():
    assert validating_recipes(["r0", "r1", "r2", "r3"]) == ["r1"]       # md5 c, 7, d, 9: none starts 0-3
    assert validating_recipes(["r7", "r9"]) == ["r9"]                    # md5 3, 1: both would; the first quarter
    with pytest.raises(ValueError, match="too few to train on while the train split is held out"):
        validating_recipes(["r7"])


def _export(root, recipes: dict[str, str]):
    """A minimal export: two questions per recipe, its steps, and one more file the folds link to."""
    (root / "questions").mkdir(parents=True)
    rows = [(f"ds-{k}", f"{r}-q{j}", r, s) for r, s in recipes.items() for j in range(2) for k in range(2)]
    con = duckdb.connect()
    con.execute("CREATE TABLE q (dataset_id VARCHAR, qid VARCHAR, recipe_id VARCHAR, split VARCHAR)")
    con.executemany("INSERT INTO q VALUES (?, ?, ?, ?)", rows)
    con.execute(f"COPY q TO '{root / 'questions' / 'data_0.parquet'}' (FORMAT parquet)")
    con.execute(f"COPY (SELECT DISTINCT recipe_id, split, 1 AS step_idx FROM q) TO '{root / 'steps.parquet'}' "
                "(FORMAT parquet)")
    (root / "README.md").write_text("card")
    return root


def test_the_folds_of_a_small_export_train_validate_and_score_apart(tmp_path):
    recipes = {"r5": "train", "r10": "train", "r0": "val", "r1": "val", "r2": "test", "r3": "test"}
    folds = dict(fold_exports(_export(tmp_path / "export", recipes), tmp_path / "folds"))
    read = lambda d: dict(duckdb.sql(f"SELECT DISTINCT recipe_id, split FROM '{d}/questions/*.parquet'")
                          .fetchall())
    assert read(folds["test"]) == recipes
    assert read(folds["val"]) == {"r5": "train", "r10": "train", "r0": "test", "r1": "test", "r2": "val",
                                  "r3": "val"}
    assert read(folds["train"]) == {"r5": "test", "r10": "test", "r1": "val", "r0": "train", "r2": "train",
                                    "r3": "train"}
    steps = dict(duckdb.sql(f"SELECT recipe_id, split FROM '{folds['train']}/steps.parquet'").fetchall())
    assert steps == read(folds["train"])
    assert (folds["train"] / "README.md").read_text() == "card"
    # made again: replaced, the same
    again = dict(fold_exports(tmp_path / "export", tmp_path / "folds"))
    assert read(again["train"]) == read(folds["train"])
    with pytest.raises(ValueError, match="hold 1 recipe"):
        fold_exports(_export(tmp_path / "tiny", {"r5": "train", "r0": "val"}), tmp_path / "tiny-folds")
