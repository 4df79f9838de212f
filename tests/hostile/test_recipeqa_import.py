"""Hostile RecipeQA files: every malformed file is refused as a whole by `mrqa ingest recipeqa`
(rc 2, one line naming the record and field, no traceback, warehouse unchanged); a re-import never
drops rows silently (kept without --replace, dropped with it); and arbitrary JSON fed to the
importer raises nothing but RecipeQAFormatError (hypothesis)."""
from __future__ import annotations

import copy
import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from etl.config import Paths
from etl.recipeqa import (
    RecipeQAFormatError,
    import_recipeqa,
    load_recipeqa,
    read_recipeqa,
)
from etl.recipeqa_schema import MAX_JSON_DEPTH
from etl.warehouse import connect, run_sql_tests, table_fingerprint

RECIPE = "toy-soup"
TEXTUAL, VISUAL, COHERENCE, ORDERING = range(4)     # record order of make_recipeqa_doc


def _set(path: list, value):
    """A mutation: set doc["data"][path...] = value."""
    def apply(doc):
        node = doc["data"]
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = value
    return apply


def _drop(path: list):
    def apply(doc):
        node = doc["data"]
        for p in path[:-1]:
            node = node[p]
        del node[path[-1]]
    return apply


# (case, mutation of a valid document or raw file text, words the one-line reason must contain)
CASES = [
    ("title_dict", _set([VISUAL, "context", 0, "title"], {"a": 1}), "context step 0: title"),
    ("title_int", _set([VISUAL, "context", 0, "title"], 7), "context step 0: title"),
    ("image_int", _set([TEXTUAL, "context", 1, "images", 0], 5), "context step 1: images[0]"),
    ("image_dict", _set([TEXTUAL, "context", 1, "images", 0], {"x": 1}), "context step 1: images[0]"),
    ("image_null", _set([TEXTUAL, "context", 1, "images", 0], None), "context step 1: images[0]"),
    ("step_id_huge", _set([VISUAL, "context", 0, "id"], 10 ** 30), "context step 0: id"),
    ("step_id_negative", _set([VISUAL, "context", 0, "id"], -1), "context step 0: id"),
    ("step_id_bool", _set([VISUAL, "context", 0, "id"], True), "context step 0: id"),
    ("step_ids_repeat", _set([VISUAL, "context", 1, "id"], 1), "step ids repeat"),
    ("qid_list", _set([VISUAL, "qid"], ["2000-1"]), "qid"),
    ("question_items_dicts", _set([VISUAL, "question"], [{"a": 1}, {"b": 2}]), "question[0]"),
    ("choice_inner_int", _set([ORDERING, "choice_list", 0, 1], 3), "choice_list[0][1]"),
    ("answer_bool", _set([COHERENCE, "answer"], True), "answer"),
    ("answer_out_of_range", _set([COHERENCE, "answer"], 9), "does not index choice_list"),
    ("recipe_id_traversal", _set([VISUAL, "recipe_id"], "../../../../tmp/x"), "not a safe recipe id"),
    ("recipe_id_5mb", _set([VISUAL, "recipe_id"], "a" * 5_000_000), "not a safe recipe id"),
    ("recipe_id_dot", _set([VISUAL, "recipe_id"], "."), "not a safe recipe id"),
    ("recipe_id_dotdot", _set([VISUAL, "recipe_id"], ".."), "not a safe recipe id"),
    ("recipe_id_slash", _set([VISUAL, "recipe_id"], "soup/stock"), "not a safe recipe id"),
    ("recipe_id_backslash", _set([VISUAL, "recipe_id"], "soup\\stock"), "not a safe recipe id"),
    ("recipe_id_nul", _set([VISUAL, "recipe_id"], "soup\x00"), "not a safe recipe id"),
    ("recipe_id_empty", _set([VISUAL, "recipe_id"], ""), "not a safe recipe id"),
    ("image_name_traversal", _set([TEXTUAL, "context", 0, "images", 0], "../x_1_0.jpg"),
     "not a safe image name"),
    ("image_number_huge", _set([COHERENCE, "question", 0], f"{RECIPE}_{10 ** 25}_0.jpg"), "out of range"),
    ("unknown_task", _set([VISUAL, "task"], "audio_cloze"), "unknown task"),
    ("unknown_split", _set([VISUAL, "split"], "dev"), "unknown split"),
    ("unknown_key", _set([VISUAL, "surprise"], 1), "unknown key 'surprise'"),
    ("missing_keys", _drop([VISUAL, "choice_list"]), "missing key"),
    ("record_not_object", _set([VISUAL], [1, 2]), "must be a JSON object"),
    ("body_too_long", _set([VISUAL, "context", 0, "body"], "x" * 300_000), "context step 0: body"),
    ("split_conflict", _set([COHERENCE, "split"], "test"), "in split"),
    ("deep_nesting", "[" * 100_000 + "]" * 100_000, f"the limit is {MAX_JSON_DEPTH}"),
    ("deep_nesting_in_record", '{"data": [' + "[" * 5_000 + "]" * 5_000 + "]}", "nested"),
    ("huge_integer_literal", '{"data": [' + "9" * 5_000 + "]}", "malformed JSON"),
    ("not_json", '{"data": [ {"recipe_id": ', "malformed JSON"),
    ("not_a_document", "[1, 2, 3]", 'expected an object {"data"'),
]


@pytest.fixture(scope="module")
def home(tmp_path_factory, recipeqa_doc) -> Path:
    """A warehouse that already holds a recipe, so 'unchanged' means something."""
    home = tmp_path_factory.mktemp("import_home")
    src = home / "first.json"
    src.write_text(json.dumps(recipeqa_doc("bread-soup")))
    con = connect(Paths(home))
    import_recipeqa(con, [src])
    con.close()
    return home


@pytest.mark.parametrize("case, change, words", CASES, ids=[c[0] for c in CASES])
def test_malformed_file_is_refused_whole(home, tmp_path, case, change, words, recipeqa_doc,
                                         run_mrqa, warehouse_fingerprint):
    bad = tmp_path / f"{case}.json"
    if isinstance(change, str):
        bad.write_text(change)
    else:
        doc = recipeqa_doc(RECIPE)
        change(doc)
        bad.write_text(json.dumps(doc))
    before = warehouse_fingerprint(home)
    res = run_mrqa("ingest", "recipeqa", str(bad), home=home)
    line = res.assert_refused()
    assert str(bad) in line and words in line, line
    assert len(line) < 700, f"{len(line)} chars"
    if not isinstance(change, str):
        assert "record " in line and "(qid " in line, line
    assert warehouse_fingerprint(home) == before


# ----------------------------------------------------------------------------- re-import keeps rows

def _write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _partial(doc: dict) -> dict:
    """The same recipe, with fewer steps and one image per step: what a partial file would say."""
    doc = copy.deepcopy(doc)
    for rec in doc["data"]:
        rec["context"] = rec["context"][:3]
    for step in doc["data"][TEXTUAL]["context"]:
        step["images"] = step["images"][:1]
    return doc


def _tables(con) -> dict:
    return {t: table_fingerprint(con, t, exclude=["fetched_at"]) for t in ("recipes", "steps", "images")}


def test_partial_reimport_keeps_rows_without_replace(con, tmp_path, recipeqa_doc):
    full = recipeqa_doc(RECIPE, n_steps=4, images_per_step=3)
    import_recipeqa(con, [_write(tmp_path / "full.json", full)])
    before = _tables(con)
    assert con.execute("SELECT count(*) FROM images").fetchone()[0] == 12

    s = import_recipeqa(con, [_write(tmp_path / "partial.json", _partial(full))])
    assert s["kept"] == {"recipes": 1, "steps": 1, "images": 9, "titles": 0}
    assert "--replace" in s["note"]
    assert _tables(con) == before          # nothing dropped, nothing changed
    # visual records only (no image lists, no step 4): titles and images stay too
    visual_only = {"data": _partial(full)["data"][1:]}
    s = import_recipeqa(con, [_write(tmp_path / "visual.json", visual_only)])
    assert s["kept"]["steps"] == 1 and s["kept"]["images"] > 0
    assert _tables(con) == before
    assert all(v == 0 for v in run_sql_tests(con).values())


def test_partial_reimport_with_replace_drops_rows(con, tmp_path, recipeqa_doc):
    full = recipeqa_doc(RECIPE, n_steps=4, images_per_step=3)
    import_recipeqa(con, [_write(tmp_path / "full.json", full)])
    s = import_recipeqa(con, [_write(tmp_path / "partial.json", _partial(full))], replace=True)
    assert s["dropped"] == {"steps": 1, "images": 9}
    assert con.execute("SELECT count(*) FROM steps").fetchone()[0] == 3
    assert con.execute("SELECT count(*) FROM images").fetchone()[0] == 3
    assert all(v == 0 for v in run_sql_tests(con).values())


def test_textual_only_reimport_keeps_step_titles(con, tmp_path, recipeqa_doc):
    full = recipeqa_doc(RECIPE)
    import_recipeqa(con, [_write(tmp_path / "full.json", full)])
    before = _tables(con)
    s = import_recipeqa(con, [_write(tmp_path / "textual.json", {"data": full["data"][:1]})])
    assert s["kept"]["titles"] == 4
    assert _tables(con) == before


def test_cli_replace_flag(home, tmp_path, recipeqa_doc, run_mrqa):
    """Through the real CLI (and its Prefect flow): the summary says what was kept, --replace drops."""
    partial = _write(tmp_path / "partial.json", _partial(recipeqa_doc("bread-soup")))
    res = run_mrqa("ingest", "recipeqa", str(partial), home=home)
    assert res.rc == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout)
    assert summary["kept"] == {"recipes": 1, "steps": 1, "images": 5, "titles": 0}
    res = run_mrqa("ingest", "recipeqa", str(partial), "--replace", home=home)
    assert res.rc == 0, res.stderr[-2000:]
    assert json.loads(res.stdout)["dropped"] == {"steps": 1, "images": 5}
    res = run_mrqa("query", "SELECT count(*) AS n FROM images WHERE recipe_id = 'bread-soup'",
                   "--format", "json", home=home)
    assert json.loads(res.stdout) == [{"n": 3}]


# ----------------------------------------------------------------------------- fuzz

FUZZ_EXAMPLES = int(os.environ.get("MRQA_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

SCALARS = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
           | st.text(max_size=12) | st.sampled_from(
               ["", ".", "..", "a/b", "@placeholder", f"{RECIPE}_1_0.jpg", f"{RECIPE}_01_0.jpg",
                f"{RECIPE}_2_100.jpg", "textual_cloze", "visual_ordering", "val", "test", "x" * 300,
                10 ** 30, -1, 0, 4, 10_000, 10_001, 2 ** 31]))
JSON = st.recursive(SCALARS, lambda kids: st.lists(kids, max_size=4)
                    | st.dictionaries(st.text(max_size=10), kids, max_size=4), max_leaves=20)


def _import_or_refuse(con, doc) -> bool:
    """Write `doc`, read + validate it, load it when valid; True when it loaded. Only
    RecipeQAFormatError may come out."""
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "fuzz.json"
        f.write_text(json.dumps(doc))
        try:
            records = read_recipeqa([f])
            load_recipeqa(con, records)
        except RecipeQAFormatError as e:
            assert "\n" not in str(e)
            return False
    assert all(v == 0 for v in run_sql_tests(con).values())
    return True


@FUZZ
@given(doc=JSON | st.lists(JSON, max_size=3).map(lambda xs: {"data": xs}))
def test_fuzz_arbitrary_json(con, doc):
    event("loaded" if _import_or_refuse(con, doc) else "refused")


@st.composite
def mutated_docs(draw, make_doc):
    """A valid document (from `make_doc`) with 1-3 values replaced, deleted or added inside."""
    doc = make_doc(RECIPE, n_steps=draw(st.integers(3, 5)), images_per_step=2)
    for _ in range(draw(st.integers(1, 3))):
        node = doc
        while isinstance(node, (dict, list)) and node and draw(st.integers(0, 3)) > 0:
            key = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else range(len(node))))
            if not isinstance(node[key], (dict, list)) or not node[key]:
                break
            node = node[key]
        if not isinstance(node, (dict, list)) or not node:
            continue
        key = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else range(len(node))))
        action = draw(st.sampled_from(["set", "delete", "add"]))
        if action == "delete":
            del node[key]
        elif action == "add" and isinstance(node, dict):
            node[draw(st.text(max_size=10))] = draw(JSON)
        else:
            node[key] = draw(JSON)
    return doc


@FUZZ
@given(data=st.data())
def test_fuzz_mutated_records(con, recipeqa_doc, data):
    event("loaded" if _import_or_refuse(con, data.draw(mutated_docs(recipeqa_doc))) else "refused")
