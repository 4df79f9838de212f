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


# ----------------------------------------------------------------------------- fast path == stock NLTK

TRICKY = [
    'He said "stop." Then (she left.)', "I cannot go; you're gonna 'tis fine -- ok?!", "Wait... what?",
    "Mix: flour, 2,5 cups & sugar @ 50% [approx.] {x} <y> * z", "It's the cook's 'special' dish.''",
    "``quoted'' text and ''more'' here.", "Bake at 350 degrees F.  Mr. Smith  agrees .",
    "lemme gimme d'ye more'n", "wanna go", "end.'", "end.)  ", "a.b.c. e.g. done.", "'tis 'twas 'Hello' 'n' ",
    "Café au lait, naïve crème.", "tab\tinside. Next", "..", ".", "'", '"', "x'", ":", "a,", "GONNA CANNOT",
    "ÂŒ odd", "don't won't can't",
]


def _sample_texts(gt_path):
    from etl.clean_rules import clean_text, clean_title
    recs = [json.loads(line) for line in gt_path.read_text().splitlines()]
    return [f(s[k]) for r in recs for s in r["steps"] for f, k in ((clean_title, "title_raw"),
                                                                    (clean_text, "body_raw"))]


def test_fast_tokenizer_equals_stock_nltk_on_sample_kitchen(tmp_path):
    """The optimized path (re-compiled patterns, pre-checks, ASCII fast path) stores exactly the
    tokens of stock NLTK on the sample kitchen's text, tricky strings and seeded random strings."""
    import random

    from etl.sample.generate import build_sample
    from etl.tokenize import reference_tokenize_text
    build_sample(tmp_path, 30, 3, workers=1)
    texts = _sample_texts(tmp_path / "ground_truth.jsonl") + TRICKY
    punkt = train_punkt([t for t in texts if t] + [TEXT * 5])
    for t in texts:
        assert tokenize_text(t, punkt) == reference_tokenize_text(t, punkt), t
    rng = random.Random(0)
    alphabet = list(" .,:;?!'\"`-()[]{}<>*&$%#@aAnNtTsSdD19") + [
        "cannot", "gonna", "'tis", " 'twas", "n't", "'ll", "'S ", "more'n", "wanna ", "..", "--", "Mr.", "  "]
    for _ in range(3000):
        t = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30)))
        assert tokenize_text(t, punkt) == reference_tokenize_text(t, punkt), repr(t)


def test_fast_spans_equal_stock_nltk_spans():
    """`fast_span_tokenize` (the role extractor's tokens) gives NLTK's span_tokenize on every printable
    ASCII string: the tricky ones and seeded random ones, quotes included."""
    import random

    from nltk.tokenize import NLTKWordTokenizer

    from etl.fast_nltk import fast_span_tokenize, is_fast_line
    stock = NLTKWordTokenizer()
    rng = random.Random(1)
    alphabet = list(" .,:;?!'\"`-()[]{}<>*&$%#@aAnNtTsSdD19") + ["''", "``", "cannot", "n't", "'ll", "..", "--"]
    texts = [t for t in TRICKY if is_fast_line(t)] + [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))) for _ in range(3000)]
    for t in texts:
        assert fast_span_tokenize(t) == list(stock.span_tokenize(t)), repr(t)


def test_fast_paths_only_for_printable_ascii():
    from etl.fast_nltk import is_fast_line
    assert is_fast_line("Mix 2 cups (flour).") and not is_fast_line("Café") and not is_fast_line("a\tb")
