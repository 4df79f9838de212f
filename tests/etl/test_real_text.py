"""Cleaning real RecipeQA text (538 real validation records, recipeqa/val_dev.json of the MRQA_SHARED fixtures):
the repair rules fire on real tokenization failures, rare real words stay whole, fractions, URLs and
abbreviations are kept, the stored text is repaired and cleaning twice changes nothing."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from etl.clean import CleanConfig, clean_corpus
from etl.recipeqa import import_recipeqa
from etl.vocab import vocab_report
from etl.warehouse import load_query, table_fingerprint

SHARED = Path(os.environ.get("MRQA_SHARED", Path(__file__).resolve().parents[3] / "shared"))
VAL_DEV = SHARED / "fixtures" / "recipeqa" / "val_dev.json"


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    if not VAL_DEV.is_file():
        pytest.skip(f"needs ../shared/fixtures/recipeqa/val_dev.json (not found at {VAL_DEV}); "
                    "set MRQA_SHARED to the shared/ folder to run this test")
    home = tmp_path_factory.mktemp("real_text")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MRQA_HOME", str(home))
        from etl.config import Paths
        from etl.warehouse import connect
        paths = Paths.from_env().ensure()
        con = connect(paths)
        import_recipeqa(con, [VAL_DEV])
        res = clean_corpus(con, paths, CleanConfig(workers=1))
        report = vocab_report(con, paths, top=20)
        yield con, paths, res, report
        con.close()


def test_every_split_rule_fires_on_real_text(real):
    _, _, res, report = real
    fired = {r["rule"]: r["types"] for r in report["by_rule"]}
    for rule in ("dangling_hyphen", "slash_compound", "colon_number", "sentence_period", "word_digits",
                 "number_unit", "camel_case", "fused_word"):
        assert fired[rule] > 0, rule
    assert res.summary["repairs"]["slash_compound"]["types"] == fired["slash_compound"]


def test_types_in_dictionary_reach_95_percent(real):
    report = real[3]
    before, after = report["before_repair"], report["after_repair"]
    assert before["types_in_dict_share"] < 0.9 <= 0.95 <= after["types_in_dict_share"]
    assert after["tokens_in_dict_share"] > before["tokens_in_dict_share"]
    # the cumulative figure after the last rule is the after-repair figure
    assert report["by_rule"][-1]["types_in_dict_share"] == after["types_in_dict_share"]


def test_no_remaining_oov_is_a_slash_or_colon_compound_of_words(real):
    groups = real[3]["oov_by_pattern"]
    assert groups["colon"]["types"] == 0
    for word, _ in groups["slash"]["top"]:
        assert not re.fullmatch(r"[a-z]+(?:/[a-z]+)+", word), word


def test_stored_text_is_repaired_and_keeps_fractions_urls_abbreviations(real):
    con = real[0]
    bodies = "\n".join(b for (b,) in con.execute("SELECT body FROM steps s JOIN recipes r USING (recipe_id) "
                                                  "WHERE r.status = 'ok'").fetchall())
    words = set(bodies.split())
    assert not any(re.fullmatch(r"[a-z]{3,}/[a-z]{3,}", w) for w in words)      # slash compounds split
    assert not any(re.fullmatch(r"[a-z]{3,}:\d+", w) for w in words)            # colon + number split
    assert "1/2" in words                                                         # fractions kept
    assert re.search(r"\b\w+\.com\b", bodies)                                     # domains kept
    raw = "\n".join(b for (b,) in con.execute("SELECT body_raw FROM steps").fetchall())
    assert "and/or" in raw and "and / or" in bodies


def test_rare_real_words_stay_whole():
    from etl.repair import Repairer
    rep = Repairer()
    for word in ("silpat", "tsukemono", "kyusu", "gnocchi", "maraschinos"):
        assert rep.repair_token(word) == (word,), word


def test_cleaning_twice_changes_nothing(real):
    con, paths, _, _ = real
    before = {t: table_fingerprint(con, t) for t in ("steps", "step_tokens", "recipes")}
    clean_corpus(con, paths, CleanConfig(workers=1))
    assert {t: table_fingerprint(con, t) for t in ("steps", "step_tokens", "recipes")} == before


def test_export_steps_query_carries_raw_cleaned_text_and_tokens(real):
    con = real[0]
    con.execute("CREATE OR REPLACE TEMP VIEW export_datasets AS SELECT 'none' AS dataset_id")
    cols = [d[0] for d in con.execute(load_query("export_steps") + " LIMIT 0").description]
    assert {"title", "body", "title_raw", "body_raw", "title_tokens", "body_tokens", "image_ids"} <= set(cols)


def test_spelling_is_reported_apart_and_conservative(real):
    spelling = real[3]["spelling"]
    assert spelling["types_corrected"] > 0
    for word, fix, _n in spelling["examples"]:
        assert word.islower() and word.isalpha() and fix != word
    from etl.spelling import Speller
    sp = Speller(keep=frozenset({"silpat"}))
    assert sp.correct("silpat") is None and sp.correct("Remainning") is None    # domain term, capitalised
    assert sp.correct("remainning") == "remaining"
