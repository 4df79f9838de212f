"""The look probe (features/diagnostics/look_probe.py): question-only models on the photos' own pixels.

A synthetic world (features/datasets/synthetic.py) whose photos are written as real image files: with a
planted giveaway (every photo of a recipe on its recipe's own background colour) the probe reads near
100% of visual cloze and coherence, whose distractors and foreign photos come from other recipes; with
the colours drawn per photo it stays near chance. Unreadable and missing photos are counted with their
reason and their questions left out; the figures are deterministic; `mrqa report` stores them in
bias_metrics, where the reading gate holds a dataset back on them; `mrqa look-probe` is read-only and
refuses bad input in one line."""
from __future__ import annotations

import hashlib
import json

import duckdb
import numpy as np
import pytest
from planted_photos import ENC, break_photos, photo_world, write_photos
from typer.testing import CliRunner

from features.datasets.knobs import KnobParams
from features.diagnostics.look_probe import N_STATISTICS, image_statistics, look_probe_rows, standardise

SETTINGS = [("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 1)),
            ("visual_coherence", KnobParams.preset_for("visual_coherence", 0, 1, 0)),
            ("textual_cloze", KnobParams.preset_for("textual_cloze", 0, 1, 0))]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with photo_world(tmp_path_factory, "look_home", SETTINGS) as w:
        yield w


def _by_task(res: dict) -> dict:
    return {r["task"]: r for r in res["datasets"]}


def test_a_planted_look_is_read_and_photos_without_it_stay_near_chance(world):
    con, home, ids = world["con"], world["home"], world["ids"]
    write_photos(con, home, planted=True)
    planted = _by_task(look_probe_rows(con, home, [ids["visual_cloze"], ids["visual_coherence"]], progress=False))
    for task in ("visual_cloze", "visual_coherence"):
        r = planted[task]
        assert r["n_scored"] == r["n_questions"] > 40 and r["n_left_out"] == 0
        assert r["linear"]["accuracy"] > 0.9, r
        assert r["tree"]["accuracy"] > 0.7, r
        lo, hi = r["linear"]["ci"]
        assert lo <= r["linear"]["accuracy"] <= hi
    write_photos(con, home, planted=False, seed=1)
    plain = _by_task(look_probe_rows(con, home, [ids["visual_cloze"], ids["visual_coherence"]], progress=False))
    for task in ("visual_cloze", "visual_coherence"):
        assert 0.1 < plain[task]["linear"]["accuracy"] < 0.4, plain[task]
        assert plain[task]["tree"]["accuracy"] < 0.45, plain[task]


def test_unreadable_and_missing_photos_are_counted_and_their_questions_left_out(world, tmp_path):
    con, home, ids = world["con"], world["home"], world["ids"]
    write_photos(con, home, planted=True)
    victims = break_photos(con, home, ids["visual_cloze"])
    try:
        res = look_probe_rows(con, home, [ids["visual_cloze"]], progress=False)
    finally:
        write_photos(con, home, planted=True)
    r = res["datasets"][0]
    assert sum(res["photos_unreadable"].values()) == len(victims)
    assert set(res["photos_unreadable"]) <= {"UnidentifiedImageError", "FileNotFoundError"}
    assert r["n_left_out"] >= 3 and r["n_scored"] + r["n_left_out"] == r["n_questions"]


def test_the_figures_are_deterministic_and_the_statistics_have_their_shape(world):
    con, home, ids = world["con"], world["home"], world["ids"]
    write_photos(con, home, planted=True)
    a = look_probe_rows(con, home, [ids["visual_cloze"]], seed=3, progress=False)
    b = look_probe_rows(con, home, [ids["visual_cloze"]], seed=3, progress=False)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    # a dataset's figure does not depend on the others measured with it (one space of every photo)
    both = look_probe_rows(con, home, [ids["visual_coherence"], ids["visual_cloze"]], seed=3, progress=False)
    assert next(r for r in both["datasets"] if r["dataset_id"] == ids["visual_cloze"]) == a["datasets"][0]
    some = con.execute("SELECT path FROM images WHERE status = 'ok' ORDER BY image_id LIMIT 5").fetchall()
    blocks = [image_statistics(home / p) for (p,) in some]
    m = standardise({k: np.stack([s[k] for s in blocks]) for k in blocks[0]})
    assert m.shape == (5, N_STATISTICS) and np.allclose(np.linalg.norm(m, axis=1), 1.0, atol=1e-5)
    assert abs(float(blocks[0]["hist"].sum()) - 1.0) < 1e-6


def test_cached_statistics_give_the_same_space_without_decoding(world, monkeypatch):
    """The second read takes every photo's statistics from the cache (look_statistics.py): the decoder is
    broken for it, yet no photo is missing, and the space is the first one bit for bit."""
    from features.diagnostics import look_probe, look_statistics
    from features.diagnostics.look_statistics import cache_path
    con, home = world["con"], world["home"]
    write_photos(con, home, planted=True)
    cache_path(home).unlink(missing_ok=True)
    first = look_probe.look_space(con, home, progress=False)
    assert cache_path(home).is_file() and not first.missing

    def broken(path):
        raise RuntimeError("decoded although cached")
    monkeypatch.setattr(look_statistics, "image_statistics", broken)
    second = look_probe.look_space(con, home, progress=False)
    assert not second.missing and second.ids == first.ids
    assert second.mat.tobytes() == first.mat.tobytes()


def test_a_photo_written_again_is_read_again_and_a_broken_cache_is_replaced(world, caplog):
    from features.diagnostics.look_probe import look_space
    from features.diagnostics.look_statistics import cache_path
    con, home = world["con"], world["home"]
    write_photos(con, home, planted=True)
    planted = look_space(con, home, progress=False)
    try:
        write_photos(con, home, planted=False, seed=5)          # new pixels in every file
        again = look_space(con, home, progress=False)
        cache_path(home).unlink()
        fresh = look_space(con, home, progress=False)
        assert again.mat.tobytes() == fresh.mat.tobytes() != planted.mat.tobytes()
        cache_path(home).write_bytes(b"not an npz file")
        with caplog.at_level("WARNING"):
            from_broken = look_space(con, home, progress=False)
        assert "unreadable" in caplog.text
        assert from_broken.mat.tobytes() == fresh.mat.tobytes()
        with np.load(cache_path(home)) as z:                    # written again, whole
            assert len(z["ids"]) == len(fresh.ids)
    finally:
        write_photos(con, home, planted=True)


def test_the_background_fill_caches_every_photo_and_a_stopped_block_ends_it(world):
    import multiprocessing

    from features.diagnostics.look_statistics import cache_path, filling_in_background, photo_rows
    con, home = world["con"], world["home"]
    write_photos(con, home, planted=True)
    cache_path(home).unlink(missing_ok=True)
    with pytest.raises(KeyboardInterrupt):
        with filling_in_background(con, home):
            raise KeyboardInterrupt                  # Ctrl-C during the embed stage: the fill is ended
    assert not [p for p in multiprocessing.active_children() if p.name == "look-statistics"]
    with filling_in_background(con, home):
        pass                                         # the block's end waits for the fill
    with np.load(cache_path(home)) as z:
        assert sorted(z["ids"].tolist()) == [i for i, _ in photo_rows(con)]


@pytest.mark.slow      # processes against turns (~11 s)
def test_the_figures_are_the_same_in_processes_and_in_turn(world):
    """The look and the words probe run dataset by dataset in spawned processes on a big report (the probes
    hold the GIL): every figure is the one measured in turn, for the look probe's linear model and trees
    (`space_probe_rows`) and the report's look rows (`look_rows`); the words probe's placed features in
    processes: test_report.py's `bench report-home` test."""
    from features.diagnostics.bias import list_datasets
    from features.diagnostics.look_probe import look_rows, look_space, probe_workers, space_probe_rows
    con, home, ids = world["con"], world["home"], world["ids"]
    write_photos(con, home, planted=True)
    visual = list_datasets(con, [ids["visual_cloze"], ids["visual_coherence"]])
    space = look_space(con, home, progress=False)
    turn = space_probe_rows(con, visual, space, 3, 5, workers=1)
    assert turn == space_probe_rows(con, visual, space, 3, 5, workers=2)
    assert all(r["linear"]["accuracy"] > 0.9 for r in turn)
    rows = [dict(r) for r in visual]
    look_rows(con, rows, home, seed=3, workers=1, progress=False)
    again = [dict(r) for r in visual]
    look_rows(con, again, home, seed=3, workers=2, progress=False)
    assert rows == again and all(r["look_acc"] == t["linear"]["accuracy"] for r, t in zip(rows, turn))
    # processes only where they pay (about 2 s each to start), never more than the datasets
    assert probe_workers(None, 25, 4_999) == 1 and probe_workers(None, 1, 50_000) == 1
    assert probe_workers(3, 2, 10) == 2 and probe_workers(None, 25, 50_000) >= 1


def test_the_report_stores_the_look_figure_and_the_reading_gate_holds_back_on_it(world, tmp_path):
    from features.datasets.card import reading_gate
    from features.diagnostics.report import build_report
    con, home, paths, ids = world["con"], world["home"], world["paths"], world["ids"]
    write_photos(con, home, planted=True)
    res = build_report(con, tmp_path / "report", list(ids.values()), lance_uri=paths.lance, progress=False,
                       home=home)
    look = dict(con.execute("SELECT dataset_id, look_acc FROM bias_metrics").fetchall())
    assert look[ids["textual_cloze"]] is None
    alone = _by_task(look_probe_rows(con, home, [ids["visual_cloze"], ids["visual_coherence"]], progress=False))
    for task in ("visual_cloze", "visual_coherence"):
        assert look[ids[task]] == alone[task]["linear"]["accuracy"] > 0.9
        row = next(r for r in res["tasks"][task]["table"])
        assert row["look probe, pixels (95% CI)"].startswith(f"{100 * look[ids[task]]:.1f}% [")
    _, why = reading_gate(con, list(ids.values()))
    for task in ("visual_cloze", "visual_coherence"):
        assert why[ids[task]].startswith("look probe (pixels) "), why[ids[task]]
    assert not why[ids["textual_cloze"]].startswith("look probe")
    # the background cue: one row per space; each photo's nearest other photo shares its planted background
    cue = {r[0]: r[1:] for r in con.execute(
        "SELECT space, encoder_id, n_photos, nn_same_recipe, chance_same_recipe, nn_same_author, "
        "photos_without_author FROM background_cue").fetchall()}
    assert set(cue) == {"look", "encoder"} and cue["encoder"][0] == ENC and cue["look"][0] is None
    n_photos = con.execute("SELECT count(*) FROM images WHERE status = 'ok'").fetchall()[0][0]
    assert cue["look"][1] == n_photos and cue["look"][2] > 0.9 > 0.2 > cue["look"][3]
    authors = con.execute("SELECT count(*) FROM recipes WHERE coalesce(author, '') <> ''").fetchall()[0][0]
    assert (cue["look"][4] is None) == (authors == 0) and (cue["look"][5] == 0) == (authors > 0)
    assert [c["space"] for c in res["background_cue"]] == ["look", "encoder"]
    page = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    assert "id='background-cue'" in page and "nearest photo, same recipe (chance)" in page


def test_cli_is_read_only_and_refuses_bad_input_in_one_line(world, monkeypatch):
    from flows.cli import app
    con, home, ids, paths = world["con"], world["home"], world["ids"], world["paths"]
    write_photos(con, home, planted=True)
    con.execute("CHECKPOINT")
    monkeypatch.setenv("MRQA_HOME", str(home))
    before = hashlib.sha256(paths.warehouse.read_bytes()).hexdigest()
    con.close()
    try:
        r = CliRunner().invoke(app, ["--no-prefect", "look-probe", "--dataset", ids["visual_cloze"], "--json"])
        assert r.exit_code == 0, r.output
        out = json.loads(r.output[r.output.index("{"):])
        assert out["datasets"][0]["dataset_id"] == ids["visual_cloze"] and out["datasets"][0]["linear"]["accuracy"]
        r = CliRunner().invoke(app, ["--no-prefect", "look-probe", "--dataset", ids["visual_cloze"]])
        assert r.exit_code == 0 and ids["visual_cloze"] in r.output and "chance 25.0%" in r.output, r.output
        for args, msg in ((["--dataset", ids["textual_cloze"]], "textual cloze shows none"),
                          (["--dataset", "nope-1"], "unknown dataset(s): nope-1"),
                          (["--dataset", ","], "--dataset needs at least one"),
                          (["--seed", "-1"], "--seed must be 0 or more")):
            bad = CliRunner().invoke(app, ["--no-prefect", "look-probe", *args])
            assert bad.exit_code == 2 and msg in bad.output and "Traceback" not in bad.output, bad.output
        assert hashlib.sha256(paths.warehouse.read_bytes()).hexdigest() == before
        monkeypatch.setenv("MRQA_HOME", str(home / "nowhere"))
        bad = CliRunner().invoke(app, ["--no-prefect", "look-probe"])
        assert bad.exit_code == 2 and "no warehouse" in bad.output, bad.output
    finally:
        world["con"] = duckdb.connect(str(paths.warehouse))


def test_real_recipeqa_photos_share_their_recipes_look(shared_fixtures):
    """The cue the look probe reads is not the sample kitchen's alone: on the real RecipeQA photos of the
    fixtures (15 photos of 8 recipes, 11 of them with another photo of their recipe), the photo nearest each
    one in the probe's standardised statistics is of the same recipe for 8 of the 11 (by chance about 2)."""
    photos = sorted((shared_fixtures / "recipeqa" / "images").glob("*.jpg"))
    assert len(photos) == 15
    stats = [image_statistics(p) for p in photos]
    recipe = [p.name.rsplit("_", 2)[0] for p in photos]
    m = standardise({b: np.array([s[b] for s in stats]) for b in stats[0]})
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    sim = m @ m.T
    np.fill_diagonal(sim, -np.inf)
    nearest = sim.argmax(1)
    paired = [i for i in range(len(photos)) if recipe.count(recipe[i]) > 1]
    chance = sum((recipe.count(recipe[i]) - 1) / (len(photos) - 1) for i in paired)
    hits = sum(recipe[nearest[i]] == recipe[i] for i in paired)
    assert len(paired) == 11 and chance < 2.5
    assert hits >= 7, (hits, chance)


def test_the_pooled_steps_look_lists_are_the_probes_verdicts(world):
    """`mrqa af-pool --look`: the linear look probe's verdicts, cross-fitted per dataset, and the trees'
    pooled over the datasets, each question scored by models that never saw its recipe: on photos with
    their recipe's own background both solve nearly every coherence question (the foreign photo is another
    recipe's), on photos without it about a quarter; the same verdicts twice."""
    from flows.af_pool import _look_oof
    con, home, paths, ids = world["con"], world["home"], world["paths"], world["ids"]
    did = ids["visual_coherence"]
    n = con.execute("SELECT count(*) FROM questions WHERE dataset_id = ?", [did]).fetchall()[0][0]
    write_photos(con, home, planted=True)
    lin, trees = _look_oof(con, paths, [did], "visual_coherence", seed=5, fold_by="recipe")
    for v in (lin, trees):
        assert len(v[did]) == n > 40
        assert all(0.0 <= p <= 1.0 for p, _ in v[did].values())
        assert sum(r for _, r in v[did].values()) / n > 0.7
    assert _look_oof(con, paths, [did], "visual_coherence", seed=5, fold_by="recipe") == (lin, trees)
    write_photos(con, home, planted=False, seed=1)
    try:
        lin, trees = _look_oof(con, paths, [did], "visual_coherence", seed=5, fold_by="recipe")
        for v in (lin, trees):
            assert sum(r for _, r in v[did].values()) / n < 0.45
    finally:
        write_photos(con, home, planted=True)


def test_the_pooled_step_refuses_look_on_textual_cloze(world):
    from flows.af_pool import af_pool_flow
    with pytest.raises(ValueError, match="reads photos: textual cloze shows none"):
        af_pool_flow.fn(task="textual_cloze", look=True)
