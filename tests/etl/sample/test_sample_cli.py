"""`mrqa sample build|serve`, `mrqa bench sample` and `mrqa bench crawl` through the real Typer app."""
from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from flows.cli import app

runner = CliRunner()


def test_sample_build_prints_speed_and_hash(tmp_path):
    out = tmp_path / "kitchen"
    r = runner.invoke(app, ["sample", "build", "--recipes", "12", "--seed", "3", "--out", str(out),
                            "--workers", "1", "--no-progress"])
    assert r.exit_code == 0, r.output
    assert re.search(r"[\d.]+ recipes/s, [\d,.]+ images/s", r.output)
    sha = re.search(r"content sha256: ([0-9a-f]{64})", r.output).group(1)
    assert json.loads((out / "manifest.json").read_text())["content_sha256"] == sha


def test_sample_serve_refuses_a_folder_that_is_not_a_build(tmp_path):
    r = runner.invoke(app, ["sample", "serve", str(tmp_path), "--port", "0"])
    assert r.exit_code == 2
    assert "not a sample kitchen build" in r.output


def test_sample_cue_prints_the_ordered_cue(sample_build):
    out, _, _ = sample_build
    r = runner.invoke(app, ["sample", "cue", str(out), "--no-encoder"])
    assert r.exit_code == 0, r.output
    m = re.search(r"same recipe ([-\d.]+)\s+same author ([-\d.]+)\s+across authors ([-\d.]+)", r.output)
    assert float(m.group(1)) > float(m.group(2)) > float(m.group(3))


def test_sample_cue_refuses_a_folder_that_is_not_a_build(tmp_path):
    r = runner.invoke(app, ["sample", "cue", str(tmp_path), "--no-encoder"])
    assert r.exit_code == 2
    assert "not a sample kitchen build" in r.output


@pytest.mark.bench
def test_bench_sample(tmp_path):
    r = runner.invoke(app, ["bench", "sample", "--recipes", "60"])
    assert r.exit_code == 0, r.output
    print(r.output)
    assert "identical output: True" in r.output


def test_bench_crawl_crawls_with_the_server_in_both_places_and_loads_the_same_rows(tmp_path):
    """`mrqa bench crawl --server`: one crawl with the server in the crawler's process, one with it in its
    own, the same warehouse rows from both (the figure itself is measured, not asserted)."""
    r = runner.invoke(app, ["bench", "crawl", "--recipes", "8", "--repeats", "1", "--workers", "2", "--server"])
    assert r.exit_code == 0, r.output
    assert re.search(r"server in the crawler's process: [\d.]+ s", r.output)
    assert re.search(r"server in its own process: [\d.]+ s", r.output)
    assert "the same rows loaded: True" in r.output


def test_bench_crawl_compares_one_crawl_process_with_two(tmp_path):
    """`mrqa bench crawl` (default): one crawl process against 2, the same warehouse rows from both. 10 recipes
    hold the 100 images two chunks of 50 need, so the images do go to the crawl processes."""
    r = runner.invoke(app, ["bench", "crawl", "--recipes", "10", "--repeats", "1", "--workers", "2"])
    assert r.exit_code == 0, r.output
    assert re.search(r"crawl in 1 process: [\d.]+ s", r.output)
    assert re.search(r"crawl in 2 processes: [\d.]+ s", r.output)
    assert re.search(r"2 processes [\d.]+x faster; the same rows loaded: True", r.output)
