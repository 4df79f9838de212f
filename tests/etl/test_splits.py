"""Splits drawn per recipe or per author (etl/splits.py), on a real DuckDB warehouse: every recipe of an
author in one split, a recipe without an author by its id, RecipeQA imports untouched, the choice stored
and kept for later loads, idempotent; the warehouse's SQL data test catches an author across splits."""
from __future__ import annotations

import logging
from collections import Counter, defaultdict

import pytest
from typer.testing import CliRunner

from etl.bulk import load_recipes
from etl.load import load_recipe
from etl.records import RecipeRecord, StepRecord
from etl.splits import assign_split, set_split_unit, split_key, split_of, split_unit
from etl.warehouse import run_sql_tests

AUTHORS = [f"Chef {n}" for n in range(40)]


def _rec(rid: str, author: str | None) -> RecipeRecord:
    return RecipeRecord(recipe_id=rid, url=f"http://127.0.0.1/{rid}/", title=rid, author=author,
                        steps=[StepRecord(0, "Intro", "x"), StepRecord(1, "Mix", "mix it")])


def _kitchen(n: int = 240) -> list[RecipeRecord]:
    """Recipes of 40 authors, three of them prolific (author k < 3 writes a third of the recipes after the
    first 120), and every 23rd recipe without an author."""
    recs = []
    for i in range(n):
        k = i % 40 if i < 120 else i % 3
        recs.append(_rec(f"recipe-{i:04d}", AUTHORS[k] if i % 23 else None))
    return recs


def test_split_key_by_recipe_is_the_old_split_and_by_author_ignores_case_and_spacing():
    assert split_key("r1", "Sunny Oven") == "r1"
    assert split_of("r1", "Sunny Oven") == assign_split("r1")
    assert split_key("r1", "  Sunny   OVEN ", "author") == split_key("r2", "sunny oven", "author")
    assert split_key("r1", None, "author") == "r1" and split_key("r1", "  ", "author") == "r1"
    with pytest.raises(ValueError, match="split_by must be one of recipe, author"):
        split_key("r1", "a", "kitchen")


def test_splits_by_author_on_a_warehouse(con, caplog):
    recs = _kitchen()
    load_recipes(con, [(r, "sample", None) for r in recs])
    load_recipe(con, _rec("rqa-1", "Chef 1"), "recipeqa", split="val")
    assert split_unit(con) == "recipe"
    before = dict(con.execute("SELECT recipe_id, split FROM recipes").fetchall())
    assert all(before[r.recipe_id] == assign_split(r.recipe_id) for r in recs)

    with caplog.at_level(logging.INFO, logger="etl.splits"):
        res = set_split_unit(con, "author")
    assert split_unit(con) == "author"
    after = dict(con.execute("SELECT recipe_id, split FROM recipes").fetchall())
    assert res["moved"] == sum(before[r] != after[r] for r in before) > 0
    assert res["recipes"] == len(recs) and sum(res["by_split"].values()) == len(recs)
    assert after["rqa-1"] == "val"                      # RecipeQA keeps its split
    by_author = defaultdict(set)
    for r in recs:
        if r.author:
            by_author[r.author].add(after[r.recipe_id])
        else:
            assert after[r.recipe_id] == assign_split(r.recipe_id)
    assert all(len(s) == 1 for s in by_author.values()), by_author
    assert len({next(iter(s)) for s in by_author.values()}) == 3      # the authors fall in every split
    assert "moved" in caplog.text
    assert all(n == 0 for n in run_sql_tests(con).values()), run_sql_tests(con)

    # idempotent, and later loads follow the stored choice: a new recipe joins its author's split
    assert set_split_unit(con, "author")["moved"] == 0
    load_recipes(con, [(_rec("new-1", "chef 7"), "sample", None)])
    load_recipe(con, _rec("new-2", "Chef 9"), "sample")
    after = dict(con.execute("SELECT recipe_id, split FROM recipes").fetchall())
    assert after["new-1"] == after[next(r.recipe_id for r in recs if r.author == "Chef 7")]
    assert after["new-2"] == after[next(r.recipe_id for r in recs if r.author == "Chef 9")]

    # an author across two splits is what the SQL data test reports
    one = next(r.recipe_id for r in recs if r.author == "Chef 0")
    other = next(s for s in ("train", "val", "test") if s != after[one])
    con.execute("UPDATE recipes SET split = ? WHERE recipe_id = ?", [other, one])
    assert run_sql_tests(con)["recipes_author_one_split"] == 1

    # back to recipes: every split is the recipe's own hash again
    set_split_unit(con, "recipe")
    again = dict(con.execute("SELECT recipe_id, split FROM recipes WHERE source = 'sample'").fetchall())
    assert all(s == assign_split(r) for r, s in again.items())
    with pytest.raises(ValueError, match="split_by must be one of"):
        set_split_unit(con, "kitchen")


def test_resplit_warns_that_a_registered_encoder_saw_the_old_train_split(con, caplog):
    load_recipes(con, [(r, "sample", None) for r in _kitchen(60)])
    with caplog.at_level(logging.WARNING, logger="etl.splits"):
        set_split_unit(con, "author")
    assert "mrqa encoder train" not in caplog.text           # no encoder yet: nothing to warn about
    set_split_unit(con, "recipe")
    con.execute("INSERT INTO encoders (encoder_id, kind, model_name, weights_sha256, preprocess_sha256, dim, "
                "created_at) VALUES ('enc-1', 'open_clip', 'tiny', 'w', 'p', 8, now())")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="etl.splits"):
        set_split_unit(con, "author")
    assert "mrqa encoder train" in caplog.text and "1 registered encoder" in caplog.text


def test_splits_command_shows_and_sets(paths, con):
    from flows.cli import app
    load_recipes(con, [(r, "sample", None) for r in _kitchen(120)])
    con.close()
    runner = CliRunner()
    r = runner.invoke(app, ["splits"])
    assert r.exit_code == 0, r.output
    assert "split_by recipe" in r.output and "with an author-mate" in r.output
    r = runner.invoke(app, ["splits", "--by", "author"])
    assert r.exit_code == 0, r.output
    assert "splits drawn by author:" in r.output and "split_by author" in r.output
    rows = {ln.split()[0]: [int(x.replace(",", "")) for x in ln.split()[1:]] for ln in r.output.splitlines()
            if ln.split() and ln.split()[0] in ("train", "val", "test")}
    assert sum(v[0] for v in rows.values()) == 120
    r = runner.invoke(app, ["splits", "--by", "author"])
    assert "0 of 120 recipes moved" in r.output
    r = runner.invoke(app, ["splits", "--by", "kitchen"])
    assert r.exit_code != 0 and "recipe" in r.output and "author" in r.output
    r = runner.invoke(app, ["pipeline", "--split-by", "author"])
    assert r.exit_code != 0 and "ingest stage" in r.output


def test_author_mates_per_split_match_a_count_in_python(con):
    recs = _kitchen()
    load_recipes(con, [(r, "sample", None) for r in recs])
    set_split_unit(con, "author")
    from etl.warehouse import load_query
    rows = {s: (n, a, m) for s, n, a, m in con.execute(load_query("split_authors")).fetchall()}
    split = dict(con.execute("SELECT recipe_id, split FROM recipes").fetchall())
    per = Counter((split[r.recipe_id], r.author) for r in recs if r.author)
    for s in ("train", "val", "test"):
        n = sum(1 for r in recs if split[r.recipe_id] == s)
        mates = sum(c for (sp, _), c in per.items() if sp == s and c > 1)
        authors = sum(1 for (sp, _) in per if sp == s)
        assert rows[s] == (n, authors, mates), (s, rows[s])
