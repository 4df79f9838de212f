"""Adversarial filtering of visual ordering (features/datasets/adversarial.py, `refine_ordering`) on a
synthetic world whose photos show their recipe's order (`build_world(stage_cue=...)`: a step's photos move
along one direction with its place in the recipe, as a dish goes from raw to cooked), so a question-only
model reads the right order from the photos alone. Checked from the exported Parquet."""
from __future__ import annotations

import json
from dataclasses import replace

import duckdb
import numpy as np
import pytest
from synthetic_home import synthetic_home

from features.datasets.export import export_parquet
from features.datasets.generate import generate_datasets, settings_for
from features.datasets.knobs import AF_DEFAULT_ROUNDS, KnobParams, dataset_id

ENC = "synthetic-enc-0001"
TASK = "visual_ordering"
PLAIN = [(TASK, KnobParams.preset_for(TASK, k1, k2, 0)) for k1, k2 in ((0, 0), (1, 1))]
AF = [(t, replace(p, af_rounds=AF_DEFAULT_ROUNDS)) for t, p in PLAIN]


def _rows(out) -> list[dict]:
    q = duckdb.sql(f"SELECT * FROM read_parquet('{out}/questions/**/*.parquet', hive_partitioning=true)")
    rows = [dict(zip(q.columns, r)) for r in q.fetchall()]
    for r in rows:
        r["prov"] = json.loads(r["provenance"])
        r["orders"] = [json.loads(c) for c in r["choice_list"]]
    return rows


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with synthetic_home(tmp_path_factory, "ord_af_home", n_recipes=90, seed=3, dim=24, k=100,
                        stage_cue=2.0) as (home, paths, con):
        summaries = generate_datasets(con, PLAIN + AF, seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False)
        ids = [s["dataset_id"] for s in summaries]
        out = paths.exports / "ord"
        export_parquet(con, ids, out, with_vectors=True, lance_uri=paths.lance)
        vec = {}
        for i, v in duckdb.sql(f"SELECT image_id, vector FROM '{out}/image_vectors.parquet'").fetchall():
            v = np.asarray(v, dtype=np.float64)
            vec[i] = v / np.linalg.norm(v)
        yield {"con": con, "paths": paths, "summaries": {s["dataset_id"]: s for s in summaries}, "ids": ids,
               "rows": _rows(out), "vec": vec, "out": out}


def _of(world, did):
    return [r for r in world["rows"] if r["dataset_id"] == did]


def _probe(rows, vec) -> float:
    """The judge: the learned question-only probe (per-order features with the set-level cues, 5 folds
    by recipe) on exported questions and vectors."""
    from features.diagnostics.question_only import cross_fitted_scores, task_features
    ids = sorted({i for r in rows for o in r["orders"] for i in o})
    at = {i: k for k, i in enumerate(ids)}
    mat = np.array([vec[i] for i in ids])
    X = task_features(TASK, [[] for _ in rows], [[[at[i] for i in o] for o in r["orders"]] for r in rows], mat)
    y = np.array([r["answer"] for r in rows])
    return float((np.argmax(cross_fitted_scores(X, y, [r["recipe_id"] for r in rows], 5, 0), axis=1) == y).mean())


def test_ids_partitions_and_params(world):
    con = world["con"]
    for (task, p), did in zip(PLAIN + AF, world["ids"]):
        assert did == dataset_id(task, p, 0, ENC)
        params = json.loads(con.execute("SELECT params FROM datasets WHERE dataset_id = ?", [did]).fetchall()[0][0])
        if p.af_rounds:
            assert "-af-" in did and params["adversarial"]["pools"] == ["knob"]
            assert params["adversarial"]["order_pool"] == 23 and params["af_rounds"] == AF_DEFAULT_ROUNDS
        else:
            assert "-af-" not in did and "adversarial" not in params
    parts = {p.relative_to(world["out"]).parts[1:3] for p in (world["out"] / "questions").rglob("*.parquet")}
    assert {("task=visual_ordering", "knobs=0-0-0-af"), ("task=visual_ordering", "knobs=1-1-0-af"),
            ("task=visual_ordering", "knobs=0-0-0")} <= parts


def test_every_question_keeps_the_task_and_knob_one(world):
    """Every AF question: the 4 choices are distinct orders of the question's own 4 photos, exactly one of
    them the recipe's order, and it is the answer; its wrong orders are among its recorded candidates
    (every wrong order: the knob's draw has them all); and it is a question of the plain setting, with the
    same photos and steps (knob 1 untouched)."""
    for pid, aid in zip(world["ids"][:2], world["ids"][2:]):
        plain = {r["qid"]: r for r in _of(world, pid)}
        rows = _of(world, aid)
        assert 0 < len(rows) <= len(plain)
        for r in rows:
            items = r["prov"]["question_items"]
            steps = [int(i.removesuffix(".jpg").rsplit("_", 2)[1]) for i in items]
            assert steps == sorted(steps) == r["question_step_ids"]
            assert len({tuple(o) for o in r["orders"]}) == 4
            assert all(sorted(o) == sorted(items) for o in r["orders"])
            assert [j for j, o in enumerate(r["orders"]) if o == items] == [r["answer"]]
            perms = r["prov"]["choice_perms"]
            assert [[items[k] for k in pm] for pm in perms] == r["orders"]
            cands = r["prov"]["af_candidates"]
            assert sorted(cands) == list(range(1, 24))
            assert r["prov"]["af_pools"][r["answer"]] == "answer" and r["prov"]["af_pools"].count("knob") == 3
            q0 = plain[r["qid"]]
            assert q0["prov"]["question_items"] == items and q0["question_step_ids"] == r["question_step_ids"]
            assert q0["split"] == r["split"] and q0["prov"]["answer_step"] == r["prov"]["answer_step"]


def test_probe_reads_the_order_before_af_and_is_near_chance_after(world):
    """The photos show the order, so the judge reads the plain settings well above chance; after AF it
    reads the kept questions near chance (these hold 100-190 questions: +-10 points)."""
    for pid, aid in zip(world["ids"][:2], world["ids"][2:]):
        before, after = _probe(_of(world, pid), world["vec"]), _probe(_of(world, aid), world["vec"])
        assert before > 0.6, (pid, before)
        assert 0.12 <= after <= 0.38, (aid, after)
        adv = world["summaries"][aid]["adversarial"]
        assert adv["probe_before"] > 0.6 and adv["probe_after"] <= 0.38


def test_drop_rule_and_kept_share(world):
    """The final held-out ensemble picks the answer of at most a quarter of the kept questions per split
    (and finds it least plausible for at most a quarter); what it drops is counted as af_predictable."""
    for pid, aid in zip(world["ids"][:2], world["ids"][2:]):
        s = world["summaries"][aid]
        n_plain = world["summaries"][pid]["n_questions"]
        assert s["skips"].get("af_predictable", 0) == n_plain - s["n_questions"]
        assert s["adversarial"]["n_knob_questions"] == n_plain and s["adversarial"]["n_kept"] == s["n_questions"]
        ranks: dict = {}
        for r in _of(world, aid):
            sc = r["prov"]["af_scores"]
            rank = sum(x > sc[r["answer"]] for j, x in enumerate(sc) if j != r["answer"])
            ranks.setdefault(r["split"], []).append(rank)
        for split, rk in ranks.items():
            c = np.bincount(rk, minlength=4)
            assert c[0] <= len(rk) / 4 + 1 and c[3] <= len(rk) / 4 + 1, (aid, split, c)


def test_deterministic_and_seeded(world, tmp_path):
    con, paths = world["con"], world["paths"]
    again = generate_datasets(con, AF[:1], seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False, workers=1)
    assert again[0]["content_sha256"] == world["summaries"][world["ids"][2]]["content_sha256"]
    other = generate_datasets(con, AF[:1], seed=1, encoder_id=ENC, lance_uri=paths.lance, progress=False)
    assert other[0]["content_sha256"] != again[0]["content_sha256"]


def test_settings_and_refusals():
    (task, p), = settings_for(TASK, "0-1-0-af")
    assert task == TASK and p.af_rounds == AF_DEFAULT_ROUNDS and p.knobs_label == "0-1-0-af"
    with pytest.raises(ValueError, match="knob 3 is not defined"):
        settings_for(TASK, "0-1-1-af")
    with pytest.raises(ValueError, match="adversarial filtering is defined"):
        settings_for(TASK, preset="recipeqa", adversarial=True)


def test_step_text_oracle_reads_the_order_from_the_titles(world):
    """`mrqa af-report`'s oracle for ordering: the order whose photos, position by position, are most like
    the shown steps' titles in recipe order. With each photo its own step's title it is always right; on
    the AF datasets it is reported before and after."""
    from features.datasets.af_report import af_report, oracle_accuracy
    rng = np.random.default_rng(0)
    title = {f"r_{s}_title": v for s, v in enumerate(rng.normal(size=(6, 8)))}
    img = {f"r_{s}_0.jpg": title[f"r_{s}_title"] for s in range(6)}
    rows = []
    for _ in range(20):
        steps = sorted(rng.choice(6, size=4, replace=False).tolist())
        right = [f"r_{s}_0.jpg" for s in steps]
        orders = [right] + [list(rng.permutation(right)) for _ in range(3)]
        orders = [o for i, o in enumerate(orders) if i == 0 or o != right]
        ans = int(rng.integers(len(orders)))
        orders.insert(ans, orders.pop(0))
        rows.append(("visual_ordering", "r", [json.dumps(o) for o in orders], ans, steps, steps[0]))
    assert oracle_accuracy(rows, img, title) == 1.0
    rep = {r["dataset_id"]: r for r in af_report(world["con"], str(world["paths"].lance))}
    for aid in world["ids"][2:]:
        assert 0.0 <= rep[aid]["oracle_before"] <= 1.0 and 0.0 <= rep[aid]["oracle_after"] <= 1.0
        assert rep[aid]["knob_questions"] == world["summaries"][aid]["adversarial"]["n_knob_questions"]
