"""The `mrqa` command line as a package (flows/cli/): every command still answers under its name, the
option value sets match the library's, a refused value is one `error:` line with rc 2, modules stay
small, no input check is an `assert`, and importing the CLI loads no heavy library."""
from __future__ import annotations

import ast
import shlex
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from flows.cli import app

CLI_DIR = Path(__file__).resolve().parents[2] / "flows" / "cli"
COMMANDS = {
    "init", "sql-test", "query", "status", "splits", "parse", "ingest instructables", "ingest recipeqa",
    "sample build", "sample serve", "sample cue", "clean", "tokenize", "vocab-report", "encoder train",
    "encoder add", "encoder list", "encoder eval", "encoder words", "encoder export", "encoder import", "embed",
    "generate", "datasets", "compare", "af-report",
    "af-pool", "af-check",
    "reading-check", "redraw", "export", "report",
    "train", "evaluate", "baselines", "sweep", "score", "look-probe", "pixel-probe", "words-probe", "order-probe",
    "demo",
    "pipeline", "deploy",
    "bench parse",
    "bench sample",
    "bench import", "bench clean", "bench decode", "bench embed", "bench encoder-train", "bench ann", "bench knn",
    "bench generate", "bench crawl", "bench roles",
    "bench report", "bench report-home", "bench train", "bench af-folds", "bench af-chunks", "bench order-features",
    "roles extract", "roles truth", "roles eval",
    "competence generate",
    "competence evaluate", "competence export"}


def command_paths(group, prefix: str = "") -> set[str]:
    out = set()
    for name, cmd in group.commands.items():
        sub = getattr(cmd, "commands", None)
        out |= command_paths(cmd, f"{prefix}{name} ") if sub is not None else {prefix + name}
    return out


def test_every_command_keeps_its_name():
    assert command_paths(typer.main.get_command(app)) == COMMANDS


def test_version_prints_the_installed_version():
    r = CliRunner().invoke(app, ["--version"])
    assert r.exit_code == 0, r.output
    assert r.output == f"mrqa {version('meta-recipeqa')}\n"


@pytest.mark.parametrize("args, line", [
    (["report", "--probe", "tree"], "error: --probe must be logreg or svm, got 'tree'"),
    (["datasets", "--format", "xml"], "error: --format must be table or json, got 'xml'"),
    (["train", "--dataset", "d", "--size", "huge"], "error: --size must be paper, small or tiny, got 'huge'"),
    (["bench", "knn", "--data", "cubes"], "error: --data must be recipes or clustered, got 'cubes'"),
    (["bench", "af-folds", "--task", "textual_cloze"],
     "error: --task must be visual_cloze, visual_coherence or visual_ordering, got 'textual_cloze'"),
    (["bench", "af-folds", "--seeds", "a,b"], "error: --seeds must be comma-separated integers, got 'a,b'"),
    (["encoder", "train", "--twins", "merge"], "error: --twins must be none, positive or mask, got 'merge'"),
    (["encoder", "train", "--hard-share", "1.5"], "error: --hard-share must be between 0 and 1"),
    (["demo", "--adversary-size", "huge"], "error: --adversary-size must be small or paper, got 'huge'"),
    (["pipeline", "--force", "embed", "--force", "bake"],
     "error: --force must be all, ingest, clean, embed, generate, competence, report, train or sweep, got 'bake'"),
])
def test_a_refused_choice_is_one_line_naming_the_option_and_its_values(paths, args, line):
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert r.output.strip() == line
    assert not (paths.home / "warehouse.duckdb").exists()          # refused before any work


def test_reading_check_refuses_what_it_cannot_check_with_the_reason(paths):
    r = CliRunner().invoke(app, ["reading-check", "--dataset", " , "])
    assert r.exit_code == 2
    assert r.output.strip() == "error: --dataset needs at least one dataset id (`mrqa datasets` lists them)"
    r = CliRunner().invoke(app, ["reading-check", "--dataset", "vc-nope"])
    assert r.exit_code == 2
    assert r.output.strip() == "error: no dataset vc-nope in the warehouse (`mrqa datasets` lists them)"
    r = CliRunner().invoke(app, ["reading-check"])          # an empty warehouse: nothing to check, and how to
    assert r.exit_code == 2
    assert r.output.strip().splitlines()[-1] == ("error: nothing to check: no visual cloze dataset of "
                                                     "0-0-0-af, 0-0-1-af, 0-1-0-af, 0-1-1-af, 1-0-0-af, 1-0-1-af, "
                                                     "1-1-0-af, 1-1-1-af (seed 0); name the datasets with --dataset")


def test_help_lists_the_choices():
    wide = {"COLUMNS": "200", "TERMINAL_WIDTH": "200"}
    r = CliRunner().invoke(app, ["report", "--help"], env=wide)
    assert r.exit_code == 0 and "logreg|svm" in r.output
    r = CliRunner().invoke(app, ["generate", "--help"], env=wide)
    assert "coin|all|balanced" in r.output and "visual_cloze|visual_coherence" in r.output


def test_comma_lists_are_checked_against_the_choices(tmp_path):
    r = CliRunner().invoke(app, ["sweep", "--scorers", "bidaf,nope", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "--scorers must be a comma-separated list of transformer" in r.output
    r = CliRunner().invoke(app, ["sweep", "--tasks", "visual_cloze,cloze", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "--tasks must be a comma-separated list of visual_cloze" in r.output
    assert "textual_cloze" in r.output          # the readers read textual cloze too
    r = CliRunner().invoke(app, ["sweep", "--tasks", "textual_cloze", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "--tasks textual_cloze needs --text-features vectors" in r.output
    assert list(tmp_path.iterdir()) == []


def test_choice_sets_match_the_library():
    from features.datasets.knobs import K3_MODES, TASKS
    from features.vectors.neighbours import METHODS
    from flows.cli import choices as c
    from flows.pipeline import STAGES
    from training.af_pooled import FLOOR_BY, FOLD_BY
    from training.config import READER_TASKS, SCORERS, SIZES, TEXT_FEATURES
    assert tuple(c.Task) == TASKS
    assert set(c.ReaderTask) <= set(TASKS) and tuple(c.ReaderTask) == READER_TASKS
    assert tuple(c.FloorBy) == FLOOR_BY
    assert tuple(c.FoldBy) == FOLD_BY
    assert tuple(c.K3Mode) == tuple(m for m in K3_MODES if m != "off")
    assert tuple(c.ForceStage) == ("all", *STAGES)
    assert set(c.NeighbourMethod) <= set(METHODS)
    assert (tuple(c.Scorer), tuple(c.Size), tuple(c.TextFeatures)) == (SCORERS, SIZES, TEXT_FEATURES)


def cli_modules() -> list[Path]:
    return sorted(CLI_DIR.rglob("*.py"))


def test_every_cli_module_is_at_most_260_lines():
    assert len(cli_modules()) >= 12
    long = {p.relative_to(CLI_DIR).as_posix(): n for p in cli_modules()
            if (n := len(p.read_text().splitlines())) > 260}
    assert long == {}


def test_no_input_check_is_an_assert():
    """`python -O` drops asserts, so the CLI never checks input with one."""
    asserts = [f"{p.name}:{node.lineno}" for p in cli_modules()
               for node in ast.walk(ast.parse(p.read_text())) if isinstance(node, ast.Assert)]
    assert asserts == []


def test_importing_the_cli_loads_no_heavy_library():
    code = ("import sys, flows.cli; print(sorted(m for m in ('torch', 'open_clip', 'prefect', 'lancedb', "
            "'numpy', 'duckdb', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_mrqa_script_runs_flows_cli_main():
    script = Path(sys.executable).parent / "mrqa"
    if not script.is_file():
        pytest.skip("no mrqa console script next to this interpreter (not an installed venv)")
    out = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout) == (0, f"mrqa {version('meta-recipeqa')}\n")


def test_status_prints_every_table_in_order(paths):
    r = CliRunner().invoke(app, ["init"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["status"])
    assert r.exit_code == 0, r.output
    rows = [line.split() for line in r.output.splitlines()]
    assert rows == [[t, "0"] for t in ("recipes", "steps", "step_tokens", "images", "pages", "rejects",
                                       "datasets", "questions", "runs")]


def test_make_reading_benchmark_runs_the_demo_with_options_the_demo_accepts():
    """`make reading-benchmark` is the demo with the opt-ins the README's "whole reading benchmark" names;
    its command line (from `make -n`, nothing run) parses as `mrqa demo` options, DEMO_ARGS last."""
    repo = CLI_DIR.parents[1]
    out = subprocess.run(["make", "-n", "reading-benchmark", "DEMO_ARGS=--recipes 5"], cwd=repo,
                         capture_output=True, text=True, check=True).stdout
    line = next(x for x in out.splitlines() if "mrqa demo" in x)
    args = shlex.split(line.split("mrqa demo", 1)[1])
    assert args[-2:] == ["--recipes", "5"]
    assert {"--redrawn", "--author-coherence"} <= set(args) and args[args.index("--split-by") + 1] == "author"
    demo = typer.main.get_command(app).commands["demo"]
    ctx = demo.make_context("demo", args)        # click's parser: an unknown option or value raises
    assert ctx.params["redrawn"] and ctx.params["author_coherence"] and ctx.params["recipes"] == 5
    assert str(ctx.params["split_by"]).endswith("author")
