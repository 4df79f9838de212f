"""Cleaning rules: one test per planted noise kind of the sample kitchen, counters, idempotency."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from etl.clean_rules import clean_text, clean_title

CASES = {
    "html": ("Mix the <b>flour</b>&nbsp;and sugar.</p><p>Then bake.<br />", "Mix the flour and sugar. Then bake.",
             "strip_html"),
    "office": ("Normal 0 false false false EN-US X-NONE X-NONE MicrosoftInternetExplorer4 Preheat the oven.",
               "Preheat the oven.", "strip_office"),
    "office_xml": ("<!--[if gte mso 9]><xml> <w:WordDocument> <w:View>Normal</w:View> </w:WordDocument> "
                   "</xml><![endif]--> Stir well.", "Stir well.", "strip_office"),
    "office_css": ('/* Style Definitions */ table.MsoNormalTable {mso-style-name:"Table Normal"; '
                   "mso-padding-alt:0in 5.4pt 0in 5.4pt; font-size:10.0pt;} Whisk the eggs.",
                   "Whisk the eggs.", "strip_office"),
    "css": ("{font-family:Arial, Helvetica, sans-serif; font-size:12px;} Chop the onions. "
            "p { margin-bottom: 0.1in; line-height: 120%; }", "Chop the onions.", "strip_css"),
    "url": ("Serve warm. http://www.myfoodblog.com/2013/05/pie.html See (www.youtube.com/watch?v=dQw1) too.",
            "Serve warm. See too.", "strip_urls"),
    "unicode": ("Add 1½ cups of milk, bake at 350°F \u2013 about \u201c20\u201d minutes\u00a0now\u2026 "
                "don\u2019t st\u200birr.", 'Add 1 1/2 cups of milk, bake at 350 degrees F - about "20" minutes '
                "now... don't stirr.", "normalize_unicode"),
    "mojibake": ("CafÃ© au lait", "Café au lait", "normalize_unicode"),
    "control_char": ("Stir well.\x0bBake it.\x07 Done\x1b.\r\nNext", "Stir well. Bake it. Done.\nNext",
                     "strip_control_chars"),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_noise_kind_removed_and_counted(kind):
    raw, want, rule = CASES[kind]
    counts = Counter()
    got = clean_text(raw, counts=counts)
    assert " ".join(got.split()) == " ".join(want.split())
    assert counts[rule] > 0


@pytest.mark.parametrize("raw, want", [
    ("Step 3: Mix It", "Mix It"), ("STEP 12 - Bake", "Bake"), ("3. Serve", "Serve"), ("4) Chill", "Chill"),
    ("Step Three: Enjoy", "Enjoy"), ("Step 3", ""), ("3 Eggs", "3 Eggs"), ("Bake at 350", "Bake at 350"),
])
def test_step_numbers_out_of_titles(raw, want):
    counts = Counter()
    assert clean_title(raw, counts) == want
    assert (counts["strip_step_number"] > 0) == (raw != want)


def test_clean_is_idempotent_and_keeps_plain_text():
    for raw, _, _ in CASES.values():
        once = clean_text(raw)
        assert clean_text(once) == once
    plain = "Beat the egg until it is fluffy.\nAdd 3/4 cup milk, stir < 2 minutes."
    counts = Counter()
    assert clean_text(plain, counts=counts) == plain and not counts


def test_real_recipeqa_text(shared_fixtures):
    data = json.loads((shared_fixtures / "recipeqa" / "val_sample.json").read_text())["data"]
    for rec in data:
        for step in rec["context"]:
            out = clean_text(step["body"])
            assert out and "\t" not in out and "  " not in out and not out.startswith((" ", "\n"))
            assert clean_text(out) == out
            # no word is lost: cleaning only removes markup/whitespace from this text
            assert out.split() == step["body"].split()


def _plain_clean(text: str, title: bool = False) -> str:
    """The rules without their pre-checks: every regex applied unconditionally, in rule order."""
    import re

    from etl import clean_rules as R
    for rx in (R._OFFICE_COND, R._OFFICE_WORD_JUNK, R._OFFICE_CSS, R._MSO_DECL, R._HTML_BLOCK,
               R._HTML_COMMENT):
        text = rx.sub(" ", text)
    text = R._HTML_BREAK.sub("\n", text)
    text = R._HTML_TAG.sub(" ", text)
    text = R._HTML_ENTITY.sub(lambda m: __import__("html").unescape(m.group(0)), text)
    text = R._CSS_DECL.sub(" ", R._CSS_BLOCK.sub(" ", text))
    text, n = R._URL.subn(" ", text)
    if n:
        text = R._EMPTY_BRACKETS.sub(" ", text)
    text = R.normalize_unicode(text)[0]
    text = R._CONTROL.sub(" ", text.replace("\r\n", "\n").replace("\r", "\n"))

    def ws(t):
        t = R._SPACES.sub(" ", t)
        t = R._BLANK_LINES.sub("\n", "\n".join(line.strip() for line in t.split("\n"))).strip()
        return re.sub(r" +([,.;:!?])(?=\s|$)", r"\1", t)
    text = ws(text)
    if title:
        text = ws(R._STEP_NUMBER.sub("", text, count=1))
    return text


def test_prechecks_change_nothing(shared_fixtures):
    """clean_text/clean_title (with their substring pre-checks) == the plain regex pipeline on the
    noise cases, real RecipeQA text and seeded random strings over markup-ish pieces."""
    import random
    data = json.loads((shared_fixtures / "recipeqa" / "val_sample.json").read_text())["data"]
    texts = [raw for raw, _, _ in CASES.values()] + [s["body"] for rec in data for s in rec["context"]]
    rng = random.Random(1)
    pieces = list(" \n\t\x0b.,:;?!<>{}&/*-") + [
        "Normal 0 false", "NORMAL", "mso-style:x;", "Mso", "st1:*{", "http://a.b", "WWW.x.y", "<!--", "-->",
        "<b>", "</p>", "&amp;", "font-size:12px;", "p{color:red}", "\u017ft1", "½", "°", "é", "\u2028",
        "\u00a0", "  ", "\n\n", " ,", "Step 2:", "<![if !x]>", "<style>a{}</style>"]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 25))) for _ in range(3000)]
    for t in texts:
        assert clean_text(t) == _plain_clean(t), repr(t)
        assert clean_title(t) == _plain_clean(t, title=True), repr(t)
