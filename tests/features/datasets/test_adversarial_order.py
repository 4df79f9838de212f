"""AF's order members (features/datasets/adversarial.py ORDER_MEMBERS) on textual cloze.

A synthetic world (features/datasets/synthetic.py) whose step titles are rewritten before the datasets are
made, so the titles' vectors carry nothing of it: half the steps are titled by their place ("Stage 03", the
same at the same place of every recipe), the others by one of 12 titles drawn at random. The corpus's order
of titles then gives the answer away, which only the order probe (features/diagnostics/order_probe.py) and
AF's order members read. AF with them leaves the order probe near chance; the same AF without them (the
members taken out, an ablation) leaves it well above."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from synthetic_home import synthetic_home

from features.datasets import adversarial
from features.datasets.generate import generate_datasets
from features.datasets.knobs import AF_DEFAULT_ROUNDS, KnobParams
from features.diagnostics.order_probe import order_probe_rows

ENC = "synthetic-enc-0001"
SETTING = ("textual_cloze", replace(KnobParams.preset_for("textual_cloze", 0, 1, 0), af_rounds=AF_DEFAULT_ROUNDS))


def place_titles(con, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    rows = con.execute("SELECT recipe_id, step_idx FROM steps ORDER BY recipe_id, step_idx").fetchall()
    new = [(f"Stage {idx:02d}" if rng.random() < 0.5 else f"Title {int(rng.integers(12)):02d}", rid, idx)
           for rid, idx in rows]
    con.executemany("UPDATE steps SET title = ? WHERE recipe_id = ? AND step_idx = ?", new)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with synthetic_home(tmp_path_factory, "af_order_home", n_recipes=200, seed=4, dim=16, k=60) as (home, paths, con):
        place_titles(con)
        yield {"con": con, "paths": paths}


def _generate(world, params) -> tuple[dict, float]:
    """Generate the setting with `params`: its summary and the order probe's figure on every question."""
    con, paths = world["con"], world["paths"]
    s = generate_datasets(con, [("textual_cloze", params)], seed=0, encoder_id=ENC, lance_uri=paths.lance,
                          progress=False)[0]
    return s, order_probe_rows(con, [s["dataset_id"]])["datasets"][0]["linear"]["accuracy"]


def test_af_order_members_take_the_title_order_cue_away(world, monkeypatch):
    _, plain = _generate(world, replace(SETTING[1], af_rounds=0))
    s, with_order = _generate(world, SETTING[1])
    ensemble = world["con"].execute("SELECT json_extract(params, '$.adversarial.ensemble') FROM datasets "
                                    "WHERE dataset_id = ?", [s["dataset_id"]]).fetchall()[0][0]
    assert [m for m in json.loads(ensemble) if m["features"] == "order"] == [dict(m) for m in adversarial.ORDER_MEMBERS]
    again, _ = _generate(world, SETTING[1])
    assert again["content_sha256"] == s["content_sha256"]            # deterministic
    monkeypatch.setattr(adversarial, "ORDER_MEMBERS", ())           # the ablation: AF without its order members
    s0, without = _generate(world, SETTING[1])
    assert s0["content_sha256"] != s["content_sha256"]
    # the cue is there: the plain setting and AF without the members are read well above chance
    assert plain > 0.4 and without > 0.4, (plain, without)
    # with them AF picks distractors the corpus's order cannot reject: measured 38.1% against 45.8%
    assert with_order < without - 0.05, (with_order, without)
    assert s["n_questions"] > 300 and s0["n_questions"] > 300
