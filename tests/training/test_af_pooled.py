"""The pooled adversary (training/af_pooled.py, features/datasets/af_pooled.py, `mrqa af-pool`) on
the synthetic world: every dropped question was solved out of fold with at least tau, by a model
that never trained on its recipe; counts, content hash, skips and params are rewritten; the floor of
kept questions holds; a second run is refused; the adversary is deterministic."""
from __future__ import annotations

import json
from dataclasses import replace

import duckdb
import pytest
from synthetic_home import synthetic_home

from features.datasets.generate import generate_datasets
from features.datasets.knobs import AF_DEFAULT_ROUNDS, KnobParams
from training.af_pooled import drop_plan

ENC = "synthetic-enc-0001"
SETTINGS = [("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 1)),
            ("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 0, 0))]


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    with synthetic_home(tmp_path_factory, "af_pool_home", n_recipes=90, seed=3, dim=24, k=100) as (h, paths, con):
        con.execute("UPDATE recipes SET author = 'author-' || CAST(CAST(split_part(recipe_id, '-', 3) AS INTEGER) "
                    "% 12 AS VARCHAR)")
        generate_datasets(con, SETTINGS + [(t, replace(p, af_rounds=AF_DEFAULT_ROUNDS)) for t, p in SETTINGS],
                          seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False)
        before = {d: n for d, n in con.execute("SELECT dataset_id, n_questions FROM datasets WHERE adversarial")
                  .fetchall()}
        qids = {(d, q): r for d, q, r in con.execute("SELECT dataset_id, qid, recipe_id FROM questions").fetchall()}
        con.execute("INSERT INTO bias_metrics (dataset_id, task, knobs, n_questions, n_scored, chance, probe_model, "
                    "probe_folds, computed_at) SELECT dataset_id, task, setting, n_questions, n_questions, 0.25, "
                    "'logreg', 5, now() FROM datasets WHERE adversarial")
        con.close()
        from flows.af_pool import af_pool_flow
        res = af_pool_flow.fn(task="visual_cloze", tau=0.3, folds=2, seed=0, size="tiny")
        con2 = duckdb.connect(str(paths.warehouse))
        yield {"res": res, "before": before, "qids": qids, "con": con2, "paths": paths}
        con2.close()


def test_dropped_questions_are_gone_and_everything_is_rewritten(home):
    con = home["con"]
    assert {r["dataset_id"] for r in home["res"]["datasets"]} == set(home["before"])
    for r in home["res"]["datasets"]:
        did = r["dataset_id"]
        n = con.execute("SELECT count(*) FROM questions WHERE dataset_id = ?", [did]).fetchall()[0][0]
        assert n == r["kept"] == home["before"][did] - r["dropped"]
        nq, params = con.execute("SELECT n_questions, params FROM datasets WHERE dataset_id = ?", [did]).fetchall()[0]
        params = json.loads(params)
        assert nq == n and params["af_pooled"]["dropped"] == r["dropped"] and params["af_pooled"]["tau"] == 0.3
        assert con.execute("SELECT n_skipped FROM generation_skips WHERE dataset_id = ? AND reason = "
                           "'af_pooled_predictable'", [did]).fetchall() == [(r["dropped"],)]
        assert not con.execute("SELECT 1 FROM bias_metrics WHERE dataset_id = ?", [did]).fetchall()
    assert sum(r["dropped"] for r in home["res"]["datasets"]) > 0
    plain = con.execute("SELECT count(*) FROM questions q JOIN datasets d USING (dataset_id) "
                        "WHERE NOT d.adversarial").fetchall()[0][0]
    assert plain > 0                                   # plain settings are never touched


def test_a_second_run_is_refused(home):
    from flows.af_pool import af_pool_flow
    with pytest.raises(ValueError, match="already filtered"):
        af_pool_flow.fn(task="visual_cloze", tau=0.3, folds=2, seed=0, size="tiny")


def test_the_adversary_scores_out_of_fold_and_deterministically(home, tmp_path):
    from features.datasets.export import export_parquet
    from training.af_pooled import out_of_fold
    con, paths = home["con"], home["paths"]
    ids = sorted(home["before"])
    recipe_of = {(d, q): r for d, q, r in con.execute(
        "SELECT dataset_id, qid, recipe_id FROM questions WHERE list_contains(?, dataset_id)", [ids]).fetchall()}
    export_parquet(con, ids, tmp_path / "x", with_vectors=True, lance_uri=paths.lance)
    a = out_of_fold(tmp_path / "x", ids, recipe_of, folds=2, seed=0, size="tiny", lance_uri=paths.lance)
    b = out_of_fold(tmp_path / "x", ids, recipe_of, folds=2, seed=0, size="tiny", lance_uri=paths.lance)
    assert a == b
    assert {d: set(q) for d, q in a.items()} == {d: {q for (dd, q) in recipe_of if dd == d} for d in ids}
    assert all(0.0 <= p <= 1.0 for qs in a.values() for p, _ in qs.values())


def test_drop_plan_takes_the_confident_solved_ones_and_keeps_the_floor():
    oof = {"d": {"a": (0.9, True), "b": (0.6, True), "c": (0.7, False), "e": (0.2, True), "f": (0.55, True)}}
    assert drop_plan(oof, {"d": 10}, tau=0.5) == {"d": ["a", "b", "f"]}
    assert drop_plan(oof, {"d": 10}, tau=0.5, min_kept=0.4) == {"d": ["a"]}    # keep >= 4 of 5
    assert drop_plan(oof, {"d": 10}, tau=0.5, min_kept=0.5) == {"d": []}
    with pytest.raises(ValueError, match="tau"):
        drop_plan(oof, {}, tau=0.0)
    with pytest.raises(ValueError, match="min-kept"):
        drop_plan(oof, {}, min_kept=1.0)


def test_cli_refuses_in_one_line(paths):
    from typer.testing import CliRunner

    from flows.cli import app
    r = CliRunner().invoke(app, ["--no-prefect", "af-pool", "--task", "visual_cloze"])
    assert r.exit_code == 2 and "no AF datasets of visual_cloze" in r.output
    r = CliRunner().invoke(app, ["--no-prefect", "af-pool", "--tau", "0"])
    assert r.exit_code == 2 and "--tau must be in (0, 1]" in r.output
