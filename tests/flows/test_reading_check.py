"""The pipeline's reading check (flows/train.py `reading_check`, the demo's train stage): on the AF visual
cloze datasets of a synthetic world whose step bodies lie near their photos, the pooled reader, the
learned question-only model and the reader with another recipe's steps, per dataset on its test split;
deterministic; a home without the datasets is skipped with the reason, and the demo's summary prints it."""
from __future__ import annotations

from dataclasses import replace

import duckdb
import pytest
from synthetic_home import synthetic_home

from features.datasets.generate import generate_datasets
from features.datasets.knobs import AF_DEFAULT_ROUNDS, KnobParams
from flows.demo import _reading_lines
from flows.train import READING_EXPORT, reading_check
from training.sweep import ci95, difference_ci

ENC = "synthetic-enc-0001"
SETTINGS = [("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 1)),
            ("visual_cloze", replace(KnobParams.preset_for("visual_cloze", 0, 0, 0), af_rounds=AF_DEFAULT_ROUNDS)),
            ("visual_cloze", replace(KnobParams.preset_for("visual_cloze", 0, 1, 1), af_rounds=AF_DEFAULT_ROUNDS))]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with synthetic_home(tmp_path_factory, "reading_home", n_recipes=300, seed=3, dim=24, k=100) as (h, paths, con):
        generate_datasets(con, SETTINGS, seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False)
        tests = dict(con.execute("SELECT dataset_id, count(*) FILTER (split = 'test') FROM questions "
                                 "GROUP BY 1").fetchall())
        setting = dict(con.execute("SELECT dataset_id, setting FROM datasets").fetchall())
        con.close()
        yield paths, tests, setting


@pytest.mark.slow      # readers trained per dataset (~37 s, and the world ~17 s)
def test_the_reader_against_question_only_per_af_dataset(world):
    paths, tests, setting = world
    res = reading_check(paths, seed=0, settings=("0-0-0-af", "0-1-1-af"), workers=2)
    rows = res["settings"]
    assert [r["setting"] for r in rows] == ["0-0-0-af", "0-1-1-af"]          # the plain 0-1-1 is not read
    assert {r["dataset_id"] for r in rows} == {d for d, s in setting.items() if s in ("0-0-0-af", "0-1-1-af")}
    for r in rows:
        assert r["n_test"] == tests[r["dataset_id"]] > 0
        assert all(0.0 <= r[k] <= 1.0 for k in ("reader", "question_only", "reader_other_recipe", "hasty_student"))
        assert r["lead"] == pytest.approx(r["reader"] - r["question_only"], abs=1e-4)
        for k in ("reader", "question_only"):        # each with its Wilson interval over the test questions
            assert r[f"{k}_ci"] == ci95(r[k], r["n_test"]) and r[f"{k}_ci"][0] <= r[k] <= r[f"{k}_ci"][1]
        assert r["lead_ci"] == difference_ci(r["reader"], r["question_only"], r["n_test"])
        assert r["lead_ci"][0] <= r["lead"] <= r["lead_ci"][1]
        assert r["cost_ci"] == difference_ci(r["reader"], r["reader_other_recipe"], r["n_test"])
        # the step bodies tell the answer photo, the photos alone do not: the reader reads, and reads less
        # from another recipe's steps
        assert r["reader"] > r["question_only"] and r["reader"] > r["reader_other_recipe"]
    assert (paths.exports / READING_EXPORT / "questions").is_dir()
    again = reading_check(paths, seed=0, settings=("0-0-0-af", "0-1-1-af"), workers=1)
    assert again["settings"] == rows            # deterministic, and the same in 2 processes as in turn
    con = duckdb.connect(str(paths.warehouse), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM runs").fetchall()[0][0] == 0     # it records no runs
    finally:
        con.close()
    text = "\n".join(_reading_lines(res))
    assert "does a model have to read the recipe?" in text and "0-1-1-af" in text and "0-0-0-af" in text
    assert "test split" in text and "test q" in text
    assert f"{100 * min(r['lead'] for r in rows):.1f} points or more" in text
    lo, hi = rows[0]["reader_ci"]
    assert f"{100 * rows[0]['reader']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]" in text


def test_a_home_without_the_settings_is_skipped_with_the_reason(world):
    paths, _, _ = world
    res = reading_check(paths, seed=0, settings=("1-1-1-af",))
    assert res == {"skipped": "no visual cloze dataset of 1-1-1-af (seed 0)"}
    assert _reading_lines(res) == ["reading check: skipped (no visual cloze dataset of 1-1-1-af (seed 0))"]
    assert reading_check(paths, seed=5)["skipped"].startswith("no visual cloze dataset of 0-0-0-af")
    # the pipeline's train stage: only the datasets the gate holds back for want of a check (none of seed 5)
    assert reading_check(paths, seed=5, settings=(), waiting=True) == {
        "skipped": "no dataset of seed 5 held back for want of a reading check"}


@pytest.mark.slow      # readers trained per dataset, twice (~47 s)
def test_recorded_per_dataset_with_its_content_hash_and_checked_again_in_place(world):
    """`record`: one reading_checks row per dataset with the figures of the table, the content hash it
    measured and the datasets it was pooled with; checking again replaces the rows (the same figures, no
    second row). Named datasets (`--dataset`) give the figures of the same pool."""
    paths, _, setting = world
    ids = sorted(d for d, s in setting.items() if s in ("0-0-0-af", "0-1-1-af"))
    res = reading_check(paths, seed=0, datasets=tuple(reversed(ids)), record=True, workers=1)
    assert res["recorded"] == 2 and [r["dataset_id"] for r in res["settings"]] == ids
    assert res["settings"] == [{**r, "task": "visual_cloze"} for r in
                               reading_check(paths, seed=0, settings=("0-0-0-af", "0-1-1-af"), workers=1)["settings"]]
    again = reading_check(paths, seed=0, datasets=tuple(ids), record=True, workers=1)
    assert again["settings"] == res["settings"]
    con = duckdb.connect(str(paths.warehouse), read_only=True)
    try:
        rows = con.execute("SELECT c.dataset_id, c.content_sha256 = d.content_sha256, c.task, c.n_test, c.reader_acc, "
                           "c.question_only_acc, c.reader_other_recipe_acc, c.pooled_with, c.reader::VARCHAR "
                           "FROM reading_checks c JOIN datasets d USING (dataset_id) ORDER BY 1").fetchall()
    finally:
        con.close()
    assert [r[0] for r in rows] == ids
    for row, r in zip(rows, res["settings"]):
        assert row[1:8] == (True, "visual_cloze", r["n_test"], r["reader"], r["question_only"],
                            r["reader_other_recipe"], ids)
        assert '"layers": 4' in row[8]


def test_named_datasets_are_checked_or_refused_with_the_reason(world):
    """An unknown id is refused naming it; the pipeline's train stage checks only what `mrqa export
    --reading-only` holds back for want of a check (here nothing: no bias report yet, so every dataset is held
    back for want of bias figures), records nothing, and counts what the export would export after it."""
    from flows.pipeline import _train
    paths, _, setting = world
    with pytest.raises(ValueError, match="no dataset vc-nope in the warehouse"):
        reading_check(paths, datasets=("vc-nope",))
    con = duckdb.connect(str(paths.warehouse))
    try:
        con.execute("DELETE FROM reading_checks")
    finally:
        con.close()
    out = _train(paths, [], True, {"seed": 0, "train_epochs": 1})
    assert out["gm3c_check"] == {}        # no report yet: no AF dataset waits for an independent GM3C check
    assert out["reading"] == {"skipped": "no dataset of seed 0 held back for want of a reading check"}
    n = len(setting)
    assert out["reading_only"] == {"datasets": [], "left_out": n, "reasons": {"no bias figures": n}}
    con = duckdb.connect(str(paths.warehouse), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM reading_checks").fetchall()[0][0] == 0
    finally:
        con.close()


def test_each_fold_holds_one_split_out_and_keeps_the_recipes_apart(world, tmp_path):
    """`--folds split`'s exports (training/split_folds.py): the test split's fold is the export itself; the
    val split's scores val and trains on train; the train split's scores train and trains on the val and test
    splits' recipes, a quarter of them (the same for every dataset) validating. Every question keeps its
    place in exactly one split of each fold, and a recipe's steps have its questions' split."""
    from etl.warehouse import connect
    from features.datasets.export import export_parquet
    from training.split_folds import fold_exports
    paths, _, setting = world
    con = connect(paths)
    try:
        export_parquet(con, sorted(setting), tmp_path / "export", with_vectors=True, lance_uri=paths.lance)
    finally:
        con.close()
    folds = dict(fold_exports(tmp_path / "export", tmp_path / "folds"))
    assert list(folds) == ["test", "val", "train"] and folds["test"] == tmp_path / "export"
    read = lambda d: {(r[0], r[1]): r[2] for r in duckdb.sql(
        f"SELECT dataset_id, qid, split FROM read_parquet('{d}/questions/**/*.parquet', hive_partitioning = false)"
    ).fetchall()}
    steps = lambda d: dict(duckdb.sql(f"SELECT DISTINCT recipe_id, split FROM '{d}/steps.parquet'").fetchall())
    orig, recipe = read(folds["test"]), dict(duckdb.sql(
        f"SELECT qid, recipe_id FROM read_parquet('{tmp_path}/export/questions/**/*.parquet', "
        "hive_partitioning = false)").fetchall())
    val, train = read(folds["val"]), read(folds["train"])
    assert set(val) == set(train) == set(orig)
    assert {k for k, s in val.items() if s == "test"} == {k for k, s in orig.items() if s == "val"}
    assert {k for k, s in val.items() if s == "val"} == {k for k, s in orig.items() if s == "test"}
    assert {k for k, s in val.items() if s == "train"} == {k for k, s in orig.items() if s == "train"}
    assert {k for k, s in train.items() if s == "test"} == {k for k, s in orig.items() if s == "train"}
    kept = {k for k, s in train.items() if s == "val"}
    assert kept and kept < {k for k, s in orig.items() if s in ("val", "test")}
    share = len(kept) / sum(s in ("val", "test") for s in orig.values())
    assert 0.1 < share < 0.4                         # a quarter of the recipes, by the md5 of their ids
    for fold in (val, train):                        # one split per recipe, in every dataset, and in the steps
        by_recipe: dict[str, set] = {}
        for (_, qid), s in fold.items():
            by_recipe.setdefault(recipe[qid], set()).add(s)
        assert all(len(s) == 1 for s in by_recipe.values())
    for h, fold in (("val", val), ("train", train)):
        st = steps(folds[h])
        assert all(st[recipe[qid]] == s for (_, qid), s in fold.items())
    assert (folds["train"] / "text_vectors.parquet").resolve() == (tmp_path / "export" / "text_vectors.parquet")


def test_an_unknown_fold_rule_is_refused(world):
    paths, _, _ = world
    with pytest.raises(ValueError, match="folds must be one of test, split"):
        reading_check(paths, folds="recipe")


@pytest.mark.slow      # readers trained three times (~100 s)
def test_every_split_held_out_in_turn_scores_every_question(world):
    """`folds="split"`: each dataset's figures are over all its questions, each fold's are kept, the test
    split's fold is the plain check's figure, and the whole is the folds' correct answers summed; recorded
    with its rule, and the gate's message names it."""
    from features.datasets.card import _reading_failed, reading_checks
    paths, tests, setting = world
    ids = sorted(d for d, s in setting.items() if s in ("0-0-0-af", "0-1-1-af"))
    plain = {r["dataset_id"]: r for r in reading_check(paths, seed=0, datasets=tuple(ids), workers=2)["settings"]}
    res = reading_check(paths, seed=0, datasets=tuple(ids), workers=2, folds="split", record=True)
    con = duckdb.connect(str(paths.warehouse), read_only=True)
    try:
        n_split = {(d, s): n for d, s, n in con.execute("SELECT dataset_id, split, count(*) FROM questions "
                                                        "GROUP BY ALL").fetchall()}
        checked = reading_checks(con, ids)
    finally:
        con.close()
    assert res["folds"] == "split" and [r["dataset_id"] for r in res["settings"]] == ids
    for r in res["settings"]:
        d = r["dataset_id"]
        assert list(r["folds"]) == ["test", "val", "train"]
        assert {h: f["n_test"] for h, f in r["folds"].items()} == {h: n_split[(d, h)] for h in r["folds"]}
        assert r["n_test"] == sum(n_split[(d, h)] for h in r["folds"]) > 3 * tests[d]
        assert r["folds"]["test"] == {k: plain[d][k] for k in ("n_test", "reader", "question_only",
                                                               "reader_other_recipe")}
        for k in ("reader", "question_only", "reader_other_recipe"):
            assert r[k] == round(sum(round(f[k] * f["n_test"]) for f in r["folds"].values()) / r["n_test"], 4)
        assert r["reader_ci"] == ci95(r["reader"], r["n_test"])
        assert r["lead_ci"] == difference_ci(r["reader"], r["question_only"], r["n_test"])
        assert r["reader"] > r["question_only"] and r["reader"] > r["reader_other_recipe"]
        assert checked[d] == {"n_test": r["n_test"], "reader": r["reader"], "question_only": r["question_only"],
                              "reader_other_recipe": r["reader_other_recipe"], "folds": "split"}
    text = "\n".join(_reading_lines(res))
    assert "every split held out in turn" in text and "all q" in text and "test q" not in text
    worst = {**checked[ids[0]], "reader_other_recipe": checked[ids[0]]["reader"]}
    assert "questions, every split held out in turn" in _reading_failed(worst)
