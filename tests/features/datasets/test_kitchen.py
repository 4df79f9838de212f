"""Visual cloze with distractors from the question's own kitchen (`--distractors kitchen`, beyond the paper),
on a synthetic world whose vectors carry a planted per-recipe style (features/datasets/synthetic.py)."""
from __future__ import annotations

import json
from dataclasses import replace

import duckdb
import numpy as np
import pytest
from synthetic_home import assert_deterministic, dataset_rows, exported_world, item_step

from features.datasets.card import PROVENANCE_KEYS
from features.datasets.knobs import AF_DEFAULT_ROUNDS, KnobParams, dataset_id, parse_setting

ENC = "synthetic-enc-0001"
TASK = "visual_cloze"


def _kitchen(k1: int, af: bool) -> tuple[str, KnobParams]:
    p = KnobParams.preset_for(TASK, k1, 0, 0, distractors="kitchen")
    return TASK, replace(p, af_rounds=AF_DEFAULT_ROUNDS) if af else p


SETTINGS = [_kitchen(0, False), _kitchen(1, False), _kitchen(0, True),
            (TASK, KnobParams.preset_for(TASK, 0, 0, 0)),                 # the paper's 0-0-0, to compare
            (TASK, replace(KnobParams.preset_for(TASK, 0, 0, 0), af_rounds=AF_DEFAULT_ROUNDS))]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with exported_world(tmp_path_factory, "kitchen_home", SETTINGS, n_recipes=120, seed=5, dim=24, k=100) as w:
        out = w["out"]
        unit = lambda v: np.asarray(v, np.float64) / np.linalg.norm(v)
        w["vec"] = {i: unit(v) for i, v in duckdb.sql(f"SELECT image_id, vector FROM '{out}/image_vectors.parquet'")
                    .fetchall()}
        w["body"] = {(r, s): unit(v) for r, s, v in duckdb.sql(
            f"SELECT recipe_id, step_idx, vector FROM '{out}/text_vectors.parquet' WHERE field = 'body'").fetchall()}
        yield w


def test_names_ids_params_and_refusals(world):
    for (task, p), did in zip(SETTINGS, world["ids"]):
        assert did == dataset_id(task, p, 0, ENC)
        setting, params = world["con"].execute("SELECT setting, params FROM datasets WHERE dataset_id = ?",
                                               [did]).fetchall()[0]
        params = json.loads(params)
        if p.distractors == "kitchen":          # its own setting name: never a paper setting's id or partition
            name = f"{p.knob1}-0-0-kitchen" + ("-af" if p.af_rounds else "")
            assert setting == name and did == f"vc-{name}-s0-{did.rsplit('-', 1)[-1]}"
            assert params["distractors"] == "kitchen"
            if p.af_rounds:
                assert params["adversarial"]["pools"] == ["recipe"]
        else:
            assert "kitchen" not in setting and "kitchen" not in did
    assert parse_setting("1-0-0-kitchen-af").params(TASK) == _kitchen(1, True)[1]
    assert parse_setting("0-0-0-af", distractors="kitchen").name == "0-0-0-kitchen-af"
    for text, kw in (("0-1-0-kitchen", {}), ("0-0-1-kitchen", {}), ("0-0-0-kitchen", {"distractors": "matched"})):
        with pytest.raises(ValueError, match="kitchen"):
            parse_setting(text, **kw)
    for task, kw in (("visual_coherence", {}), ("textual_cloze", {}), ("visual_ordering", {}),
                     (TASK, {"k2": 1}), (TASK, {"k3": 1})):
        p = KnobParams.preset_for(task, 0, kw.get("k2", 0), kw.get("k3", 0), distractors="kitchen")
        with pytest.raises(ValueError, match="--distractors kitchen is defined for visual cloze"):
            p.validate(task)
    with pytest.raises(ValueError, match="--distractors kitchen"):
        KnobParams.recipeqa_preset(distractors="kitchen").validate(TASK)


def test_every_distractor_is_a_photo_of_the_recipe_no_reader_could_take_for_the_answer(world):
    """On every question of the kitchen datasets, plain and AF: the 3 distractors are distinct photos of the
    question's own recipe; none is of a step the question shows (the answer's own step included) nor of a
    step between the placeholder's shown neighbours (it could fill the blank as well); the answer step's
    text is nearer the answer photo than each distractor (recomputed from the exported vectors)."""
    n = 0
    for did in world["ids"][:3]:
        rows = dataset_rows(world, did)
        assert rows
        for r in rows:
            p, choices = r["prov"], list(r["choice_list"])
            assert set(p) <= set(PROVENANCE_KEYS), set(p) - set(PROVENANCE_KEYS)          # on the card
            assert p["rule"] == "kitchen" and p["n_kitchen_candidates"] >= 3
            answer = choices[r["answer"]]
            distractors = [c for i, c in enumerate(choices) if i != r["answer"]]
            assert len(set(distractors)) == 3 and answer not in distractors
            shown = list(p["question_items"])
            blank = p["placeholder_index"]
            assert shown[blank] == answer and p["answer_step"] == item_step(answer)[1]
            shown_steps = [item_step(x)[1] for x in shown]
            lo = shown_steps[blank - 1] if blank > 0 else -1
            hi = shown_steps[blank + 1] if blank < len(shown) - 1 else 10 ** 9
            t = world["body"][(r["recipe_id"], p["answer_step"])]
            for d in distractors:
                rid, step = item_step(d)
                assert rid == r["recipe_id"]
                assert step not in shown_steps and not lo < step < hi
                assert t @ world["vec"][d] < t @ world["vec"][answer]
            assert [x["item"] for x in p["distractors"]] == distractors
            if "af_pools" in p:
                assert [x for i, x in enumerate(p["af_pools"]) if i != r["answer"]] == ["recipe"] * 3
            n += 1
    assert n > 200


def test_the_recipes_own_photos_hide_the_planted_kitchen(world):
    """The synthetic photos of a recipe share a planted style, as a kitchen's do. The paper's 0-0-0 draws its
    distractors from other recipes, so the learned question-only probe reads it well (AF in the same space
    removes that only partly); with the recipe's own photos the same probe falls to about chance."""
    from features.diagnostics.bias import learned_probe_rows
    con, paths = world["con"], world["paths"]
    qo = {d: r["qo_acc"] for d, r in learned_probe_rows(con, world["ids"], paths.lance).items()}
    kitchen, kitchen_af, paper = qo[world["ids"][0]], qo[world["ids"][2]], qo[world["ids"][3]]
    assert paper > 0.6, qo
    assert kitchen < paper - 0.2 and kitchen_af < 0.4, qo
    n = dict(con.execute("SELECT dataset_id, n_questions FROM datasets").fetchall())
    assert n[world["ids"][2]] >= 0.4 * n[world["ids"][0]]          # AF keeps 40% of the kitchen setting


def test_kitchen_generation_is_deterministic(world):
    assert_deterministic(world, SETTINGS[:3])


def test_cli_distractors_kitchen_and_its_bad_input(paths, con, prefect_harness):
    from typer.testing import CliRunner

    from features.datasets.synthetic import build_world
    from flows.cli import app
    build_world(con, paths.lance, n_recipes=40, seed=2, dim=16, k=50)
    con.close()
    runner = CliRunner()
    for args in (["--task", "visual_coherence", "--knobs", "0-0-0"], ["--task", TASK, "--knobs", "0-1-0-af"],
                 ["--task", TASK, "--knobs", "0-0-1"]):
        r = runner.invoke(app, ["generate", *args, "--distractors", "kitchen"])
        assert r.exit_code == 2 and "Traceback" not in r.output, (args, r.output)
        assert "--distractors kitchen is defined for visual cloze" in r.output, r.output
    r = runner.invoke(app, ["generate", "--task", TASK, "--knobs", "0-0-0-kitchen-af"])
    assert r.exit_code == 0, r.output
    assert r.output.split()[0].startswith("vc-0-0-0-kitchen-af-s0-")
    r = runner.invoke(app, ["generate", "--task", TASK, "--knobs", "0-0-0-kitchen", "--distractors", "matched"])
    assert r.exit_code == 2 and "Traceback" not in r.output and "kitchen" in r.output, r.output
    # the ball's and knob 3's options mean nothing here: refused, never a `-p` twin of the same questions
    for opt in (["--k", "5"], ["--ball-lo-sd", "1"], ["--ball-hi-sd", "2"], ["--k3-constrained", "2"],
                ["--k3-prob", "1"]):
        r = runner.invoke(app, ["generate", "--task", TASK, "--knobs", "0-0-0-kitchen", *opt])
        assert r.exit_code == 2 and f"{opt[0]}: kitchen distractors use no knob-2 ball" in r.output, (opt, r.output)
    r = runner.invoke(app, ["generate", "--task", TASK, "--knobs", "0-0-0-kichen"])
    assert r.exit_code == 2 and "-kitchen (visual cloze)" in r.output, r.output


def test_the_reports_tree_probe_and_af_pool_keep_the_kitchen_datasets_apart(world):
    """The report's tree probe pools the AF datasets of one kind only (as af-pool and af-check do): the
    paper's AF figures are the same with the kitchen AF dataset beside them; and af-pool / af-check refuse a
    kind the task has none of before any work."""
    from features.diagnostics.bias import compute_bias_metrics
    from features.diagnostics.tree_probe import tree_rows
    from flows.af_pool import af_check_flow, af_pool_flow
    con, lance = world["con"], world["paths"].lance
    paper_af, kitchen_af = world["ids"][4], world["ids"][2]

    def trees(ids):
        rows = compute_bias_metrics(con, ids, lance_uri=lance, progress=False, keep_resolved=True)
        tree_rows(con, rows, lance)
        return {r["dataset_id"]: r["tree_acc"] for r in rows}
    alone, beside = trees([paper_af]), trees([paper_af, kitchen_af])
    assert alone[paper_af] is not None and beside[paper_af] == alone[paper_af]
    assert beside[kitchen_af] is not None
    for flow, kw in ((af_pool_flow, {}), (af_check_flow, {"seeds": (0,)})):
        for task, kind in (("visual_coherence", "kitchen"), ("textual_cloze", "kitchen"), ("visual_cloze", "matched")):
            with pytest.raises(ValueError, match=f"--distractors {kind} names .* {task} has none"):
                flow.fn(task=task, distractors=kind, **kw)
