"""The pooled adversary's swap rounds on visual ordering (`mrqa af-pool --task visual_ordering`), on a
synthetic world whose photos show their recipe's order (`build_world(stage_cue=...)`).

An ordering question's alternates are the wrong orders AF considered that it does not show
(features/datasets/af_pooled.order_alternates): each is scored as a choice's query, and a question
the adversary solves too easily gets wrong orders it finds plausible. Checked: every swap puts in a
candidate order and takes out a shown one; afterwards every question still has 4 distinct orders of its
own photos with exactly one the recipe's, the answer; the recorded permutations, summed distances and
distance probe follow the choices; the adversary scores an alternate as it scores the same order shown
as a choice; the whole step is deterministic."""
from __future__ import annotations

import json
from dataclasses import replace

import duckdb
import numpy as np
import pytest
from synthetic_home import synthetic_home

from features.datasets.af_pooled import order_alternates, summed_distance
from features.datasets.generate import PERMS, generate_datasets
from features.datasets.knobs import AF_DEFAULT_ROUNDS, KnobParams

ENC = "synthetic-enc-0001"
TASK = "visual_ordering"
PLAIN = [(TASK, KnobParams.preset_for(TASK, k1, k2, 0)) for k1, k2 in ((0, 0), (1, 1))]
AF = [(t, replace(p, af_rounds=AF_DEFAULT_ROUNDS)) for t, p in PLAIN]


def _rows(con) -> dict:
    q = con.execute("SELECT q.*, d.params FROM questions q JOIN datasets d USING (dataset_id) "
                    "WHERE d.adversarial AND d.task = ? ORDER BY q.dataset_id, q.qid", [TASK])
    cols = [c[0] for c in q.description]
    out = {}
    for r in q.fetchall():
        r = dict(zip(cols, r))
        r["prov"] = json.loads(r["provenance"])
        r["orders"] = [json.loads(c) for c in r["choice_list"]]
        out[(r["dataset_id"], r["qid"])] = r
    return out


def _build(tmp_path_factory, name: str):
    from flows.af_pool import af_pool_flow
    cm = synthetic_home(tmp_path_factory, name, n_recipes=90, seed=3, dim=24, k=100, stage_cue=2.0)
    home, paths, con = cm.__enter__()
    generate_datasets(con, PLAIN + AF, seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False,
                      af_pooled_drop=(TASK,))
    before = _rows(con)
    con.close()
    # AF already takes the world's question-only model near chance: aim lower, so the rounds swap
    res = af_pool_flow.fn(task=TASK, tau=0.3, folds=2, seed=0, size="tiny", rounds=2, solved_share=0.05,
                          min_kept=0.4)
    con2 = duckdb.connect(str(paths.warehouse))
    return cm, res, before, paths, con2


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from features.vectors.store import FeatureStore
    cm, res, before, paths, con = _build(tmp_path_factory, "af_pool_ord_home")
    ids, mat = FeatureStore(paths.lance).image_vectors(ENC)
    state = {"res": res, "before": before, "after": _rows(con), "con": con, "paths": paths,
             "vec": dict(zip(ids, np.asarray(mat, dtype=np.float32)))}
    try:
        yield state
    finally:
        con.close()
        cm.__exit__(None, None, None)


def test_af_drop_left_to_the_pool(world):
    """With the pooled drop, AF keeps every knob question; af-pool's floor then holds."""
    con = world["con"]
    n = dict(con.execute("SELECT setting, n_questions FROM datasets WHERE task = ?", [TASK]).fetchall())
    for s in ("0-0-0", "1-1-0"):
        kept_before = sum(1 for (d, _), r in world["before"].items() if r["params"] and f"-{s}-af-" in d)
        assert kept_before == n[s]                       # no AF drop of its own
        assert n[f"{s}-af"] >= np.floor(0.4 * n[s]) and n[f"{s}-af"] < n[s]


def test_swaps_put_in_candidate_orders(world):
    """Each swap takes out a shown wrong order and puts in a candidate AF considered that was not shown,
    in a wrong order's column; the swapped column's AF score is cleared (that ensemble never saw it)."""
    n_swaps = 0
    for key, r in world["after"].items():
        b = world["before"][key]
        shown = {PERMS.index(tuple(c)) for c in b["prov"]["choice_perms"]}
        for s in r["prov"].get("af_pooled_swaps", []):
            n_swaps += 1
            assert s["choice"] != r["answer"] and s["round"] in (1, 2)
            assert s["in"] in r["prov"]["af_candidates"] and s["in"] != 0 and s["out"] != 0
            if s["round"] == 1:
                assert s["out"] in shown and s["in"] not in shown
            assert r["prov"]["af_scores"][s["choice"]] is None
            assert s["logit_in"] > s["logit_answer"] >= s["logit_out"]      # plausible in, easy out
    assert n_swaps > 0


def test_every_question_keeps_the_task_and_knob_one(world):
    """After the rounds: 4 distinct orders of the question's own photos, exactly one the recipe's order and
    the answer; wrong orders among the candidates; photos, steps and split as before (knob 1 untouched);
    the recorded permutations and summed distances are those of the choices now."""
    vec = world["vec"]
    for key, r in world["after"].items():
        b = world["before"][key]
        items = r["prov"]["question_items"]
        assert items == b["prov"]["question_items"] and r["question_step_ids"] == b["question_step_ids"]
        assert r["split"] == b["split"] and r["answer"] == b["answer"]
        assert len({tuple(o) for o in r["orders"]}) == 4 and all(sorted(o) == sorted(items) for o in r["orders"])
        assert [j for j, o in enumerate(r["orders"]) if o == items] == [r["answer"]]
        perms = r["prov"]["choice_perms"]
        assert [[items[k] for k in pm] for pm in perms] == r["orders"]
        assert {PERMS.index(tuple(pm)) for j, pm in enumerate(perms) if j != r["answer"]} <= set(
            r["prov"]["af_candidates"])
        for o, s in zip(r["orders"], r["prov"]["choice_summed_distance"]):
            assert abs(s - summed_distance(o, vec)) < 2e-6
        assert r["choice_list"][r["answer"]] == b["choice_list"][r["answer"]]


def test_counts_hash_and_distance_probe_rewritten(world):
    """Each dataset's question count, content hash and distance-probe accuracy (the smallest summed distance
    picks the answer) are those of its questions now; the swap rounds and the drop are recorded."""
    from etl.warehouse import load_query
    con = world["con"]
    for did, n, sha, params in con.execute("SELECT dataset_id, n_questions, content_sha256, params FROM datasets "
                                           "WHERE adversarial AND task = ?", [TASK]).fetchall():
        rows = [r for (d, _), r in world["after"].items() if d == did]
        params = json.loads(params)
        assert n == len(rows) and sha == con.execute(load_query("questions_content_hash"),
                                                     {"dataset_id": did}).fetchall()[0][0]
        hits = sum(int(np.argmin(r["prov"]["choice_summed_distance"])) == r["answer"] for r in rows)
        assert params["distance_probe_accuracy"] == round(hits / n, 4)
        step = params["af_pooled"]
        assert [x["round"] for x in step["swap_rounds"]] == [1, 2]
        assert all(0 <= x["answer_above_all"] <= x["oof_question_only_acc"] for x in step["swap_rounds"])
        assert sum(x["swapped"] for x in step["swap_rounds"]) >= sum(
            bool(r["prov"].get("af_pooled_swaps")) for r in rows)
        assert params["skips"]["af_pooled_predictable"] == step["dropped"]


def test_alternate_scored_as_the_same_order_shown(world, tmp_path):
    """The adversary scores an alternate as the model scores the same image sequence shown as a choice:
    with every question's own choices given as its alternates, their logits are the choices' logits."""
    from features.datasets.export import export_parquet
    from training.af_pooled import out_of_fold_scores
    con = world["con"]
    ids = [d for (d,) in con.execute("SELECT dataset_id FROM datasets WHERE adversarial AND task = ? ORDER BY 1",
                                     [TASK]).fetchall()]
    export_parquet(con, ids, tmp_path, with_vectors=True, lance_uri=world["paths"].lance)
    recipe_of = {(d, q): r["recipe_id"] for (d, q), r in world["after"].items()}
    alts = {k: r["orders"] for k, r in world["after"].items()}
    out = out_of_fold_scores(tmp_path, ids, recipe_of, folds=2, seed=5, size="tiny", max_epochs=2, patience=1,
                             lance_uri=world["paths"].lance, alternates=alts, alt_vectors=world["vec"])
    n = 0
    for d, qs in out.items():
        for q, s in qs.items():
            assert np.allclose(s["alts"], s["choices"], atol=1e-4), (d, q, s)
            n += 1
    assert n == len(world["after"])


def test_order_alternates_are_the_unshown_candidates(world):
    """`order_alternates`: the candidates not shown, in the knob's draw order, each written as the question's
    choices are."""
    for r in list(world["after"].values())[:50]:
        alts = order_alternates(r["prov"], r["choice_list"])
        shown = {PERMS.index(tuple(c)) for c in r["prov"]["choice_perms"]}
        assert [a["perm"] for a in alts] == [c for c in r["prov"]["af_candidates"] if c not in shown]
        for a in alts:
            assert json.loads(a["item"]) == a["seq"] == [r["prov"]["question_items"][i] for i in PERMS[a["perm"]]]
            assert a["item"] not in r["choice_list"]


def test_deterministic(world, tmp_path_factory):
    """Generating and pooling again from scratch gives the same datasets, byte for byte."""
    cm, _, _, _, con = _build(tmp_path_factory, "af_pool_ord_home_again")
    try:
        again = dict(con.execute("SELECT dataset_id, content_sha256 FROM datasets WHERE task = ?", [TASK]).fetchall())
        first = dict(world["con"].execute("SELECT dataset_id, content_sha256 FROM datasets WHERE task = ?",
                                          [TASK]).fetchall())
        assert again == first
    finally:
        con.close()
        cm.__exit__(None, None, None)


def test_af_report_shows_the_dataset_as_it_is_now(world):
    """`mrqa af-report` after af-pool: the pooled step's drop and its adversary's figure from the dataset's
    params, and the learned probe as `mrqa report` computes it on the kept questions ('-' before the report
    runs); the 'after' column stays AF's own selection."""
    from features.datasets.af_report import af_report, format_table
    from features.diagnostics.bias import compute_bias_metrics, write_bias_metrics
    con = world["con"]
    ids = [d for (d,) in con.execute("SELECT dataset_id FROM datasets WHERE adversarial AND task = ? ORDER BY 1",
                                     [TASK]).fetchall()]
    rows = {r["dataset_id"]: r for r in af_report(con, world["paths"].lance)}
    for did in ids:
        step = json.loads(con.execute("SELECT params FROM datasets WHERE dataset_id = ?", [did]).fetchall()[0][0])
        step = step["af_pooled"]
        r = rows[did]
        assert r["pooled_dropped"] == step["dropped"] > 0 and r["af_questions"] == step["scored"] - step["dropped"]
        assert r["pooled_adversary_kept"] == step["oof_question_only_acc_kept"] and r["probe_now"] is None
    assert "af-pool dropped" in format_table(list(rows.values()))
    metrics = compute_bias_metrics(con, ids[:1], world["paths"].lance, progress=False)
    write_bias_metrics(con, metrics)
    metrics = {m["dataset_id"]: m for m in metrics}
    r = {x["dataset_id"]: x for x in af_report(con, world["paths"].lance)}[ids[0]]
    assert r["probe_now"] == metrics[ids[0]]["qo_acc"] is not None
    con.execute("DELETE FROM bias_metrics WHERE dataset_id = ?", [ids[0]])      # leave the home as it was


def test_above_all_counts_the_questions_no_swap_can_move():
    """`above_all_share`: one alternate scored above the answer (one logit each), or one alternate foreign image
    with which another choice outscores it (coherence: 4 logits per alternate), makes a question movable."""
    from training.af_pooled import above_all_share as _above_all
    ans = np.array([1.0, 3.0, 0.5, 0.2])
    qs = {"fixed": {"choices": ans, "answer": 1, "alts": np.array([2.9, 1.0])},
          "movable": {"choices": ans, "answer": 1, "alts": np.array([0.1, 3.5])},
          "missed": {"choices": ans, "answer": 0, "alts": np.array([0.0])}}
    assert _above_all({"d": qs}) == {"d": round(1 / 3, 4)}
    coh = {"fixed": {"choices": ans, "answer": 1, "alts": np.array([[0.0, 2.0, 1.0, 1.5]])},
           "movable": {"choices": ans, "answer": 1, "alts": np.array([[0.0, 2.0, 2.5, 1.5], [0, 9, 0, 0]])},
           "no_alternates": {"choices": ans, "answer": 1, "alts": np.zeros((0, 4))}}
    assert _above_all({"c": coh}) == {"c": round(2 / 3, 4)}


def test_movable_and_swap_first(world):
    """`movable`: an alternate above the answer (one logit each) or, for coherence, one with which another
    choice outscores it. Ordering moves the movable questions first by default (recorded); a wrong
    --swap-first is refused with the choices."""
    from flows.af_pool import af_pool_flow
    from training.af_pooled import movable, swap_plan
    ch = np.array([1.0, 3.0, 0.5, 0.2])
    assert movable({"choices": ch, "answer": 1, "alts": np.array([0.1, 3.5])})
    assert not movable({"choices": ch, "answer": 1, "alts": np.array([2.9])})
    assert movable({"choices": ch, "answer": 1, "alts": np.array([[0.0, 2.0, 2.5, 1.5]])})
    assert not movable({"choices": ch, "answer": 1, "alts": np.array([[0.0, 2.0, 1.9, 1.5]])})
    assert not movable({"choices": ch, "answer": 1, "alts": np.zeros((0, 4))})
    for did, params in world["con"].execute("SELECT dataset_id, params FROM datasets WHERE adversarial AND task = ?",
                                            [TASK]).fetchall():
        assert json.loads(params)["af_pooled"]["swap_first"] == "movable", did
    with pytest.raises(ValueError, match="swap-first"):
        af_pool_flow.fn(task=TASK, swap_first="fastest")
    with pytest.raises(ValueError, match="swap-first"):
        swap_plan({}, {}, first="fastest")
