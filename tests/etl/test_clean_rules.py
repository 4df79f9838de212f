"""Cleaning rules: one test per planted noise kind (contract C3 styles), counters, idempotency."""
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
