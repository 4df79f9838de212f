"""Bad command lines and bad homes end `mrqa` with one `error:` line and rc 2, never a traceback: a missing
argument or option (named), a --home that is a file, a warehouse file that is not a DuckDB database, an
--out that is the working directory or a file, a --datasets list with no id; and a choice given twice
counts once."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from flows.cli import app


def _run(*args: str):
    r = CliRunner().invoke(app, ["--no-prefect", *args])
    return r, [ln for ln in r.output.strip().splitlines() if ln.strip()]


@pytest.mark.parametrize("args, name", [
    (["query"], "SQL"), (["tokenize"], "TEXT"), (["parse"], "PAGE"),
    (["train"], "--dataset"), (["evaluate", "--run", "x"], "--dataset"), (["roles", "truth"], "--ground-truth"),
])
def test_a_missing_argument_or_option_is_named(paths, args, name):
    r, lines = _run(*args)
    assert r.exit_code == 2 and len(lines) == 1 and "Traceback" not in r.output, r.output
    assert lines[0].startswith(f"error: missing {name}") and lines[0].endswith("see --help"), lines


@pytest.mark.parametrize("args, want", [
    (["export", "--bogus"], "error: No such option: --bogus"), (["bogus"], "error: No such command 'bogus'"),
    (["query", "SELECT 1", "extra"], "error: Got unexpected extra argument(s) (extra); see `"),
    (["export", "--out"], "error: Option '--out' requires an argument"),
])
def test_usage_errors_are_one_line_too(paths, args, want):
    r, lines = _run(*args)
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith(want), r.output
    assert lines[0].endswith("--help`") and "Traceback" not in r.output


def test_a_home_that_is_a_file_or_holds_a_broken_warehouse(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    f = tmp_path / "afile"
    f.write_text("not a folder")
    for home in (f, f / "sub"):
        r = CliRunner().invoke(app, ["--home", str(home), "status"])
        assert r.exit_code == 2 and r.output.strip() == f"error: --home (MRQA_HOME): {f} is a file, not a folder"
    monkeypatch.setenv("MRQA_HOME", str(f))
    r = CliRunner().invoke(app, ["status"])
    assert r.exit_code == 2 and "is a file, not a folder" in r.output
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "warehouse.duckdb").write_text("hello")
    for args in (["status"], ["query", "SELECT 1"], ["datasets"]):
        r = CliRunner().invoke(app, ["--home", str(broken), *args])
        lines = r.output.strip().splitlines()
        assert r.exit_code == 2 and len(lines) == 1 and "Traceback" not in r.output, r.output
        assert f"{broken / 'warehouse.duckdb'} is not a usable DuckDB warehouse" in lines[0]
    assert (broken / "warehouse.duckdb").read_text() == "hello"          # left as it was
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "broken"]


def test_reading_commands_do_not_create_a_warehouse(tmp_path, monkeypatch):
    home = tmp_path / "typo"
    monkeypatch.setenv("MRQA_HOME", str(home))
    for args in (["status"], ["datasets"], ["sql-test"], ["query", "SELECT 1"], ["export", "--all"], ["report"],
                 ["clean"], ["af-report"]):
        r, lines = _run(*args)
        assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith(f"error: no warehouse at {home}"), r.output
    assert not home.exists()


def test_a_warehouse_cut_short_is_one_line_with_what_to_do(tmp_path, monkeypatch):
    """A warehouse file that opens but whose blocks are gone (a copy cut short): one line naming the file and
    what to do, not DuckDB's traceback."""
    home = tmp_path / "home"
    monkeypatch.setenv("MRQA_HOME", str(home))
    assert _run("init")[0].exit_code == 0
    db = home / "warehouse.duckdb"
    with db.open("r+b") as f:
        f.truncate(db.stat().st_size // 2)
    for args in (["datasets"], ["status"]):
        r, lines = _run(*args)
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        err = [ln for ln in lines if ln.startswith("error:")]
        assert len(err) == 1 and str(db) in err[0] and "restore it from a copy" in err[0], r.output


@pytest.mark.parametrize("args, want", [
    (["af-check", "--seeds", "-1"], "--seeds: -1 is not a seed"),
    (["af-check", "--seeds", "0,0"], "names a seed twice"),
    (["af-check", "--folds", "1"], "--folds: Input should be greater than or equal to 2"),
    (["af-check", "--seed", "-5"], "--seed: Input should be greater than or equal to 0"),
])
def test_af_check_refuses_bad_seeds_and_folds_before_any_model_trains(tmp_path, monkeypatch, args, want):
    monkeypatch.setenv("MRQA_HOME", str(tmp_path / "none"))        # refused before the warehouse is even looked for
    r, lines = _run(*args)
    assert r.exit_code == 2 and len(lines) == 1 and want in lines[0], r.output


def test_an_empty_mrqa_home_means_the_default(tmp_path, monkeypatch):
    from etl.config import Paths
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MRQA_HOME", "")
    assert Paths.from_env().home == tmp_path / "data"


def test_outputs_that_are_the_working_directory_or_a_file_are_refused_first(paths, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "canary.txt").write_text("still here")
    f = tmp_path / "afile"
    f.write_text("x")
    for args, want in ((["export", "--all", "--out", ""], "--out: give a folder to write to"),
                       (["export", "--all", "--out", "."], "--out: give a folder to write to"),
                       (["export", "--all", "--out", str(f)], f"--out: {f} is a file"),
                       (["export", "--all", "--out", str(f / "sub")], f"--out: {f} is a file"),
                       (["report", "--out", str(f)], f"--out: {f} is a file"),
                       (["report", "--datasets", ","], "--datasets: no dataset id in ','"),
                       (["generate", "--task", "visual_cloze", "--knobs", " "], "--knobs is empty"),
                       (["ingest", "recipeqa", str(f), "--images", str(f)], f"--images {f}: a file, not a folder"),
                       (["ingest", "recipeqa", str(f), "--images", "nodir"], "--images nodir: no such folder")):
        r, lines = _run(*args)
        assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {want}"), (args, r.output)
    assert (tmp_path / "canary.txt").read_text() == "still here"


def test_a_choice_given_twice_counts_once():
    from flows.cli.choices import Scorer
    from flows.cli.common import parse_choices
    assert parse_choices("--scorers", "transformer, transformer,question_only", Scorer) == ["transformer",
                                                                                            "question_only"]
