"""Punkt trained on the corpus, persisted as JSON; lines are sentence boundaries; NLTK word tokens."""
from __future__ import annotations

import json

from etl.tokenize import load_punkt, save_punkt, tokenize_text, train_punkt

TEXT = ("Preheat the oven to 350 degrees F. Mix 2 tbsp. sugar with the flour, approx. 3 min. "
        "Mr. Smith likes it. Bake for 20 minutes.\n1 cup milk\n2 eggs")


def test_punkt_json_roundtrip(tmp_path):
    punkt = train_punkt([TEXT * 20])
    path = save_punkt(punkt, tmp_path, {"n": 1})
    doc = json.loads(path.read_text())
    assert set(doc["model"]) == {"abbrev_types", "collocations", "sent_starters", "ortho_context"}
    again = load_punkt(tmp_path)
    assert tokenize_text(TEXT, again) == tokenize_text(TEXT, punkt)


def test_lines_are_sentences_and_words_are_treebank():
    sents = tokenize_text(TEXT, train_punkt([TEXT * 20]))
    assert sents[-2:] == [["1", "cup", "milk"], ["2", "eggs"]]
    assert len(sents) >= 4 and sents[0][:3] == ["Preheat", "the", "oven"]
    flat = [t for s in sents for t in s]
    assert "n't" not in flat and "Mr." in flat


def test_cli_tokenize(paths):
    from typer.testing import CliRunner

    from flows.cli import app
    res = CliRunner().invoke(app, ["tokenize", "<p>Preheat the oven to 350degrees.</p> Add the "
                                               "cutterOne&nbsp;now\u2026"])
    assert res.exit_code == 0, res.output
    toks = json.loads(res.output)
    flat = [t for s in toks for t in s]
    assert flat[:7] == ["Preheat", "the", "oven", "to", "350", "degrees", "."]
    assert "cutter" in flat and "One" in flat and "<p>" not in flat and "..." in flat
