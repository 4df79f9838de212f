"""The generate flow (real Prefect run) and the CLI commands generate, datasets and export."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from flows.cli import app

ENC = "synthetic-enc-0001"


def _world(con, paths):
    from features.datasets.synthetic import build_world
    build_world(con, paths.lance, n_recipes=24, seed=2, dim=16, k=50)


def test_generate_flow_and_cli(paths, con, prefect_harness, tmp_path):
    from flows.generate import generate_flow
    _world(con, paths)
    con.close()
    res = generate_flow(all_settings=False, seed=0, task_name="visual_cloze", knobs=(0, 1, 0))
    assert res["n_datasets"] == 1 and res["n_questions"] > 0
    ds = res["datasets"][0]
    assert ds["dataset_id"].startswith("vc-0-1-0-s0-") and ds["encoder_id"] == ENC
    runner = CliRunner()
    r = runner.invoke(app, ["generate", "--task", "visual_ordering", "--knobs", "0,0,0", "--seed", "3"])
    assert r.exit_code == 0, r.output
    assert "vord-0-0-0-s3-" in r.output
    r = runner.invoke(app, ["datasets", "--format", "json"])
    listed = {d["dataset_id"]: d for d in json.loads(r.output)}
    assert ds["dataset_id"] in listed and listed[ds["dataset_id"]]["n_questions"] == ds["n_questions"]
    out = tmp_path / "exp"
    r = runner.invoke(app, ["export", "--dataset", ds["dataset_id"], "--format", "parquet", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert list((out / "questions").rglob("*.parquet"))
    r = runner.invoke(app, ["export", "--all", "--format", "recipeqa-json", "--out", str(tmp_path / "rq"),
                            "--no-images"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["records"]


def test_cli_bad_input_is_a_clear_error(paths, con):
    con.close()                     # the warehouse exists (export refuses a home without one first)
    runner = CliRunner()
    for args, needle in ((["generate", "--task", "nope", "--knobs", "0,0,0"], "--task must be"),
                         (["generate", "--task", "visual_cloze", "--knobs", "0,2"], "not a knob setting"),
                         (["generate", "--task", "visual_cloze", "--knobs", "0-0-0-balanced"], "needs k3=1"),
                         (["generate", "--task", "visual_cloze", "--knobs", "0-0-1:all", "--k3-mode", "balanced"],
                          "--k3-mode is 'balanced'"),
                         (["generate", "--task", "visual_ordering", "--knobs", "0,0,1"], "not defined"),
                         (["generate", "--all", "--task", "visual_cloze"], "--all"),
                         (["export", "--dataset", "missing"], "no dataset")):
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        assert needle in r.output, (args, r.output)


def test_old_spellings_of_a_setting_make_one_dataset_with_one_name(paths, con, prefect_harness, tmp_path):
    """`--knobs 0,1,1 --k3-mode balanced`, `0-1-1:balanced` (the old knob label), `0-1-1balanced` (the
    old partition) and `--setting 0-1-1-balanced` are the same setting: one dataset id spelling the
    name, `mrqa datasets` and the export's knobs= partition say `0-1-1-balanced`, knob3 is the integer 1."""
    _world(con, paths)
    con.close()
    runner = CliRunner()
    ids = set()
    for args in (["--knobs", "0,1,1", "--k3-mode", "balanced"], ["--knobs", "0-1-1:balanced"],
                 ["--knobs", "0-1-1balanced"], ["--setting", "0-1-1-balanced"]):
        r = runner.invoke(app, ["generate", "--task", "visual_cloze", *args])
        assert r.exit_code == 0, (args, r.output)
        ids |= {w for w in r.output.split() if w.startswith("vc-")}
    assert len(ids) == 1 and next(iter(ids)).startswith("vc-0-1-1-balanced-s0-")
    did = ids.pop()
    r = runner.invoke(app, ["datasets", "--format", "json"])
    listed = json.loads(r.output)
    assert [(d["dataset_id"], d["knobs"]) for d in listed] == [(did, "0-1-1-balanced")]
    r = runner.invoke(app, ["export", "--dataset", did, "--out", str(tmp_path / "exp")])
    assert r.exit_code == 0, r.output
    parts = {p.parent.parent.name for p in (tmp_path / "exp" / "questions").rglob("*.parquet")}
    assert parts == {"knobs=0-1-1-balanced"}
    from etl.warehouse import connect
    row = connect(paths).execute("SELECT knob1, knob2, knob3, k3_mode, adversarial, setting FROM datasets").fetchall()
    assert row == [(0, 1, 1, "balanced", False, "0-1-1-balanced")]


def test_af_report_command_lists_what_af_did(paths, con):
    """`mrqa af-report`: one row per AF dataset, the same rows as features.datasets.af_report, and the
    printed table; a home without AF datasets says how to make one."""
    from dataclasses import replace

    from etl.warehouse import connect
    from features.datasets.af_report import af_report
    from features.datasets.generate import generate_datasets
    from features.datasets.knobs import AF_DEFAULT_ROUNDS, KnobParams
    from features.datasets.synthetic import build_world
    runner = CliRunner()
    con.close()                       # one process: the command opens the warehouse read-only
    r = runner.invoke(app, ["af-report"])
    assert r.exit_code == 0 and "no adversarially filtered datasets" in r.output, r.output
    con = connect(paths)
    build_world(con, paths.lance, n_recipes=60, seed=3, dim=16, k=50)
    base = KnobParams.preset_for("visual_cloze", 0, 1, 1)
    generate_datasets(con, [("visual_cloze", base), ("visual_cloze", replace(base, af_rounds=AF_DEFAULT_ROUNDS))],
                      seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False)
    con.close()
    r = runner.invoke(app, ["af-report", "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [x["knobs"] for x in rows] == ["0-1-1-af"] and rows[0]["task"] == "visual_cloze"
    assert 0 < rows[0]["af_questions"] <= rows[0]["knob_questions"]
    assert rows[0]["kept_share"] == round(rows[0]["af_questions"] / rows[0]["knob_questions"], 4)
    ro = connect(paths, read_only=True)
    try:
        assert rows == json.loads(json.dumps(af_report(ro, paths.lance)))
    finally:
        ro.close()
    r = runner.invoke(app, ["af-report"])
    assert r.exit_code == 0 and "0-1-1-af" in r.output and "oracle before" in r.output, r.output


def test_export_out_with_a_tilde_is_the_home_folder(paths, con, tmp_path, monkeypatch):
    """`mrqa export --out=~/x` (the shell leaves a ~ after `=` as it is): the export goes to ~/x, as the check
    of --out took it; the check's expanded path was dropped, so the Parquet export made a folder named `~` in
    the working directory and then failed with a traceback (pyarrow expands ~ itself), and the RecipeQA export
    was written under ./~/x."""
    from features.datasets.generate import generate_datasets, settings_for
    _world(con, paths)
    did = generate_datasets(con, settings_for("visual_cloze", (0, 1, 0)), seed=0, encoder_id=ENC,
                            lance_uri=paths.lance, progress=False)[0]["dataset_id"]
    con.close()
    home, cwd = tmp_path / "user", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    runner = CliRunner()
    r = runner.invoke(app, ["export", "--dataset", did, "--out=~/exp"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["export", "--dataset", did, "--format", "recipeqa-json", "--no-images", "--out=~/rq"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["out"] == str(home / "rq")
    assert list((home / "exp" / "questions").rglob("*.parquet")) and (home / "rq" / "train.json").is_file()
    assert list(cwd.iterdir()) == [] and sorted(p.name for p in home.iterdir()) == ["exp", "rq"]


def test_the_recipeqa_json_export_has_its_own_default_folder(paths, con, tmp_path):
    """`mrqa export --format recipeqa-json` without --out wrote to the Parquet export's default folder:
    with --all its 80 dataset folders went into MRQA_HOME/exports/all, and every later Parquet export of it
    (`mrqa export --all`, the pipeline's sweep stage) was refused; with one dataset, `mrqa train --dataset ID`
    could not write MRQA_HOME/exports/ID any more. The RecipeQA folders end in -recipeqa, and RecipeQA JSON
    folders are never written into a Parquet export."""
    from features.datasets.generate import generate_datasets, settings_for
    from training.data import training_export
    _world(con, paths)
    made = generate_datasets(con, settings_for("visual_cloze", (0, 1, 0)) + settings_for("visual_cloze", (0, 0, 0)),
                             seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False)
    con.close()
    ids = sorted(d["dataset_id"] for d in made)
    runner = CliRunner()
    for args in (["--all"], ["--all", "--format", "recipeqa-json", "--no-images"], ["--all"],
                 ["--dataset", ids[0], "--format", "recipeqa-json", "--no-images"]):
        r = runner.invoke(app, ["export", *args])
        assert r.exit_code == 0, (args, r.output)
    exports = paths.home / "exports"
    assert sorted(p.name for p in exports.iterdir()) == ["all", "all-recipeqa", f"{ids[0]}-recipeqa"]
    assert sorted(p.name for p in (exports / "all-recipeqa").iterdir()) == ids
    assert "questions" in {p.name for p in (exports / "all").iterdir()} and not set(ids) & {
        p.name for p in (exports / "all").iterdir()}
    import shutil
    shutil.rmtree(exports / "all")                      # training writes exports/<id> (a Parquet export) now
    assert training_export(ids[0], paths=paths) == exports / ids[0] and (exports / ids[0] / "questions").is_dir()
    r = runner.invoke(app, ["export", "--all", "--format", "recipeqa-json", "--out", str(exports / ids[0])])
    assert r.exit_code == 2 and "it is a Parquet export" in r.output, r.output
