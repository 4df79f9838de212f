"""The clean stage's worker pool never hangs: a worker that dies fails the stage at once with a
clear error and leaves the warehouse as it was (library and `mrqa clean`)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from etl.bulk import load_recipes
from etl.clean import CRASH_ENV, CleanConfig, CleanWorkerDied, clean_corpus
from etl.config import Paths
from etl.records import RecipeRecord, StepRecord
from etl.warehouse import connect, table_fingerprint, transaction

N_RECIPES = 300   # ~2,700 steps: more than one 2,000-step cleaning task, so `mrqa clean` uses its pool
TABLES = ("recipes", "steps", "step_tokens", "rejects", "vocab_stats")


@pytest.fixture(scope="module")
def kitchen_home(tmp_path_factory) -> Path:
    """A warehouse holding a generated sample kitchen's raw recipes (not cleaned yet)."""
    from etl.sample.generate import build_sample
    root = tmp_path_factory.mktemp("pool")
    build_sample(root / "kitchen", N_RECIPES, 7, workers=1, progress=False)
    paths = Paths.from_env(root / "home").ensure()
    con = connect(paths)
    items = []
    for line in (root / "kitchen" / "ground_truth.jsonl").read_text().splitlines():
        r = json.loads(line)
        steps = [StepRecord(s["step_idx"], s["title_raw"], s["body_raw"], [], s.get("n_videos", 0))
                 for s in r["steps"]]
        items.append((RecipeRecord(r["recipe_id"], r["url_path"], r["title"], category=r["category"],
                                   channel=r["channel"], steps=steps), "sample", None))
    with transaction(con):
        load_recipes(con, items)
    con.close()
    return paths.home


def _fingerprints(con) -> dict[str, str]:
    return {t: table_fingerprint(con, t, exclude=("fetched_at", "at", "computed_at", "created_at"))
            for t in TABLES}


def _copy_home(src: Path, dst: Path) -> Paths:
    import shutil
    shutil.copytree(src, dst)
    return Paths.from_env(dst)


@pytest.mark.slow      # a clean pool whose worker is killed (~13 s)
def test_a_dead_worker_fails_clean_at_once_and_writes_nothing(kitchen_home, tmp_path, monkeypatch):
    paths = _copy_home(kitchen_home, tmp_path / "home")
    con = connect(paths)
    before = _fingerprints(con)
    monkeypatch.setenv(CRASH_ENV, "1")
    t = time.monotonic()
    with pytest.raises(CleanWorkerDied, match="worker process died"):
        clean_corpus(con, paths, CleanConfig(workers=2, chunk_steps=100))
    assert time.monotonic() - t < 30          # not a wait on a dead worker (seconds here, even loaded)
    assert _fingerprints(con) == before
    # the same run without the fault cleans, and gives what one in-process run gives
    monkeypatch.delenv(CRASH_ENV)
    clean_corpus(con, paths, CleanConfig(workers=2, chunk_steps=100))
    pooled = _fingerprints(con)
    assert pooled != before
    clean_corpus(con, paths, CleanConfig(workers=1))
    assert _fingerprints(con) == pooled
    con.close()


def test_mrqa_clean_with_a_dead_worker_is_one_clear_error(kitchen_home, tmp_path, monkeypatch,
                                                          run_mrqa, warehouse_fingerprint):
    home = _copy_home(kitchen_home, tmp_path / "home").home
    before = warehouse_fingerprint(home)
    monkeypatch.setenv(CRASH_ENV, "1")
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    r = run_mrqa("clean", "--workers", "2", home=home)
    assert r.rc == 1, r.stderr[-3000:]
    assert [ln for ln in r.error_lines if "worker process died" in ln], r.stderr[-3000:]
    assert warehouse_fingerprint(home)["tables"] == before["tables"]
