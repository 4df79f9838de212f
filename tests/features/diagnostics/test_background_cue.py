"""The background cue (features/diagnostics/background_cue.py): how much more alike two photos are when they
share a recipe or an author.

The exact pair means and the nearest-photo shares agree with a brute-force count over every pair; a planted
cue (a style per author, a smaller one per recipe) comes out ordered same recipe > same author > other
authors, far above chance, and photos without any cue sit at chance; photos without an author are counted
and leave the author figures empty; the figures are the same on every run; `mrqa report` stores one row per
space and shows it."""
from __future__ import annotations

import itertools

import duckdb
import numpy as np
import pytest

from features.diagnostics.background_cue import (
    Cue,
    format_cue,
    nearest_kinds,
    pair_means,
    write_background_cue,
)


def _unit(m: np.ndarray) -> np.ndarray:
    return (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float32)


def world(n_authors: int = 6, recipes_per_author: int = 3, steps: int = 4, photos_per_step: int = 2,
          author_w: float = 1.0, recipe_w: float = 1.0, dim: int = 12, seed: int = 0, unknown: int = 0):
    """Photos with a planted style per author and per recipe (weights 0: no cue) and their codes; the first
    `unknown` authors' recipes have no author (code -1)."""
    rng = np.random.default_rng(seed)
    rows, recipe, author, step = [], [], [], []
    for a in range(n_authors):
        a_style = rng.normal(size=dim)
        for r in range(recipes_per_author):
            r_style = rng.normal(size=dim)
            rid = a * recipes_per_author + r
            for s in range(steps):
                for _ in range(photos_per_step):
                    rows.append(author_w * a_style + recipe_w * r_style + rng.normal(size=dim))
                    recipe.append(rid)
                    author.append(-1 if a < unknown else a)
                    step.append(rid * steps + s)
    return _unit(np.array(rows)), np.array(recipe), np.array(author), np.array(step)


def brute(mat, recipe, author, step) -> dict:
    """Every figure by a loop over every pair and every photo."""
    sums = {k: [0.0, 0] for k in ("same_recipe", "same_author", "other_author")}
    n = len(recipe)
    for i, j in itertools.combinations(range(n), 2):
        c = float(mat[i].astype(np.float64) @ mat[j].astype(np.float64))
        if recipe[i] == recipe[j]:
            kind = "same_recipe" if step[i] != step[j] else None
        elif author[i] < 0 or author[j] < 0:
            kind = None
        else:
            kind = "same_author" if author[i] == author[j] else "other_author"
        if kind:
            sums[kind][0] += c
            sums[kind][1] += 1
    out = {f"cos_{k}": (round(t / m, 4) if m else None) for k, (t, m) in sums.items()}
    hits, chance, used = np.zeros(3), np.zeros(3), 0
    for i in range(n):
        cands = [j for j in range(n) if step[j] != step[i]]
        if not cands:
            continue
        used += 1

        def kind(j, i=i):
            if recipe[j] == recipe[i]:
                return 0
            return 1 if author[i] >= 0 and author[j] == author[i] else 2
        sims = [float(mat[i] @ mat[j]) for j in cands]
        best = cands[int(np.argmax(sims))]
        hits[kind(best)] += 1
        for j in cands:
            chance[kind(j)] += 1 / len(cands)
    for k, name in enumerate(("same_recipe", "same_author", "other_author")):
        out[f"nn_{name}"] = round(hits[k] / used, 4)
        out[f"chance_{name}"] = round(chance[k] / used, 4)
    return out


def test_the_figures_are_those_of_a_count_over_every_pair():
    mat, recipe, author, step = world(n_authors=4, recipes_per_author=2, steps=3, unknown=1, seed=3)
    got = {**pair_means(mat, recipe, author, step), **nearest_kinds(mat, recipe, author, step, block=7)}
    want = brute(mat, recipe, author, step)
    assert set(got) == set(want)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, abs=1e-4), k


def test_a_planted_cue_is_ordered_recipe_author_across_and_no_cue_stays_at_chance():
    planted = world(author_w=1.5, recipe_w=1.0, seed=1)
    got = {**pair_means(*planted), **nearest_kinds(*planted)}
    assert got["cos_same_recipe"] > got["cos_same_author"] > got["cos_other_author"] + 0.2
    assert got["nn_same_recipe"] > 0.6 > got["chance_same_recipe"] * 4
    assert got["nn_same_recipe"] + got["nn_same_author"] > 0.95
    assert got["nn_other_author"] < got["chance_other_author"] / 4
    flat = world(author_w=0.0, recipe_w=0.0, n_authors=10, seed=2)
    got = {**pair_means(*flat), **nearest_kinds(*flat)}
    for k in ("same_recipe", "same_author"):
        assert abs(got[f"cos_{k}"] - got["cos_other_author"]) < 0.05, got
    assert abs(got["nn_other_author"] - got["chance_other_author"]) < 0.12, got
    assert got["nn_same_recipe"] < 0.2


def test_photos_without_an_author_are_counted_out_of_the_author_figures():
    mat, recipe, author, step = world(unknown=6, seed=4)         # every author unknown
    got = {**pair_means(mat, recipe, author, step), **nearest_kinds(mat, recipe, author, step)}
    assert got["cos_same_author"] is None and got["cos_other_author"] is None
    assert got["nn_same_author"] is None and got["chance_same_author"] is None
    assert got["cos_same_recipe"] is not None
    assert got["nn_same_recipe"] + got["nn_other_author"] == pytest.approx(1.0, abs=1e-3)
    one = world(n_authors=1, recipes_per_author=1, steps=1, photos_per_step=3)   # one step: no candidate
    assert all(v is None for v in nearest_kinds(*one).values())


def test_the_figures_are_the_same_on_every_run_and_stored_rows_are_replaced(tmp_path):
    from etl.warehouse import migrate
    planted = world(seed=5)
    a = {**pair_means(*planted), **nearest_kinds(*planted)}
    b = {**pair_means(*planted), **nearest_kinds(*planted, block=5)}
    assert a == b
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    migrate(con)
    cue = Cue(space="look", encoder_id=None, n_photos=len(planted[0]), n_recipes=18, n_authors=6,
              photos_without_author=0, **a)
    write_background_cue(con, [cue])
    write_background_cue(con, [cue, Cue(**{**cue.as_row(), "space": "encoder", "encoder_id": "enc-1"})])
    rows = con.execute("SELECT space, encoder_id, nn_same_recipe FROM background_cue ORDER BY space").fetchall()
    assert rows == [("encoder", "enc-1", a["nn_same_recipe"]), ("look", None, a["nn_same_recipe"])]
    line = format_cue([cue.as_row()])[0]
    assert line.startswith("background cue, look (144 photos, 18 recipes, 6 authors)") and "chance" in line
