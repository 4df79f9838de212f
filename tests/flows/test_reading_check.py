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
from training.sweep import ci95

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
        # the step bodies tell the answer photo, the photos alone do not: the reader reads, and reads less
        # from another recipe's steps
        assert r["reader"] > r["question_only"] and r["reader"] > r["reader_other_recipe"]
    assert (paths.exports / READING_EXPORT / "questions").is_dir()
    again = reading_check(paths, seed=0, settings=("0-0-0-af", "0-1-1-af"), workers=1)
    assert again["settings"] == rows            # deterministic, and the same in 2 processes as in turn
    con = duckdb.connect(str(paths.warehouse), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0     # it records no runs
    finally:
        con.close()
    text = "\n".join(_reading_lines(res))
    assert "does a model have to read the recipe?" in text and "0-1-1-af" in text and "0-0-0-af" in text
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
