"""RecipeQA importer: merge across tasks, splits, image mapping, original questions, idempotency,
all-or-nothing validation. Uses the four real records of ../shared/fixtures/recipeqa/."""
from __future__ import annotations

import json
import shutil

import pytest

from etl.recipeqa import RecipeQAFormatError, bench_import, import_recipeqa, read_recipeqa, synthesise_records
from etl.warehouse import run_sql_tests, table_fingerprint

TABLES = ("recipes", "steps", "images", "questions", "datasets")


def _counts(con):
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}


@pytest.fixture
def val_json(shared_fixtures):
    return shared_fixtures / "recipeqa" / "val_sample.json"


def test_merge_titles_images_split(con, val_json):
    raw = json.loads(val_json.read_text())["data"]
    s = import_recipeqa(con, [val_json])
    assert s["records"] == len(raw)
    assert s["recipes"] == len({r["recipe_id"] for r in raw})
    # titles come from visual-task records
    titles = dict(con.execute("SELECT step_idx, title_raw FROM steps "
                              "WHERE recipe_id = 'bacon-pancake-poppers'").fetchall())
    ctx = {c["id"]: c["title"] for c in raw[0]["context"]}
    assert titles == ctx
    # image lists come from the textual-cloze record
    tc = next(r for r in raw if r["task"] == "textual_cloze")
    want = {i for c in tc["context"] for i in c["images"]}
    got = {i for (i,) in con.execute("SELECT image_id FROM images WHERE recipe_id = ?",
                                     [tc["recipe_id"]]).fetchall()}
    assert want <= got
    # RecipeQA's split is kept, source is recipeqa, bodies are raw and unchanged
    assert {r for (r,) in con.execute("SELECT DISTINCT split FROM recipes").fetchall()} == {"val"}
    body = con.execute("SELECT body_raw FROM steps WHERE recipe_id = ? AND step_idx = 1",
                       [tc["recipe_id"]]).fetchone()[0]
    assert body == tc["context"][0]["body"]
    assert all(v == 0 for v in run_sql_tests(con).values())


def test_original_questions_one_dataset_per_task(con, val_json):
    raw = json.loads(val_json.read_text())["data"]
    import_recipeqa(con, [val_json])
    rows = con.execute("SELECT dataset_id, task, preset, n_questions FROM datasets").fetchall()
    assert {r[0] for r in rows} == {f"recipeqa-original-{r['task']}" for r in raw}
    assert all(r[2] == "recipeqa-original" and r[0].endswith(r[1]) for r in rows)
    for rec in raw:
        q, choices, ans = con.execute("SELECT question, choice_list, answer FROM questions WHERE qid = ?",
                                      [rec["qid"]]).fetchone()
        assert ans == rec["answer"] and q == rec["question"]
        assert [json.loads(c) if c.startswith("[") else c for c in choices] == rec["choice_list"]


def test_import_twice_is_idempotent(con, val_json):
    import_recipeqa(con, [val_json])
    first = _counts(con), {t: table_fingerprint(con, t, exclude=["fetched_at", "created_at"])
                           for t in TABLES}
    import_recipeqa(con, [val_json])
    second = _counts(con), {t: table_fingerprint(con, t, exclude=["fetched_at", "created_at"])
                            for t in TABLES}
    assert first == second


def test_image_mapping_ok_missing_broken(con, paths, val_json, shared_fixtures, tmp_path):
    # the fixture images belong to other recipes: build a dir whose names match our records
    src = sorted((shared_fixtures / "recipeqa" / "images").glob("*.jpg"))
    imgdir = tmp_path / "images-qa" / "val" / "images-qa"
    imgdir.mkdir(parents=True)
    shutil.copy(src[0], imgdir / "dessert-hamburgers_2_0.jpg")
    shutil.copy(src[1], imgdir / "dessert-hamburgers_2_1.jpg")
    (imgdir / "dessert-hamburgers_3_0.jpg").write_bytes(src[2].read_bytes()[:300])  # truncated
    s = import_recipeqa(con, [val_json], images_dir=tmp_path / "images-qa", home=paths.home)
    rows = {r[0]: r[1:] for r in con.execute(
        "SELECT image_id, status, status_reason, path, sha256, width, height FROM images").fetchall()}
    ok = rows["dessert-hamburgers_2_0.jpg"]
    assert ok[0] == "ok" and ok[3] and ok[4] > 0 and ok[5] > 0
    from pathlib import Path
    assert Path(ok[2]).resolve() == (imgdir / "dessert-hamburgers_2_0.jpg").resolve()
    assert rows["dessert-hamburgers_3_0.jpg"][0] == "broken"
    assert "image_decode_error" in rows["dessert-hamburgers_3_0.jpg"][1]
    assert rows["dessert-hamburgers_1_0.jpg"][0] == "missing" and rows["dessert-hamburgers_1_0.jpg"][1]
    assert s["images_by_status"]["ok"] == 2
    # a later import without --images keeps the mapping
    import_recipeqa(con, [val_json])
    assert con.execute("SELECT status FROM images WHERE image_id = 'dessert-hamburgers_2_0.jpg'"
                       ).fetchone()[0] == "ok"
    assert all(v == 0 for v in run_sql_tests(con).values())


def test_malformed_json_loads_nothing(con, val_json, tmp_path):
    bad = tmp_path / "train.json"
    bad.write_text('{"data": [ {"recipe_id": "x", ')
    with pytest.raises(RecipeQAFormatError, match="train.json: malformed JSON"):
        import_recipeqa(con, [val_json, bad])
    assert all(v == 0 for v in _counts(con).values())


@pytest.mark.parametrize("mutate, message", [
    (lambda r: r.pop("choice_list"), "missing key"),
    (lambda r: r.update(answer=7), "does not index choice_list"),
    (lambda r: r.update(task="audio_cloze"), "unknown task"),
    (lambda r: r["context"][0].pop("id"), "context step 0"),
])
def test_bad_record_named_and_nothing_loaded(con, val_json, tmp_path, mutate, message):
    doc = json.loads(val_json.read_text())
    for r in doc["data"]:
        r["qid"] += "-other-file"
    mutate(doc["data"][2])
    bad = tmp_path / "test.json"
    bad.write_text(json.dumps(doc))
    qid = doc["data"][2]["qid"]
    with pytest.raises(RecipeQAFormatError) as e:
        import_recipeqa(con, [val_json, bad])
    assert "test.json: record 2" in str(e.value) and qid in str(e.value) and message in str(e.value)
    assert all(v == 0 for v in _counts(con).values())


def test_bench_methods_agree(val_json):
    """Arrow and executemany load the same rows; the bench reports both rates."""
    from etl.recipeqa import load_recipeqa
    from etl.warehouse import connect
    recs = synthesise_records(read_recipeqa([val_json]), 40)
    prints = []
    for method in ("arrow", "executemany"):
        c = connect(database=":memory:")
        load_recipeqa(c, recs, method=method)
        prints.append({t: table_fingerprint(c, t, exclude=["fetched_at", "created_at"]) for t in TABLES})
        c.close()
    assert prints[0] == prints[1]
    r = bench_import(read_recipeqa([val_json]), n=40, n_baseline=8)
    assert r["arrow_records_per_s"] > 0 and r["ratio_arrow_vs_executemany"] > 0


def test_cli_ingest_recipeqa(paths, val_json, tmp_path, prefect_harness):
    from typer.testing import CliRunner

    from flows.cli import app
    res = CliRunner().invoke(app, ["ingest", "recipeqa", str(val_json)])
    assert res.exit_code == 0, res.output
    assert '"questions": 4' in res.output
    bad = tmp_path / "val.json"
    bad.write_text("{not json")
    res = CliRunner().invoke(app, ["ingest", "recipeqa", str(bad)])
    assert res.exit_code == 2 and "malformed JSON" in res.output and "Traceback" not in res.output


def test_sample_kitchen_records_are_valid_recipeqa_and_load():
    """`mrqa bench import`'s default input needs no third-party file: the sample kitchen's records
    pass the importer's schema, load into the warehouse, and are the same for the same seed."""
    from etl.recipeqa import load_recipeqa, sample_kitchen_records
    from etl.warehouse import connect
    recs = sample_kitchen_records(12, seed=3)
    assert recs and [r.raw for r in recs] == [r.raw for r in sample_kitchen_records(12, seed=3)]
    for r in recs:
        assert r.raw["choice_list"][r.raw["answer"]] not in r.raw["question"]
    c = connect(database=":memory:")
    load_recipeqa(c, synthesise_records(recs, 30), method="arrow")
    assert c.execute("SELECT count(*) FROM recipes").fetchone()[0] == 30
    assert c.execute("SELECT count(*) FROM questions").fetchone()[0] == 30
    c.close()


def test_resplit_puts_each_recipe_in_a_split_by_its_id_alone(tmp_path, paths):
    """`--resplit`: a file of one split (RecipeQA's validation file alone) becomes train, val and test by a
    hash of each recipe id: the same split whatever the file's order, each original question in its
    recipe's split with the file's kept as `original_split`, the shares honoured; bad shares refused in one
    line before anything is loaded."""
    from typer.testing import CliRunner

    from etl.recipeqa import load_recipeqa, parse_resplit, resplit_records, sample_kitchen_records, split_of_recipe
    from etl.warehouse import connect
    from flows.cli import app
    recs = synthesise_records(sample_kitchen_records(12, seed=5), 400)
    assert {r.raw["split"] for r in recs} == {"val"}
    shares = parse_resplit("0.6,0.2,0.2")
    out = resplit_records(recs, shares)
    again = {r.raw["recipe_id"]: r.raw["split"] for r in resplit_records(recs[::-1], shares)}
    assert {r.raw["recipe_id"]: r.raw["split"] for r in out} == again
    counts = {s: sum(r.raw["split"] == s for r in out) for s in ("train", "val", "test")}
    assert 200 <= counts["train"] <= 280 and 55 <= counts["val"] <= 105 and 55 <= counts["test"] <= 105, counts
    c = connect(database=":memory:")
    load_recipeqa(c, out, method="arrow")
    rows = c.execute("SELECT r.recipe_id, r.split, q.split, json_extract_string(q.provenance, '$.original_split') "
                     "FROM recipes r JOIN questions q USING (recipe_id)").fetchall()
    assert len(rows) == 400
    assert all(rs == qs == split_of_recipe(rid, shares) and orig == "val" for rid, rs, qs, orig in rows)
    c.close()
    for bad in ("0.6,0.2", "0.6,0.3,0.3", "a,b,c", "1.2,-0.1,-0.1"):
        with pytest.raises(ValueError, match="--resplit"):
            parse_resplit(bad)
    f = tmp_path / "val.json"
    f.write_text(json.dumps({"data": [r.raw for r in recs[:3]]}))
    res = CliRunner().invoke(app, ["--no-prefect", "ingest", "recipeqa", str(f), "--resplit", "0.5,0.5"])
    assert res.exit_code == 2 and "--resplit" in res.output and "Traceback" not in res.output
    assert not (paths.home / "warehouse.duckdb").exists() or connect(paths).execute(
        "SELECT count(*) FROM recipes").fetchone()[0] == 0
    res = CliRunner().invoke(app, ["--no-prefect", "ingest", "recipeqa", str(f), "--resplit", "1,0,0"])
    assert res.exit_code == 0, res.output
    con = connect(paths)
    assert {s for s, in con.execute("SELECT DISTINCT split FROM recipes").fetchall()} == {"train"}
    con.close()
