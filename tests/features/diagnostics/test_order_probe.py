"""The order probe (features/diagnostics/order_probe.py): a question-only model of textual cloze that knows the
corpus's order of step titles.

A synthetic world (features/datasets/synthetic.py) whose step titles are rewritten after the datasets are made
(the questions resolve to the steps by item id, so the probe reads the new titles): titles that say where they
stand (one per step place, the same in every recipe) are read far above chance; titles drawn at random stay
near chance; titles unique to their recipe stay near chance too, which fails if a question's own recipe (or a
choice's) were counted. `mrqa report` stores the figure, the reading gate holds a dataset back on it, the
pooled drop takes its list, and `mrqa order-probe` is read-only and refuses the visual tasks in one line."""
from __future__ import annotations

import json

import numpy as np
import pytest
from synthetic_home import synthetic_home
from typer.testing import CliRunner

from features.datasets.knobs import KnobParams
from features.diagnostics.order_probe import order_probe_rows
from features.diagnostics.title_order import TitleOrder, place_bin, title_key

ENC = "synthetic-enc-0001"
SETTINGS = [("textual_cloze", KnobParams.preset_for("textual_cloze", 0, 1, 0)),
            ("textual_cloze", KnobParams.preset_for("textual_cloze", 1, 1, 1)),
            ("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 1))]


def write_titles(con, kind: str, seed: int = 0) -> None:
    """Every step title rewritten: `ordered`, the step's place (the same title at the same place of every
    recipe); `random`, one of 12 titles drawn per step; `unique`, a title no other recipe has."""
    rng = np.random.default_rng(seed)
    rows = con.execute("SELECT recipe_id, step_idx FROM steps ORDER BY recipe_id, step_idx").fetchall()
    new = []
    for rid, idx in rows:
        title = {"ordered": f"Stage {idx:02d}", "random": f"Title {int(rng.integers(12)):02d}",
                 "unique": f"{rid} part {idx}"}[kind]
        new.append((title, rid, idx))
    con.executemany("UPDATE steps SET title = ? WHERE recipe_id = ? AND step_idx = ?", new)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from features.datasets.generate import generate_datasets
    with synthetic_home(tmp_path_factory, "order_home", n_recipes=60, seed=2, dim=16, k=60) as (home, paths, con):
        made = generate_datasets(con, SETTINGS, seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False)
        ids = [s["dataset_id"] for s in made]
        yield {"home": home, "paths": paths, "con": con, "text": ids[:2], "visual": ids[2]}


def test_titles_that_tell_their_place_are_read_and_random_ones_stay_near_chance(world):
    con, text = world["con"], world["text"]
    write_titles(con, "ordered")
    for r in order_probe_rows(con, text)["datasets"]:
        assert r["n_scored"] == r["n_questions"] > 40 and r["n_left_out"] == 0, r
        assert r["linear"]["accuracy"] > 0.6, r
        lo, hi = r["linear"]["ci"]
        assert lo <= r["linear"]["accuracy"] <= hi
    write_titles(con, "random", seed=1)
    for r in order_probe_rows(con, text)["datasets"]:
        assert 0.1 < r["linear"]["accuracy"] < 0.4, r


def test_the_questions_and_the_choices_own_recipes_are_left_out_of_the_counts(world):
    """Titles unique to their recipe: counted with the question's own recipe, the shown titles would come
    before the answer in the counts and never before a distractor (near 100%); left out, every choice is a
    title the counts never saw, and the probe stays near chance."""
    con, text = world["con"], world["text"]
    write_titles(con, "unique")
    for r in order_probe_rows(con, text)["datasets"]:
        assert r["linear"]["accuracy"] < 0.4, r
    order = TitleOrder(con)
    rid = next(iter(order.own))
    rows = [i for i, r in enumerate(order.recipe) if r == rid]
    # its own title after its first one: counted once in the corpus, nothing once its recipe is left out
    assert order.tables[0][(order.key[rows[0]], order.key[rows[1]])] == 1
    f = order.features([rows[0]], 1, rows[1], rid)
    g = order.features([rows[0]], 1, rows[1], "another-recipe")
    assert f[0] == pytest.approx(np.log(0.5) - np.log(1.0)) and f[5] == 0.0     # no count left
    assert g[0] == pytest.approx(f[0])           # the choice's own recipe is left out as well


def test_the_batch_lookup_gives_the_figures_of_one_choice_at_a_time(world):
    """`TitleOrder.batch` (AF's candidates, `order_features`) against `features`, choice by choice: the same
    float64 figures, bit for bit, with questions of different lengths, blanks at either end, no-choice
    slots (-1, zeros) and a question recipe the counts do not know."""
    con = world["con"]
    write_titles(con, "random", seed=3)
    order = TitleOrder(con)
    rng = np.random.default_rng(0)
    n, K = len(order.key), 60
    length = rng.integers(1, 6, K)
    blank = np.array([rng.integers(0, n_ + 1) for n_ in length])
    shown = np.full((K, 5), -1, np.int64)
    for k in range(K):
        shown[k, :length[k]] = rng.integers(0, n, length[k])
    choice = rng.integers(-1, n, (K, 7))
    rids = [order.recipe[i] for i in rng.integers(0, n, K)]
    rids[0] = "a-recipe-not-counted"
    recipe = np.array([order.recipe_index.get(r, -1) for r in rids])
    got = order.batch(shown, length, blank, choice, recipe)
    for k in range(K):
        for m in range(7):
            want = ([0.0] * 6 if choice[k, m] < 0 else
                    order.features(list(shown[k, :length[k]]), int(blank[k]), int(choice[k, m]), rids[k]))
            assert got[k, m].tolist() == want, (k, m)


def test_counts_keys_and_places():
    assert title_key("  Bake   the CAKE ") == "bake the cake"
    assert [place_bin(i, 10) for i in range(10)] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert place_bin(0, 1) == 0 and place_bin(3, 4) == 3


def test_it_is_deterministic_and_one_dataset_does_not_move_another(world):
    con, text = world["con"], world["text"]
    write_titles(con, "ordered")
    one = order_probe_rows(con, [text[0]], seed=3)
    assert json.dumps(one, sort_keys=True) == json.dumps(order_probe_rows(con, [text[0]], seed=3), sort_keys=True)
    both = order_probe_rows(con, [text[1], text[0]], seed=3)
    assert next(r for r in both["datasets"] if r["dataset_id"] == text[0]) == one["datasets"][0]


def test_the_report_stores_the_order_figure_and_the_reading_gate_holds_back_on_it(world, tmp_path):
    from features.datasets.card import reading_gate
    from features.diagnostics.report import build_report
    con, home, paths, text, visual = world["con"], world["home"], world["paths"], world["text"], world["visual"]
    write_titles(con, "ordered")
    res = build_report(con, tmp_path / "report", [*text, visual], lance_uri=paths.lance, progress=False, home=home)
    stored = dict(con.execute("SELECT dataset_id, order_acc FROM bias_metrics").fetchall())
    assert stored[visual] is None
    alone = {r["dataset_id"]: r for r in order_probe_rows(con, text)["datasets"]}
    for d in text:
        assert stored[d] == alone[d]["linear"]["accuracy"] > 0.6
    shown = {row["order probe, titles' order (95% CI)"].split(" [")[0]
             for row in res["tasks"]["textual_cloze"]["table"]}
    assert {f"{100 * stored[d]:.1f}%" for d in text} <= shown
    _, why = reading_gate(con, [*text, visual])
    assert any(why[d].startswith("order probe (titles' order) ") for d in text), why


def test_the_pooled_drop_takes_the_order_list():
    from training.af_pooled import drop_plan
    gm3c = {"d": {q: (0.9 - i / 100, True) for i, q in enumerate("abc")} | {q: (0.1, False) for q in "defgh"}}
    order = {"d": {"g": (0.8, True), "h": (0.7, True), "e": (0.6, True), "f": (0.5, True)}}
    assert drop_plan(gm3c, {"d": 10}, tau=0.35, min_kept=0.6) == {"d": ["a", "b"]}
    # minimax: the order list solves 4 of the 8 kept, GM3C 3: its most confident first (g), then the two
    # lists tie at 3 and GM3C's goes (a)
    assert drop_plan(gm3c, {"d": 10}, tau=0.35, min_kept=0.6, more=(order,), order="minimax") == {"d": ["a", "g"]}


def test_the_pooled_step_refuses_order_on_a_visual_task(world):
    from flows.af_pool import af_pool_flow
    with pytest.raises(ValueError, match="only textual cloze shows them"):
        af_pool_flow.fn(task="visual_cloze", order=True)


def test_the_pooled_steps_order_list_is_the_probes_verdicts(world):
    """`mrqa af-pool --order`: the order probe's verdicts on every question, each scored by a model that never
    saw its recipe: most are solved on titles that tell their place, about a quarter on random ones."""
    from flows.af_pool import _order_oof
    con, text = world["con"], world["text"]
    write_titles(con, "ordered")
    got = _order_oof(con, text, seed=5)
    n = {d: con.execute("SELECT count(*) FROM questions WHERE dataset_id = ?", [d]).fetchall()[0][0] for d in text}
    assert {d: len(q) for d, q in got.items()} == n
    solved = [r for q in got.values() for _, r in q.values()]
    assert sum(solved) / len(solved) > 0.6
    assert all(0.0 <= p <= 1.0 for q in got.values() for p, _ in q.values())
    assert _order_oof(con, text, seed=5) == got                      # deterministic
    write_titles(con, "random", seed=1)
    solved = [r for q in _order_oof(con, text, seed=5).values() for _, r in q.values()]
    assert sum(solved) / len(solved) < 0.4


def test_the_command_is_read_only_and_refuses_bad_input_in_one_line(world, monkeypatch):
    import hashlib

    import duckdb

    from flows.cli import app
    con, home, paths, text, visual = world["con"], world["home"], world["paths"], world["text"], world["visual"]
    write_titles(con, "ordered")
    con.execute("CHECKPOINT")
    monkeypatch.setenv("MRQA_HOME", str(home))
    before = hashlib.sha256(paths.warehouse.read_bytes()).hexdigest()
    con.close()
    try:
        r = CliRunner().invoke(app, ["--no-prefect", "order-probe", "--dataset", text[0], "--json"])
        assert r.exit_code == 0, r.output
        out = json.loads(r.output[r.output.index("{"):])
        assert out["datasets"][0]["dataset_id"] == text[0] and out["datasets"][0]["linear"]["accuracy"] > 0.6
        r = CliRunner().invoke(app, ["--no-prefect", "order-probe"])
        assert r.exit_code == 0 and all(d in r.output for d in text) and "chance 25.0%" in r.output, r.output
        for args, msg in ((["--dataset", visual], "only textual cloze shows them"),
                          (["--dataset", "nope-1"], "unknown dataset(s): nope-1"),
                          (["--af"], "no adversarially filtered textual cloze datasets"),
                          (["--seed", "-1"], "--seed must be 0 or more")):
            bad = CliRunner().invoke(app, ["--no-prefect", "order-probe", *args])
            assert bad.exit_code == 2 and msg in bad.output and "Traceback" not in bad.output, bad.output
        assert hashlib.sha256(paths.warehouse.read_bytes()).hexdigest() == before
    finally:
        world["con"] = duckdb.connect(str(paths.warehouse))


def test_the_order_bench_compares_the_batch_with_one_choice_at_a_time(world):
    from features.diagnostics.report_bench import bench_order_features
    write_titles(world["con"], "random", seed=4)
    counts, figures = list(bench_order_features(world["con"], repeats=1))
    assert "train recipes" in counts
    assert "2 textual cloze datasets" in figures and figures.endswith("same figures bit for bit: True"), figures
