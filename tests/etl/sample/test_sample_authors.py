"""Authors in the sample kitchen: heavy-tailed recipes per author, one kitchen per author with a
small per-recipe variation, the author on the page and in the ground truth, and a background cue
ordered same recipe > same author > across authors."""
from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest
from bs4 import BeautifulSoup

from etl.sample.cue import cue_figures, measure_cue
from etl.sample.recipes import assign_authors


def test_recipes_per_author_are_heavy_tailed_at_1000():
    authors, of_recipe = assign_authors(seed=0, n=1000)
    per = Counter(of_recipe)
    share_1_2 = sum(v <= 2 for v in per.values()) / len(per)
    print(f"\n1,000 recipes: {len(per)} authors, {share_1_2:.1%} with 1-2 recipes, max {max(per.values())}, "
          f"{sum(v >= 20 for v in per.values())} with 20+")
    assert len(per) == len(authors) and 300 <= len(authors) <= 700
    assert share_1_2 >= 0.7
    assert max(per.values()) >= 20
    assert len({a.name for a in authors}) == len(authors), "author names are unique"


def test_author_assignment_is_seeded_and_a_prefix_of_larger_samples():
    a, of = assign_authors(seed=4, n=300)
    b, of_big = assign_authors(seed=4, n=600)
    assert of_big[:300] == of and b[:len(a)] == a
    assert assign_authors(seed=5, n=300)[1] != of
    with pytest.raises(ValueError):
        assign_authors(seed=0, n=10, new_author_p=0)


def test_an_authors_recipes_share_the_kitchen_with_small_variation(sample_build):
    _, summary, gt = sample_build
    by_author = defaultdict(list)
    for g in gt:
        by_author[g["author"]].append(g)
    assert {len({g["author_id"] for g in gs}) for gs in by_author.values()} == {1}
    multi = [gs for gs in by_author.values() if len(gs) >= 2]
    assert multi, "some author has several recipes"
    varied = 0
    for gs in multi:
        ks = [g["kitchen_style"] for g in gs]
        for key in ("surface", "counter_rgb", "texture"):
            assert len({str(k[key]) for k in ks}) == 1, key
        assert len({k["light"]["direction"] for k in ks}) == 1
        b = [k["light"]["brightness"] for k in ks]
        assert max(b) / min(b) < 1.2
        varied += len({(k["light"]["brightness"], k["framing"]["dx"], k["framing"]["dy"]) for k in ks}) > 1
    assert varied == len(multi), "each recipe varies its author's light or framing"
    assert summary["counts"]["authors"] == len(by_author)


def test_the_author_is_on_the_page(sample_build):
    out, _, gt = sample_build
    for g in gt:
        if g["expected"]["reason"] == "http_404":
            continue
        soup = BeautifulSoup((out / "site" / g["recipe_id"] / "index.html").read_text(encoding="utf-8"), "lxml")
        assert soup.select_one(".header-byline a[rel=author]").get_text() == g["author"]


def test_background_cue_is_ordered_recipe_then_author_then_across(sample_build):
    out, _, _ = sample_build
    f = measure_cue(out)["border_pixels"]
    print(f"\nborder-pixel cosine: same recipe {f['cos_same_recipe']}, same author {f['cos_same_author']}, "
          f"across authors {f['cos_across_authors']}; 1-NN recipe {f['nn_same_recipe']} "
          f"(chance {f['nn_same_recipe_chance']}), author {f['nn_same_author']} (chance {f['nn_same_author_chance']})")
    assert f["n_authors_multi"] >= 2
    assert f["cos_same_recipe"] > f["cos_same_author"] > f["cos_across_authors"]
    assert f["nn_same_recipe"] > 5 * f["nn_same_recipe_chance"]
    assert f["nn_same_author"] > 3 * f["nn_same_author_chance"]


def test_cue_figures_on_hand_made_vectors():
    """Two authors: author A's recipes r1, r2 share a direction, author B's r3 points elsewhere."""
    x = [[1, 0, 0], [1, 0, 0], [1, 0.3, 0], [1, 0.3, 0], [0, 0, 1], [0, 0, 1]]
    f = cue_figures(np.array(x, float), ["r1", "r1", "r2", "r2", "r3", "r3"], [1, 2, 1, 2, 1, 2],
                    ["A", "A", "A", "A", "B", "B"])
    assert f["cos_same_recipe"] == 1.0
    assert f["cos_same_author"] == round(1 / np.hypot(1, 0.3), 4)
    assert f["cos_across_authors"] == 0.0
    assert f["nn_same_recipe"] == 1.0 and f["nn_same_author"] == 1.0
