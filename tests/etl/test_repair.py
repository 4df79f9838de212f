"""OOV repair: number/unit and fused words split, rare real words and names survive, case kept."""
from __future__ import annotations

import json

import pytest

from etl.repair import Repairer


@pytest.fixture(scope="module")
def rep():
    return Repairer()


@pytest.mark.parametrize("tok, want", [
    ("350degrees", "350 degrees"), ("2tbsp", "2 tbsp"), ("200g", "200 g"), ("3cups", "3 cups"),
    ("1/2cup", "1/2 cup"), ("10minutes", "10 minutes"), ("flour1/2", "flour 1/2"), ("salt2", "salt 2"),
])
def test_number_unit(rep, tok, want):
    assert " ".join(rep.repair_token(tok)) == want


@pytest.mark.parametrize("tok, want", [
    ("cutterOne", "cutter One"), ("toothpicksA", "toothpicks A"), ("preheatoven", "preheat oven"),
    ("thebowl", "the bowl"), ("intothe", "into the"), ("untilgolden", "until golden"),
    ("tspsalt", "tsp salt"), ("bowlThen", "bowl Then"),
])
def test_fused_words_case_preserved(rep, tok, want):
    assert " ".join(rep.repair_token(tok)) == want


@pytest.mark.parametrize("tok", [
    "maraschinos", "maraschino", "gnocchi", "bärenjäger", "KitchenAid", "kitchenaid", "Pyrex", "Crisco",
    "chimichurri", "stovetop", "cheesecloth", "1st", "4x4", "375o", "withstand", "agave", "lathe",
    "Dartssnake", "spatchula", "bacony", "n't", "McDonalds",
])
def test_real_words_and_names_survive(rep, tok):
    assert rep.repair_token(tok) == (tok,)


def test_labelled_oov_sample_from_real_text(rep, shared_fixtures):
    """Every OOV token of the real RecipeQA records, labelled by hand: none is a fusion, so none may
    be split (over-splitting = 0)."""
    from etl.clean_rules import clean_text
    from etl.tokenize import tokenize_text, untrained_punkt
    from etl.vocab import LABELLED_REAL_OOV_KEEP
    labelled_keep = set(LABELLED_REAL_OOV_KEEP)
    data = json.loads((shared_fixtures / "recipeqa" / "val_sample.json").read_text())["data"]
    oov = {t for rec in data for s in rec["context"] for text in (s.get("title") or "", s["body"])
           for sent in tokenize_text(clean_text(text), untrained_punkt()) for t in sent
           if any(c.isalpha() for c in t) and not rep.in_dictionary(t)}
    assert oov <= labelled_keep, f"new OOV tokens to label: {oov - labelled_keep}"
    assert [t for t in oov if len(rep.repair_token(t)) > 1] == []


def test_repairs_are_cached_per_type(rep):
    rep.repair_token("saltandpepper")
    assert "saltandpepper" in rep._cache
    assert rep.repair_tokens(["Add", "saltandpepper", "."]) == ["Add", "salt", "and", "pepper", "."]


def test_labelled_oov_of_the_real_instructables_page(rep, shared_fixtures):
    """The real instructables page's OOV tokens (a misspelling, "Startch") are labelled keep: none
    may be split, and every other word token is in the dictionary."""
    from etl.clean_rules import clean_text
    from etl.parse import parse_page
    from etl.tokenize import tokenize_text, untrained_punkt
    from etl.vocab import LABELLED_REAL_OOV_KEEP
    page = shared_fixtures / "instructables" / "egg-drop-chicken-noodle-soup.html"
    rec = parse_page(page.read_text(), "https://www.instructables.com/Egg-Drop-Chicken-Noodle-Soup/")
    words = [t for s in rec.steps for text in (s.title, s.body)
             for sent in tokenize_text(clean_text(text), untrained_punkt()) for t in sent
             if any(c.isalpha() for c in t)]
    oov = {t for t in words if not rep.in_dictionary(t)}
    assert len(words) > 200 and oov <= set(LABELLED_REAL_OOV_KEEP), oov - set(LABELLED_REAL_OOV_KEEP)
    assert [t for t in oov if len(rep.repair_token(t)) > 1] == []


@pytest.mark.parametrize("tok,want,rule", [
    ("and/or", "and / or", "slash_compound"),
    ("sugar/butter/vanilla/egg", "sugar / butter / vanilla / egg", "slash_compound"),
    ("hand/", "hand /", "slash_compound"),
    ("stalks6-8", "stalks 6-8", "word_digits"),
    ("butter300g", "butter 300 g", "word_digits"),
    ("ingredients:1", "ingredients : 1", "colon_number"),
    ("recipe:4c", "recipe : 4 c", "colon_number"),
    ("bar.unmolding", "bar . unmolding", "sentence_period"),
    ("carots-", "carots", "dangling_hyphen"),
    ("-Next", "Next", "dangling_hyphen"),
    ("~1c", "~ 1 c", "leading_symbol"),
    ("120gmargarine", "120 g margarine", "number_unit_word"),
])
def test_split_rules(rep, tok, want, rule):
    assert " ".join(rep.repair_token(tok)) == want
    assert rep.rule_of[tok] == rule


@pytest.mark.parametrize("tok", ["1/2", "3/4-inch", "2:30", "surlatable.com", "images/foo.jpg",
                                 "http://x.com/a/b", "e.g", "approx", "9x13", "mp3", "silpat-covered"])
def test_split_rules_keep_fractions_times_urls_abbreviations(rep, tok):
    assert rep.repair_token(tok) == (tok,)


def test_repair_text_and_rule_selection():
    from etl.repair import WORD_RULES, Repairer, repair_text
    text = "1/2 cup sugar2 tbsp butter1 and/or (preheatoven), ingredients:1 cup. Bake the bar.Unmolding"
    fixed, n = repair_text(text, Repairer())
    assert fixed == ("1/2 cup sugar 2 tbsp butter 1 and / or (preheat oven), ingredients: 1 cup. "
                     "Bake the bar. Unmolding")
    assert n == 6 and repair_text(fixed, Repairer()) == (fixed, 0)      # idempotent
    only_words = Repairer(rules=frozenset(WORD_RULES))
    assert only_words.repair_token("and/or") == ("and/or",)
    with pytest.raises(ValueError, match="unknown repair rule"):
        Repairer(rules=frozenset({"nope"}))
