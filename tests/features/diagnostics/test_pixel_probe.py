"""The pixel probe (features/diagnostics/pixel_probe.py): a CNN question-only model trained on the photos.

A synthetic world whose photos are real image files (tests/features/planted_photos.py): with a planted
giveaway (every photo of a recipe on its recipe's own background colour) the CNN reads near 100% of visual
cloze and coherence; with the colours drawn per photo it stays near chance. The val and test folds never
train on a photo they score; unreadable photos are counted and their questions left out; the figures are the
same whatever the workers; `mrqa pixel-probe` is read-only and refuses bad input in one line."""
from __future__ import annotations

import hashlib
import json

import duckdb
import numpy as np
import pytest
from planted_photos import break_photos, photo_world, write_photos
from typer.testing import CliRunner

from features.datasets.knobs import KnobParams
from features.diagnostics.pixel_probe import (
    MAX_TRAIN_FOLDS,
    fold_jobs,
    folds,
    photo_index,
    pixel_probe_rows,
    pixel_questions,
    record_pixel_checks,
    train_fold_count,
)

SETTINGS = [("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 1)),
            ("visual_coherence", KnobParams.preset_for("visual_coherence", 0, 1, 0)),
            ("visual_ordering", KnobParams.preset_for("visual_ordering", 0, 1, 0)),
            ("textual_cloze", KnobParams.preset_for("textual_cloze", 0, 1, 0))]
EPOCHS = 8
SIDE = 32                   # the probe at a test's size (its default, 64 x 64, is 4 times the work)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with photo_world(tmp_path_factory, "pixel_home", SETTINGS) as w:
        yield w


def _by_task(res: dict) -> dict:
    return {r["task"]: r for r in res["datasets"]}


def test_a_planted_look_is_learned_and_photos_without_it_stay_near_chance(world):
    con, home, ids = world["con"], world["home"], world["ids"]
    names = [ids["visual_cloze"], ids["visual_coherence"]]
    write_photos(con, home, planted=True)
    planted = _by_task(pixel_probe_rows(con, home, names, epochs=EPOCHS, workers=1, side=SIDE))
    for task in ("visual_cloze", "visual_coherence"):
        r = planted[task]
        assert r["n_scored"] == r["n_questions"] > 40 and r["n_left_out"] == 0, r
        assert r["accuracy"] > 0.85, r
        lo, hi = r["ci"]
        assert lo <= r["accuracy"] <= hi
        assert (r["n_test"] > 0) == (r["test_accuracy"] is not None)
    assert planted["visual_coherence"]["n_test"] > 0            # this world's 3 test recipes hold coherence questions
    write_photos(con, home, planted=False, seed=1)
    try:
        plain = _by_task(pixel_probe_rows(con, home, names, epochs=EPOCHS, workers=1, side=SIDE))
    finally:
        write_photos(con, home, planted=True)
    for task in ("visual_cloze", "visual_coherence"):
        assert 0.05 < plain[task]["accuracy"] < 0.45, plain[task]


def test_the_val_and_test_folds_never_train_on_a_photo_they_score(world):
    con, home, ids = world["con"], world["home"], world["ids"]
    write_photos(con, home, planted=True)
    index = photo_index(con)
    for task in ("visual_cloze", "visual_coherence", "visual_ordering"):
        pq = pixel_questions(con, home, ids[task], task, index)
        f = folds(pq.recipes, pq.splits, seed=0)
        sp = np.array(pq.splits)
        k = train_fold_count(pq.splits)
        assert 2 <= k <= MAX_TRAIN_FOLDS
        assert set(f[sp == "val"]) == {k} and set(f[sp == "test"]) <= {k + 1} and set(f[sp == "train"]) == set(range(k))
        by_recipe = {}
        for r, fold in zip(pq.recipes, f):
            by_recipe.setdefault(r, set()).add(int(fold))
        assert all(len(v) == 1 for v in by_recipe.values())          # a recipe's questions share one fold

        def photos(rows, pq=pq):
            return set(pq.shown[rows][pq.shown[rows] >= 0].ravel()) | set(pq.choices[rows].ravel())
        for fold, job in fold_jobs(pq, seed=0, epochs=1):
            train, stop, held = job[5], job[6], job[7]
            assert not set(train) & set(held) and not set(stop) & set(held)
            assert set(train) | set(stop) | set(held) == set(range(len(pq.qids)))
            assert len({pq.recipes[i] for i in stop} & {pq.recipes[i] for i in train}) == 0
            if fold >= k:                                              # the val and test splits, held out whole
                assert not photos(held) & photos(np.concatenate([train, stop])), (task, fold)


def test_every_fold_model_trains_on_at_least_what_the_test_split_model_trains_on():
    """The train split is cut in as many folds as it takes for none to hold more questions than the test
    split (2 at least, MAX_TRAIN_FOLDS at most), in near-equal folds by recipe."""
    rng = np.random.default_rng(3)
    recipes, splits = [], []
    for n, split in enumerate(["train"] * 300 + ["val"] * 40 + ["test"] * 50):
        recipes += [f"r{n}"] * int(rng.integers(1, 6))
        splits += [split] * (len(recipes) - len(splits))
    k = train_fold_count(splits)
    n_train, n_test = splits.count("train"), splits.count("test")
    assert k == min(MAX_TRAIN_FOLDS, max(2, -(-n_train // n_test))) and k > 2
    f = folds(recipes, splits, seed=0)
    sizes = np.bincount(f[np.array(splits) == "train"], minlength=k)
    assert len(sizes) == k and sizes.max() - sizes.min() <= 5          # near-equal: within one recipe's questions
    trained = [len(recipes) - s for s in sizes]
    assert min(trained) >= len(recipes) - n_test - 5                   # every fold's model: about the test one's
    assert (folds(recipes, splits, seed=0) == f).all() and not (folds(recipes, splits, seed=1) == f).all()
    for r in set(recipes):                                             # a recipe's questions share one fold
        assert len({int(x) for x, rr in zip(f, recipes) if rr == r}) == 1
    assert train_fold_count(["train"] * 50 + ["test"] * 40) == 2
    assert train_fold_count(["train"] * 5000 + ["test"] * 10) == MAX_TRAIN_FOLDS
    assert train_fold_count(["train"] * 90 + ["val"] * 10) == 9       # no test split: the val split's size


def test_the_figures_are_the_same_in_processes_and_in_turn_and_ordering_is_scored(world):
    con, home, ids = world["con"], world["home"], world["ids"]
    write_photos(con, home, planted=True)
    names = [ids["visual_cloze"], ids["visual_ordering"]]
    one = pixel_probe_rows(con, home, names, epochs=3, workers=1, side=SIDE)
    two = pixel_probe_rows(con, home, names, epochs=3, workers=2, side=SIDE)
    strip = lambda res: [{k: v for k, v in r.items() if not k.startswith("seconds")} for r in res["datasets"]]
    assert strip(one) == strip(two)
    other = pixel_probe_rows(con, home, names, epochs=3, workers=1, seed=1, side=SIDE)
    assert strip(other) != strip(one)
    order = _by_task(one)["visual_ordering"]
    assert order["n_scored"] == order["n_questions"] > 20 and 0 <= order["accuracy"] <= 1


def test_unreadable_and_missing_photos_are_counted_and_their_questions_left_out(world):
    con, home, ids = world["con"], world["home"], world["ids"]
    write_photos(con, home, planted=True)
    victims = break_photos(con, home, ids["visual_cloze"])
    try:
        res = pixel_probe_rows(con, home, [ids["visual_cloze"]], epochs=1, workers=1, side=SIDE)
    finally:
        write_photos(con, home, planted=True)
    r = res["datasets"][0]
    assert sum(res["photos_unreadable"].values()) == len(victims)
    assert res["photos_unreadable"].get("unreadable") == 1
    assert 3 <= r["n_left_out"] < r["n_questions"] and r["n_scored"] == r["n_questions"] - r["n_left_out"]


def test_cli_is_read_only_and_refuses_bad_input_in_one_line(world, monkeypatch):
    from flows.cli import app
    con, home, ids, paths = world["con"], world["home"], world["ids"], world["paths"]
    write_photos(con, home, planted=True)
    con.execute("CHECKPOINT")
    monkeypatch.setenv("MRQA_HOME", str(home))
    before = hashlib.sha256(paths.warehouse.read_bytes()).hexdigest()
    con.close()
    try:
        r = CliRunner().invoke(app, ["--no-prefect", "pixel-probe", "--dataset", ids["visual_coherence"],
                                     "--epochs", "2", "--workers", "1", "--json"])
        assert r.exit_code == 0, r.output
        out = json.loads(r.output[r.output.index("{"):])
        assert out["datasets"][0]["dataset_id"] == ids["visual_coherence"] and out["epochs"] == 2
        r = CliRunner().invoke(app, ["--no-prefect", "pixel-probe", "--dataset", ids["visual_coherence"],
                                     "--epochs", "1", "--side", "16", "--workers", "1"])
        assert r.exit_code == 0 and ids["visual_coherence"] in r.output and "chance 25.0%" in r.output, r.output
        for args, msg in ((["--dataset", ids["textual_cloze"]], "textual cloze shows none"),
                          (["--dataset", "nope-1"], "unknown dataset(s): nope-1"),
                          (["--side", "4"], "--side must be 8 to 128"),
                          (["--epochs", "0"], "--epochs must be 1 or more"),
                          (["--workers", "0"], "--workers must be 1 or more"),
                          (["--seed", "-1"], "--seed must be 0 or more")):
            bad = CliRunner().invoke(app, ["--no-prefect", "pixel-probe", *args])
            assert bad.exit_code == 2 and msg in bad.output and "Traceback" not in bad.output, bad.output
        assert hashlib.sha256(paths.warehouse.read_bytes()).hexdigest() == before
        r = CliRunner().invoke(app, ["--no-prefect", "pixel-probe", "--dataset", ids["visual_coherence"],
                                     "--epochs", "1", "--workers", "1", "--record"])
        assert r.exit_code == 0, r.output
        with duckdb.connect(str(paths.warehouse), read_only=True) as ro:
            assert ro.execute("SELECT epochs FROM pixel_checks WHERE dataset_id = ?",
                              [ids["visual_coherence"]]).fetchall() == [(1,)]
    finally:
        world["con"] = duckdb.connect(str(paths.warehouse))


def test_a_recorded_figure_holds_while_the_dataset_is_unchanged(world):
    from features.datasets.card import pixel_checks
    con, home, ids = world["con"], world["home"], world["ids"]
    write_photos(con, home, planted=True)
    vc = ids["visual_cloze"]
    con.execute("DELETE FROM pixel_checks")              # the CLI test may have recorded one before
    res = pixel_probe_rows(con, home, [vc], epochs=2, workers=1, side=SIDE)
    r = res["datasets"][0]
    assert record_pixel_checks(con, res) == 1
    sha = con.execute("SELECT content_sha256 FROM datasets WHERE dataset_id = ?", [vc]).fetchone()[0]
    row = con.execute("SELECT content_sha256, task, n, accuracy, ci_low, ci_high, n_test, seed, side, epochs, "
                      "train_folds, fewest_trained FROM pixel_checks WHERE dataset_id = ?", [vc]).fetchone()
    assert row == (sha, "visual_cloze", r["n_scored"], r["accuracy"], *r["ci"], r["n_test"], 0, 32, 2,
                   r["train_folds"], r["fewest_trained"])
    assert r["train_folds"] >= 2 and r["fewest_trained"] > 0
    assert pixel_checks(con, [vc, ids["visual_coherence"]]) == {vc: r["accuracy"]}
    record_pixel_checks(con, pixel_probe_rows(con, home, [vc], epochs=1, workers=1, side=SIDE))  # replaced, not added
    assert con.execute("SELECT count(*), any_value(epochs) FROM pixel_checks WHERE dataset_id = ?",
                       [vc]).fetchone() == (1, 1)
    con.execute("UPDATE pixel_checks SET train_folds = NULL WHERE dataset_id = ?", [vc])
    assert pixel_checks(con, [vc]) == {}                      # measured before migration 119's folds: not read
    con.execute("UPDATE pixel_checks SET train_folds = 2 WHERE dataset_id = ?", [vc])
    con.execute("UPDATE datasets SET content_sha256 = 'made again' WHERE dataset_id = ?", [vc])
    try:
        assert pixel_checks(con, [vc]) == {}                                         # stale: not read
    finally:
        con.execute("UPDATE datasets SET content_sha256 = ? WHERE dataset_id = ?", [sha, vc])


def test_the_pooled_steps_pixel_list_is_the_probes_out_of_fold_verdicts(world):
    """`mrqa af-pool --pixel 32`: one verdict per question from the CNN of a fold that never saw its recipe;
    with the recipe's own background planted it solves most coherence questions, without it about a quarter;
    the same verdicts twice; textual cloze and a bad side are refused before any work."""
    from flows.af_pool import _pixel_oof, af_pool_flow
    con, home, paths, ids = world["con"], world["home"], world["paths"], world["ids"]
    did = ids["visual_coherence"]
    n = con.execute("SELECT count(*) FROM questions WHERE dataset_id = ?", [did]).fetchall()[0][0]
    write_photos(con, home, planted=True)
    v = _pixel_oof(con, paths, [did], seed=5, side=32)
    assert len(v[did]) == n > 40
    assert all(0.0 <= p <= 1.0 for p, _ in v[did].values())
    assert sum(r for _, r in v[did].values()) / n > 0.7
    assert _pixel_oof(con, paths, [did], seed=5, side=32) == v
    write_photos(con, home, planted=False, seed=1)
    try:
        plain = _pixel_oof(con, paths, [did], seed=5, side=32)
        assert sum(r for _, r in plain[did].values()) / n < 0.45
    finally:
        write_photos(con, home, planted=True)
    with pytest.raises(ValueError, match="reads photos: textual cloze shows none"):
        af_pool_flow.fn(task="textual_cloze", pixel=32)
    with pytest.raises(ValueError, match="--pixel must be a side of 8 to 128"):
        af_pool_flow.fn(task="visual_coherence", pixel=4)


def test_the_swap_rounds_pixel_scores_scores_each_alternate_in_the_foreign_photos_place(world):
    """`mrqa af-pool --pixel-swaps`: the CNN of the question's fold scores each alternate foreign photo in the
    answer's place. The foreign photo itself as an alternate gets the question's own logits; a photo of the
    question's own recipe there (no foreign photo left) makes the answer less likely than any foreign one,
    with the recipe's background planted; an alternate with no file gets NaN logits and is named; the same
    logits twice; anything but coherence with --pixel is refused before any work."""
    from flows.af_pool import _pixel_scores, af_pool_flow
    con, home, paths, ids = world["con"], world["home"], world["paths"], world["ids"]
    did = ids["visual_coherence"]
    write_photos(con, home, planted=True)
    rows = con.execute("SELECT qid, answer, choice_list, recipe_id FROM questions WHERE dataset_id = ? ORDER BY qid",
                       [did]).fetchall()
    others = {r: [i for (i,) in con.execute("SELECT image_id FROM images WHERE recipe_id <> ? ORDER BY image_id "
                                            "LIMIT 1", [r]).fetchall()] for _, _, _, r in rows}
    items = {(did, q): [ch[a], ch[(a + 1) % 4], *others[r], "no-such-photo"] for q, a, ch, r in rows}
    got = _pixel_scores(con, paths, [did], seed=3, side=SIDE, items=items)[did]
    assert len(got) == len(rows) > 40
    own, foreign = [], []
    for q, a, _, _ in rows:
        s = got[q]
        assert s["alts"].shape == (4, 4)
        np.testing.assert_allclose(s["alts"][0], s["choices"], atol=1e-4)   # the foreign photo in its own place
        assert np.isnan(s["alts"][3]).all() and not np.isnan(s["alts"][:3]).any()
        p = np.exp(s["alts"][:3]) / np.exp(s["alts"][:3]).sum(1, keepdims=True)
        own.append(p[1, a])
        foreign.append(p[2, a])
    assert np.mean(own) < 0.5 < np.mean(foreign), (np.mean(own), np.mean(foreign))
    again = _pixel_scores(con, paths, [did], seed=3, side=SIDE, items=items)[did]
    assert all(np.array_equal(again[q]["alts"], got[q]["alts"], equal_nan=True) for q in got)
    for kw in ({"task": "visual_coherence", "pixel_swaps": True},
               {"task": "visual_cloze", "pixel": 32, "pixel_swaps": True}):
        with pytest.raises(ValueError, match="--pixel-swaps: the CNN scores alternate foreign photos"):
            af_pool_flow.fn(**kw)


@pytest.mark.slow     # a photo world of its own and a pooled step with two CNN passes (~60 s on 2 cores)
def test_af_pool_pixel_swaps_swap_by_both_adversaries_and_keep_the_author_rule(tmp_path_factory):
    """`mrqa af-pool --pixel 16 --pixel-swaps` on the author coherence AF dataset: a round's swaps are picked
    by the mean of GM3C's and the CNN's log-probabilities (the recorded logits of every swap are such: at most
    0), the round's log carries the CNN's out-of-fold accuracy, params.af_pooled records the option, and every
    kept question's foreign photo still comes from another recipe of the question's author."""
    from dataclasses import replace

    from features.datasets.knobs import AF_DEFAULT_ROUNDS
    from flows.af_pool import af_pool_flow
    author_af = replace(KnobParams.preset_for("visual_coherence", 0, 0, 0, distractors="author"),
                        af_rounds=AF_DEFAULT_ROUNDS)
    settings = [("visual_coherence", KnobParams.preset_for("visual_coherence", 0, 0, 0)),
                ("visual_coherence", author_af)]
    with photo_world(tmp_path_factory, "pixel_swaps_home", settings, authors=8) as w:
        con, home, paths = w["con"], w["home"], w["paths"]
        write_photos(con, home, planted=True)
        did = con.execute("SELECT dataset_id FROM datasets WHERE dataset_id LIKE '%author-af%'").fetchall()[0][0]
        con.execute("CHECKPOINT")
        con.close()
        try:
            res = af_pool_flow.fn(task="visual_coherence", distractors="author", tau=0.3, folds=2, size="tiny",
                                  rounds=1, solved_share=0.05, min_kept=0.4, pixel=16, pixel_swaps=True)
        finally:
            w["con"] = con = duckdb.connect(str(paths.warehouse))
        assert res["pixel_swaps"] is True and [r["dataset_id"] for r in res["datasets"]] == [did]
        params = json.loads(con.execute("SELECT params FROM datasets WHERE dataset_id = ?", [did]).fetchone()[0])
        pooled = params["af_pooled"]
        assert pooled["pixel_swaps"] is True and pooled["pixel_side"] == 16
        rnd = pooled["swap_rounds"][0]
        assert rnd["round"] == 1 and rnd["pixel_oof_acc"] > 0.7          # the planted background, seen by the CNN
        author = dict(con.execute("SELECT recipe_id, author FROM recipes").fetchall())
        swaps = 0
        for rid, prov in con.execute("SELECT recipe_id, provenance FROM questions WHERE dataset_id = ?",
                                     [did]).fetchall():
            p = json.loads(prov)
            assert p["foreign_recipe_id"] != rid and author[p["foreign_recipe_id"]] == author[rid]
            for s in p.get("af_pooled_swaps", []):
                swaps += 1
                assert max(s["logits_before"] + s["logits_after"]) <= 0.0      # mean log-probabilities
        assert swaps > 0


def test_the_device_comes_from_the_environment_and_a_bad_one_is_refused_before_any_work(world, monkeypatch):
    """MRQA_PIXEL_DEVICE: unset or cpu, the CPU (the recorded figures'); auto, CUDA where there is one (here the
    CPU, so the same figures); another value, or cuda without a CUDA device, a ValueError that says what to set."""
    import torch

    from features.diagnostics.pixel_probe import pixel_device
    con, home, ids = world["con"], world["home"], world["ids"]
    write_photos(con, home, planted=True)
    names = [ids["visual_coherence"]]
    monkeypatch.delenv("MRQA_PIXEL_DEVICE", raising=False)
    assert pixel_device() == "cpu"
    base = pixel_probe_rows(con, home, names, epochs=1, workers=1, side=16)
    assert base["device"] == "cpu"
    monkeypatch.setenv("MRQA_PIXEL_DEVICE", "gpu")
    with pytest.raises(ValueError, match="MRQA_PIXEL_DEVICE must be one of cpu, cuda, auto, got 'gpu'"):
        pixel_probe_rows(con, home, names, epochs=1, workers=1, side=16)
    if not torch.cuda.is_available():
        monkeypatch.setenv("MRQA_PIXEL_DEVICE", "cuda")
        with pytest.raises(ValueError, match="sees no CUDA device: unset it"):
            pixel_probe_rows(con, home, names, epochs=1, workers=1, side=16)
        monkeypatch.setenv("MRQA_PIXEL_DEVICE", " Auto ")
        auto = pixel_probe_rows(con, home, names, epochs=1, workers=1, side=16)
        strip = lambda res: [{k: v for k, v in r.items() if not k.startswith("seconds")} for r in res["datasets"]]
        assert auto["device"] == "cpu" and strip(auto) == strip(base)


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_the_probe_and_its_alternates_on_cuda_learn_the_planted_look_the_same_twice(world, monkeypatch):
    """MRQA_PIXEL_DEVICE=cuda: the folds train on the GPU (in turn), learn the planted background, and give
    the same figures twice (cuDNN's deterministic kernels); the pooled step's alternates are scored there too."""
    from flows.af_pool import _pixel_scores
    con, home, paths, ids = world["con"], world["home"], world["paths"], world["ids"]
    write_photos(con, home, planted=True)
    monkeypatch.setenv("MRQA_PIXEL_DEVICE", "cuda")
    names = [ids["visual_cloze"], ids["visual_coherence"]]
    one = pixel_probe_rows(con, home, names, epochs=EPOCHS, workers=2, side=SIDE)
    two = pixel_probe_rows(con, home, names, epochs=EPOCHS, workers=2, side=SIDE)
    assert one["device"] == "cuda"
    assert [r["accuracy"] for r in one["datasets"]] == [r["accuracy"] for r in two["datasets"]]
    assert all(r["accuracy"] > 0.85 for r in one["datasets"]), one["datasets"]
    did = ids["visual_coherence"]
    rows = con.execute("SELECT qid, answer, choice_list FROM questions WHERE dataset_id = ?", [did]).fetchall()
    got = _pixel_scores(con, paths, [did], seed=3, side=SIDE, items={(did, q): [ch[a]] for q, a, ch in rows})[did]
    for q in got:
        np.testing.assert_allclose(got[q]["alts"][0], got[q]["choices"], atol=1e-3)
