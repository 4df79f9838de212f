"""Visual coherence with matched foreign images (features/datasets/matched.py), beyond the paper, on a
synthetic world with a planted per-recipe "kitchen" cue (features/datasets/synthetic.py)."""
from __future__ import annotations

import json
import logging
import math
from collections import Counter
from dataclasses import replace

import duckdb
import numpy as np
import pytest
from synthetic_home import assert_deterministic, dataset_rows, exported_world, item_step, synthetic_home

from features.datasets.card import PROVENANCE_KEYS
from features.datasets.generate import generate_datasets
from features.datasets.knobs import AF_DEFAULT_ROUNDS, KnobParams, dataset_id
from features.datasets.matched import MATCHED_POOL

ENC = "synthetic-enc-0001"
TASK = "visual_coherence"


def _matched(k1: int, af: bool, kind: str = "matched") -> tuple[str, KnobParams]:
    p = KnobParams.preset_for(TASK, k1, 0, 0, distractors=kind)
    return TASK, replace(p, af_rounds=AF_DEFAULT_ROUNDS) if af else p


SETTINGS = [_matched(0, False), _matched(1, False), _matched(0, True),
            (TASK, KnobParams.preset_for(TASK, 0, 0, 0)),       # the paper's 0-0-0, to compare
            _matched(1, False, "author"), _matched(0, True, "author")]   # among the author's recipes
MATCHED = [0, 1, 2, 4, 5]                                       # SETTINGS with a matched foreign photo


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with exported_world(tmp_path_factory, "matched_home", SETTINGS, n_recipes=90, seed=3, dim=24, k=100) as w:
        out = w["out"]
        iv = duckdb.sql(f"SELECT image_id, recipe_id, vector FROM '{out}/image_vectors.parquet'").fetchall()
        w["vec"] = {i: np.asarray(v, np.float64) / np.linalg.norm(v) for i, _, v in iv}
        w["images"] = [(i, r) for i, r, _ in iv]
        w["split"] = dict(duckdb.sql(f"SELECT recipe_id, split FROM '{out}/recipes.parquet'").fetchall())
        w["author"] = dict(w["con"].execute("SELECT recipe_id, author FROM recipes").fetchall())
        yield w


def test_ids_params_and_refusals(world):
    for (task, p), did in zip(SETTINGS, world["ids"]):
        assert did == dataset_id(task, p, 0, ENC)
        params = json.loads(world["con"].execute("SELECT params FROM datasets WHERE dataset_id = ?",
                                                 [did]).fetchall()[0][0])
        setting = world["con"].execute("SELECT setting FROM datasets WHERE dataset_id = ?", [did]).fetchall()[0][0]
        if p.distractors in ("matched", "author"):     # its own setting name: never a paper setting's
            name = f"{p.knob1}-0-0-{p.distractors}" + ("-af" if p.af_rounds else "")     # id or partition
            assert setting == name and did == f"vcoh-{name}-s0-{did.rsplit('-', 1)[-1]}"
            assert params["distractors"] == p.distractors
            if p.af_rounds:
                assert params["adversarial"]["pools"] == [p.distractors]
        else:
            assert setting == "0-0-0" and "matched" not in did
        assert "-p" not in did.rsplit("-", 1)[-1][:2]
    for task, kw in (("visual_cloze", {}), (TASK, {"k2": 1}), (TASK, {"k3": 1})):
        p = KnobParams.preset_for(task, 0, kw.get("k2", 0), kw.get("k3", 0), distractors="matched")
        with pytest.raises(ValueError, match="--distractors matched is defined for visual coherence"):
            p.validate(task)
    with pytest.raises(ValueError, match="--distractors matched"):
        KnobParams.recipeqa_preset(distractors="matched").validate(TASK)


def test_every_foreign_image_is_matched_to_a_held_out_photo_of_the_recipe(world):
    """On every question: the foreign image (the answer) is a photo of another recipe of the same split
    (`author`: by the question recipe's author); the reference is a photo of the question's recipe from a
    step it does not show; and the foreign image is among the MATCHED_POOL candidates whose sorted cosines
    to the 3 shown photos are nearest the reference's (recomputed here from the exported vectors over every
    photo of the split, `author`: every photo of the author's other recipes there)."""
    n = Counter()
    for i in MATCHED:
        kind = SETTINGS[i][1].distractors
        rows = dataset_rows(world, world["ids"][i])
        assert rows
        for r in rows:
            assert set(r["prov"]) <= set(PROVENANCE_KEYS), set(r["prov"]) - set(PROVENANCE_KEYS)   # on the card
            _check_matched(world, r, kind)
            n[kind] += 1
    assert n["matched"] > 100 and n["author"] > 100, n


def test_author_candidates_only_where_the_author_has_another_recipe(world):
    """A question whose recipe's author has no other recipe in its split gets no foreign photo (counted as
    `no_author_candidate`); the author variant keeps fewer questions than the matched one, never more."""
    con = world["con"]
    author, split = world["author"], world["split"]
    mates = {r: sum(1 for o in author if o != r and author[o] == author[r] and split[o] == split[r])
             for r in author}
    for i in (4, 5):
        rows = dataset_rows(world, world["ids"][i])
        assert all(mates[r["recipe_id"]] > 0 for r in rows)
    plain = dict(con.execute("SELECT setting, n_questions FROM datasets").fetchall())
    assert plain["1-0-0-author"] <= plain["1-0-0-matched"]
    lonely = {r["recipe_id"] for r in dataset_rows(world, world["ids"][1]) if mates[r["recipe_id"]] == 0}
    skipped = dict(con.execute("SELECT reason, n_skipped FROM generation_skips WHERE dataset_id = ?",
                               [world["ids"][4]]).fetchall())
    assert lonely and skipped.get("no_author_candidate", 0) >= len(lonely)     # each asked at least once


def _check_matched(world, r, kind: str = "matched") -> None:
    """The foreign image of question row r is a photo of another recipe of its split (`author`: by r's
    recipe's author), among the MATCHED_POOL best matches of the reference, a photo of r's recipe from a step
    it does not show."""
    vec, split, author = world["vec"], world["split"], world["author"]
    if "by_split" not in world:
        world["by_split"] = {}
        for img, rid in world["images"]:
            world["by_split"].setdefault(split[rid], []).append(img)
    p, choices = r["prov"], list(r["choice_list"])
    foreign = choices[r["answer"]]
    shown = [c for i, c in enumerate(choices) if i != r["answer"]]
    assert p["rule"] == kind and p["foreign_item"] == foreign
    frid, rid = item_step(foreign)[0], r["recipe_id"]
    assert frid != rid and split[frid] == split[rid] == r["split"]
    if kind == "author":
        assert author[frid] == author[rid]
    ref_rid, ref_step = item_step(p["reference_item"])
    assert ref_rid == rid and p["reference_item"] not in shown
    assert ref_step not in {item_step(c)[1] for c in shown}
    S = np.stack([vec[c] for c in shown])
    prof = lambda x: -np.sort(-(S @ vec[x]))
    target = prof(p["reference_item"])
    pool = [i for i in world["by_split"][r["split"]] if item_step(i)[0] != rid
            and (kind == "matched" or author[item_step(i)[0]] == author[rid])]
    costs = np.array([np.abs(prof(i) - target).sum() for i in pool])
    assert (costs < np.abs(prof(foreign) - target).sum() - 1e-5).sum() < MATCHED_POOL


def test_the_distance_rules_lose_the_foreign_image(world):
    """The paper's knob 2 puts the foreign image in the closest pair of the four; matched, the
    closest-pair and centre rules and Hasty Student's outlier rule fall towards chance."""
    from features.diagnostics.bias import centre_rule, pair_rule
    vec = world["vec"]

    def rules(did):
        rows = dataset_rows(world, did)
        items = sorted({c for r in rows for c in r["choice_list"]})
        ix = {c: i for i, c in enumerate(items)}
        mat = np.stack([vec[c] for c in items])
        choice_rows = [[ix[c] for c in r["choice_list"]] for r in rows]
        ans = np.array([r["answer"] for r in rows])
        X = mat[np.array(choice_rows)]
        rest = X.sum(1, keepdims=True) - X
        loo = 1 - (X * rest).sum(-1) / np.linalg.norm(rest, axis=-1)
        outlier = float((loo.argmax(1) == ans).mean())
        return pair_rule(TASK, choice_rows, mat, ans), centre_rule(TASK, choice_rows, mat, ans), outlier

    paper = rules(world["ids"][3])
    matched = rules(world["ids"][0])
    assert paper[0] > 0.5                                   # the knob-2 closest pair
    assert matched[0] < paper[0] - 0.2 and matched[0] < 0.4
    assert all(x < 0.45 for x in matched), matched


def test_matched_generation_is_deterministic(world):
    assert_deterministic(world, SETTINGS)


def test_cli_distractors_matched_and_its_bad_input(paths, con, prefect_harness):
    from typer.testing import CliRunner

    from features.datasets.synthetic import build_world
    from flows.cli import app
    build_world(con, paths.lance, n_recipes=30, seed=2, dim=16, k=50)
    con.close()
    runner = CliRunner()
    for args in (["--task", "visual_cloze", "--knobs", "0-0-0"], ["--task", TASK, "--knobs", "0-1-0-af"],
                 ["--all"]):
        r = runner.invoke(app, ["generate", *args, "--distractors", "matched"])
        assert r.exit_code == 2 and "Traceback" not in r.output, (args, r.output)
        assert ("--distractors matched is defined" in r.output) or ("--all" in r.output), r.output
    r = runner.invoke(app, ["generate", "--task", TASK, "--knobs", "0-0-0-af", "--distractors", "matched"])
    assert r.exit_code == 0, r.output
    matched = r.output.split()[0]
    assert matched.startswith("vcoh-0-0-0-matched-af-s0-")
    # the setting's own name says it too; a name and an option that disagree are refused
    r = runner.invoke(app, ["generate", "--task", TASK, "--knobs", "0-0-0-matched-af"])
    assert r.exit_code == 0 and r.output.split()[0] == matched, r.output
    for args in (["--knobs", "0-1-0-matched"], ["--knobs", "0-0-0-matched", "--distractors", "ball"]):
        r = runner.invoke(app, ["generate", "--task", TASK, *args])
        assert r.exit_code == 2 and "Traceback" not in r.output and "matched" in r.output, (args, r.output)
    for cmd in (["generate", "--task", "visual_cloze", "--knobs", "0-0-0-author-af"],
                ["generate", "--task", TASK, "--knobs", "0-1-1-author"],
                ["af-pool", "--task", "visual_cloze", "--distractors", "author"],
                ["af-check", "--task", "textual_cloze", "--distractors", "author"]):
        r = runner.invoke(app, cmd)
        assert r.exit_code == 2 and "Traceback" not in r.output and "author" in r.output, (cmd, r.output)
    # this world records no author: every question is skipped with its reason, none is lost silently
    r = runner.invoke(app, ["generate", "--task", TASK, "--knobs", "0-0-0-author-af"])
    assert r.exit_code == 0 and r.exception is None, r.output      # (its warning may meet a closed test stream)
    line = next(x for x in r.output.splitlines() if x.startswith("vcoh-0-0-0-author-af-s0-") and "skipped" in x)
    assert line.split()[1] == "0" and "'no_author_candidate': " in line, line
    r = runner.invoke(app, ["generate", "--task", TASK, "--knobs", "0-0-0"])
    assert r.exit_code == 0, r.output
    plain = r.output.split()[0]
    # an export of a chosen few (the matched datasets apart from the knob settings' for a sweep)
    out = paths.exports / "two"
    r = runner.invoke(app, ["export", "--dataset", f"{matched},{plain}", "--out", str(out)])
    assert r.exit_code == 0, r.output
    got = {d for (d,) in duckdb.sql(f"SELECT DISTINCT dataset_id FROM read_parquet('{out}/questions/**/*.parquet', "
                                    "hive_partitioning = true)").fetchall()}
    assert got == {matched, plain}
    for args in (["--dataset", "nope"], ["--dataset", matched, "--all"], []):
        r = runner.invoke(app, ["export", *args])
        assert r.exit_code == 2 and "Traceback" not in r.output, (args, r.output)


@pytest.mark.slow      # the pooled drop and GM3C fold models (~13 s)
def test_af_pool_and_af_check_keep_the_matched_datasets_apart(world):
    """The knob settings' AF datasets and the matched ones are separate benchmarks: `mrqa af-pool` and
    `mrqa af-check` take one kind (--distractors); the floor counts against the paper setting's plain
    dataset (not the matched plain one); the pooled adversary's swaps stay in the matched pool. Runs
    last: it filters the matched AF dataset in place."""
    from features.datasets.af_pooled import af_datasets, split_counts
    from flows.af_pool import af_check_flow, af_pool_flow
    con = world["con"]
    matched_af, paper_plain = world["ids"][2], world["ids"][3]
    rows = af_datasets(con, TASK, 0, "matched")
    assert [r["dataset_id"] for r in rows] == [matched_af] and af_datasets(con, TASK, 0) == []
    author = af_datasets(con, TASK, 0, "author")        # a benchmark of its own, its floor the paper setting's
    assert [(r["dataset_id"], r["n_plain"]) for r in author] == [(world["ids"][5], rows[0]["n_plain"])]
    assert rows[0]["n_plain"] == con.execute("SELECT n_questions FROM datasets WHERE dataset_id = ?",
                                             [paper_plain]).fetchall()[0][0]
    split_of, n_split = split_counts(con, rows)         # what the per-split floor counts against
    assert split_of == {matched_af: dict(con.execute("SELECT qid, split FROM questions WHERE dataset_id = ?",
                                                     [matched_af]).fetchall())}
    assert n_split == {matched_af: dict(con.execute("SELECT split, count(*) FROM questions WHERE dataset_id = ? "
                                                    "GROUP BY ALL", [paper_plain]).fetchall())}
    assert sum(n_split[matched_af].values()) == rows[0]["n_plain"]
    con.close()
    try:
        with pytest.raises(ValueError, match="no AF datasets of visual_coherence .*ball distractors"):
            af_pool_flow.fn(task=TASK, folds=2, size="tiny")
        res = af_pool_flow.fn(task=TASK, tau=0.3, folds=2, size="tiny", rounds=2, solved_share=0.05,
                              min_kept=0.4, distractors="matched", floor_by="split")
        chk = af_check_flow.fn(task=TASK, seeds=(0,), folds=2, size="tiny", distractors="matched", record=True)
    finally:
        world["con"] = duckdb.connect(str(world["paths"].warehouse))
    # --record: the figure is in af_checks under the content hash it measured, and the card's rules read it
    # while the dataset is unchanged
    from features.datasets.card import _bias
    con = world["con"]
    row = con.execute("SELECT c.accuracy, c.n, c.content_sha256 = d.content_sha256 FROM af_checks c "
                      "JOIN datasets d USING (dataset_id) WHERE dataset_id = ?", [matched_af]).fetchall()[0]
    assert row == (chk["datasets"][0]["accuracy"], chk["datasets"][0]["n"], True) and chk["recorded"] == 1
    assert _bias(con, [matched_af])[matched_af]["gm3c_qo_acc"] == row[0]
    fold_by, by_split = con.execute("SELECT fold_by, by_split FROM af_checks WHERE dataset_id = ?",
                                    [matched_af]).fetchall()[0]
    assert fold_by == chk["fold_by"] == "split" and json.loads(by_split) == chk["datasets"][0]["by_split"]
    # the tree probe's figure beside it, recorded and read by the card's rules the same way
    tree = chk["datasets"][0]["tree"]
    assert 0 <= tree["accuracy"] <= 1 and tree["ci"][0] <= tree["accuracy"] <= tree["ci"][1]
    assert sum(v["n"] for v in tree["by_split"].values()) == chk["datasets"][0]["n"]
    t_acc, t_split = con.execute("SELECT tree_accuracy, tree_by_split FROM af_checks WHERE dataset_id = ?",
                                 [matched_af]).fetchall()[0]
    assert t_acc == tree["accuracy"] and json.loads(t_split) == tree["by_split"]
    assert _bias(con, [matched_af])[matched_af]["tree_qo_acc"] == t_acc
    sha = con.execute("SELECT content_sha256 FROM datasets WHERE dataset_id = ?", [matched_af]).fetchall()[0][0]
    con.execute("UPDATE datasets SET content_sha256 = 'changed' WHERE dataset_id = ?", [matched_af])
    assert "gm3c_qo_acc" not in _bias(con, [matched_af]).get(matched_af, {})       # stale: not read
    con.execute("UPDATE datasets SET content_sha256 = ? WHERE dataset_id = ?", [sha, matched_af])
    assert [r["dataset_id"] for r in res["datasets"]] == [matched_af] and res["distractors"] == "matched"
    assert [r["dataset_id"] for r in chk["datasets"]] == [matched_af] and chk["distractors"] == "matched"
    q = world["con"].execute("SELECT * FROM questions WHERE dataset_id = ?", [matched_af])
    cols = [c[0] for c in q.description]
    after = [dict(zip(cols, r)) for r in q.fetchall()]
    assert after and chk["datasets"][0]["n"] == len(after)
    # the floor holds in each split, counted against the paper setting's plain dataset there
    plain = dict(world["con"].execute("SELECT split, count(*) FROM questions WHERE dataset_id = ? GROUP BY ALL",
                                      [paper_plain]).fetchall())
    kept = Counter(r["split"] for r in after)
    assert res["floor_by"] == "split" and set(kept) == set(plain)
    assert all(kept[s] >= math.ceil(0.4 * plain[s]) for s in plain), (kept, plain)
    swapped = 0
    for r in after:
        r["prov"] = json.loads(r["provenance"])
        swapped += bool(r["prov"].get("af_pooled_swaps"))
        _check_matched(world, r)
    assert swapped > 0


@pytest.mark.slow      # the pipeline's opt-in matched step (~13 s)
@pytest.mark.parametrize("kind", ["matched", "author"])
def test_the_pipeline_makes_and_filters_the_matched_coherence_datasets(kind, tmp_path_factory, monkeypatch,
                                                                       prefect_harness, caplog):
    """`mrqa demo/pipeline --matched-coherence` (`--author-coherence`): after the paper's settings, the
    generate stage makes the matched (author) settings and runs their own pooled step, which keeps at least
    40% of the paper setting's questions; the stage's summary holds their final counts. Without the flag the
    stage's parameters (its fingerprint) are what they were, so a home made before does not generate again."""
    import inspect

    from flows import pipeline
    from flows.pipeline import AUTHOR_SETTINGS, MATCHED_SETTINGS, build_stages, pipeline_flow
    pool_name = f"{kind.upper()}_POOL"
    monkeypatch.setattr(pipeline, pool_name, {**getattr(pipeline, pool_name), "size": "tiny", "folds": 2,
                                              "adversaries": 1})
    with synthetic_home(tmp_path_factory, f"{kind}_pipeline", n_recipes=90, seed=3, dim=24, k=100) as (
            home, paths, con):
        con.execute("""UPDATE recipes SET author = 'author-' ||
                       CAST(CAST(split_part(recipe_id, '-', 3) AS INTEGER) % 6 AS VARCHAR)""")
        author = dict(con.execute("SELECT recipe_id, author FROM recipes").fetchall())
        paper = [(TASK, KnobParams.preset_for(TASK, k1, 0, 0)) for k1 in (0, 1)]
        plain = {s["dataset_id"]: s["n_questions"] for s in generate_datasets(
            con, paper, seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False)}
        con.close()
        with caplog.at_level(logging.WARNING, logger="flows.pipeline"):
            out, made = pipeline._matched(paths, {"seed": 0, "encoder_id": ENC}, kind)
        # splits drawn per recipe (the synthetic home's): the author step says what would serve it better
        assert ("author coherence on splits drawn per recipe" in caplog.text) == (kind == "author")
        con = duckdb.connect(str(paths.warehouse))
        rows = dict(con.execute("SELECT dataset_id, n_questions FROM datasets").fetchall())
        settings = dict(con.execute("SELECT dataset_id, setting FROM datasets").fetchall())
        params = {d: json.loads(p) for d, p in con.execute("SELECT dataset_id, params FROM datasets").fetchall()}
        foreign = con.execute("SELECT q.dataset_id, q.recipe_id, q.provenance FROM questions q JOIN datasets d "
                              "USING (dataset_id) WHERE list_contains(?, d.setting)",
                              [list(AUTHOR_SETTINGS if kind == "author" else MATCHED_SETTINGS)]).fetchall()
        con.close()
    assert sorted(settings[d["dataset_id"]] for d in made) == sorted(
        AUTHOR_SETTINGS if kind == "author" else MATCHED_SETTINGS)
    assert foreign and all(json.loads(p)["rule"] == kind for _, _, p in foreign)
    if kind == "author":          # the foreign photo: another recipe of the question's author
        for _, rid, p in foreign:
            frid = item_step(json.loads(p)["foreign_item"])[0]
            assert frid != rid and author[frid] == author[rid], (rid, frid)
    assert out["datasets"] == {d["dataset_id"]: rows[d["dataset_id"]] for d in made}
    assert all(d["n_questions"] == rows[d["dataset_id"]] for d in made)
    af = [d["dataset_id"] for d in made if settings[d["dataset_id"]].endswith("-af")]
    assert sorted(out["af_pool"]) == sorted(af)
    for did in af:
        step = params[did]["af_pooled"]
        assert step["distractors"] == kind and step["min_kept"] == 0.4
        assert step["rounds"] == (3 if kind == "author" else 2)
        assert step.get("look", False) == (kind == "author")       # the author step's drop reads the pixels too
        assert step.get("pixel_swaps", False) == (kind == "author")  # and its swaps the CNN's scores
        assert step.get("pixel_side") == (64 if kind == "author" else None)
        assert step["drop_order"].startswith("the list whose" if kind == "author" else "lists in turn")
        assert step["fold_by"] == "split"        # held-out splits scored by models that never saw their images
        assert step["adversary"].endswith("out of fold by split (val and test each a fold of their own, "
                                          "the train split's recipes the others)")
        paper_id = next(p for p in plain if p.startswith(f"vcoh-{settings[did][:5]}-s0-"))
        assert rows[did] >= math.ceil(0.4 * plain[paper_id]) and out["af_pool"][did]["kept"] == rows[did]
    defaults = {k: v.default for k, v in inspect.signature(pipeline_flow.fn).parameters.items()}
    flag = f"{kind}_coherence"
    gen = {m: next(s for s in build_stages({**defaults, flag: m}, paths) if s.name == "generate")
           for m in (False, True)}
    assert flag not in gen[False].params and gen[True].params[flag]
    assert {k: v for k, v in gen[True].params.items() if k != flag} == gen[False].params
