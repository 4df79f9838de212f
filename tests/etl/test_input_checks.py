"""The library side of the input checks the CLI relies on: a ground truth that matches nothing replaces
no truth rows, a sample build never clears a folder of other files, and files of another shape are a
ValueError naming the file (and line), not a KeyError or TypeError deep inside (audit D4, D5, D13, D21)."""
from __future__ import annotations

import json

import duckdb
import pytest

from etl.sample.generate import build_sample, check_build_dir, ground_truth, plan_all


def test_load_truth_that_matches_no_warehouse_recipe_keeps_the_truth_rows(tmp_path):
    from etl.load import load_recipe
    from etl.records import RecipeRecord, StepRecord
    from etl.roles.store import load_truth
    from etl.warehouse import migrate
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    migrate(con)
    gt = tmp_path / "ground_truth.jsonl"
    gt.write_text("".join(json.dumps(ground_truth(p)) + "\n" for p in plan_all(10, 0)))
    for g in map(json.loads, gt.read_text().splitlines()):
        if g["expected"]["stage"] is None:
            load_recipe(con, RecipeRecord(g["recipe_id"], g["url_path"], g["title"], steps=[
                StepRecord(s["step_idx"], s["title_clean"], s["body_clean"]) for s in g["steps"]]), source="sample")
    assert load_truth(con, gt)["rows"] > 0
    before = con.execute("SELECT * FROM step_roles ORDER BY ALL").fetchall()
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps(ground_truth(p)) + "\n" for p in plan_all(10, 99)))
    for path, needle in ((other, "no record matches a recipe in the warehouse"), (tmp_path / "e.jsonl", "no records")):
        path.touch()
        with pytest.raises(ValueError, match=f"{path.name}: {needle}.*nothing replaced"):
            load_truth(con, path)
    assert con.execute("SELECT * FROM step_roles ORDER BY ALL").fetchall() == before


def test_a_sample_build_refuses_a_folder_it_did_not_write(tmp_path):
    check_build_dir(tmp_path / "new")                    # missing, empty: fine
    (tmp_path / "empty").mkdir()
    check_build_dir(tmp_path / "empty")
    mine = tmp_path / "mine"
    (mine / "site").mkdir(parents=True)
    (mine / "site" / "keep.txt").write_text("keep")
    with pytest.raises(ValueError, match="holds other files and no earlier sample build"):
        build_sample(mine, 2, 0, workers=1, progress=False)
    assert (mine / "site" / "keep.txt").read_text() == "keep"
    (mine / "manifest.json").write_text("[]")             # a manifest.json, but not a build's
    with pytest.raises(ValueError, match="holds other files"):
        check_build_dir(mine)
    with pytest.raises(ValueError, match="is a file, not a folder"):
        check_build_dir(mine / "site" / "keep.txt" / "out")
    out = tmp_path / "kitchen"
    build_sample(out, 2, 0, workers=1, progress=False)
    (out / ".sample-build").unlink()                    # a build from before the mark: its manifest suffices
    check_build_dir(out)


def test_ground_truth_of_another_shape_is_a_value_error_naming_the_line(tmp_path):
    from etl.vocab import evaluate_on_ground_truth
    f = tmp_path / "gt.jsonl"
    f.write_text('{"recipe_id": "a", "steps": []}\n{"recipe_id": "b", "steps": [{"title_raw": "t", "body_raw": 1}]}\n')
    with pytest.raises(ValueError, match=r"gt.jsonl:2: not a sample kitchen ground-truth record \(step \? has no text"):
        evaluate_on_ground_truth(f)


def test_role_scores_refuse_files_of_another_shape(tmp_path):
    from etl.roles.evaluate import score_real, score_sample
    lab, rq, gt = tmp_path / "labels.json", tmp_path / "rq.json", tmp_path / "gt.jsonl"
    lab.write_text('{"recipes": {"r": []}}')
    rq.write_text('{"data": []}')
    with pytest.raises(ValueError, match="labels.json: not a hand-label file"):
        score_real(lab, rq)
    lab.write_text('{"recipes": []}')
    rq.write_text('{"data": [{"recipe_id": "r", "context": [{"body": "x"}]}]}')
    with pytest.raises(ValueError, match="rq.json: not a RecipeQA JSON file"):
        score_real(lab, rq)
    gt.write_text("[]\n")
    with pytest.raises(ValueError, match="gt.jsonl:1: not a sample kitchen ground-truth record"):
        score_sample(gt)
