"""Pooled training (training/pooled.py, `mrqa sweep --pooled`): the union of two datasets' train/val
questions is exactly their questions, each pointing at its own images and recipe, and no test
question; the pooled sweep scores every dataset's own test split."""
from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from flows.cli import app


def _load(toy, key, features="vectors"):
    from training.data import load_qa_dataset
    return load_qa_dataset(toy["export"], toy["ids"][key], features, lance_uri=str(toy["home"] / "lance"))


def test_pool_keeps_every_question_with_its_own_images_and_recipe(toy_home):
    from training.pooled import pool
    a, b = _load(toy_home, ("visual_cloze", "recipeqa")), _load(toy_home, ("visual_cloze", "0-0-0"))
    u = pool([a, b])
    assert sorted(u.splits) == ["train", "val"]
    for name in ("train", "val"):
        assert len(u.splits[name]) == len(a.splits[name]) + len(b.splits[name])
        n_a = len(a.splits[name])
        for ds, lo, hi in ((a, 0, n_a), (b, n_a, len(u.splits[name]))):
            sp, k = ds.splits[name], np.arange(lo, hi)
            got, want = u.batch(name, k), ds.batch(name, np.arange(len(sp)))
            assert torch_equal(got["query"][got["query_mask"]], want["query"][want["query_mask"]])
            assert torch_equal(got["ctx"][got["ctx_mask"]], want["ctx"][want["ctx_mask"]])
            assert (got["answer"] == want["answer"]).all()
    assert "test" not in u.splits          # a pooled dataset never holds a test question


def torch_equal(x, y) -> bool:
    return x.shape == y.shape and bool((x == y).all())


def test_pool_refuses_tokens_and_mixed_tasks(toy_home):
    from training.pooled import pool
    with pytest.raises(ValueError, match="vectors"):
        pool([_load(toy_home, ("visual_cloze", "0-0-0"), "tokens")])
    with pytest.raises(ValueError, match="different task"):
        pool([_load(toy_home, ("visual_cloze", "0-0-0")), _load(toy_home, ("visual_coherence", "0-0-0"))])


def test_pooled_sweep_scores_each_setting_on_its_own_test_split(toy_home, tmp_path):
    r = CliRunner().invoke(app, ["sweep", "--scorers", "transformer,question_only", "--tasks", "visual_cloze",
                                 "--knobs", "recipeqa,0-0-0", "--text-features", "vectors", "--tiny", "--pooled",
                                 "--max-epochs", "2", "--seed", "0", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    rows = pq.read_table(tmp_path / "accuracy.parquet").to_pylist()
    assert sorted((x["knobs"], x["scorer"]) for x in rows) == [
        ("0-0-0", "question_only"), ("0-0-0", "transformer"), ("recipeqa", "question_only"),
        ("recipeqa", "transformer")]
    a, b = _load(toy_home, ("visual_cloze", "recipeqa")), _load(toy_home, ("visual_cloze", "0-0-0"))
    n_train = len(a.splits["train"]) + len(b.splits["train"])
    for x in rows:
        ds = a if x["knobs"] == "recipeqa" else b
        assert x["n_train"] == n_train and x["n_test"] == len(ds.splits["test"]) and 0 <= x["test_acc"] <= 1
    r = CliRunner().invoke(app, ["sweep", "--scorers", "transformer", "--tasks", "visual_cloze", "--pooled",
                                 "--tiny", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "--pooled needs --text-features vectors" in r.output


def test_the_readers_read_textual_cloze_from_the_steps_photos(toy_home, tmp_path):
    """`mrqa sweep --tasks textual_cloze`: the transformer reads the placeholder step's photos (well above
    chance, and another recipe's steps take most of it away), while the question-only model, which never
    sees them, scores the same with either recipe; tokens are refused with the option to use."""
    r = CliRunner().invoke(app, ["sweep", "--scorers", "transformer,question_only", "--tasks", "textual_cloze",
                                 "--text-features", "vectors", "--tiny", "--pooled", "--max-epochs", "6",
                                 "--seed", "0", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    rows = {x["scorer"]: x for x in pq.read_table(tmp_path / "accuracy.parquet").to_pylist()}
    reader, qo = rows["transformer"], rows["question_only"]
    assert reader["text_source"] == "images" and reader["knobs"] == "0-1-0" and reader["n_test"] > 10
    ds = _load(toy_home, ("textual_cloze", "0-1-0"))
    assert reader["n_test"] == len(ds.splits["test"])
    assert reader["test_acc"] >= 0.6 and reader["test_acc"] >= reader["foreign_context_acc"] + 0.25
    assert qo["foreign_context_acc"] == qo["test_acc"] and qo["text_source"] == "images"
    r = CliRunner().invoke(app, ["sweep", "--scorers", "transformer", "--tasks", "textual_cloze", "--tiny",
                                 "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "--tasks textual_cloze needs --text-features vectors" in r.output
