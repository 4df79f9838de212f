"""Text twins (features/datasets/twins.py): the content-word Jaccard rule that keeps AF from offering an
equally right answer as a distractor."""
from __future__ import annotations

import numpy as np
import pytest

from features.datasets.twins import TWIN_JACCARD, StepWords, content_words


def test_content_words_drop_stop_words_digits_and_single_letters():
    assert content_words("Bake the Pie at 350 for 30 minutes, a 2nd time!") == ["bake", "minutes", "nd", "pie", "time"]
    assert content_words(None) == [] and content_words("") == []


def test_same_step_said_twice_is_a_twin_and_different_steps_are_not():
    a = "Into the Oven. Bake the batter in the baking dish for 30 minutes, until golden."
    b = "Bake. Bake the dough in the baking dish for 25 minutes until golden brown."
    c = "Dice the Carrots. Cut the carrots into small cubes with a chef's knife."
    w = StepWords([("r", 0), ("r", 1), ("r", 2)], [a, b, c], max_df=1.0)
    assert w.jaccard(np.array(0), np.array(1)) >= TWIN_JACCARD > w.jaccard(np.array(0), np.array(2))


def _words(texts, max_df=1.0):
    return StepWords([("r", i) for i in range(len(texts))], texts, max_df=max_df)


def test_step_words_jaccard_matches_the_set_formula_on_random_texts():
    rng = np.random.default_rng(0)
    vocab = [f"word{chr(97 + i)}{chr(97 + j)}" for i in range(6) for j in range(6)]
    texts = [" ".join(rng.choice(vocab, size=rng.integers(0, 9))) for _ in range(60)]
    w = _words(texts)
    a, b = rng.integers(0, 60, 500), rng.integers(0, 60, 500)
    got = w.jaccard(a, b)
    for i, j, g in zip(a, b, got):
        sa, sb = set(content_words(texts[i])), set(content_words(texts[j]))
        assert g == pytest.approx(len(sa & sb) / len(sa | sb) if sa | sb else 0.0)
    # broadcasting and the -1 padding
    assert w.jaccard(np.array([[0], [1]]), np.array([[0, 1, -1]])).shape == (2, 3)
    assert w.jaccard(np.array([-1]), np.array([0]))[0] == 0.0


def test_boilerplate_words_in_most_steps_do_not_make_twins():
    texts = [f"Step body. Chop the {x} finely." for x in ("onions", "carrots", "leeks", "celery")] + \
            [f"Step body. Bake the {x} slowly." for x in ("bread", "cake", "pie", "tart")]
    plain, capped = _words(texts, max_df=1.0), _words(texts, max_df=0.6)
    # "step", "body" are in every step: with them, a chop step twins a bake step
    assert plain.twins(np.array(0), np.array(4)) and not capped.twins(np.array(0), np.array(4))
    assert capped.twins(np.array(0), np.array(1))          # chop ... finely vs chop ... finely


def test_recipe_rows_and_rows_lookup():
    w = StepWords([("a", 0), ("a", 1), ("b", 0)], ["mix flour", "bake cake", "mix sugar"])
    assert w.rows(["a", "b", "c"], [1, 0, 0]).tolist() == [1, 2, -1]
    assert w.recipe_rows(["b", "a", "zz"]).tolist() == [[2, -1], [0, 1], [-1, -1]]


def test_twin_rule_quality_counts_same_action_distractors_against_the_ground_truth(tmp_path):
    """The measurement behind the threshold, on a hand-made home: ground truth (step actions) in
    sample/*/ground_truth.jsonl, steps and visual cloze questions in the warehouse."""
    import json

    import duckdb

    from features.datasets.twins import twin_rule_quality
    steps = {("a", 1): ("bake", "Bake", "Bake the batter in the baking dish for 30 minutes."),
             ("b", 2): ("bake", "Into the Oven", "Bake the dough in the baking dish for 25 minutes."),
             ("c", 3): ("chop", "Chop", "Chop the onions on the board with a knife."),
             ("d", 4): ("mix", "Mix", "Mix the flour and sugar in a bowl with a spoon."),
             ("e", 5): ("bake", "Bake Again", "Bake the cake in the baking dish for 20 minutes.")}
    # more steps of other kinds, so that no content word above is in more than a quarter of the steps
    steps.update({(f"f{i}", 0): (f"act{i}", f"Word{i}a", f"Word{i}b word{i}c.") for i in range(12)})
    gt = tmp_path / "sample" / "n5-seed0"
    gt.mkdir(parents=True)
    with open(gt / "ground_truth.jsonl", "w") as f:
        for (rid, s), (act, _, _) in steps.items():
            f.write(json.dumps({"recipe_id": rid, "steps": [{"step_idx": s, "labels": {"action": act}}]}) + "\n")
    con = duckdb.connect(str(tmp_path / "warehouse.duckdb"))
    con.execute("CREATE TABLE steps (recipe_id VARCHAR, step_idx INTEGER, title VARCHAR, body VARCHAR)")
    con.executemany("INSERT INTO steps VALUES (?, ?, ?, ?)", [(r, s, t, b) for (r, s), (_, t, b) in steps.items()])
    con.execute("CREATE TABLE questions (dataset_id VARCHAR, task VARCHAR, choice_list VARCHAR[], answer INTEGER)")
    # answer a_1 (bake) among b_2 (bake), c_3 (chop), d_4 (mix); answer c_3 (chop) among a_1, d_4, e_5
    con.execute("""INSERT INTO questions VALUES
                   ('vc-x', 'visual_cloze', ['b_2_0.jpg', 'a_1_0.jpg', 'c_3_0.jpg', 'd_4_0.jpg'], 1),
                   ('vc-x', 'visual_cloze', ['a_1_0.jpg', 'd_4_0.jpg', 'c_3_0.jpg', 'e_5_0.jpg'], 2)""")
    con.close()
    rows = {r["threshold"]: r for r in twin_rule_quality(str(tmp_path), "vc-%")}
    r = rows[TWIN_JACCARD]
    assert r["pairs"] == 6 and r["same_action_share"] == round(1 / 6, 3)
    assert r["questions_with_a_same_action_distractor"] == 0.5
    assert r["recall"] == 1.0 and r["precision"] == 1.0            # only bake/bake is flagged


def test_item_twins_are_the_same_kind_and_action_on_an_item_of_the_same_name():
    """twins.ItemTwins: steps whose photos show the same (kind, action, item name) are twins, the same action on
    other items is not (though the words call it one), another action on the same item is not; a step without
    ground truth falls back to the words rule; -1 is never a twin; rows broadcast."""
    from features.datasets.twins import ItemTwins
    keys = [("a", 1), ("b", 1), ("c", 1), ("d", 1), ("e", 1), ("f", 1)]
    texts = ["Dice the almonds finely.", "Dice the carrots finely.", "Dice the almonds into cubes.",
             "Roast the almonds.", "Dice the onions finely.", "Dice the carrots finely."]
    words = StepWords(keys, texts, max_df=1.0)

    def photo(action, *names):
        return {"kind": "food", "action": action, "items": [{"name": n} for n in names]}
    photos = {"a_1_0.jpg": ("a", 1, photo("dice", "almond")), "b_1_0.jpg": ("b", 1, photo("dice", "carrot")),
              "c_1_0.jpg": ("c", 1, photo("dice", "almond", "knife")), "c_1_1.jpg": ("c", 1, photo("stir", "egg")),
              "d_1_0.jpg": ("d", 1, photo("roast", "almond")), "f_1_0.jpg": ("f", 1, photo("dice", "carrot"))}
    it = ItemTwins(words, photos)
    a = np.array([0, 0, 0, 0, 1, 1, -1])
    b = np.array([1, 2, 3, 5, 5, 4, 0])
    assert bool(words.twins(0, 1))                               # the words call dicing almonds and carrots twins
    assert it.twins(a, b).tolist() == [False, True, False, False, True, bool(words.twins(1, 4)), False]
    assert it.twins(np.array([[0], [1]]), np.array([[1, 2]])).tolist() == [[False, True], [True, False]]
    assert it.rows(["c"], [1]).tolist() == [2] and it.recipe_rows(["e"]).tolist() == [[4]]
