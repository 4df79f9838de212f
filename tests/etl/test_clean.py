"""The clean stage on a small generated sample kitchen (loaded from its ground truth's raw text):
planted rejects found with their reason, noise removed, repairs scored, idempotent, re-runnable."""
from __future__ import annotations

import json

import pytest

from etl.clean import CleanConfig, clean_corpus
from etl.load import load_recipe
from etl.records import RecipeRecord, StepRecord
from etl.warehouse import run_sql_tests, table_fingerprint

N_RECIPES, SEED = 40, 5


@pytest.fixture(scope="module")
def kitchen(tmp_path_factory):
    from etl.sample.generate import build_sample
    out = tmp_path_factory.mktemp("kitchen")
    build_sample(out, N_RECIPES, SEED, workers=1)
    return out / "ground_truth.jsonl"


def _load(con, gt_path):
    recs = [json.loads(line) for line in gt_path.read_text().splitlines()]
    for r in recs:
        if (r["expected"] or {}).get("stage") == "ingest":
            continue
        steps = [StepRecord(s["step_idx"], s["title_raw"], s["body_raw"],
                            [im["url_path"] for im in s["images"]], s.get("n_videos", 0)) for s in r["steps"]]
        load_recipe(con, RecipeRecord(r["recipe_id"], r["url_path"], r["title"], category=r["category"],
                                      channel=r["channel"], steps=steps), source="sample")
    return recs


def test_clean_sample_kitchen(con, paths, kitchen):
    recs = _load(con, kitchen)
    res = clean_corpus(con, paths, CleanConfig(workers=1))
    # every planted clean-stage defect is rejected with its reason, nothing else is
    want = {r["recipe_id"]: r["expected"]["reason"] for r in recs
            if (r["expected"] or {}).get("stage") == "clean"}
    got = dict(con.execute("SELECT key, reason FROM rejects WHERE stage = 'clean'").fetchall())
    assert got == want
    assert dict(con.execute("SELECT recipe_id, status_reason FROM recipes WHERE status = 'rejected'"
                            ).fetchall()) == want
    # raw text kept, cleaned text differs where noise was planted
    n_diff = con.execute("SELECT count(*) FROM steps WHERE body <> body_raw").fetchone()[0]
    assert n_diff > 0
    assert con.execute("SELECT count(*) FROM steps WHERE body_raw IS NULL").fetchone()[0] == 0
    # tokens only for kept recipes; vocab stats stored; Punkt model persisted
    bad = con.execute("SELECT count(*) FROM step_tokens t JOIN recipes r USING (recipe_id) "
                      "WHERE r.status <> 'ok'").fetchone()[0]
    assert bad == 0 and res.summary["sentences"] > 0
    assert (paths.models / "punkt.json").exists()
    va = res.summary["vocab_after"]
    assert va["types_in_dict_share"] > res.summary["vocab_before"]["types_in_dict_share"]
    assert {p for (p,) in con.execute("SELECT phase FROM vocab_stats WHERE scope = 'clean'").fetchall()} \
        == {"before_repair", "after_repair"}
    # no cleaned body still holds planted junk
    for r in recs:
        for s in r["steps"]:
            row = con.execute("SELECT title, body FROM steps WHERE recipe_id = ? AND step_idx = ?",
                              [r["recipe_id"], s["step_idx"]]).fetchone()
            if row is None:
                continue
            for n in s["noise"]:
                if n["kind"] in ("html", "office", "css", "url"):
                    assert n["raw"].strip() not in row[1]
                if n["kind"] == "step_number":
                    assert row[0] == " ".join(s["title_clean"].split())
            assert not any(ord(c) < 32 and c != "\n" for c in row[1])
    assert all(v == 0 for v in run_sql_tests(con).values())


def test_clean_twice_changes_nothing(con, paths, kitchen):
    _load(con, kitchen)
    clean_corpus(con, paths, CleanConfig(workers=1))
    tables = {"steps": [], "step_tokens": [], "recipes": ["fetched_at"], "rejects": ["at"]}
    first = {t: table_fingerprint(con, t, exclude=ex) for t, ex in tables.items()}
    clean_corpus(con, paths, CleanConfig(workers=2))
    assert {t: table_fingerprint(con, t, exclude=ex) for t, ex in tables.items()} == first


def test_repairs_against_ground_truth(kitchen):
    from etl.vocab import evaluate_on_ground_truth
    r = evaluate_on_ground_truth(kitchen)
    for kind in ("fused_word", "number_unit"):
        assert r[kind]["planted"] > 0
        assert r[kind]["precision"] >= 0.95 and r[kind]["recall"] >= 0.95, r
    assert set(r["noise_removed"]) >= {"html", "unicode"}
    assert all(v == 1.0 for v in r["noise_removed"].values()), r["noise_removed"]
    assert r["rare_words"]["split"] == 0


def test_recipeqa_import_then_clean(con, paths, shared_fixtures):
    from etl.recipeqa import import_recipeqa
    from etl.vocab import vocab_report
    import_recipeqa(con, [shared_fixtures / "recipeqa" / "val_sample.json"])
    s = clean_corpus(con, paths, CleanConfig(workers=1)).summary
    assert s["recipes"] == 3 and s["kept"] == 3, s
    rep = vocab_report(con, paths)
    assert rep["after_repair"]["types_in_dict_share"] >= 0.95
    # over-splitting on the hand-labelled real OOV tokens: seen in this text, none split
    assert rep["repairs"]["labelled_keep_seen"] > 0 and rep["repairs"]["labelled_keep_split"] == 0
