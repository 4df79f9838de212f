"""The tree probe (features/diagnostics/tree_probe.py) on hand-made worlds: near 100% on a planted
giveaway and near chance without one; a cue no linear probe can read (an interaction of two set-level
features) and the trees read; folds that hold the val and test splits out whole; determinism; and the
pooled adversary's drop taking the tree's list in turn."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from features.diagnostics.question_only import N_SET_FEATURES, question_only_probe, task_features
from features.diagnostics.tree_probe import (
    folds_for,
    tree_features,
    tree_probe,
    tree_scores,
    tree_scores_many,
    tree_threads,
    tree_workers,
)
from training.af_pooled import drop_plan


def _worlds():
    """The hand-made vector worlds of the linear probe's tests (one definition of them)."""
    path = Path(__file__).with_name("test_question_only.py")
    spec = importlib.util.spec_from_file_location("qo_worlds", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.WORLDS


WORLDS = _worlds()


@pytest.mark.parametrize("task", ["visual_cloze", "visual_coherence"])
def test_planted_giveaway_is_found_and_no_signal_stays_near_chance(task):
    q, c, y, g, mat = WORLDS[task](400, planted=True)
    res = tree_probe(task_features(task, q, c, mat), y, g, seed=0)
    assert res.accuracy > 0.9, res
    assert res.n == 400 and res.chance == 0.25 and res.scores.shape == (400, 4)
    q, c, y, g, mat = WORLDS[task](400, planted=False)
    res = tree_probe(task_features(task, q, c, mat), y, g, seed=0)
    assert 0.15 < res.accuracy < 0.35, res


def test_shuffled_answers_leave_only_chance():
    q, c, _, g, mat = WORLDS["visual_cloze"](400, planted=True)
    y = np.random.default_rng(7).integers(0, 4, size=400)
    res = tree_probe(task_features("visual_cloze", q, c, mat), y, g, seed=0)
    assert 0.15 < res.accuracy < 0.35, res


def _interaction_world(n: int = 800, seed: int = 0):
    """Probe features whose set-level part holds a per-choice value a and a per-question sign s: the
    answer is the choice with the largest a where s > 0 and the smallest where s < 0. A conditional logit
    adds w.a + v.s per choice, and s is the same for every choice of a question, so it cannot read this;
    one split on s and one on a do."""
    rng = np.random.default_rng(seed)
    X = np.zeros((n, 4, 8 + N_SET_FEATURES), np.float32)
    a = rng.normal(size=(n, 4))
    s = rng.choice([-1.0, 1.0], size=n)
    X[..., 8] = a
    X[..., 9] = s[:, None]
    X[..., :8] = rng.normal(size=(n, 4, 8))             # raw dimensions the trees never see
    y = np.where(s > 0, a.argmax(1), a.argmin(1))
    return X, y, [f"r{i // 2}" for i in range(n)]


def test_a_cue_only_trees_read():
    X, y, g = _interaction_world()
    tree = tree_probe(X, y, g, seed=0)
    linear = question_only_probe(X, y, g, seed=0)
    assert tree.accuracy > 0.85, tree
    assert linear.accuracy < 0.6, linear                 # it can only read "the largest a" on half


def test_tree_features_are_the_set_part_and_its_question_relative_copy():
    X, _, _ = _interaction_world(10)
    F = tree_features(X)
    assert F.shape == (10, 4, 2 * N_SET_FEATURES)
    np.testing.assert_allclose(F[..., :N_SET_FEATURES], X[..., -N_SET_FEATURES:])
    np.testing.assert_allclose(F[..., N_SET_FEATURES:].sum(1), 0, atol=1e-5)


def test_split_folds_hold_val_and_test_out_whole():
    groups = [f"r{i % 40}" for i in range(200)]
    splits = ["val" if i % 40 < 5 else "test" if i % 40 < 10 else "train" for i in range(200)]
    fold = folds_for(groups, splits, n_folds=4, seed=3, fold_by="split")
    sp = np.array(splits)
    assert set(fold[sp == "val"]) == {4} and set(fold[sp == "test"]) == {5}
    assert set(fold[sp == "train"]) <= {0, 1, 2, 3} and len(set(fold[sp == "train"])) == 4
    for r in set(groups):                               # a recipe in one fold
        assert len({f for f, gg in zip(fold, groups) if gg == r}) == 1
    with pytest.raises(ValueError, match="fold_by"):
        folds_for(groups, splits, fold_by="question")


def test_scores_are_deterministic_and_out_of_fold():
    X, y, g = _interaction_world(300, seed=1)
    F = tree_features(X)
    fold = folds_for(g, None, 4, seed=0)
    a, b = tree_scores(F, y, fold, seed=0), tree_scores(F, y, fold, seed=0)
    assert a.tobytes() == b.tobytes()
    # a question's score does not depend on its own answer: change the answers of one fold only
    y2 = y.copy()
    y2[fold == 0] = (y2[fold == 0] + 1) % 4
    c = tree_scores(F, y2, fold, seed=0)
    np.testing.assert_array_equal(a[fold == 0], c[fold == 0])


def test_the_drop_takes_the_three_lists_in_turn():
    """GM3C's, the linear probe's and the tree's lists, each most confident first, taken in turn; without
    the tree the plan is the two-list plan it always was."""
    gm3c = {"d": {"a": (0.9, True), "b": (0.8, True), "c": (0.2, False), "d": (0.2, False), "e": (0.2, False),
                  "f": (0.2, False)}}
    linear = {"d": {"c": (0.7, True), "d": (0.6, True)}}
    tree = {"d": {"e": (0.95, True), "f": (0.5, True), "a": (0.4, True)}}
    two = drop_plan(gm3c, {"d": 10}, tau=0.35, min_kept=0.3, linear=linear)      # room 6 - 3 = 3
    assert two == {"d": ["a", "c", "b"]} or two == {"d": sorted(["a", "c", "b"])}
    three = drop_plan(gm3c, {"d": 10}, tau=0.35, min_kept=0.3, linear=linear, tree=tree)
    # places: a (0, gm3c), c (0, linear), e (0, tree), then b, d, f (a: its earlier place); room 3
    assert three == {"d": sorted(["a", "c", "e"])}
    everything = drop_plan(gm3c, {"d": 0}, tau=0.35, linear=linear, tree=tree)
    assert everything == {"d": sorted("abcdef")}
    # with the tree, a question on more lists goes first: d, last on the linear list, is on all three
    on_all = {"d": {**tree["d"], "d": (0.36, True)}}
    gm3c_d = {"d": {**gm3c["d"], "d": (0.36, True)}}
    assert drop_plan(gm3c_d, {"d": 10}, tau=0.35, min_kept=0.5, linear=linear, tree=on_all) == {"d": ["d"]}
    # without it, the two-list plan (in turn, no tiers) is the one it always was: a, c
    assert drop_plan(gm3c_d, {"d": 10}, tau=0.35, min_kept=0.4, linear=linear) == {"d": ["a", "c"]}


def test_the_card_reads_af_checks_recorded_before_the_tree_column():
    """A warehouse opened read-only (af-check, export) is not migrated: af_checks rows recorded before
    the tree column give the GM3C figure and no tree figure, and never an error."""
    import duckdb

    from features.datasets.card import _bias
    con = duckdb.connect()
    con.execute("CREATE TABLE datasets (dataset_id VARCHAR, content_sha256 VARCHAR)")
    con.execute("CREATE TABLE bias_metrics (dataset_id VARCHAR, qo_acc DOUBLE)")
    con.execute("CREATE TABLE af_checks (dataset_id VARCHAR, content_sha256 VARCHAR, accuracy DOUBLE)")
    con.execute("INSERT INTO datasets VALUES ('a', 'h1'), ('b', 'h2')")
    con.execute("INSERT INTO bias_metrics VALUES ('a', 0.3), ('b', 0.2)")
    con.execute("INSERT INTO af_checks VALUES ('a', 'h1', 0.31), ('b', 'stale', 0.5)")
    got = _bias(con, ["a", "b"])
    assert got == {"a": {"qo_acc": 0.3, "gm3c_qo_acc": 0.31}, "b": {"qo_acc": 0.2}}
    con.execute("ALTER TABLE af_checks ADD COLUMN tree_accuracy DOUBLE")
    con.execute("UPDATE af_checks SET tree_accuracy = 0.36 WHERE dataset_id = 'a'")
    assert _bias(con, ["a", "b"])["a"] == {"qo_acc": 0.3, "gm3c_qo_acc": 0.31, "tree_qo_acc": 0.36}


@pytest.mark.slow      # the trees fitted on 1 and 2 threads (~7 s)
def test_the_trees_are_the_same_whatever_the_threads(monkeypatch):
    X, y, g = _interaction_world(400, seed=2)
    F = tree_features(X)
    fold = folds_for(g, None, 4, seed=0)
    got = []
    for n in ("1", "2", "3"):
        monkeypatch.setenv("MRQA_TREE_THREADS", n)
        got.append(tree_scores(F, y, fold, seed=0).tobytes())
    assert got[0] == got[1] == got[2]


@pytest.mark.slow      # the trees fitted in turn and on processes (~3 s)
def test_the_trees_are_the_same_whatever_the_processes():
    """The folds' fits of several seeds on spawned processes give the scores the same fits give in turn."""
    X, y, g = _interaction_world(400, seed=3)
    F = tree_features(X)
    folds = [folds_for(g, None, 4, seed=s) for s in (0, 1)]
    alone = [tree_scores(F, y, f, seed=s, workers=1) for f, s in zip(folds, (0, 1))]
    pooled = tree_scores_many(F, y, folds, [0, 1], workers=2)
    assert [a.tobytes() for a in alone] == [p.tobytes() for p in pooled]
    assert not np.array_equal(alone[0], alone[1])          # two seeds, two fold splits: not one run twice


@pytest.mark.parametrize("name", ["MRQA_TREE_THREADS", "MRQA_TREE_WORKERS"])
@pytest.mark.parametrize("value", ["two", "0", "-1", "1.5"])
def test_a_tree_count_that_is_not_a_whole_number_of_one_or_more_is_a_clear_error(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=f"{name} must be a whole number >= 1, got '{value}'"):
        tree_threads() if name == "MRQA_TREE_THREADS" else tree_workers()
    monkeypatch.setenv(name, " 3 ")
    assert (tree_threads() if name == "MRQA_TREE_THREADS" else tree_workers()) == 3
    monkeypatch.setenv(name, "")
    assert tree_threads() == 1 and 1 <= tree_workers() <= 4


def test_the_cli_refuses_a_bad_tree_count_before_it_starts_work():
    env = {k: v for k, v in os.environ.items() if not k.startswith("MRQA_TREE_")}
    out = subprocess.run([sys.executable, "-c", "from flows.cli import main; main()", "--help"],
                         env={**env, "MRQA_TREE_WORKERS": "many"}, capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    assert "MRQA_TREE_WORKERS must be a whole number >= 1, got 'many'" in out.stderr and "Traceback" not in out.stderr
