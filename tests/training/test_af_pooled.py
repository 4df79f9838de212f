"""The pooled adversary (training/af_pooled.py, features/datasets/af_pooled.py, `mrqa af-pool`) on
the synthetic world: every dropped question was solved out of fold with at least tau, by a model
that never trained on its recipe; counts, content hash, skips and params are rewritten; the floor of
kept questions holds; a second run is refused; the adversary is deterministic.

The swap rounds: every swapped-in distractor was one of the question's recorded knob-valid alternates,
and the knob invariant suite of test_generate.py (the ball and the knob-3 closer count, recomputed from
the exported vectors) runs on the swapped datasets; the answer's own step is never a distractor and
the step text still tells the answer; the swaps are recorded; the whole step is deterministic."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import shutil
from dataclasses import replace
from pathlib import Path

import duckdb
import numpy as np
import pytest
from synthetic_home import synthetic_home

from features.datasets.generate import generate_datasets
from features.datasets.knobs import AF_DEFAULT_ROUNDS, KnobParams
from training.af_pooled import drop_plan, swaps_for, target_ranks

ENC = "synthetic-enc-0001"
SETTINGS = [("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 1)),
            ("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 0, 0)),
            ("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 1, k3_mode="balanced")),
            ("visual_coherence", KnobParams.preset_for("visual_coherence", 0, 1, 1)),
            ("visual_coherence", KnobParams.preset_for("visual_coherence", 0, 1, 1, k3_mode="balanced"))]


def _load_invariants():
    spec = importlib.util.spec_from_file_location(
        "af_pool_knob_invariants", Path(__file__).parents[1] / "features" / "datasets" / "test_generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _build(tmp_path_factory, name: str):
    """A synthetic home with the AF settings generated and then swapped and filtered by the pooled
    adversary: (af-pool's result, the AF rows before, the rows after, paths, an open connection)."""
    from flows.af_pool import af_pool_flow
    cm = synthetic_home(tmp_path_factory, name, n_recipes=90, seed=3, dim=24, k=100)
    h, paths, con = cm.__enter__()
    con.execute("UPDATE recipes SET author = 'author-' || CAST(CAST(split_part(recipe_id, '-', 3) AS INTEGER) "
                "% 12 AS VARCHAR)")
    generate_datasets(con, SETTINGS + [(t, replace(p, af_rounds=AF_DEFAULT_ROUNDS)) for t, p in SETTINGS],
                      seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False)
    before = _rows(con, "WHERE d.adversarial")
    con.execute("INSERT INTO bias_metrics (dataset_id, task, knobs, n_questions, n_scored, chance, probe_model, "
                "probe_folds, computed_at) SELECT dataset_id, task, setting, n_questions, n_questions, 0.25, "
                "'logreg', 5, now() FROM datasets WHERE adversarial")
    con.close()
    # AF already takes the synthetic world's question-only model to chance: aim lower, so the rounds swap
    # cloze: the drop by a model trained anew after the rounds; coherence: by the last round's model
    res = {t: af_pool_flow.fn(task=t, tau=0.3, folds=2, seed=0, size="tiny", rounds=2, solved_share=0.05,
                              fresh_drop=t == "visual_cloze", min_kept=0.0)
           for t in ("visual_cloze", "visual_coherence")}
    con2 = duckdb.connect(str(paths.warehouse))
    return cm, res, before, paths, con2


def _rows(con, where: str) -> dict:
    q = con.execute(f"SELECT q.*, d.preset FROM questions q JOIN datasets d USING (dataset_id) {where}")
    cols = [c[0] for c in q.description]
    out = {}
    for r in q.fetchall():
        r = dict(zip(cols, r))
        r["prov"] = json.loads(r["provenance"])
        out[(r["dataset_id"], r["qid"])] = r
    return out


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    cm, res, before_rows, paths, con2 = _build(tmp_path_factory, "af_pool_home")
    before = {}
    for (d, _), r in before_rows.items():
        if r["task"] == "visual_cloze":
            before[d] = before.get(d, 0) + 1
    state = {"res": res["visual_cloze"], "res_all": res, "before": before, "before_rows": before_rows,
             "con": con2, "paths": paths}
    try:
        yield state
    finally:
        state["con"].close()            # a test may have reopened it
        cm.__exit__(None, None, None)


@pytest.fixture(scope="module")
def world(home):
    """The swapped AF datasets in the shape the knob invariant suite reads (rows with `prov`, unit vectors)."""
    from features.vectors.store import FeatureStore
    ids, mat = FeatureStore(home["paths"].lance).image_vectors(ENC)
    vec = {i: np.asarray(v, np.float64) / np.linalg.norm(v) for i, v in zip(ids, mat)}
    rows = list(_rows(home["con"], "WHERE d.adversarial").values())
    return {"con": home["con"], "rows": rows, "vec": vec, "paths": home["paths"],
            "cloze": [r for r in rows if r["task"] == "visual_cloze"],
            "coherence": [r for r in rows if r["task"] == "visual_coherence"]}


_inv = _load_invariants()


def test_swapped_datasets_keep_the_knob2_ball(world):
    assert any("af_pooled_swaps" in r["prov"] for r in world["cloze"])
    _inv.test_cloze_shape_and_knob2_ball_from_exported_vectors({**world, "rows": world["cloze"]})


def test_swapped_datasets_keep_the_knob3_closer_count(world):
    _inv.test_knob3_closer_distractors_on_flagged_questions({**world, "rows": world["cloze"]})


def test_swapped_coherence_keeps_knobs_2_and_3_and_stays_readable(home, world):
    """Coherence: the swapped-in foreign image was a recorded alternate; it is from another recipe of
    the split, its anchor and distance are right and inside the ball, knob 3 holds (recomputed from
    the vectors), the shown steps' texts still tell it apart, and its distance-probe flag is right."""
    from features.datasets.adversarial import READ_MARGIN
    from features.vectors.store import FeatureStore
    ids, mat = FeatureStore(home["paths"].lance).text_vectors(ENC, "body")
    body = {i: v / np.linalg.norm(v) for i, v in zip(ids, np.asarray(mat, np.float64))}
    vec, before, swapped = world["vec"], home["before_rows"], 0
    split = dict(home["con"].execute("SELECT recipe_id, split FROM recipes").fetchall())
    for r in world["coherence"]:
        p, b = r["prov"], before[(r["dataset_id"], r["qid"])]["prov"]
        assert r["question"] == r["choice_list"] and r["question"][r["answer"]] == p["foreign_item"]
        swaps = p.get("af_pooled_swaps", [])
        if not swaps:
            assert p["foreign_item"] == b["foreign_item"]
            continue
        swapped += 1
        was = {a["item"]: a for a in b["af_alternates"]} | {b["foreign_item"]: None}
        assert p["foreign_item"] in was and swaps[-1]["in"] == p["foreign_item"]
        assert p["foreign_recipe_id"] != r["recipe_id"] and split[p["foreign_recipe_id"]] == r["split"]
        coherent, f = p["question_items"], vec[p["foreign_item"]]
        assert p["anchor_item"] in coherent
        assert _inv._d(f, vec[p["anchor_item"]]) == pytest.approx(p["distance"], abs=1e-5)
        assert p["ball"][0] - 1e-5 < p["distance"] < p["ball"][1] + 1e-5
        _inv.assert_coherence_knob3(r, vec, coherent, f)
        for it in coherent:
            t = body[f"{r['recipe_id']}_{it.removesuffix('.jpg').rsplit('_', 2)[1]}_body"]
            assert f @ t <= vec[it] @ t - READ_MARGIN + 1e-6
        allv = [vec[x] for x in r["question"]]
        loo = [_inv._d(allv[j], np.sum([allv[i] for i in range(4) if i != j], axis=0)) for j in range(4)]
        assert p["distance_probe_hit"] == (int(np.argmax(loo)) == r["answer"])
        for s in swaps:       # the adversary ranked the answer higher (less plausible as foreign) than before
            assert (np.delete(s["logits_after"], r["answer"]) > s["logits_after"][r["answer"]]).sum() >= 1
    assert swapped > 5, swapped


def test_swaps_come_from_the_recorded_alternates_and_are_recorded(home, world):
    """Every swapped-in image was a recorded alternate of the question before af-pool, the swapped-out
    one is an alternate now, the pools and rounds are what they say; the swap rounds counted them."""
    before, n_swapped = home["before_rows"], {}
    for r in world["cloze"]:
        p, b = r["prov"], before[(r["dataset_id"], r["qid"])]["prov"]
        swaps = p.get("af_pooled_swaps", [])
        n_swapped[r["dataset_id"]] = n_swapped.get(r["dataset_id"], 0) + bool(swaps)
        pool_of = {a["item"]: a["pool"] for a in b["af_alternates"]}
        pool_of.update({b["choice_items"][c]: b["af_pools"][c] for c in range(4)})
        last = {s["choice"]: s["in"] for s in swaps}            # a later round may swap a column again
        assert r["answer"] not in last and len(set(p["choice_items"])) == 4
        for c in range(4):
            item = p["choice_items"][c]
            assert item == last.get(c, b["choice_items"][c]), r["qid"]
            assert item in pool_of and p["af_pools"][c] == pool_of[item]     # an alternate, or a choice before
            assert (p["af_scores"][c] is None) == (c in last)
        for s in swaps:
            assert s["round"] in (1, 2) and s["logit_in"] > s["logit_answer"] >= s["logit_out"]
        # nothing lost: the choices and the alternates hold the same images as before
        assert (set(p["choice_items"]) | {a["item"] for a in p["af_alternates"]}) == set(pool_of)
    assert sum(n_swapped.values()) > 10, n_swapped
    for did, n in n_swapped.items():
        params = json.loads(home["con"].execute("SELECT params FROM datasets WHERE dataset_id = ?",
                                                [did]).fetchall()[0][0])
        rounds = params["af_pooled"]["swap_rounds"]
        assert [x["round"] for x in rounds] == [1, 2]
        # a question swapped in both rounds counts in each; dropped questions are gone from the rows
        assert sum(x["swapped"] for x in rounds) >= n


def test_swapped_distractors_are_never_the_answer_step_and_stay_readable(home, world):
    from features.datasets.adversarial import READ_MARGIN
    from features.vectors.store import FeatureStore
    ids, mat = FeatureStore(home["paths"].lance).text_vectors(ENC, "body")
    body = {i: v / np.linalg.norm(v) for i, v in zip(ids, np.asarray(mat, np.float64))}
    vec, checked = world["vec"], 0
    for r in world["cloze"]:
        p = r["prov"]
        for s in p.get("af_pooled_swaps", []):
            rid, step, _ = s["in"].removesuffix(".jpg").rsplit("_", 2)
            assert not (rid == r["recipe_id"] and int(step) in (p["answer_step"], *r["question_step_ids"]))
            t = body[f"{r['recipe_id']}_{p['answer_step']}_body"]
            assert vec[p["answer_item"]] @ t - vec[s["in"]] @ t >= READ_MARGIN - 1e-6
            checked += 1
    assert checked > 10


@pytest.mark.slow      # two passes on a second home (~20 s)
def test_swaps_and_drops_are_deterministic(home, tmp_path_factory):
    cm, res, _, _, con = _build(tmp_path_factory, "af_pool_home_again")
    try:
        again = dict(con.execute("SELECT dataset_id, content_sha256 FROM datasets WHERE adversarial").fetchall())
        first = dict(home["con"].execute("SELECT dataset_id, content_sha256 FROM datasets WHERE adversarial")
                     .fetchall())
        assert again == first and res == home["res_all"]
    finally:
        con.close()
        cm.__exit__(None, None, None)


def test_target_ranks_even_out_the_ranks_most_confident_first():
    # 8 questions, 6 solved (rank 0): 4 move (to 2 rank 0 = 8/4), to the ranks short of 2, lower first
    ch = lambda r: np.array([1.0, 0.5 + r, 0.4, 0.3]) if r else np.array([1.0, 0.5, 0.4, 0.3])
    scores = {f"q{i}": {"choices": ch(0), "answer": 0} for i in range(6)}
    scores["q6"] = {"choices": np.array([0.0, 1.0, 2.0, 3.0]), "answer": 0}          # rank 3
    scores["q7"] = {"choices": np.array([0.0, 1.0, -1.0, -2.0]), "answer": 0}        # rank 1
    conf = {f"q{i}": i / 10 for i in range(8)}
    t = target_ranks(scores, conf.__getitem__)
    assert set(t) == {"q5", "q4", "q3", "q2"}                  # the most confident solved ones
    assert sorted(t.values()) == [1, 2, 2, 3]
    counts = np.bincount([0] * 2 + [3, 1] + list(t.values()), minlength=4)
    assert counts.tolist() == [2, 2, 2, 2]


def test_swaps_for_reaches_the_target_and_keeps_the_closer_count():
    choices = np.array([2.0, 0.1, 0.5, 0.3])         # answer 0 is the pick
    closer = np.array([False, True, False, False])
    alts = np.array([2.5, 2.1, 3.0, 1.0, 2.2])
    alt_closer = np.array([True, False, False, False, True])
    # exact: one closer distractor stays one; the least distinguishable above first (2.1, then 2.2 ...)
    sw = swaps_for(choices, 0, alts, closer, alt_closer, need=1, exact=True, target=2)
    assert sw == [(1, 4), (3, 1)]           # lowest first: col 1 (0.1, closer) <- 2.2 (closer); col 3 <- 2.1
    assert sum(alts[j] > 2.0 for _, j in sw) == 2
    # at least one closer: col 1 may take a non-closer alternate only if another closer one remains
    sw = swaps_for(choices, 0, alts, closer, alt_closer, need=1, exact=False, target=1)
    assert sw == [(1, 4)]
    sw = swaps_for(choices, 0, alts, closer, alt_closer, need=0, exact=False, target=3)
    assert [j for _, j in sw] == [1, 4, 0] and [c for c, _ in sw] == [1, 3, 2]
    assert swaps_for(choices, 0, np.array([1.0]), closer, np.array([False]), 0, False, 1) == []   # none above


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


def test_a_dataset_made_since_is_filtered_and_those_filtered_already_are_left_as_they_are(tmp_path_factory):
    """A task with datasets the pooled step filtered and one generated since (e.g. one more setting): af-pool
    filters that one, names the others and leaves them byte for byte; once all are filtered it refuses."""
    from flows.af_pool import af_pool_flow
    with synthetic_home(tmp_path_factory, "af_pool_since", n_recipes=90, seed=3, dim=24, k=100) as (_h, paths, con):
        af = [(t, replace(p, af_rounds=AF_DEFAULT_ROUNDS)) for t, p in SETTINGS[:2]]
        generate_datasets(con, SETTINGS[:2] + af[:1], seed=0, encoder_id=ENC, lance_uri=paths.lance,
                          progress=False, af_pooled_drop=("visual_cloze",))
        con.close()
        kw = {"task": "visual_cloze", "tau": 0.3, "folds": 2, "seed": 0, "size": "tiny", "rounds": 0,
              "min_kept": 0.4}
        first = af_pool_flow.fn(**kw)
        con = duckdb.connect(str(paths.warehouse))
        generate_datasets(con, af[1:], seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False,
                          af_pooled_drop=("visual_cloze",))
        sha = dict(con.execute("SELECT dataset_id, content_sha256 FROM datasets WHERE adversarial").fetchall())
        con.close()
        second = af_pool_flow.fn(**kw)
        (old,), (new,) = [r["dataset_id"] for r in first["datasets"]], [r["dataset_id"] for r in second["datasets"]]
        assert old != new and second["left_as_they_were"] == [old] and "left_as_they_were" not in first
        con = duckdb.connect(str(paths.warehouse))
        after = dict(con.execute("SELECT dataset_id, content_sha256 FROM datasets WHERE adversarial").fetchall())
        params = {d: json.loads(p) for d, p in con.execute("SELECT dataset_id, params FROM datasets "
                                                          "WHERE adversarial").fetchall()}
        con.close()
        assert after[old] == sha[old] and "af_pooled" in params[old] and "af_pooled" in params[new]
        with pytest.raises(ValueError, match="already filtered"):
            af_pool_flow.fn(**kw)


def test_the_adversary_scores_out_of_fold_and_deterministically(home, tmp_path):
    from features.datasets.export import export_parquet
    from training.af_pooled import out_of_fold_scores, verdicts
    con, paths = home["con"], home["paths"]
    ids = sorted(home["before"])
    recipe_of = {(d, q): r for d, q, r in con.execute(
        "SELECT dataset_id, qid, recipe_id FROM questions WHERE list_contains(?, dataset_id)", [ids]).fetchall()}
    export_parquet(con, ids, tmp_path / "x", with_vectors=True, lance_uri=paths.lance)
    kw = dict(folds=2, seed=0, size="tiny", lance_uri=paths.lance)
    a = verdicts(out_of_fold_scores(tmp_path / "x", ids, recipe_of, **kw))
    b = verdicts(out_of_fold_scores(tmp_path / "x", ids, recipe_of, **kw))
    assert a == b
    assert {d: set(q) for d, q in a.items()} == {d: {q for (dd, q) in recipe_of if dd == d} for d in ids}
    assert all(0.0 <= p <= 1.0 for qs in a.values() for p, _ in qs.values())


@pytest.mark.slow      # GM3C fold models by split (~12 s)
def test_split_folds_score_the_val_and_test_splits_by_models_that_never_saw_them(home, tmp_path):
    """fold_by="split": the val and the test split are each held out whole, so their scores come from
    models trained on the other splits only. Renaming each test recipe to one that falls in another fold
    of recipes changes none of the test split's scores (with folds of recipes it moves them to another
    model), and a bad value is refused. (The val split's model trains on the test split, so its scores
    may move.)"""
    from features.datasets.export import export_parquet
    from training.af_pooled import _unit, out_of_fold_scores
    con, paths = home["con"], home["paths"]
    ids = sorted(home["before"])
    rows = con.execute("SELECT dataset_id, qid, recipe_id, split FROM questions WHERE list_contains(?, dataset_id)",
                       [ids]).fetchall()
    recipe_of = {(d, q): r for d, q, r, _ in rows}
    split_of = {(d, q): s for d, q, _, s in rows}
    assert {"train", "val", "test"} <= set(split_of.values())

    def elsewhere(r: str) -> str:             # a made-up recipe in the other of the 2 folds of recipes
        return next(f"made-up-{r}-{i}" for i in range(100)
                    if _unit(f"fold:0:made-up-{r}-{i}") % 2 != _unit(f"fold:0:{r}") % 2)
    moved = {k: (elsewhere(r) if split_of[k] == "test" else r) for k, r in recipe_of.items()}
    export_parquet(con, ids, tmp_path / "x", with_vectors=True, lance_uri=paths.lance)
    kw = dict(folds=2, seed=0, size="tiny", lance_uri=paths.lance)

    def held(scores, splits):
        return {(d, q): tuple(v["choices"]) for d, qs in scores.items() for q, v in qs.items()
                if split_of[(d, q)] in splits}

    a = out_of_fold_scores(tmp_path / "x", ids, recipe_of, fold_by="split", **kw)
    b = out_of_fold_scores(tmp_path / "x", ids, moved, fold_by="split", **kw)
    assert held(a, {"test"}) == held(b, {"test"})
    r = out_of_fold_scores(tmp_path / "x", ids, recipe_of, **kw)
    assert held(r, {"test"}) != held(out_of_fold_scores(tmp_path / "x", ids, moved, **kw), {"test"})
    assert held(a, {"test"}) != held(r, {"test"})      # folds of recipes trained on other test recipes
    with pytest.raises(ValueError, match="fold_by"):
        out_of_fold_scores(tmp_path / "x", ids, recipe_of, fold_by="author", **kw)


@pytest.fixture
def two_threads():
    """This process's torch on 2 threads while the test runs, whatever the machine's default: a run in this
    process must still give what a spawned process of one thread gives (training/procs.py `in_turn`; on 2
    threads a tiny model rounds otherwise and, near a tie, early-stops at another epoch: seen on an AMD
    EPYC machine, logits of -4 against 0), and leave the thread count as it found it."""
    import torch
    n = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    assert torch.get_num_threads() == 2
    torch.set_num_threads(n)


@pytest.mark.slow      # equivalence of processes and turns (~17 s)
def test_runs_in_processes_give_what_runs_in_turn_give(home, two_threads):
    """Several adversaries (or check seeds) go to a process each, or with more workers than runs each
    fold to a process: the same logits, to the digit, as the same runs one after the other in this
    process; and a refused worker count."""
    from typer.testing import CliRunner

    from flows.af_pool import _runs
    from flows.cli import app
    con, paths = home["con"], home["paths"]
    ids = sorted(home["before"])
    recipe_of = {(d, q): r for d, q, r in con.execute(
        "SELECT dataset_id, qid, recipe_id FROM questions WHERE list_contains(?, dataset_id)", [ids]).fetchall()}
    seeds = [3, 3 + 7919]
    one = _runs(con, paths, ids, recipe_of, 2, seeds, "tiny", workers=1)
    two = _runs(con, paths, ids, recipe_of, 2, seeds, "tiny", workers=2)
    folds = _runs(con, paths, ids, recipe_of, 2, seeds, "tiny", workers=3)          # 2 runs x 2 folds
    assert len(one) == len(two) == len(folds) == 2
    for a, b in [*zip(one, two), *zip(one, folds)]:
        assert a.keys() == b.keys()
        for d in a:
            assert a[d].keys() == b[d].keys()
            for q in a[d]:
                assert a[d][q]["choices"].tolist() == b[d][q]["choices"].tolist()
                assert a[d][q]["alts"].tolist() == b[d][q]["alts"].tolist()
    assert any(one[0][d][q]["choices"].tolist() != one[1][d][q]["choices"].tolist()
               for d in one[0] for q in one[0][d])                     # two seeds: two different models
    for cmd in ("af-pool", "af-check"):
        r = CliRunner().invoke(app, ["--no-prefect", cmd, "--workers", "0"])
        assert r.exit_code == 2 and "--workers" in r.output, r.output


def test_spawn_shares_gives_every_result_in_the_order_of_the_jobs():
    """Fold jobs shared out before they start (process i: jobs i, i + n, ...): the results come back in
    the order of the jobs, whatever the number of processes."""
    from training.procs import spawn_shares
    jobs = [-3, 2, -1, 5, -7]
    for n in (1, 2, 3, 9):
        assert spawn_shares(abs, jobs, n) == [3, 2, 1, 5, 7]


def test_in_turn_runs_the_jobs_here_on_one_thread_and_gives_the_threads_back(two_threads):
    """A run in this process trains on one torch and one BLAS thread, as a spawned process does, whatever
    this process had; afterwards it has them again, also when a job fails."""
    import torch
    from threadpoolctl import threadpool_info

    from training.procs import in_turn

    def threads(_job):
        return torch.get_num_threads(), {p["num_threads"] for p in threadpool_info()}

    assert in_turn(threads, [1, 2]) == [(1, {1}), (1, {1})]
    assert torch.get_num_threads() == 2
    with pytest.raises(ZeroDivisionError):
        in_turn(lambda j: 1 / j, [0])
    assert torch.get_num_threads() == 2


def test_check_workers_makes_folds_jobs_only_when_cores_are_left_and_the_check_is_big():
    """af-check's default: a process per seed, unless there are more cores than seeds and enough
    questions for the folds' models to outweigh a process's start; an explicit --workers always wins."""
    from flows.af_pool import FOLD_JOBS_MIN_QUESTIONS as big
    from flows.af_pool import check_workers
    assert check_workers(None, 1, big, cores=2) == 2                  # the demo's check: 1 seed, 2 cores
    assert check_workers(None, 1, big - 1, cores=2) is None           # small: start-up outweighs
    assert check_workers(None, 3, 10 * big, cores=2) is None          # 3 seeds on 2 cores: a process per seed
    assert check_workers(None, 3, big, cores=16) == 16                # a GPU host's cores
    assert check_workers(1, 1, 10 * big, cores=16) == 1               # --workers 1: in turn, as asked


def test_drop_plan_takes_the_confident_solved_ones_and_keeps_the_floor():
    oof = {"d": {"a": (0.9, True), "b": (0.6, True), "c": (0.7, False), "e": (0.2, True), "f": (0.55, True)}}
    assert drop_plan(oof, {"d": 10}, tau=0.5) == {"d": ["a", "b", "f"]}
    assert drop_plan(oof, {"d": 10}, tau=0.5, min_kept=0.4) == {"d": ["a"]}    # keep >= 4 of 5
    assert drop_plan(oof, {"d": 10}, tau=0.5, min_kept=0.5) == {"d": []}
    # the cap: 4 of 5 solved; at least a quarter of the kept stay solved: (4 - d) / (5 - d) >= 0.25 -> d <= 3
    assert drop_plan(oof, {"d": 10}, tau=0.1, keep_solved=0.25) == {"d": ["a", "b", "f"]}
    assert drop_plan(oof, {"d": 10}, tau=0.1, keep_solved=0.6) == {"d": ["a", "b"]}     # 2/3 >= 0.6 > 1/2
    assert drop_plan(oof, {"d": 10}, tau=0.1, keep_solved=0.8) == {"d": []}             # 4/5: at the share
    with pytest.raises(ValueError, match="tau"):
        drop_plan(oof, {}, tau=0.0)
    with pytest.raises(ValueError, match="min-kept"):
        drop_plan(oof, {}, min_kept=1.0)


def test_cli_refuses_in_one_line(paths):
    from typer.testing import CliRunner

    from flows.cli import app
    r = CliRunner().invoke(app, ["--no-prefect", "af-pool", "--task", "visual_cloze"])
    assert r.exit_code == 2 and "no warehouse at" in r.output       # a home without one: never a new one
    assert not paths.warehouse.exists()
    r = CliRunner().invoke(app, ["--no-prefect", "af-pool", "--tau", "0"])
    assert r.exit_code == 2 and "--tau must be in (0, 1]" in r.output
    r = CliRunner().invoke(app, ["--no-prefect", "af-pool", "--keep-solved", "1"])
    assert r.exit_code == 2 and "--keep-solved must be in [0, 1)" in r.output
    r = CliRunner().invoke(app, ["--no-prefect", "af-pool", "--floor-by", "recipe"])
    assert r.exit_code == 2 and "--floor-by" in r.output and "dataset" in r.output
    r = CliRunner().invoke(app, ["--no-prefect", "af-pool", "--swap-first", "fastest"])
    assert r.exit_code == 2 and "--swap-first" in r.output and "movable" in r.output
    r = CliRunner().invoke(app, ["--no-prefect", "af-pool", "--drop-order", "loudest"])
    assert r.exit_code == 2 and "--drop-order" in r.output and "minimax" in r.output
    from flows.af_pool import af_pool_flow
    with pytest.raises(ValueError, match="--drop-order must be one of votes, minimax"):
        af_pool_flow.fn(drop_order="loudest")
    assert not paths.warehouse.exists()
    r = CliRunner().invoke(app, ["--no-prefect", "af-pool", "--min-kept", "1"])
    assert r.exit_code == 2 and "--min-kept must be in [0, 1), got 1.0" in r.output
    r = CliRunner().invoke(app, ["--no-prefect", "af-pool", "--jobs-out", "j", "--scores-from", "j/scores.json"])
    assert r.exit_code == 2 and "give one of them" in r.output
    r = CliRunner().invoke(app, ["--no-prefect", "af-pool", "--rounds", "2", "--jobs-out", "j"])
    assert r.exit_code == 2 and "--rounds 1" in r.output
    r = CliRunner().invoke(app, ["--no-prefect", "af-pool", "--rounds", "1", "--scores-from", "nowhere.json"])
    assert r.exit_code == 2 and "no scores file at nowhere.json" in r.output


def test_the_floor_is_the_kept_share_bound_unless_asked_otherwise():
    import inspect

    from typer.testing import CliRunner

    from flows.af_pool import af_pool_flow
    from flows.cli import app
    from training.af_pooled import MIN_KEPT
    assert MIN_KEPT == 0.4 and inspect.signature(af_pool_flow.fn).parameters["min_kept"].default == MIN_KEPT
    r = CliRunner().invoke(app, ["af-pool", "--help"], terminal_width=200)
    assert r.exit_code == 0 and "[default: 0.4]" in " ".join(r.output.split())


def test_coherence_swap_for_picks_the_foreign_image_nearest_the_target_rank():
    from training.af_pooled import coherence_swap_for
    choices = np.array([0.1, 0.2, 2.0, 0.3])              # the answer (foreign, column 2) is spotted: rank 0
    sets = np.array([[0.5, 0.1, 0.9, 0.0],                # rank 0
                     [1.5, 0.1, 1.0, 0.0],                # rank 1, gap 0.5
                     [1.1, 0.1, 1.0, 0.0],                # rank 1, gap 0.1: the least distinguishable
                     [1.5, 1.6, 1.0, 1.2]])               # rank 3
    assert coherence_swap_for(choices, 2, sets, 1) == [(2, 2)]
    assert coherence_swap_for(choices, 2, sets, 3) == [(2, 3)]
    assert coherence_swap_for(choices, 2, sets[:1], 1) == []          # no nearer than now: no swap
    assert coherence_swap_for(choices, 2, np.zeros((0, 4)), 1) == []


def test_early_stop_rows_hold_out_about_a_tenth_of_the_training_recipes():
    from training.af_pooled import _early_stop_rows
    keys = np.repeat(np.arange(40, dtype=np.uint64) * 7919 % 101, 3)       # 40 recipes, 3 questions each
    train = np.arange(120) < 90                                            # 30 recipes train
    rows = _early_stop_rows(train, keys)
    assert not (rows & ~train).any() and len(np.unique(keys[rows])) == 3
    assert _early_stop_rows(np.arange(120) < 6, keys).sum() == 3           # 2 recipes: one held out
    with pytest.raises(ValueError, match="at least two recipes"):
        _early_stop_rows(np.arange(120) < 3, keys)


def test_swapped_scores_put_the_alternates_logits_in_and_the_flags_say_which_drop():
    from training.af_pooled import swapped_scores
    scores = {"d": {"a": {"choices": np.array([2.0, 0.1, 0.5, 0.3]), "answer": 0, "alts": np.array([2.5, 1.0])},
                    "b": {"choices": np.array([0.1, 0.2, 2.0, 0.3]), "answer": 2,
                          "alts": np.array([[1.1, 0.1, 1.0, 0.0]])}}}
    out = swapped_scores(scores, {"d": {"a": [(1, 0)], "b": [(2, 0)]}})
    assert out["d"]["a"]["choices"].tolist() == [2.0, 2.5, 0.5, 0.3]
    assert out["d"]["b"]["choices"].tolist() == [1.1, 0.1, 1.0, 0.0]
    assert scores["d"]["a"]["choices"].tolist() == [2.0, 0.1, 0.5, 0.3]          # the input is left as it was
    from training.af_pooled import verdicts
    v = verdicts(out)
    assert v["d"]["a"][1] is False and v["d"]["b"][1] is False                    # neither solved any more


def test_af_pool_records_how_the_drop_was_decided(home):
    assert home["res_all"]["visual_cloze"]["fresh_drop"] is True
    assert home["res_all"]["visual_coherence"]["fresh_drop"] is False
    for r in home["res_all"]["visual_coherence"]["datasets"]:
        params = json.loads(home["con"].execute("SELECT params FROM datasets WHERE dataset_id = ?",
                                                [r["dataset_id"]]).fetchall()[0][0])
        assert params["af_pooled"]["fresh_drop"] is False and len(params["af_pooled"]["swap_rounds"]) == 2


def test_swaps_never_make_the_answer_the_centre_and_coherence_never_takes_a_probe_spotted_foreign():
    from training.af_pooled import centre, coherence_swap_for
    V = np.array([[0, 0, 1, 0], [1, 1, 0, 0], [0.2, 0, 1, 0], [0, 1, 0, 1.0]])
    assert centre(V) == 2                                       # not the answer (column 1)
    choices, closer = np.array([0.1, 2.0, 0.5, 0.3]), np.zeros(4, dtype=bool)
    W = np.array([[1, 0.8, 0, 0], [0, 0, 0, 1.0]])              # the first would make column 1 the centre
    alts = np.array([2.2, 2.5])
    assert centre(np.array([W[0], V[1], V[2], V[3]])) == 1
    assert swaps_for(choices, 1, alts, closer, np.zeros(2, bool), 0, False, 1) == [(0, 0)]      # unguarded
    assert swaps_for(choices, 1, alts, closer, np.zeros(2, bool), 0, False, 1, V, W) == [(0, 1)]
    sets = np.array([[1.1, 0.1, 1.0, 0.0], [1.5, 0.1, 1.0, 0.0]])
    ch = np.array([0.1, 0.2, 2.0, 0.3])
    assert coherence_swap_for(ch, 2, sets, 1) == [(2, 0)]
    assert coherence_swap_for(ch, 2, sets, 1, np.array([True, False])) == [(2, 1)]
    assert coherence_swap_for(ch, 2, sets, 1, np.array([True, True])) == []
    assert coherence_swap_for(ch, 2, sets, 1, np.array([True, False]), now_hit=True) == [(2, 0)]


def test_swapped_questions_keep_the_answer_off_centre_and_the_probe_off_the_foreign(home, world):
    from training.af_pooled import centre
    before, vec, n = home["before_rows"], world["vec"], 0
    for r in world["rows"]:
        p = r["prov"]
        if not p.get("af_pooled_swaps"):
            continue
        b = before[(r["dataset_id"], r["qid"])]["prov"]
        if r["task"] == "visual_cloze":
            was = centre(np.stack([vec[i] for i in b["choice_items"]])) == r["answer"]
            now = centre(np.stack([vec[i] for i in p["choice_items"]])) == r["answer"]
            assert was or not now, r["qid"]
        else:
            assert b["distance_probe_hit"] or not p["distance_probe_hit"], r["qid"]
        n += 1
    assert n > 10


def test_the_pipeline_step_leaves_filtered_and_missing_tasks_as_they_are(home):
    from flows.pipeline import _af_pool
    before = dict(home["con"].execute("SELECT dataset_id, content_sha256 FROM datasets").fetchall())
    home["con"].close()
    try:
        out = _af_pool(home["paths"], {"tasks": ["visual_cloze", "visual_coherence"], "seed": 0, "rounds": 1,
                                       "min_kept": 0.4})
        assert out == {t: {"skipped": "already filtered by the pooled adversary"}
                       for t in ("visual_cloze", "visual_coherence")}
        out = _af_pool(home["paths"], {"tasks": ["visual_cloze"], "seed": 7, "rounds": 1, "min_kept": 0.4})
        assert out == {"visual_cloze": {"skipped": "no AF datasets with questions"}}
    finally:
        home["con"] = duckdb.connect(str(home["paths"].warehouse))
    assert dict(home["con"].execute("SELECT dataset_id, content_sha256 FROM datasets").fetchall()) == before


def test_mean_scores_average_the_members_logits_and_one_member_is_itself():
    from training.af_pooled import mean_scores, member_seed, verdicts
    a = {"d": {"q": {"choices": np.array([2.0, 0.0, 0.0, 0.0]), "answer": 0, "alts": np.array([1.0, 3.0])},
               "r": {"choices": np.array([0.0, 1.0, 0.0, 0.0]), "answer": 2, "alts": np.zeros(0)}}}
    b = {"d": {"q": {"choices": np.array([-2.0, 0.0, 0.0, 2.0]), "answer": 0, "alts": np.array([3.0, 1.0])},
               "r": {"choices": np.array([0.0, 0.0, 3.0, 0.0]), "answer": 2, "alts": np.zeros(0)}}}
    assert mean_scores([a]) is a
    m = mean_scores([a, b])
    assert m["d"]["q"]["choices"].tolist() == [0.0, 0.0, 0.0, 1.0]
    assert m["d"]["q"]["alts"].tolist() == [2.0, 2.0] and m["d"]["r"]["alts"].shape == (0,)
    v = verdicts(m)
    assert v["d"]["q"][1] is False and v["d"]["r"][1] is True       # a solved q alone, b solved r alone
    assert member_seed(5, 0) == 5 and len({member_seed(5, k) for k in range(4)}) == 4
    with pytest.raises(ValueError, match="at least one member"):
        mean_scores([])


def test_an_ensemble_of_adversaries_is_refused_below_one_and_recorded(home, paths):
    from typer.testing import CliRunner

    from flows.cli import app
    r = CliRunner().invoke(app, ["--no-prefect", "af-pool", "--adversaries", "0"])
    assert r.exit_code == 2 and "--adversaries must be at least 1" in r.output
    step = json.loads(home["con"].execute("SELECT params FROM datasets WHERE task = 'visual_cloze' "
                                          "AND adversarial LIMIT 1").fetchall()[0][0])["af_pooled"]
    assert step["adversaries"] == 1


@pytest.mark.slow      # GM3C fold models of three seeds (~25 s)
def test_af_check_reads_every_question_out_of_fold_with_an_interval(home):
    from flows.af_pool import af_check_flow
    from training.af_pooled import out_of_fold_scores  # noqa: F401  (the model the check trains)
    con = home["con"]
    counts = dict(con.execute("SELECT dataset_id, n_questions FROM datasets WHERE task = 'visual_cloze' "
                              "AND adversarial AND n_questions > 0").fetchall())
    settings = dict(con.execute("SELECT dataset_id, setting FROM datasets").fetchall())
    con.close()
    try:
        a = af_check_flow.fn(task="visual_cloze", seeds=(0, 1), folds=2, size="tiny")
        b = af_check_flow.fn(task="visual_cloze", seeds=(0, 1), folds=2, size="tiny", knobs_only=False)
    finally:
        home["con"] = duckdb.connect(str(home["paths"].warehouse))
    assert {r["dataset_id"] for r in b["datasets"]} == set(counts)
    assert {r["dataset_id"] for r in a["datasets"]} == {d for d in counts if "balanced" not in settings[d]}
    for r in b["datasets"]:
        assert r["n"] == counts[r["dataset_id"]]                 # every question, not a test split
        assert set(r["by_seed"]) == {0, 1}
        assert r["accuracy"] == pytest.approx(sum(r["by_seed"].values()) / 2, abs=1e-4)
        assert r["ci"][0] <= r["accuracy"] <= r["ci"][1]
        by = r["by_split"]                                       # the same figure, split by split
        assert set(by) <= {"train", "val", "test"} and sum(v["n"] for v in by.values()) == r["n"]
        assert sum(v["n"] * v["accuracy"] for v in by.values()) / r["n"] == pytest.approx(r["accuracy"], abs=1e-3)
        assert all(v["ci"][0] <= v["accuracy"] <= v["ci"][1] for v in by.values())
    assert a["datasets"] == [r for r in b["datasets"] if "balanced" not in r["setting"]]   # deterministic
    for r in b["datasets"]:                                      # the tree probe beside it, on the same terms
        t = r["tree"]
        assert set(t["by_seed"]) == {0, 1} and t["ci"][0] <= t["accuracy"] <= t["ci"][1]
        assert t["accuracy"] == pytest.approx(sum(t["by_seed"].values()) / 2, abs=1e-4)
        assert sum(v["n"] for v in t["by_split"].values()) == r["n"]


@pytest.mark.slow      # a whole report on the home (~12 s)
def test_the_report_puts_the_pooled_tree_probe_on_the_af_datasets_only(home):
    """bias_metrics' tree figures: the AF datasets of a task, from trees fitted on them together (the val
    and the test split held out whole, as af-check's tree with the report's seed), None elsewhere."""
    from features.diagnostics.bias import compute_bias_metrics
    from features.diagnostics.tree_probe import pooled_tree_scores, tree_rows
    con = home["con"]
    rows = compute_bias_metrics(con, None, home["paths"].lance, seed=0, progress=False, workers=1)
    tree_rows(con, rows, home["paths"].lance, seed=0)
    af = {r["dataset_id"]: r for r in rows if r["adversarial"] and r["task"] == "visual_cloze" and r["n_scored"]}
    assert af and all(r["tree_acc"] is None for r in rows if not r["adversarial"])
    scores, answers = pooled_tree_scores(con, home["paths"].lance, sorted(af), "visual_cloze", 0, "split")
    for d, r in af.items():
        hits = [int(np.argmax(v)) == answers[d][q] for q, v in scores[d].items()]
        assert r["tree_acc"] == pytest.approx(np.mean(hits), abs=1e-4)
        assert r["tree_ci_low"] <= r["tree_acc"] <= r["tree_ci_high"]
    again = compute_bias_metrics(con, sorted(af), home["paths"].lance, seed=0, progress=False, workers=2)
    tree_rows(con, again, home["paths"].lance, seed=0)
    assert [r["tree_acc"] for r in again] == [af[d]["tree_acc"] for d in sorted(af)]   # threads change nothing
    kept = compute_bias_metrics(con, None, home["paths"].lance, seed=0, progress=False, keep_resolved=True)
    assert all(r["_resolved"] is not None for r in kept if r["dataset_id"] in af)
    tree_rows(con, kept, home["paths"].lance, seed=0)            # the report's path: the resolved questions reused
    cols = ("tree_acc", "tree_ci_low", "tree_ci_high", "tree_test_acc")
    assert [[r[c] for c in cols] for r in kept] == [[r[c] for c in cols] for r in rows]


@pytest.mark.slow      # a fallback path, 12 datasets (~12 s)
def test_the_pipeline_makes_a_task_again_with_afs_own_drop_when_the_pooled_step_cannot(tmp_path_factory):
    """AF datasets generated for the pooled drop have none of their own; when the pipeline's pooled step
    cannot run on their task, `_linear_drop` makes them again with AF's own drop."""
    from features.datasets.generate import generation_settings
    from flows.pipeline import _linear_drop

    def drops(con) -> dict:
        return {d: json.loads(p)["adversarial"].get("drop") for d, p in con.execute(
            "SELECT dataset_id, any_value(provenance) FROM questions JOIN datasets USING (dataset_id) "
            "WHERE adversarial AND datasets.task = 'visual_cloze' GROUP BY ALL").fetchall()}

    with synthetic_home(tmp_path_factory, "linear_drop", n_recipes=60, seed=5, dim=24, k=100) as (_, paths, con):
        settings = [(t, p) for t, p in generation_settings(adversarial=True) if t == "visual_cloze" and p.af_rounds]
        made = generate_datasets(con, settings, seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False,
                                 af_pooled_drop=("visual_cloze",))
        assert len(made) == 12 and set(drops(con).values()) == {"pooled"}
        assert all(s["skips"].get("af_predictable", 0) == 0 for s in made)
        con.close()
        ids = _linear_drop("visual_cloze", {"seed": 0, "encoder_id": ENC})
        con = duckdb.connect(str(paths.warehouse))
        try:
            assert sorted(ids) == sorted(s["dataset_id"] for s in made)
            assert set(drops(con).values()) == {None}          # AF's own drop: nothing recorded
            n = dict(con.execute("SELECT dataset_id, n_questions FROM datasets").fetchall())
            assert all(n[s["dataset_id"]] <= s["n_questions"] for s in made)
        finally:
            con.close()


@pytest.mark.slow      # a fallback path, 12 datasets twice (~20 s)
def test_the_textual_step_makes_its_datasets_again_with_afs_own_drop_when_it_cannot_run(tmp_path_factory,
                                                                                      monkeypatch):
    """The pipeline generates the textual cloze AF datasets leaving their drop to the pooled step
    (TEXTUAL_AF_DROP); when that step cannot run (here: an option it refuses), `_textual` says why and
    makes them again with AF's own drop, so they are never left without one."""
    from features.datasets.generate import generation_settings
    from flows import pipeline

    def drops(con) -> dict:
        return {d: json.loads(p)["adversarial"].get("drop") for d, p in con.execute(
            "SELECT dataset_id, any_value(provenance) FROM questions JOIN datasets USING (dataset_id) "
            "WHERE adversarial AND datasets.task = 'textual_cloze' GROUP BY ALL").fetchall()}

    # any refusal of the step (a ValueError: too few recipes for its folds on a small corpus) takes this path
    monkeypatch.setattr(pipeline, "TEXTUAL_POOL", {**pipeline.TEXTUAL_POOL, "adversaries": 0})
    with synthetic_home(tmp_path_factory, "textual_fallback", n_recipes=60, seed=5, dim=24, k=100) as (
            _, paths, con):
        settings = [(t, p) for t, p in generation_settings(adversarial=True) if t == "textual_cloze" and p.af_rounds]
        made = generate_datasets(con, settings, seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False,
                                 af_pooled_drop=("textual_cloze",))
        assert set(drops(con).values()) == {"pooled"}
        con.close()
        # one dataset the pooled step had no room in: made again with AF's own drop, the others left as they are
        one = sorted(s["dataset_id"] for s in made)[0]
        assert pipeline._linear_drop("textual_cloze", {"seed": 0, "encoder_id": ENC}, only=[one]) == [one]
        con = duckdb.connect(str(paths.warehouse))
        got = drops(con)
        con.close()
        assert got.pop(one) is None and set(got.values()) == {"pooled"}
        out = pipeline._textual(paths, {"seed": 0, "encoder_id": ENC})
        assert "--adversaries must be at least 1" in out["skipped"]
        assert sorted(out["regenerated_with_linear_drop"]) == sorted(s["dataset_id"] for s in made)
        assert pipeline._kept(out) == {}
        con = duckdb.connect(str(paths.warehouse))
        try:
            assert set(drops(con).values()) == {None}          # AF's own drop: nothing recorded
        finally:
            con.close()


def test_drop_plan_with_the_linear_probe_takes_what_either_solves_most_confident_first():
    oof = {"d": {"a": (0.9, True), "b": (0.3, True), "c": (0.7, False), "e": (0.2, False), "f": (0.5, True)}}
    lin = {"d": {"a": (0.4, True), "b": (0.8, True), "c": (0.6, True), "e": (0.9, False), "f": (0.1, False)}}
    assert drop_plan(oof, {"d": 10}, tau=0.5) == {"d": ["a", "f"]}
    # b and c are solved by the linear probe alone; e by neither (its 0.9 is not the answer's argmax)
    assert drop_plan(oof, {"d": 10}, tau=0.5, linear=lin) == {"d": ["a", "b", "c", "f"]}
    # the floor keeps 3 of 5: each list's most confident, the pooled model's a, then the linear probe's b
    assert drop_plan(oof, {"d": 5}, tau=0.5, min_kept=0.6, linear=lin) == {"d": ["a", "b"]}
    assert drop_plan(oof, {"d": 10}, tau=0.5, linear={}) == drop_plan(oof, {"d": 10}, tau=0.5)


def test_drop_plan_spends_the_floors_room_on_both_adversaries_in_turn():
    """The pooled model is more confident than the linear probe, yet the room goes to both lists in
    turn; a question on both lists takes its earlier place, once."""
    oof = {"d": {"a": (0.95, True), "b": (0.9, True), "c": (0.85, True), "e": (0.2, False), "f": (0.3, False),
                 "g": (0.8, True)}}
    lin = {"d": {"a": (0.6, True), "e": (0.55, True), "f": (0.5, True), "g": (0.3, False)}}
    # lists: pooled a, b, c, g; linear a, e, f -> a (first on both), b, e (second places), c, f, g
    full = ["a", "b", "c", "e", "f", "g"]
    for keep, want in ((5, ["a"]), (4, ["a", "b"]), (3, ["a", "b", "e"]), (2, ["a", "b", "c", "e"]),
                       (1, ["a", "b", "c", "e", "f"]), (0, full)):
        assert drop_plan(oof, {"d": 6}, tau=0.5, min_kept=keep / 6 if keep else 0.0, linear=lin) == {"d": want}
    # by the larger confidence alone the room would have gone to a, b, c first: the linear cue kept
    assert drop_plan(oof, {"d": 6}, tau=0.5, min_kept=3 / 6) == {"d": ["a", "b", "c"]}


def test_linear_verdicts_are_the_softmax_of_the_probe_scores():
    from training.af_pooled import linear_verdicts
    v = linear_verdicts({"d": {"q": np.array([0.0, 0.0, np.log(2.0), 0.0]), "r": np.zeros(4)}},
                        {"d": {"q": 2, "r": 1}})
    assert v["d"]["q"] == (pytest.approx(0.4), True)
    assert v["d"]["r"][0] == pytest.approx(0.25) and v["d"]["r"][1] is False    # ties: the first choice


def test_the_linear_adversary_scores_every_question_out_of_fold_on_folds_of_its_own(home):
    from features.diagnostics.bias import VectorLookup, resolve_dataset
    from features.diagnostics.question_only import recipe_folds
    from flows.af_pool import LINEAR_SEED, _linear_oof, _resolved
    con, paths = home["con"], home["paths"]
    ids = sorted(home["before"])
    a = _linear_oof(con, paths, ids, "visual_cloze", 0)
    assert a == _linear_oof(con, paths, ids, "visual_cloze", 0)
    assert a == _linear_oof(con, paths, ids, "visual_cloze", 0, _resolved(con, paths, ids, "visual_cloze"))
    n = dict(con.execute("SELECT dataset_id, count(*) FROM questions WHERE list_contains(?, dataset_id) GROUP BY 1",
                         [ids]).fetchall())
    assert {d: len(qs) for d, qs in a.items()} == {d: k for d, k in n.items() if k}
    assert all(0.0 <= p <= 1.0 for qs in a.values() for p, _ in qs.values())
    res = resolve_dataset(con, ids[0], VectorLookup(paths.lance, ENC, "image"), "visual_cloze")
    # not the report's folds (seed 0): the report's probe is read on a split this drop never used
    assert (recipe_folds(res.recipe_ids, 5, LINEAR_SEED) != recipe_folds(res.recipe_ids, 5, 0)).any()


@pytest.mark.slow      # two more checks at other sizes (~13 s)
def test_af_check_and_af_pool_take_the_models_size_from_the_command_line(home, monkeypatch):
    """`--size` reaches the check's models (paper is a GPU's work; tiny here): the command's figures are
    the flow's at that size, differ from the default size's, and a size that does not exist is refused
    in one line by both commands."""
    import json

    from typer.testing import CliRunner

    from flows.af_pool import af_check_flow
    from flows.cli import app
    monkeypatch.setenv("MRQA_HOME", str(home["paths"].home))
    plain = [d for (d,) in home["con"].execute("SELECT dataset_id FROM datasets WHERE task = 'visual_cloze' AND "
                                               "NOT coalesce(adversarial, false) ORDER BY 1").fetchall()]
    home["con"].close()
    try:
        r = CliRunner().invoke(app, ["--no-prefect", "af-check", "--size", "tiny", "--seeds", "0", "--folds", "2",
                                     "--json"])
        assert r.exit_code == 0, r.output
        cli = json.loads(r.output[r.output.index("{"):])
        flow = af_check_flow.fn(task="visual_cloze", seeds=(0,), folds=2, size="tiny")
        small = af_check_flow.fn(task="visual_cloze", seeds=(0,), folds=2)
        for cmd in ("af-check", "af-pool"):
            bad = CliRunner().invoke(app, ["--no-prefect", cmd, "--size", "huge"])
            assert bad.exit_code == 2 and "--size" in bad.output, bad.output
        # --dataset: any datasets of one task, plain ones too, each reported; unknown ids or none refused
        r = CliRunner().invoke(app, ["--no-prefect", "af-check", "--size", "tiny", "--seeds", "0", "--folds", "2",
                                     "--json", "--task", "visual_ordering", "--dataset", ",".join(plain)])
        assert r.exit_code == 0, r.output
        named = json.loads(r.output[r.output.index("{"):])
        assert named["task"] == "visual_cloze" and [d["dataset_id"] for d in named["datasets"]] == plain
        assert all(0 <= d["accuracy"] <= 1 and d["n"] > 0 for d in named["datasets"])
        for arg, msg in (("nope-1", "no dataset nope-1 in the warehouse"), (",", "--dataset needs at least one")):
            bad = CliRunner().invoke(app, ["--no-prefect", "af-check", "--dataset", arg])
            assert bad.exit_code == 2 and msg in bad.output and "Traceback" not in bad.output, bad.output
    finally:
        home["con"] = duckdb.connect(str(home["paths"].warehouse))
    assert cli["size"] == flow["size"] == "tiny" and small["size"] == "small"
    assert [(d["dataset_id"], d["by_seed"]) for d in cli["datasets"]] == \
        [(d["dataset_id"], {str(k): v for k, v in d["by_seed"].items()}) for d in flow["datasets"]]
    assert [d["by_seed"] for d in small["datasets"]] != [d["by_seed"] for d in flow["datasets"]]


def test_af_check_refuses_bad_seeds_and_a_missing_warehouse_in_one_line(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from flows.cli import app
    monkeypatch.setenv("MRQA_HOME", str(tmp_path / "nothing"))
    r = CliRunner().invoke(app, ["--no-prefect", "af-check", "--seeds", "a,b"])
    assert r.exit_code == 2 and "--seeds must be comma-separated integers" in r.output
    r = CliRunner().invoke(app, ["--no-prefect", "af-check"])
    assert r.exit_code == 2 and "no warehouse at" in r.output
    assert not (tmp_path / "nothing" / "warehouse.duckdb").exists()        # read-only: nothing created



def test_drop_plan_by_split_holds_the_floor_in_every_split():
    """One floor per dataset spends its room where the confident questions are (here the training
    split's): test keeps all of its questions and train a sixth. Per split, each keeps its own 40%, and
    the floor is counted against that split's plain questions."""
    from training.af_pooled import drop_plan_by_split
    oof = {"d": {**{f"t{i}": (1 - i / 20, True) for i in range(1, 7)},
                 "x1": (0.6, True), "x2": (0.55, True), "x3": (0.3, False)},
           "e": {"y1": (0.9, True), "y2": (0.1, False)}}
    split_of = {"d": {**{f"t{i}": "train" for i in range(1, 7)}, **{f"x{i}": "test" for i in (1, 2, 3)}},
                "e": {"y1": "train", "y2": "test"}}
    n_split = {"d": {"train": 6, "test": 3}, "e": {"train": 1, "test": 1}}
    # one floor: keep ceil(0.4 x 9) = 4 of 9 -> t1..t5 go; train keeps 1 of 6, test 3 of 3
    assert drop_plan(oof, {"d": 9, "e": 2}, tau=0.5, min_kept=0.4) == {"d": ["t1", "t2", "t3", "t4", "t5"],
                                                                        "e": ["y1"]}
    by = drop_plan_by_split(oof, split_of, n_split, tau=0.5, min_kept=0.4)
    # train keeps ceil(2.4) = 3 of 6 (t1..t3 go), test ceil(1.2) = 2 of 3 (its most confident, x1, goes);
    # e's train split keeps its one question
    assert by == {"d": ["t1", "t2", "t3", "x1"], "e": []}
    for plan in (by, drop_plan_by_split(oof, split_of, n_split, tau=0.5, min_kept=0.4, order="minimax")):
        for did, drop in plan.items():
            for split in ("train", "test"):
                kept = [q for q, s in split_of[did].items() if s == split and q not in drop]
                assert len(kept) >= np.ceil(0.4 * n_split[did][split])
    # without a floor the split makes no difference
    assert drop_plan_by_split(oof, split_of, n_split, tau=0.5) == drop_plan(oof, {"d": 9, "e": 2}, tau=0.5)
    # with the linear probe too, each split's two lists are taken in turn: train's t1, t6 (first on the
    # linear list), t2
    lin = {"d": {"t6": (0.9, True)}}
    assert drop_plan_by_split(oof, split_of, n_split, tau=0.5, min_kept=0.4, linear=lin)["d"] == [
        "t1", "t2", "t6", "x1"]


def test_minimax_drop_lowers_the_highest_figure_first():
    """Two adversaries: A solves the 6 questions a1..a6 (and, less surely, s1, s2), B (the tree list) solves
    b1..b3 and s1, s2. By votes the shared s1, s2 go first, then A's and B's lists in turn; minimax takes from
    A, whose share of the kept questions is the larger, until B's is as large. Every dropped question is a
    candidate of a list; the room holds; the plan is the same on a second call."""
    from training.af_pooled import minimax_drop
    qs = [f"a{i}" for i in range(1, 7)] + ["b1", "b2", "b3", "s1", "s2"] + [f"n{i}" for i in range(1, 10)]
    A = {q: (0.9 - 0.01 * i, True) for i, q in enumerate(qs) if q[0] == "a"}
    A.update({"s1": (0.5, True), "s2": (0.5, True)})
    B = {q: (0.8 - 0.01 * i, True) for i, q in enumerate(qs) if q[0] == "b"}
    B.update({"s1": (0.6, True), "s2": (0.6, True)})
    oof, tree = {"d": {q: A.get(q, (0.4, False)) for q in qs}}, {"d": B}
    votes = drop_plan(oof, {"d": 20}, tau=0.35, min_kept=0.75, tree=tree)["d"]     # room 20 - 15 = 5
    mini = drop_plan(oof, {"d": 20}, tau=0.35, min_kept=0.75, tree=tree, order="minimax")["d"]
    assert votes == ["a1", "a2", "b1", "s1", "s2"]
    # shares of 20: A 8, B 5 -> A (s1, s2 first: both lists hold them) -> A 6/18, B 3/18 -> a1, a2, a3
    assert mini == ["a1", "a2", "a3", "s1", "s2"]

    def shares(drop):
        kept = [q for q in qs if q not in drop]
        return [sum(L.get(q, (0, False))[1] for q in kept) / len(kept) for L in (oof["d"], B)]
    assert max(shares(mini)) < max(shares(votes))
    assert shares(mini) == [3 / 15, 3 / 15]
    assert all(any(L.get(q, (0, False))[1] and L[q][0] >= 0.35 for L in (oof["d"], B)) for q in mini)
    assert minimax_drop(qs, [oof["d"], B], 0.35, 5) == minimax_drop(qs, [oof["d"], B], 0.35, 5)
    assert minimax_drop(qs, [oof["d"], B], 0.35, 0) == []
    # a list with no candidate at or above tau steps aside; the drop ends when no list has one left
    assert sorted(minimax_drop(qs, [oof["d"], B], 0.95, 5)) == []
    assert sorted(minimax_drop(qs, [oof["d"], B], 0.35, 100)) == sorted(set(A) | set(B))
    with pytest.raises(ValueError, match="drop order"):
        drop_plan(oof, {"d": 20}, tau=0.35, order="loudest")


@pytest.mark.slow      # the pooled drop with the trees, three runs (~33 s)
def test_the_tree_joins_the_drop_and_is_recorded(tmp_path_factory):
    """`af-pool --tree`: the drop also takes what the tree probe solves (its list beside GM3C's and the
    linear probe's), within the floor; the params record it; the same inputs give the same datasets."""
    from features.datasets.af_pooled import af_datasets
    from flows.af_pool import TREE_MEMBERS, TREE_SEED, _tree_oof, af_pool_flow

    def run(name):
        with synthetic_home(tmp_path_factory, name, n_recipes=90, seed=3, dim=24, k=100) as (_h, paths, con):
            af = [(t, replace(p, af_rounds=AF_DEFAULT_ROUNDS)) for t, p in SETTINGS[:2]]
            generate_datasets(con, SETTINGS[:2] + af, seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False,
                              af_pooled_drop=("visual_cloze",))
            before = dict(con.execute("SELECT dataset_id, n_questions FROM datasets WHERE adversarial").fetchall())
            plain = {r["dataset_id"]: r["n_plain"] for r in af_datasets(con, "visual_cloze")}
            ids = sorted(before)
            trees = _tree_oof(con, paths, ids, "visual_cloze", TREE_SEED, "split", TREE_MEMBERS)
            con.close()
            res = af_pool_flow.fn(task="visual_cloze", tau=0.3, folds=2, seed=0, size="tiny", rounds=0,
                                  min_kept=0.4, linear=True, tree=True, fold_by="split")
            con2 = duckdb.connect(str(paths.warehouse))
            kept = {d: {q for (q,) in con2.execute("SELECT qid FROM questions WHERE dataset_id = ?", [d]).fetchall()}
                    for d in ids}
            params = {d: json.loads(p)["af_pooled"] for d, p in con2.execute(
                "SELECT dataset_id, params FROM datasets WHERE list_contains(?, dataset_id)", [ids]).fetchall()}
            sha = dict(con2.execute("SELECT dataset_id, content_sha256 FROM datasets WHERE adversarial").fetchall())
            con2.close()
        return res, before, trees, kept, params, sha, plain

    res, before, trees, kept, params, sha, plain = run("af_pool_tree_a")
    assert res["tree"] is True and res["drop_order"] == "questions on more lists first, then in turn"
    for p in params.values():
        assert p["tree"] is True and p["tree_seed"] == TREE_SEED and p["tree_members"] == TREE_MEMBERS
    solved_by_tree = {(d, q) for d, qs in trees.items() for q, (pr, ok) in qs.items() if ok and pr >= 0.3}
    dropped = {(d, q) for d, qs in trees.items() for q in qs if q not in kept[d]}
    assert dropped, "the synthetic world leaves the tree something to drop"
    assert dropped & solved_by_tree, "some dropped question is on the tree's list"
    for r in res["datasets"]:                                      # the floor: 40% of the plain setting
        assert plain[r["dataset_id"]] and r["kept"] >= np.ceil(0.4 * plain[r["dataset_id"]]) - 1e-9
        assert r["kept"] + r["dropped"] == before[r["dataset_id"]] == r["kept"] + len(
            [q for q in trees[r["dataset_id"]] if q not in kept[r["dataset_id"]]])
    assert run("af_pool_tree_b")[5] == sha                          # deterministic, byte for byte


@pytest.mark.slow      # textual cloze pooled drop on a home of its own (~17 s)
def test_textual_cloze_is_dropped_by_gm3c_the_trees_and_the_linear_probe(tmp_path_factory):
    """`af-pool --task textual_cloze --rounds 0 [--tree --linear]`: the drop is what GM3C question-only (on
    the titles' vectors, out of fold), the tree probe and the linear probe solve, within the floor; the
    params say which adversary decided. `af-check
    --task textual_cloze` then reads every kept question with GM3C question-only, and writes nothing."""
    from features.datasets.af_pooled import af_datasets
    from flows.af_pool import TREE_MEMBERS, TREE_SEED, _linear_oof, _scores, _tree_oof, af_check_flow, af_pool_flow
    from training.af_pooled import verdicts
    tc = [("textual_cloze", KnobParams.preset_for("textual_cloze", 0, 1, 1)),
          ("textual_cloze", KnobParams.preset_for("textual_cloze", 0, 0, 0))]
    with synthetic_home(tmp_path_factory, "af_pool_text", n_recipes=90, seed=3, dim=24, k=100) as (_h, paths, con):
        af = [(t, replace(p, af_rounds=AF_DEFAULT_ROUNDS)) for t, p in tc]
        generate_datasets(con, tc + af, seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False,
                          af_pooled_drop=("textual_cloze",))
        rows = {r["dataset_id"]: r for r in af_datasets(con, "textual_cloze")}
        ids = sorted(d for d, r in rows.items() if r["n_questions"])
        assert ids and all(r["params"]["adversarial"]["drop"] == "pooled" for r in rows.values())
        trees = _tree_oof(con, paths, ids, "textual_cloze", TREE_SEED, "split", TREE_MEMBERS)
        lin = _linear_oof(con, paths, ids, "textual_cloze", 0)
        recipe_of = {(d, q): r for d, q, r in con.execute("SELECT dataset_id, qid, recipe_id FROM questions "
                                                          "WHERE list_contains(?, dataset_id)", [ids]).fetchall()}
        gm3c = verdicts(_scores(con, paths, ids, recipe_of, 2, 0, "tiny", workers=1, fold_by="split"))  # the drop's
        con.close()
        res = af_pool_flow.fn(task="textual_cloze", tau=0.3, rounds=0, min_kept=0.4, linear=True, tree=True,
                              fold_by="split", size="tiny", folds=2, adversaries=1, workers=1)
        con = duckdb.connect(str(paths.warehouse))
        try:
            for r in res["datasets"]:
                d = r["dataset_id"]
                kept = {q for (q,) in con.execute("SELECT qid FROM questions WHERE dataset_id = ?", [d]).fetchall()}
                dropped = set(trees[d]) - kept
                solved = {q for v in (trees, lin, gm3c) for q, (p, ok) in v.get(d, {}).items() if ok and p >= 0.3}
                assert dropped <= solved                                   # only what an adversary solves
                floor = np.ceil(0.4 * rows[d]["n_plain"])                       # the floor (a dataset AF's
                assert len(kept) >= min(floor, rows[d]["n_questions"]) - 1e-9    # twins left below it keeps all)
                assert len(kept) == r["kept"] == con.execute("SELECT n_questions FROM datasets WHERE dataset_id = ?",
                                                             [d]).fetchall()[0][0]
                step = json.loads(con.execute("SELECT params FROM datasets WHERE dataset_id = ?",
                                              [d]).fetchall()[0][0])["af_pooled"]
                assert step["adversary"].startswith("GM3C question_only (the titles' vectors)") and step["tree"]
                assert step["drop_order"] == "questions on more lists first, then in turn"
                assert 0 <= r["oof_question_only_acc_kept"] <= 1 and 0 <= r["oof_question_only_acc"] <= 1
            assert any(r["dropped"] for r in res["datasets"]), "the synthetic world leaves the drop something"
            before = con.execute("SELECT dataset_id, content_sha256, n_questions FROM datasets ORDER BY 1").fetchall()
            kept = {r["dataset_id"]: r["kept"] for r in res["datasets"]}
        finally:
            con.close()
        check = af_check_flow.fn(task="textual_cloze", seeds=(0,), folds=2, size="tiny", workers=1)
        assert check["task"] == "textual_cloze" and check["datasets"]
        for r in check["datasets"]:
            assert r["n"] == kept[r["dataset_id"]] and 0 <= r["accuracy"] <= 1
            assert r["ci"][0] <= r["accuracy"] <= r["ci"][1] and sum(v["n"] for v in r["by_split"].values()) == r["n"]
            assert 0 <= r["tree"]["accuracy"] <= 1
        con = duckdb.connect(str(paths.warehouse), read_only=True)
        try:
            assert con.execute("SELECT dataset_id, content_sha256, n_questions FROM datasets ORDER BY 1"
                               ).fetchall() == before                     # the check is read-only
        finally:
            con.close()


def _textual_swapped(tmp_path_factory, name: str):
    """Textual cloze AF settings swapped (2 rounds) and dropped by the pooled adversary: (af-pool's result,
    the rows before, the rows after, every item's unit vector (images and titles), each title item's
    text, the AF datasets' content hashes)."""
    from features.vectors.store import FeatureStore
    from flows.af_pool import af_pool_flow
    tc = [("textual_cloze", KnobParams.preset_for("textual_cloze", 0, 1, 1)),
          ("textual_cloze", KnobParams.preset_for("textual_cloze", 0, 1, 1, k3_mode="balanced")),
          ("textual_cloze", KnobParams.preset_for("textual_cloze", 0, 0, 0))]
    with synthetic_home(tmp_path_factory, name, n_recipes=90, seed=3, dim=24, k=100) as (_h, paths, con):
        generate_datasets(con, tc + [(t, replace(p, af_rounds=AF_DEFAULT_ROUNDS)) for t, p in tc], seed=0,
                          encoder_id=ENC, lance_uri=paths.lance, progress=False, af_pooled_drop=("textual_cloze",))
        before = _rows(con, "WHERE d.adversarial")
        title = {f"{r}_{i}_title": t.strip() for r, i, t in con.execute(
            "SELECT recipe_id, step_idx, title FROM steps WHERE title IS NOT NULL").fetchall()}
        con.close()
        res = af_pool_flow.fn(task="textual_cloze", tau=0.3, folds=2, seed=0, size="tiny", rounds=2,
                              solved_share=0.05, min_kept=0.0, workers=1)
        con = duckdb.connect(str(paths.warehouse), read_only=True)
        after = _rows(con, "WHERE d.adversarial")
        sha = dict(con.execute("SELECT dataset_id, content_sha256 FROM datasets WHERE adversarial").fetchall())
        con.close()
        store = FeatureStore(paths.lance)
        vec = {}
        for ids, mat in (store.image_vectors(ENC), store.text_vectors(ENC, "title")):
            vec.update({i: np.asarray(v, np.float64) / np.linalg.norm(v) for i, v in zip(ids, mat)})
    return res, before, after, vec, title, sha


@pytest.mark.slow      # textual cloze swap rounds on a home of its own (~26 s)
def test_textual_cloze_swaps_write_titles_from_the_alternates_and_keep_every_knob(tmp_path_factory):
    """`af-pool --task textual_cloze --rounds 2`: each swapped-in title was a recorded alternate of its
    question (recorded with its title), the choice shows that title and `choice_items` names its item;
    no question shows a title twice; the swapped-out title joins the alternates with its text; the knob
    invariant suite (the ball, the knob-3 closer count from the vectors) holds on the swapped datasets;
    the same inputs give the same datasets, byte for byte."""
    res, before, after, vec, title, sha = _textual_swapped(tmp_path_factory, "af_pool_text_swaps")
    assert res["rounds"] == 2 and res["task"] == "textual_cloze"
    swapped = with_alts = 0
    for key, r in after.items():
        p, b = r["prov"], before[key]["prov"]
        assert [title[i] for i in p["choice_items"]] == list(r["choice_list"])     # the titles shown
        assert len({t.lower() for t in r["choice_list"]}) == 4                     # never one title twice
        for a in p["af_alternates"]:
            assert a["text"] == title[a["item"]]
        was = {a["item"]: a for a in b["af_alternates"]}
        with_alts += bool(was)
        assert set(was) | set(b["choice_items"]) == \
            {a["item"] for a in p["af_alternates"]} | set(p["choice_items"])           # nothing lost
        last = {s["choice"]: s["in"] for s in p.get("af_pooled_swaps", [])}
        assert r["answer"] not in last
        for c, item in last.items():
            assert item == p["choice_items"][c] and p["af_scores"][c] is None
            assert item in was or item in b["choice_items"]        # round 2 may take back what round 1 left
        swapped += bool(last)
    assert swapped > 10 and with_alts > len(after) / 2, (swapped, with_alts, len(after))
    rows = list(after.values())
    _inv.test_cloze_shape_and_knob2_ball_from_exported_vectors({"rows": rows, "vec": vec})
    _inv.test_knob3_closer_distractors_on_flagged_questions({"rows": rows, "vec": vec})
    assert _textual_swapped(tmp_path_factory, "af_pool_text_swaps_b")[5] == sha


def test_swaps_for_never_gives_two_choices_one_title():
    choices, closer = np.array([0.1, 2.0, 0.5, 0.3]), np.zeros(4, dtype=bool)
    alts, none = np.array([2.4, 2.2]), np.zeros(2, bool)       # alternate 1 is the least above the answer
    texts = ["Mix", "Bake", "Serve", "Chill"]
    assert swaps_for(choices, 1, alts, closer, none, 0, False, 1) == [(0, 1)]
    # alternate 1 reads "serve " (choice 2's title, case and spaces aside): alternate 0 takes the place
    assert swaps_for(choices, 1, alts, closer, none, 0, False, 1, texts=texts, alt_texts=["Whisk", "serve "]) == \
        [(0, 0)]
    # a title swapped for itself is no clash
    assert swaps_for(choices, 1, alts, closer, none, 0, False, 1, texts=texts, alt_texts=["Whisk", "Mix"]) == [(0, 1)]
    # two alternates of one title never both go in
    assert swaps_for(choices, 1, alts, closer, none, 0, False, 2) == [(0, 1), (3, 0)]
    assert swaps_for(choices, 1, alts, closer, none, 0, False, 2, texts=texts, alt_texts=["Whisk", "whisk"]) == \
        [(0, 1)]


@pytest.mark.slow      # four passes on two homes (~25 s)
def test_a_pass_trained_on_another_machine_makes_the_same_datasets(tmp_path_factory, tmp_path, two_threads):
    """`af-pool --jobs-out DIR`, `python -m training.af_jobs DIR`, `af-pool --scores-from DIR/scores.json`:
    writing the jobs leaves the warehouse as it was; the datasets then are those af-pool makes with its
    models trained in place, byte for byte; scores of other jobs, several passes and a foreign folder are
    refused with what to do."""
    from flows.af_pool import af_pool_flow
    from training.af_jobs import main as af_jobs_main
    opts = {"task": "visual_cloze", "tau": 0.3, "folds": 2, "seed": 0, "size": "tiny", "rounds": 1,
            "solved_share": 0.05, "min_kept": 0.4, "linear": True, "adversaries": 2, "workers": 1,
            "fold_by": "split"}

    def home(name):
        cm = synthetic_home(tmp_path_factory, name, n_recipes=70, seed=3, dim=24, k=100)
        _h, paths, con = cm.__enter__()
        generate_datasets(con, SETTINGS[:2] + [(t, replace(p, af_rounds=AF_DEFAULT_ROUNDS)) for t, p in SETTINGS[:2]],
                          seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False,
                          af_pooled_drop=("visual_cloze",))
        con.close()
        return cm, paths

    def state(paths):
        con = duckdb.connect(str(paths.warehouse), read_only=True)
        out = con.execute("SELECT dataset_id, content_sha256, n_questions, params FROM datasets ORDER BY 1").fetchall()
        con.close()
        return out

    cm_a, paths_a = home("af_jobs_a")
    try:
        in_place = af_pool_flow.fn(**opts)
        done_here = state(paths_a)
    finally:
        cm_a.__exit__(None, None, None)
    assert any(r["dropped"] for r in in_place["datasets"])
    cm_b, paths_b = home("af_jobs_b")
    try:
        before, jobs = state(paths_b), tmp_path / "jobs"
        with pytest.raises(ValueError, match="one GM3C pass"):
            af_pool_flow.fn(**{**opts, "rounds": 2}, jobs_out=str(jobs))
        (tmp_path / "mine").mkdir()
        (tmp_path / "mine" / "notes.txt").write_text("keep me")
        with pytest.raises(ValueError, match="not a jobs folder"):
            af_pool_flow.fn(**opts, jobs_out=str(tmp_path / "mine"))
        assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
        res = af_pool_flow.fn(**opts, jobs_out=str(jobs))
        assert res["jobs_written"] == str(jobs) and res["runs"] == 2 and res["datasets"] == []
        assert state(paths_b) == before                                 # nothing written to the warehouse
        assert (jobs / "jobs.json").is_file() and (jobs / "alt_vectors.npy").is_file()
        assert af_jobs_main([str(jobs), "--workers", "1"]) == 0
        scores = jobs / "scores.json"
        doc = json.loads(scores.read_text())
        assert [r["seed"] for r in doc["runs"]] == json.loads((jobs / "jobs.json").read_text())["seeds"]
        _resume_after_a_stop(jobs, doc, af_jobs_main)
        bad = tmp_path / "other.json"
        bad.write_text(json.dumps({**doc, "fingerprint": "0" * 64}))
        with pytest.raises(ValueError, match="other jobs"):
            af_pool_flow.fn(**opts, scores_from=str(bad))
        with pytest.raises(ValueError, match="seeds"):
            af_pool_flow.fn(**{**opts, "seed": 0}, scores_from=str(_reseeded(doc, tmp_path)))
        assert state(paths_b) == before
        applied = af_pool_flow.fn(**opts, scores_from=str(scores))
        assert applied["datasets"] == in_place["datasets"]
        assert state(paths_b) == done_here                              # the same datasets, byte for byte
    finally:
        cm_b.__exit__(None, None, None)


def _resume_after_a_stop(jobs: Path, doc: dict, af_jobs_main) -> None:
    """A run stopped part way (here: one seed's fold missing, another's half written, the scores file not
    yet written) goes on from the folds' logits it kept: the folds found are read, not trained again (their
    files untouched), the others trained again, and the logits are those of the run in one go; so are
    those of each seed's folds trained side by side in processes of their own. A broken export file ends
    the run with one line saying what to do, in this process and from a pool's worker."""
    seeds = [r["seed"] for r in doc["runs"]]
    files = {p.relative_to(jobs / "partial"): p for p in sorted((jobs / "partial").glob("*/fold-*.npz"))}
    assert sorted({k.parent.name.rsplit("-seed", 1)[1] for k in files}) == sorted(map(str, seeds))
    per_seed = [sum(k.parent == d for k in files) for d in {k.parent for k in files}]
    assert len(per_seed) == 2 and min(per_seed) >= 3  # folds of train recipes, the val and the test split
    lost, broken, cut, *kept = files.values()
    assert lost.parent != kept[-1].parent
    lost.unlink()
    broken.write_bytes(b"half a file")
    cut.write_bytes(cut.read_bytes()[:200])          # a zip cut short (a partial copy)
    stamps = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in kept}
    (jobs / "scores.json").unlink()
    assert af_jobs_main([str(jobs), "--workers", "1"]) == 0
    again = json.loads((jobs / "scores.json").read_text())
    assert [r["scores"] for r in again["runs"]] == [r["scores"] for r in doc["runs"]]
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in kept} == stamps
    assert lost.is_file() and broken.read_bytes() != b"half a file" and len(cut.read_bytes()) > 200
    elsewhere = jobs.parent / "kept_folds"                                 # --partial: a folder of one's own
    out = jobs.parent / "s.json"
    assert af_jobs_main([str(jobs), "--workers", "1", "--partial", str(elsewhere), "--out", str(out)]) == 0
    assert sorted(p.relative_to(elsewhere) for p in elsewhere.glob("*/fold-*.npz")) == sorted(files)
    assert [r["scores"] for r in json.loads(out.read_text())["runs"]] == [r["scores"] for r in doc["runs"]]
    broken = jobs.parent / "broken_jobs"                # a broken export file: one line, exit 1, what to do
    shutil.copytree(jobs, broken, ignore=shutil.ignore_patterns("partial", "scores.json"))
    (broken / "export" / "image_vectors.parquet").write_bytes(b"PAR1 cut short")
    for w in ("1", "3"):                                # in this process, and from a process pool's worker
        with contextlib.redirect_stderr(io.StringIO()) as stderr:
            assert af_jobs_main([str(broken), "--workers", w]) == 1
        err = stderr.getvalue().splitlines()
        assert len(err) == 1 and err[0].startswith("error: training the jobs failed"), err
        assert "image_vectors.parquet" in err[0] and "run the same command again" in err[0]
    assert not (broken / "scores.json").exists()
    side_by_side, out = jobs.parent / "fold_jobs", jobs.parent / "f.json"          # more workers than seeds:
    assert af_jobs_main([str(jobs), "--workers", "3", "--partial", str(side_by_side), "--out", str(out)]) == 0
    assert sorted(p.relative_to(side_by_side) for p in side_by_side.glob("*/fold-*.npz")) == sorted(files)
    assert [r["scores"] for r in json.loads(out.read_text())["runs"]] == [r["scores"] for r in doc["runs"]]


def _reseeded(doc: dict, tmp_path: Path) -> Path:
    """A scores file whose runs claim other seeds (its fingerprint kept)."""
    out = tmp_path / "reseeded.json"
    out.write_text(json.dumps({**doc, "runs": [{**r, "seed": r["seed"] + 1} for r in doc["runs"]]}))
    return out


@pytest.mark.slow      # the check twice on a home of its own (~6 s)
def test_af_check_trained_on_another_machine_reads_the_same_figures(tmp_path_factory, tmp_path):
    """`af-check --jobs-out DIR`, `python -m training.af_jobs DIR`, `af-check --scores-from DIR/scores.json`:
    the same figures as the check with its models trained in place; scores of other seeds are refused."""
    from flows.af_pool import af_check_flow
    from training.af_jobs import run_jobs
    opts = {"task": "visual_cloze", "seeds": (0,), "folds": 2, "size": "tiny", "workers": 1, "fold_by": "split"}
    with synthetic_home(tmp_path_factory, "af_check_jobs", n_recipes=70, seed=3, dim=24, k=100) as (_h, paths, con):
        af = [(t, replace(p, af_rounds=AF_DEFAULT_ROUNDS)) for t, p in SETTINGS[:2]]
        generate_datasets(con, SETTINGS[:2] + af, seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False)
        con.close()
        in_place = af_check_flow.fn(**opts)
        res = af_check_flow.fn(**opts, jobs_out=str(tmp_path / "jobs"))
        assert res["jobs_written"] == str(tmp_path / "jobs") and res["runs"] == 1 and res["datasets"] == []
        scores = run_jobs(tmp_path / "jobs", workers=1)
        assert af_check_flow.fn(**opts, scores_from=str(scores)) == in_place
        assert in_place["datasets"] and all(0 <= r["accuracy"] <= 1 for r in in_place["datasets"])
        with pytest.raises(ValueError, match="other jobs"):             # seed 1's check is another model
            af_check_flow.fn(**{**opts, "seeds": (1,)}, scores_from=str(scores))


def test_a_broken_jobs_folder_is_refused_with_what_to_do(tmp_path, capsys):
    """`python -m training.af_jobs DIR` on no folder, unreadable JSON, another format, a partial copy or a
    --partial folder it cannot write: exit 2 and one line saying what to do, nothing trained."""
    from training.af_jobs import FORMAT, main
    jobs = tmp_path / "jobs"
    assert main([str(jobs)]) == 2 and "holds no jobs.json" in capsys.readouterr().err
    jobs.mkdir()
    (jobs / "jobs.json").write_text("{bad")
    assert main([str(jobs)]) == 2 and "not readable JSON" in capsys.readouterr().err
    (jobs / "jobs.json").write_text(json.dumps({"format": "other"}))
    assert main([str(jobs)]) == 2 and "not a jobs file of this version" in capsys.readouterr().err
    (jobs / "jobs.json").write_text(json.dumps({"format": FORMAT, "vector_ids": ["a.jpg"], "seeds": [0]}))
    assert main([str(jobs)]) == 2 and "lacks export, alt_vectors.npy" in capsys.readouterr().err
    (jobs / "jobs.json").write_text(json.dumps({"format": FORMAT, "vector_ids": [], "seeds": [0],
                                                "fingerprint": "0" * 64}))
    (jobs / "export").mkdir()
    (tmp_path / "a_file").write_text("")
    assert main([str(jobs), "--partial", str(tmp_path / "a_file")]) == 2
    err = capsys.readouterr().err
    assert "cannot keep the folds' logits" in err and "--partial FOLDER" in err and len(err.splitlines()) == 1
    assert not (jobs / "scores.json").exists()


@pytest.mark.slow      # an opt-in step on a home of its own (~11 s)
def test_the_pipeline_runs_the_textual_cloze_pooled_step_when_asked(tmp_path_factory, monkeypatch, prefect_harness):
    """`mrqa demo/pipeline --textual-cloze-pooled`: the generate stage ends with the pooled step on the
    textual cloze AF datasets (made with AF's own drop): swap rounds of titles, then the drop; its summary
    holds their final counts. Without the flag the stage's parameters (its fingerprint) are what they
    were, so a home made before does not generate again."""
    import inspect

    from flows import pipeline
    from flows.af_pool import WORDS_SEED
    from flows.pipeline import build_stages, pipeline_flow
    monkeypatch.setattr(pipeline, "TEXTUAL_POOL", {**pipeline.TEXTUAL_POOL, "size": "tiny", "folds": 2,
                                                   "adversaries": 1, "workers": 1})
    tc = [("textual_cloze", KnobParams.preset_for("textual_cloze", 0, 1, k3)) for k3 in (0, 1)]
    with synthetic_home(tmp_path_factory, "textual_pipeline", n_recipes=90, seed=3, dim=24, k=100) as (
            _h, paths, con):
        generate_datasets(con, tc + [(t, replace(p, af_rounds=AF_DEFAULT_ROUNDS)) for t, p in tc], seed=0,
                          encoder_id=ENC, lance_uri=paths.lance, progress=False)
        con.close()
        out = pipeline._textual(paths, {"seed": 0})
        con = duckdb.connect(str(paths.warehouse), read_only=True)
        rows = dict(con.execute("SELECT dataset_id, n_questions FROM datasets WHERE adversarial").fetchall())
        params = {d: json.loads(p)["af_pooled"] for d, p in con.execute(
            "SELECT dataset_id, params FROM datasets WHERE adversarial").fetchall()}
        con.close()
        assert sorted(out) == sorted(rows) and all(out[d]["kept"] == n for d, n in rows.items())
        from flows.demo import demo_digest  # the demo's summary reads the step's result as it is
        gen = {"stage": "generate", "status": "completed", "seconds": 1.0, "cpu_s": 1.0,
               "summary": {"textual_cloze_pooled": out}}
        line = demo_digest({"stages": [gen], "total_s": 1.0})["counts"]["af_pool"]["textual_cloze"]
        assert line == f"{sum(rows.values())} kept / {sum(r['dropped'] for r in out.values())} dropped over 2 datasets"
        for step in params.values():
            assert step["rounds"] == 2 and step["tree"] and step["linear"] and step["min_kept"] == 0.4
            assert step["words"] and step["words_seed"] == WORDS_SEED        # the words probe's two lists too
            assert step["drop_order"] == "the list whose adversary solves the most kept questions first"
            assert [x["round"] for x in step["swap_rounds"]] == [1, 2]        # (the swaps: tested above)
        defaults = {k: v.default for k, v in inspect.signature(pipeline_flow.fn).parameters.items()}
        gen = {m: next(s for s in build_stages({**defaults, "textual_cloze_pooled": m}, paths)
                       if s.name == "generate") for m in (False, True)}
    assert "textual_cloze_pooled" not in gen[False].params and gen[True].params["textual_cloze_pooled"]
    assert {k: v for k, v in gen[True].params.items() if k != "textual_cloze_pooled"} == gen[False].params


def test_the_rules_list_is_the_reports_distance_rule_on_every_question(home):
    """`mrqa af-pool --rules`: the drop's list of the task's distance rule gives every question the report's
    verdict (cloze: the centre of the choices; coherence: the closest pair), so the share it solves is the
    report's figure; the surest picks rank first, every solved one passes tau 0.5, and it is deterministic."""
    from features.diagnostics.bias import VectorLookup, centre_rule, pair_rule, resolve_dataset
    from flows.af_pool import _resolved, _rules_oof
    con, paths = home["con"], home["paths"]
    lookup = VectorLookup(paths.lance, ENC, "image")
    for task, rule in (("visual_cloze", centre_rule), ("visual_coherence", pair_rule)):
        ids = [d for (d,) in con.execute("SELECT dataset_id FROM datasets WHERE task = ? AND adversarial AND "
                                         "n_questions > 0 ORDER BY 1", [task]).fetchall()]
        v = _rules_oof(con, paths, ids, task)
        assert v == _rules_oof(con, paths, ids, task) and set(v) == set(ids)
        # the questions resolved once for the linear probe and the rule (the flow's `_resolved`): the same verdicts
        assert _rules_oof(con, paths, ids, task, _resolved(con, paths, ids, task)) == v
        for d in ids:
            res = resolve_dataset(con, d, lookup, task)
            assert set(v[d]) == set(res.qids)
            solved = [v[d][q][1] for q in res.qids]
            assert sum(solved) / len(solved) == pytest.approx(rule(task, res.choice_rows, lookup.mat, res.answers))
            conf = [p for p, _ in v[d].values()]
            assert min(conf) >= 0.5 and max(conf) == 1.0
        assert 0 < sum(r for qs in v.values() for _, r in qs.values()) < sum(len(qs) for qs in v.values())


def test_pair_margins_pick_the_closest_pair_rule_and_say_how_clearly():
    from features.diagnostics.bias import closest_pair_pick, pair_margins
    rng = np.random.default_rng(4)
    x = rng.normal(size=(50, 4, 8))
    pick, margin = pair_margins(x)
    assert (pick == closest_pair_pick(x)).all() and (margin >= 0).all()
    e = np.eye(4)
    near = np.stack([e[0], e[1], e[2], e[2] + 0.1 * e[3]])[None]        # images 2 and 3: cosine 0.995
    pick, margin = pair_margins(near)
    assert pick[0] in (2, 3) and margin[0] == pytest.approx(1 / np.sqrt(1.01))    # the next pairs: cosine 0


def test_the_rules_list_is_refused_for_ordering(home, monkeypatch):
    from flows.af_pool import af_pool_flow
    monkeypatch.setenv("MRQA_HOME", str(home["paths"].home))
    with pytest.raises(ValueError, match="ordering has no distance rule"):
        af_pool_flow.fn(task="visual_ordering", rules=True)


def test_a_fold_jobs_process_loads_an_export_once_and_again_when_its_files_change(home, tmp_path):
    """`_loaded_once`: the fold jobs a process runs in turn read one export; the second job gets the
    datasets the first loaded, and an export written again (or another one) is loaded again."""
    import os

    from features.datasets.export import export_parquet
    from training.af_pooled import _loaded_once
    from training.config import resolve_configs
    con, paths = home["con"], home["paths"]
    ids = sorted(home["before"])
    export_parquet(con, ids, tmp_path / "x", with_vectors=True, lance_uri=paths.lance)
    _, tc = resolve_configs("tiny", text_features="vectors", max_epochs=2, patience=1, seed=0)
    first = _loaded_once(tmp_path / "x", ids, tc, paths.lance)
    assert _loaded_once(tmp_path / "x", ids, tc, paths.lance) is first
    assert [d.dataset_id for d in first] == ids and all(len(d.splits) for d in first)
    f = next((tmp_path / "x").rglob("*.parquet"))
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))
    again = _loaded_once(tmp_path / "x", ids, tc, paths.lance)
    assert again is not first and [d.dataset_hash for d in again] == [d.dataset_hash for d in first]
    assert _loaded_once(tmp_path / "x", ids[:1], tc, paths.lance) is not again


def test_guided_scores_are_the_mean_of_both_adversaries_log_probabilities():
    """`mrqa af-pool --pixel-swaps`: a coherence question's choices and alternates are scored by the mean of
    the GM3C ensemble's and the CNN's log-probabilities, so a swap picks an alternate both find plausible; an
    alternate the CNN could not read keeps GM3C's alone; a question it did not score too; mismatches raise."""
    from training.af_pooled import guided_scores

    def lsm(x):
        x = np.asarray(x, float)
        return x - x.max(-1, keepdims=True) - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True))
    gm = {"d": {"q1": {"choices": np.array([3.0, 0, 0, 0]), "answer": 0,
                       "alts": np.array([[0.0, 2, 0, 0], [0.0, 0, 0, 0], [1.0, 0, 0, 0]])},
                "q2": {"choices": np.array([0.0, 1, 0, 0]), "answer": 1, "alts": np.zeros((0, 4))}}}
    px = {"d": {"q1": {"choices": np.array([0.0, 0, 0, 0]), "answer": 0,
                       "alts": np.array([[5.0, 0, 0, 0], [0.0, 0, 3, 0], [np.nan] * 4])}}}
    g = guided_scores(gm, px)["d"]
    np.testing.assert_allclose(g["q1"]["choices"], (lsm([3.0, 0, 0, 0]) + lsm([0.0] * 4)) / 2, atol=1e-6)
    np.testing.assert_allclose(g["q1"]["alts"][:2], (lsm(gm["d"]["q1"]["alts"][:2]) + lsm(px["d"]["q1"]["alts"][:2]))
                               / 2, atol=1e-6)
    np.testing.assert_allclose(g["q1"]["alts"][2], lsm([1.0, 0, 0, 0]), atol=1e-6)     # unread by the CNN
    np.testing.assert_allclose(g["q2"]["choices"], lsm([0.0, 1, 0, 0]), atol=1e-6)     # not scored by it
    # the first alternate makes GM3C miss (choice 1 above the answer) but the CNN sees it: together they do not
    assert g["q1"]["alts"][0].argmax() == 0 and gm["d"]["q1"]["alts"][0].argmax() == 1
    alone = guided_scores(gm, {})["d"]["q1"]
    np.testing.assert_allclose(alone["alts"], lsm(gm["d"]["q1"]["alts"]), atol=1e-6)
    with pytest.raises(ValueError, match="disagree on the answer"):
        guided_scores(gm, {"d": {"q1": {**px["d"]["q1"], "answer": 2}}})
    with pytest.raises(ValueError, match="2 alternates scored, 3 recorded"):
        guided_scores(gm, {"d": {"q1": {**px["d"]["q1"], "alts": px["d"]["q1"]["alts"][:2]}}})
