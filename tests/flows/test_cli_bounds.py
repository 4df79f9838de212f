"""Out-of-range numbers and unusable output paths are refused by the real `mrqa` command line before
any work: rc 2, one `error:` line naming the option, no traceback. The home is empty (no data, no
warehouse), so a check that waited for the data would answer something else."""
from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from flows.cli import app


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MRQA_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def afile(tmp_path):
    f = tmp_path / "a-file.txt"
    f.write_text("not a folder\n")
    return f


def at_least(option: str, bound: int) -> re.Pattern:
    """The refusal of an option's `min=` bound, in click's words (`--n: 0 is not in the range x>=1.`)
    or newer Typer's (`--n: Input should be greater than or equal to 1`)."""
    return re.compile(rf"^error: {option}: .*(x>=|greater than or equal to ){bound}(\.0)?\b")


def refused(args: list[str], needle: str | re.Pattern) -> str:
    """Run `mrqa --no-prefect ARGS`: rc 2, no traceback, and exactly one `error:` line, which holds
    `needle` (or matches it)."""
    r = CliRunner().invoke(app, ["--no-prefect", *args])
    out = r.output
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert r.exit_code == 2, (args, r.exit_code, out)
    assert "Traceback" not in out and isinstance(r.exception, (SystemExit, type(None))), out
    assert len(errors) == 1, (args, out)
    assert (needle.search(errors[0]) if isinstance(needle, re.Pattern) else needle in errors[0]), (args, out)
    return errors[0]


@pytest.mark.parametrize("cmd", [["train", "--dataset", "d"], ["sweep"]])
@pytest.mark.parametrize("args, needle", [
    (["--max-epochs", "0"], "--max-epochs must be >= 1, got 0"),
    (["--patience", "-1"], "--patience must be >= 0, got -1"),
    (["--threads", "-1"], "--threads must be >= 0, got -1"),
    (["--seed", "-1"], "--seed must be in [0, 4294967295], got -1"),
    (["--seed", str(2**32)], "--seed must be in [0, 4294967295], got 4294967296"),
    (["--lr", "nan"], "--lr must be > 0 and finite, got nan"),
])
def test_train_and_sweep_refuse_bad_training_values(home, cmd, args, needle):
    refused(cmd + args, needle)


@pytest.mark.parametrize("value", ["0", "-3"])
def test_train_refuses_a_batch_size_below_one(home, value):
    refused(["train", "--dataset", "d", "--batch-size", value], f"--batch-size must be >= 1, got {value}")


def test_sweep_refuses_a_max_train_questions_below_one(home):
    refused(["sweep", "--max-train-questions", "0"], "--max-train-questions must be >= 1, got 0")


def test_sweep_refuses_an_out_that_is_a_file_or_inside_one(home, afile):
    refused(["sweep", "--out", str(afile)], f"--out: {afile} is a file, not a folder")
    refused(["sweep", "--out", str(afile / "sub")], f"--out: {afile} is a file, not a folder")
    refused(["sweep", "--out", "."], "--out: give a folder to write to, not the working directory")


def test_evaluate_refuses_a_predictions_path_that_is_a_folder_or_inside_a_file(home, afile, tmp_path):
    base = ["evaluate", "--run", "r", "--dataset", "d"]
    refused(base + ["--predictions", str(tmp_path)], f"--predictions: {tmp_path} is a folder; give a file name")
    refused(base + ["--predictions", str(afile / "p.json")], f"--predictions: {afile} is a file, not a folder")


@pytest.mark.parametrize("args, needle", [
    (["encoder", "eval", "--max-pairs", "-5"], at_least("--max-pairs", 2)),
    (["encoder", "eval", "--max-pairs", "0"], at_least("--max-pairs", 2)),
    (["encoder", "eval", "--workers", "-1"], at_least("--workers", 0)),
    (["encoder", "train", "--workers", "-1"], at_least("--workers", 0)),
    (["encoder", "train", "--image-size", "0"], at_least("--image-size", 8)),
    (["encoder", "train", "--lr", "0"], "--lr must be > 0 and finite, got 0.0"),
    (["encoder", "train", "--lr", "-1e-3"], "--lr must be > 0 and finite, got -0.001"),
    (["encoder", "train", "--lr", "inf"], "--lr must be > 0 and finite, got inf"),
    (["encoder", "train", "--lr", "nan"], "--lr must be > 0 and finite, got nan"),
    (["encoder", "train", "--max-train-steps", "0"], at_least("--max-train-steps", 1)),
    (["encoder", "train", "--seed", "-1"], at_least("--seed", 0)),
    (["encoder", "train", "--seed", str(2**32)], re.compile(r"^error: --seed: .*4294967295")),
    (["embed", "--batch-size", "0"], at_least("--batch-size", 1)),
])
def test_encoder_and_embed_refuse_out_of_range_values(home, args, needle):
    refused(args, needle)


@pytest.mark.parametrize("args, needle", [
    (["parse", "--seconds", "0"], "--seconds must be > 0 and finite, got 0.0"),
    (["parse", "--seconds", "-1"], "--seconds must be > 0 and finite, got -1.0"),
    (["parse", "--seconds", "nan"], "--seconds must be > 0 and finite, got nan"),
    (["parse", "--seconds", "inf"], "--seconds must be > 0 and finite, got inf"),
    (["report", "--questions", "0"], at_least("--questions", 20)),
    (["report", "--questions", "-5"], at_least("--questions", 20)),
    (["report", "--repeats", "0"], at_least("--repeats", 1)),
    (["import", "--records", "0"], at_least("--records", 1)),
    (["import", "--records", "-1"], at_least("--records", 1)),
    (["import", "--baseline-records", "0"], at_least("--baseline-records", 1)),
    (["import", "--baseline-records", "-2"], at_least("--baseline-records", 1)),
    (["embed", "--n", "0"], at_least("--n", 1)),
    (["embed", "--batch-size", "0"], at_least("--batch-size", 1)),
    (["embed", "--workers", "-1"], at_least("--workers", 0)),
    (["knn", "--queries", "0"], at_least("--queries", 1)),
    (["knn", "--queries", "-4"], at_least("--queries", 1)),
    (["ann", "--n", "0"], at_least("--n", 200)),
    (["roles", "--recipes", "0"], at_least("--recipes", 1)),
    (["roles", "--repeats", "0"], at_least("--repeats", 1)),
    (["af-chunks", "--repeats", "0"], at_least("--repeats", 1)),
    (["af-chunks", "--settings", "visual_cloze:0-1-0"], "is not TASK:SETTING with an AF setting"),
    (["af-chunks", "--settings", "cloze:0-1-0-af"], "is not TASK:SETTING with an AF setting"),
    (["af-chunks", "--settings", " , "], "--settings names no setting"),
])
def test_bench_refuses_out_of_range_values(home, args, needle):
    refused(["bench", *args], needle)


@pytest.mark.parametrize("args, needle", [
    (["pipeline", "--delay", "-1"], at_least("--delay", 0)),
    (["pipeline", "--stale-days", "-2"], at_least("--stale-days", 0)),
    (["demo", "--workers", "0"], at_least("--workers", 1)),
])
def test_orchestration_refuses_out_of_range_values(home, args, needle):
    refused(args, needle)
