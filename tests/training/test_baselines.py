"""The model-free references on a loaded dataset: Hasty Student (features/diagnostics/hasty.py through
the QADataset adapter) and the recipe-reading step-text match."""
from __future__ import annotations

import json

import pytest


def test_hasty_student_reads_the_preset_bias(toy_home):
    from training.baselines import hasty_student_accuracy
    from training.data import load_qa_dataset
    ds = load_qa_dataset(toy_home["export"], toy_home["ids"][("visual_cloze", "recipeqa")], "tokens")
    acc = hasty_student_accuracy(ds, "train")
    assert isinstance(acc, float) and acc > 0.5          # far random distractors are easy


@pytest.mark.parametrize("task,knobs", [("visual_cloze", "0-0-0"), ("visual_coherence", "0-0-0"),
                                        ("visual_ordering", "0-0-0"), ("textual_cloze", "0-1-0")])
def test_hasty_student_on_a_loaded_dataset_picks_what_the_bias_report_picks(toy_home, task, knobs):
    """The adapter rebuilds the question and choices from the per-choice queries of the export; the
    bias report resolves the same questions from the warehouse rows. Same rule, same inputs: the
    same pick for every question."""
    from etl.config import Paths
    from etl.warehouse import connect
    from features.diagnostics.bias import VectorLookup, dataset_distances
    from features.diagnostics.hasty import hasty_student
    from training.baselines import hasty_student_picks
    from training.data import load_qa_dataset
    did = toy_home["ids"][(task, knobs)]
    ds = load_qa_dataset(toy_home["export"], did, "vectors" if task == "textual_cloze" else "tokens")
    paths = Paths.from_env()
    con = connect(paths, read_only=True)
    try:
        space = "text" if task == "textual_cloze" else "image"
        dist = dataset_distances(con, did, VectorLookup(paths.lance, ds.encoder_id, space), task)
    finally:
        con.close()
    report = dict(zip(dist.qids, hasty_student(dist.hasty).tolist()))
    compared = 0
    for split, sp in ds.splits.items():
        picks = hasty_student_picks(ds, split)
        assert picks.tolist() == [report[q] for q in sp.qids], split
        compared += len(sp)
    assert compared == len(dist.qids) > 50


def test_step_text_match_reads_the_recipe(toy_home):
    """The recipe-reading reference: well above chance with the question's own recipe, at chance with
    another recipe's steps (so it measures the recipe, not a question cue); the CLI prints both."""
    from typer.testing import CliRunner

    from flows.cli import app
    from training.ablation import foreign_context_rows
    from training.baselines import step_text_match_accuracy
    from training.data import load_qa_dataset
    did = toy_home["ids"][("visual_cloze", "0-0-0")]
    ds = load_qa_dataset(toy_home["export"], did, "vectors")
    own = step_text_match_accuracy(ds, "train")                   # the toy test split is 10 questions
    foreign = step_text_match_accuracy(ds, "train", foreign_context_rows(ds.splits["train"].recipe_row)[0])
    assert own["n"] >= 50
    assert own["placeholder_step"] > 0.5 and own["any_step"] > 0.5 and foreign["any_step"] < 0.4
    with pytest.raises(ValueError, match="vectors"):
        step_text_match_accuracy(load_qa_dataset(toy_home["export"], did, "tokens"), "test")
    r = CliRunner().invoke(app, ["baselines", "--dataset", did, "--export", str(toy_home["export"])])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output[r.output.index("{"):])
    assert out["step_text_match"]["any_step"] == round(step_text_match_accuracy(ds, "test")["any_step"], 4)
    assert 0 <= out["hasty_student"] <= 1 and out["chance"] == 0.25
    r = CliRunner().invoke(app, ["baselines", "--dataset", did, "--export", str(toy_home["export"]), "--split", "x"])
    assert r.exit_code == 2 and "no x questions" in r.output


def test_textual_cloze_step_photo_match_reads_the_recipe(toy_home):
    """Textual cloze's recipe-reading reference: the choice title most like the placeholder step's photos
    (or any step's) is right well above chance with the question's own recipe and near chance with another
    recipe's steps; `mrqa baselines` prints it."""
    from typer.testing import CliRunner

    from flows.cli import app
    from training.ablation import foreign_context_rows
    from training.baselines import step_text_match_accuracy
    from training.data import load_qa_dataset
    did = toy_home["ids"][("textual_cloze", "0-1-0")]
    ds = load_qa_dataset(toy_home["export"], did, "vectors")
    own = step_text_match_accuracy(ds, "train")
    foreign = step_text_match_accuracy(ds, "train", foreign_context_rows(ds.splits["train"].recipe_row)[0])
    assert own["n"] >= 50
    assert own["placeholder_step"] > 0.6 and own["any_step"] > 0.45 and foreign["any_step"] < own["any_step"] - 0.2
    r = CliRunner().invoke(app, ["baselines", "--dataset", did, "--export", str(toy_home["export"]),
                                 "--split", "train"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output[r.output.index("{"):])
    assert out["task"] == "textual_cloze" and out["step_text_match"]["any_step"] == round(own["any_step"], 4)
