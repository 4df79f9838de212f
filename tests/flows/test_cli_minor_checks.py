"""Five small input checks, each ending with one `error:` line and rc 2 before any work:

- `mrqa generate --k N` above the k of the warehouse's stored image neighbour lists (which would cap it
  and give the stored k's questions under a new dataset id), naming the stored k;
- `mrqa baselines` / `train` on a dataset with no questions: says so (not "not a Parquet export") and
  writes no export;
- `mrqa parse PAGE --url U` with a U that is not an http(s) URL with a host;
- `mrqa query --format json` with a repeated column name (a JSON object would keep one of the values),
  while CSV keeps both columns;
- `python -m training.train` (the torchrun entry point) with a bad value or an unusable export.

The homes are tiny warehouses written by hand (no embedding, no generated data)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app

REPO = Path(__file__).resolve().parents[2]


def refused(args: list[str], needle: str) -> tuple[str, str]:
    """Run `mrqa --no-prefect ARGS`: rc 2, no traceback, exactly one `error:` line, holding `needle`;
    returns that line and the whole output."""
    r = CliRunner().invoke(app, ["--no-prefect", *args])
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2, (args, r.exit_code, r.output)
    assert "Traceback" not in r.output and isinstance(r.exception, (SystemExit, type(None))), r.output
    assert len(errors) == 1 and needle in errors[0], (args, r.output)
    return errors[0], r.output


def _sql(paths, *statements: tuple[str, list]) -> list:
    """Run statements on the home's warehouse (created and migrated if needed), closed again after,
    so the command under test opens it alone; returns the last statement's rows."""
    from etl.warehouse import connect
    con = connect(paths)
    try:
        rows = []
        for sql, params in statements:
            rows = con.execute(sql, params).fetchall()
        return rows
    finally:
        con.close()


# ----------------------------------------------------------------------------- generate --k

ENC = "enc-test"


@pytest.fixture
def k3_home(paths):
    """A warehouse with one encoder whose neighbours table holds 3 neighbours per image (no vectors)."""
    rows = [(ENC, f"img{i}", rank, f"img{(i + rank) % 5}", f"r{(i + rank) % 5}", rank / 10)
            for i in range(4) for rank in (1, 2, 3)]
    _sql(paths, ("INSERT INTO encoders (encoder_id, kind, model_name, weights_sha256, preprocess_sha256, dim, "
                 "created_at) VALUES (?, 'clip', 'test', 'w', 'p', 4, now())", [ENC]),
         ("INSERT INTO neighbours VALUES " + ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(rows)),
          [v for r in rows for v in r]))
    return paths


def _nothing_generated(paths) -> None:
    assert _sql(paths, ("SELECT (SELECT count(*) FROM datasets), (SELECT count(*) FROM questions)", [])) == [(0, 0)]


@pytest.mark.parametrize("task", ["visual_cloze", "visual_coherence"])
def test_generate_refuses_a_k_above_the_stored_neighbour_lists(k3_home, task):
    line, _ = refused(["generate", "--task", task, "--k", "5"], "--k 5 is more than the 3 neighbours per image")
    assert ENC in line and "give --k 3 or less" in line
    _nothing_generated(k3_home)


def test_generate_refuses_a_k_for_visual_ordering_which_uses_no_neighbours(k3_home):
    refused(["generate", "--task", "visual_ordering", "--k", "5"], "--k (visual ordering uses no neighbours)")
    _nothing_generated(k3_home)


@pytest.mark.parametrize("task, k", [("visual_cloze", "3"), ("visual_cloze", None), ("textual_cloze", "5")])
def test_generate_lets_a_k_the_lists_hold_the_default_k_and_title_tasks_through(k3_home, task, k):
    """--k 3 fits; no --k (the default 100) is not a request to refuse; title neighbours are rebuilt for a
    larger k. Each then reaches generation, which stops at the missing vectors of this bare home."""
    line, _ = refused(["generate", "--task", task, *(["--k", k] if k else [])], "vectors for encoder")
    assert "--k" not in line
    _nothing_generated(k3_home)


# ----------------------------------------------------------------------------- baselines on 0 questions

@pytest.mark.parametrize("cmd", [["baselines"], ["train", "--tiny"]])
def test_a_dataset_without_questions_is_named_as_such_and_nothing_is_exported(paths, cmd):
    _sql(paths, ("INSERT INTO datasets (dataset_id, task, created_at, n_questions, n_recipes) "
                 "VALUES ('vc-empty', 'visual_cloze', now(), 0, 0)", []))
    line, _ = refused([*cmd, "--dataset", "vc-empty"], "dataset 'vc-empty' has no questions")
    assert "Parquet export" not in line
    assert not (paths.exports / "vc-empty").exists()


# ----------------------------------------------------------------------------- parse --url

@pytest.fixture
def page(tmp_path):
    from site_builder import recipe_html
    f = tmp_path / "page.html"
    f.write_text(recipe_html("Og-Recipe", "Og Recipe", "breakfast",
                             [("Intro", "hello", []), ("Mix", "mix well", ["/F1/AAA/1.jpg"])]))
    return f


@pytest.mark.parametrize("url", ["not a url", "www.example.com/X/", "ftp://example.com/X/", "https://",
                                 "https:///X/", "http://[::1/X/", "http://example.com:99999/X/", ""])
def test_parse_refuses_a_url_that_is_not_http_with_a_host(page, url):
    refused(["parse", str(page), "--url", url], f"--url must be an http(s) URL with a host (the page's address), "
                                                f"got {url!r}")


def test_parse_takes_an_http_url_and_resolves_the_images_against_it(page):
    r = CliRunner().invoke(app, ["--no-prefect", "parse", str(page), "--url", " https://example.org/id/My-Pie/ "])
    assert r.exit_code == 0, r.output
    rec = json.loads(r.output)
    urls = [u for s in rec["steps"] for u in s["images"]]
    assert rec["recipe_id"] == "My-Pie" and urls == ["https://example.org/F1/AAA/1.jpg"], rec


# ----------------------------------------------------------------------------- query --format json

@pytest.fixture
def warehouse(paths):
    _sql(paths, ("SELECT 1", []))
    return paths


@pytest.mark.parametrize("sql, names", [("SELECT 1 AS a, 2 AS a", "'a'"),
                                        ("SELECT 1 AS a, 2 AS a, 3 AS b, 4 AS b, 5 AS c", "'a', 'b'")])
def test_query_json_refuses_repeated_column_names(warehouse, sql, names):
    line, out = refused(["query", "--format", "json", sql],
                        f"--format json needs distinct column names; repeated: {names} ")
    assert "AS name" in line and out.strip() == line        # nothing printed but the error


def test_query_keeps_repeated_columns_in_csv_and_distinct_ones_in_json(warehouse):
    r = CliRunner().invoke(app, ["--no-prefect", "query", "--format", "csv", "SELECT 1 AS a, 2 AS a"])
    assert r.exit_code == 0 and r.output.splitlines() == ["a,a", "1,2"], r.output
    r = CliRunner().invoke(app, ["--no-prefect", "query", "--format", "json", "SELECT 1 AS a, 2 AS A2"])
    assert r.exit_code == 0 and json.loads(r.output) == [{"a": 1, "A2": 2}], r.output


# ----------------------------------------------------------------------------- python -m training.train

@pytest.mark.parametrize("args, needle", [
    (["--max-epochs", "0"], "--max-epochs must be >= 1, got 0"),
    (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    (["--seed", "-1"], "--seed must be in [0, 4294967295], got -1"),
    (["--width", "0"], "--width must be >= 1, got 0"),
    ([], "is not a Parquet export"),               # --export names a folder that holds no export
])
def test_the_torchrun_entry_point_refuses_bad_values_in_one_line(tmp_path, capsys, args, needle):
    from training.train import cli
    rc = cli(["--export", str(tmp_path / "no-export"), "--dataset", "d", "--tiny", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ") and needle in err[0], err
    assert not (tmp_path / "no-export").exists()


def test_python_m_training_train_exits_2_without_a_traceback(tmp_path):
    p = subprocess.run([sys.executable, "-m", "training.train", "--export", str(tmp_path), "--dataset", "d",
                        "--max-epochs", "0"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().splitlines()[-1] == "error: --max-epochs must be >= 1, got 0", p.stderr
    assert p.stdout == ""
