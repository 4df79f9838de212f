"""The words probe (features/diagnostics/words_probe.py): question-only models on the step titles' own words.

A synthetic world (features/datasets/synthetic.py) whose step titles are rewritten: with a planted
giveaway (every title of a recipe carries the recipe's own made-up word) the probe reads near 100% of
textual cloze, whose distractors are titles of other recipes; with words drawn per title it stays near
chance; the linear model's features carry the blank's place (its neighbours, first or last), which on
real RecipeQA reads more than the order-blind ones. The space is exact and deterministic; `mrqa report`
stores the figure in bias_metrics, where the reading gate holds a dataset back on it; the pooled
adversary's drop takes its lists; `mrqa words-probe` is read-only and refuses bad input in one line."""
from __future__ import annotations

import hashlib
import json

import duckdb
import numpy as np
import pytest
from synthetic_home import synthetic_home
from typer.testing import CliRunner

from features.datasets.knobs import KnobParams
from features.diagnostics.words_probe import terms, vocabulary, words_probe_rows, words_space

ENC = "synthetic-enc-0001"
SETTINGS = [("textual_cloze", KnobParams.preset_for("textual_cloze", 0, 1, 0)),
            ("textual_cloze", KnobParams.preset_for("textual_cloze", 1, 1, 1)),
            ("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 1))]
POOL = [f"word{i:02d}" for i in range(40)]


def write_titles(con, planted: bool, seed: int = 0) -> None:
    """Every step title becomes two words drawn per title from POOL, and with `planted` a third: its
    recipe's own made-up word (the same in every title of the recipe)."""
    rng = np.random.default_rng(seed)
    rows = con.execute("SELECT recipe_id, step_idx FROM steps ORDER BY recipe_id, step_idx").fetchall()
    new = []
    for rid, idx in rows:
        words = [POOL[i] for i in rng.integers(len(POOL), size=2)]
        if planted:
            words.append("zq" + hashlib.sha256(rid.encode()).hexdigest()[:6])
        new.append((" ".join(words).title(), rid, idx))
    con.executemany("UPDATE steps SET title = ? WHERE recipe_id = ? AND step_idx = ?", new)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from features.datasets.generate import generate_datasets
    with synthetic_home(tmp_path_factory, "words_home", n_recipes=60, seed=2, dim=16, k=60) as (home, paths, con):
        made = generate_datasets(con, SETTINGS, seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False)
        ids = [s["dataset_id"] for s in made]
        yield {"home": home, "paths": paths, "con": con, "text": ids[:2], "visual": ids[2]}


def test_a_planted_word_is_read_and_titles_without_it_stay_near_chance(world):
    con, text = world["con"], world["text"]
    write_titles(con, planted=True)
    planted = words_probe_rows(con, text)
    for r in planted["datasets"]:
        assert r["n_scored"] == r["n_questions"] > 40 and r["n_left_out"] == 0, r
        assert r["linear"]["accuracy"] > 0.9, r
        assert r["tree"]["accuracy"] > 0.8, r
        lo, hi = r["linear"]["ci"]
        assert lo <= r["linear"]["accuracy"] <= hi
    write_titles(con, planted=False, seed=1)
    for r in words_probe_rows(con, text)["datasets"]:
        assert 0.1 < r["linear"]["accuracy"] < 0.4, r
        assert r["tree"]["accuracy"] < 0.45, r


def test_the_space_is_exact_deterministic_and_one_for_every_dataset(world):
    con, text = world["con"], world["text"]
    write_titles(con, planted=True)
    a, b = words_space(con), words_space(con)
    assert a.ids == b.ids and np.array_equal(a.mat, b.mat)
    n_titles = con.execute("SELECT count(*) FROM steps WHERE title IS NOT NULL").fetchall()[0][0]
    assert len(a.ids) == n_titles and np.allclose(np.linalg.norm(a.mat, axis=1), 1.0, atol=1e-5)
    one = words_probe_rows(con, [text[0]], seed=3)
    assert json.dumps(one, sort_keys=True) == json.dumps(words_probe_rows(con, [text[0]], seed=3), sort_keys=True)
    both = words_probe_rows(con, [text[1], text[0]], seed=3)
    assert next(r for r in both["datasets"] if r["dataset_id"] == text[0]) == one["datasets"][0]


def test_terms_and_vocabulary():
    assert terms("Roll Out the Dough!") == ["roll", "out", "the", "dough", "roll out", "out the", "the dough"]
    docs = [terms(t) for t in ("Bake the cake", "Bake", "Serve the cake", "Enjoy")]
    vocab = vocabulary(docs)
    assert list(vocab) == ["bake", "cake", "the", "the cake"]            # in 2 titles or more, alphabetical
    assert list(vocabulary(docs, max_terms=2)) == ["bake", "cake"]        # the most frequent, ties by the term


def test_the_report_stores_the_words_figure_and_the_reading_gate_holds_back_on_it(world, tmp_path):
    from features.datasets.card import reading_gate
    from features.diagnostics.report import build_report
    con, home, paths, text, visual = world["con"], world["home"], world["paths"], world["text"], world["visual"]
    write_titles(con, planted=True)
    res = build_report(con, tmp_path / "report", [*text, visual], lance_uri=paths.lance, progress=False, home=home)
    stored = dict(con.execute("SELECT dataset_id, words_acc FROM bias_metrics").fetchall())
    trees = dict(con.execute("SELECT dataset_id, words_tree_acc FROM bias_metrics").fetchall())
    assert stored[visual] is None and trees[visual] is None
    alone = {r["dataset_id"]: r for r in words_probe_rows(con, text)["datasets"]}
    for d in text:
        assert stored[d] == alone[d]["linear"]["accuracy"] > 0.9
        assert trees[d] == alone[d]["tree"]["accuracy"] > 0.8
    row = next(r for r in res["tasks"]["textual_cloze"]["table"])
    assert row["words probe, titles (95% CI)"].split(" [")[0] in {f"{100 * stored[d]:.1f}%" for d in text}
    _, why = reading_gate(con, [*text, visual])
    for d in text:
        assert why[d].startswith(("words probe (titles) ", "words trees (titles) ")), why[d]
    assert not why[visual].startswith("words probe")


def test_the_pooled_drop_takes_the_words_lists_in_turn():
    from training.af_pooled import drop_plan
    gm3c = {"d": {q: (0.9 - i / 100, True) for i, q in enumerate("abc")} | {q: (0.1, False) for q in "defgh"}}
    words = {"d": {"f": (0.8, True), "g": (0.7, True), "a": (0.6, True)}}
    base = drop_plan(gm3c, {"d": 10}, tau=0.35, min_kept=0.6)          # room 8 - 6 = 2: the confident two
    assert base == {"d": ["a", "b"]}
    # with the words list: "a" is on both lists and goes first, then the lists in turn (f, then b)
    assert drop_plan(gm3c, {"d": 10}, tau=0.35, min_kept=0.6, more=(words,)) == {"d": ["a", "f"]}
    assert drop_plan(gm3c, {"d": 10}, tau=0.35, min_kept=0.5, more=(words,)) == {"d": ["a", "b", "f"]}
    assert drop_plan(gm3c, {"d": 0}, tau=0.35, more=(words,)) == {"d": ["a", "b", "c", "f", "g"]}
    assert drop_plan(gm3c, {"d": 10}, tau=0.35, min_kept=0.6, more=({},)) == base


def test_the_pooled_step_refuses_words_on_a_visual_task(world):
    from flows.af_pool import af_pool_flow
    with pytest.raises(ValueError, match="only textual cloze shows them"):
        af_pool_flow.fn(task="visual_cloze", words=True)


def test_cli_is_read_only_and_refuses_bad_input_in_one_line(world, monkeypatch):
    from flows.cli import app
    con, home, paths, text, visual = world["con"], world["home"], world["paths"], world["text"], world["visual"]
    write_titles(con, planted=True)
    con.execute("CHECKPOINT")
    monkeypatch.setenv("MRQA_HOME", str(home))
    before = hashlib.sha256(paths.warehouse.read_bytes()).hexdigest()
    con.close()
    try:
        r = CliRunner().invoke(app, ["--no-prefect", "words-probe", "--dataset", text[0], "--json"])
        assert r.exit_code == 0, r.output
        out = json.loads(r.output[r.output.index("{"):])
        assert out["datasets"][0]["dataset_id"] == text[0] and out["datasets"][0]["linear"]["accuracy"] > 0.9
        r = CliRunner().invoke(app, ["--no-prefect", "words-probe"])
        assert r.exit_code == 0 and all(d in r.output for d in text) and "chance 25.0%" in r.output, r.output
        for args, msg in ((["--dataset", visual], "only textual cloze shows them"),
                          (["--dataset", "nope-1"], "unknown dataset(s): nope-1"),
                          (["--dataset", ","], "--dataset needs at least one"),
                          (["--af"], "no adversarially filtered textual cloze datasets"),
                          (["--seed", "-1"], "--seed must be 0 or more")):
            bad = CliRunner().invoke(app, ["--no-prefect", "words-probe", *args])
            assert bad.exit_code == 2 and msg in bad.output and "Traceback" not in bad.output, bad.output
        assert hashlib.sha256(paths.warehouse.read_bytes()).hexdigest() == before
        monkeypatch.setenv("MRQA_HOME", str(home / "nowhere"))
        bad = CliRunner().invoke(app, ["--no-prefect", "words-probe"])
        assert bad.exit_code == 2 and "no warehouse" in bad.output, bad.output
    finally:
        world["con"] = duckdb.connect(str(paths.warehouse))


@pytest.mark.slow      # the words probe's trees on every dataset (~12 s)
def test_the_pooled_steps_words_lists_are_the_probes_verdicts(world):
    """`mrqa af-pool --words`: the linear words probe's verdicts, cross-fitted per dataset, and the trees'
    pooled over the datasets, each question scored by models that never saw its recipe: on planted
    titles both solve nearly every question (the trees also as the mean of 3 fold splits), on titles
    without the cue about a quarter."""
    from flows.af_pool import _words_oof
    con, text = world["con"], world["text"]
    write_titles(con, planted=True)
    lin, trees = _words_oof(con, text, seed=5, fold_by="recipe")
    n = {d: con.execute("SELECT count(*) FROM questions WHERE dataset_id = ?", [d]).fetchall()[0][0] for d in text}
    for v in (lin, trees):
        assert {d: len(q) for d, q in v.items()} == n
        solved = [r for q in v.values() for _, r in q.values()]
        assert sum(solved) / len(solved) > 0.85
        assert all(0.0 <= p <= 1.0 for q in v.values() for p, _ in q.values())
    assert _words_oof(con, text, seed=5, fold_by="recipe") == (lin, trees)          # deterministic
    # the trees' verdict as the mean log-odds of 3 fold splits: the same linear list, the same questions,
    # deterministic, and still solving the planted cue
    lin3, trees3 = _words_oof(con, text, seed=5, fold_by="recipe", members=3)
    assert lin3 == lin and {d: set(q) for d, q in trees3.items()} == {d: set(q) for d, q in trees.items()}
    assert sum(r for q in trees3.values() for _, r in q.values()) / sum(n.values()) > 0.85
    assert _words_oof(con, text, seed=5, fold_by="recipe", members=3) == (lin3, trees3)
    write_titles(con, planted=False, seed=1)
    lin, trees = _words_oof(con, text, seed=5, fold_by="recipe")
    for v in (lin, trees):
        solved = [r for q in v.values() for _, r in q.values()]
        assert sum(solved) / len(solved) < 0.45


def test_placed_features_carry_the_blanks_neighbours_and_place_and_leave_the_set_features_last():
    """`placed_features`: per choice its vector times the title before the blank and the one after it, times
    "the blank is first" and "the blank is last", and both cosines, inserted before the set-level features,
    so the tree probe (which reads those last columns) sees what it saw before. An unknown blank gets zeros."""
    from features.diagnostics.bias import ResolvedQuestions
    from features.diagnostics.question_only import N_SET_FEATURES, task_features
    from features.diagnostics.tree_probe import tree_features
    from features.diagnostics.words_probe import placed_features
    rng = np.random.default_rng(0)
    mat = rng.normal(size=(12, 5)).astype(np.float32)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    q = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 4, 8]]          # shown titles, in order, the blank left out
    ch = [[9, 10, 11, 1], [10, 9, 11, 2], [11, 10, 9, 3], [9, 11, 10, 4]]
    blanks = [0, 3, 1, -1]                                     # first, last, between 6 and 7, unknown
    res = ResolvedQuestions("d", "textual_cloze", list("abcd"), list("abcd"), ["train"] * 4, np.zeros(4, np.int64),
                            q, ch, 4, 0, blanks)
    base = task_features("textual_cloze", q, ch, mat)
    X = placed_features(res, mat)
    d, c = 5, 4
    assert X.shape == (4, c, base.shape[2] + 4 * d + 2)
    np.testing.assert_array_equal(X[..., :base.shape[2] - N_SET_FEATURES], base[..., :-N_SET_FEATURES])
    np.testing.assert_array_equal(tree_features(X), tree_features(base))
    place = X[..., base.shape[2] - N_SET_FEATURES:-N_SET_FEATURES]
    C = mat[np.array(ch)]
    prev, nxt, first, last = (place[..., k * d:(k + 1) * d] for k in range(4))
    np.testing.assert_array_equal(prev[0], 0)                  # blank first: nothing before it
    np.testing.assert_allclose(nxt[0], C[0] * mat[0], rtol=1e-6)
    np.testing.assert_allclose(first[0], C[0], rtol=1e-6)
    np.testing.assert_array_equal(last[0], 0)
    np.testing.assert_allclose(prev[1], C[1] * mat[5], rtol=1e-6)   # blank last: after the third shown title
    np.testing.assert_array_equal(nxt[1], 0)
    np.testing.assert_allclose(last[1], C[1], rtol=1e-6)
    np.testing.assert_allclose(prev[2], C[2] * mat[6], rtol=1e-6)
    np.testing.assert_allclose(nxt[2], C[2] * mat[7], rtol=1e-6)
    np.testing.assert_allclose(place[2, :, 4 * d], (C[2] * mat[6]).sum(-1), rtol=1e-5)
    np.testing.assert_allclose(place[2, :, 4 * d + 1], (C[2] * mat[7]).sum(-1), rtol=1e-5)
    np.testing.assert_array_equal(place[3], 0)


def test_the_blank_is_resolved_from_provenance_or_from_the_placeholder(world):
    """resolve_dataset keeps each cloze question's blank: the generated textual cloze's placeholder_index,
    the place of @placeholder among the shown photos of visual cloze; the shown items before it are
    question_rows[:blank]."""
    from features.diagnostics.bias import VectorLookup, resolve_dataset
    con, (text, _), visual = world["con"], world["text"], world["visual"]
    space = words_space(con)
    res = resolve_dataset(con, text, space, "textual_cloze")
    prov = {q: json.loads(p) for q, p in con.execute("SELECT qid, provenance FROM questions WHERE dataset_id = ?",
                                                     [text]).fetchall()}
    assert len(res.blanks) == len(res.qids) > 40
    assert res.blanks == [prov[q]["placeholder_index"] for q in res.qids]
    assert len(set(res.blanks)) > 1 and all(0 <= b <= len(r) for b, r in zip(res.blanks, res.question_rows))
    for b, r, q in zip(res.blanks, res.question_rows, res.qids):
        items = [x for i, x in enumerate(prov[q]["question_items"]) if i != b]
        assert [space.ids[k] for k in r] == items
    vres = resolve_dataset(con, visual, VectorLookup(world["paths"].lance, ENC, "image"), "visual_cloze")
    shown = {q: json.loads(x) if isinstance(x, str) else list(x) for q, x in
             con.execute("SELECT qid, question FROM questions WHERE dataset_id = ?", [visual]).fetchall()}
    assert vres.blanks == [shown[q].index("@placeholder") for q in vres.qids]


def test_real_recipeqa_textual_cloze_gives_its_answer_away_in_the_titles_words(shared_fixtures):
    """The cue is not the sample kitchen's alone: on the 135 real RecipeQA textual cloze questions of the
    validation fixture, the choice with the shortest title is the answer in 40.7% of them (chance 25%), and
    the words probe's trees, in a space of those questions' own titles, read 39.3% (folds of recipes)."""
    from features.diagnostics.question_only import task_features
    from features.diagnostics.tree_probe import tree_probe
    from features.diagnostics.words_probe import principal_sparse, tfidf
    data = [r for r in json.loads((shared_fixtures / "recipeqa" / "val_dev.json").read_text())["data"]
            if r["task"] == "textual_cloze"]
    assert len(data) == 135
    answers = np.array([r["answer"] for r in data])
    words = np.array([[len(c.split()) for c in r["choice_list"]] for r in data])
    assert (words.argmin(1) == answers).mean() > 0.37
    titles = sorted({t for r in data for t in r["question"] + r["choice_list"] if t != "@placeholder"})
    row = {t: i for i, t in enumerate(titles)}
    docs = [terms(t) for t in titles]
    mat = principal_sparse(tfidf(docs, vocabulary(docs)))
    X = task_features("textual_cloze", [[row[t] for t in r["question"] if t != "@placeholder"] for r in data],
                      [[row[t] for t in r["choice_list"]] for r in data], mat)
    groups = [r["recipe_id"] for r in data]
    trees = tree_probe(X, answers, groups, seed=0)
    assert trees.accuracy > 0.33, trees.accuracy
    # the blank's place: on these questions the linear model reads 38.5-43.7% with it (3 seeds) against
    # 31.1-34.1% without (which titles end a recipe, which follow which)
    from features.diagnostics.bias import ResolvedQuestions
    from features.diagnostics.question_only import question_only_probe
    from features.diagnostics.words_probe import placed_features
    q = [[row[t] for t in r["question"] if t != "@placeholder"] for r in data]
    c = [[row[t] for t in r["choice_list"]] for r in data]
    res = ResolvedQuestions("val", "textual_cloze", [r["qid"] for r in data], groups, ["val"] * len(data), answers,
                            q, c, len(data), 0, [r["question"].index("@placeholder") for r in data])
    blind = np.mean([question_only_probe(X, answers, groups, None, 5, s).accuracy for s in range(3)])
    placed = np.mean([question_only_probe(placed_features(res, mat), answers, groups, None, 5, s).accuracy
                      for s in range(3)])
    assert placed > 0.37 and placed > blind + 0.04, (placed, blind)
