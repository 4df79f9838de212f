"""`mrqa compare` (features/datasets/compare.py): two homes, read-only, datasets, figures and reading benchmark.

A small synthetic home with two datasets and their `bias_metrics` rows is copied whole to a second home: the two
are the same (rc 0). Then the copy changes as a run on another machine would: a step title (so the textual
cloze dataset made again has another content hash, and its check row, alike in both homes, is stale in the
copy), one figure of the visual dataset, one more dataset. The comparison names each difference (rc 1) and
writes neither home."""
from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from typer.testing import CliRunner

from flows.cli import app

ENC = "synthetic-enc-0001"


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def homes(paths, con, tmp_path):
    from features.datasets.generate import generate_datasets
    from features.datasets.knobs import KnobParams
    from features.datasets.synthetic import build_world
    from features.diagnostics.bias import compute_bias_metrics, write_bias_metrics
    build_world(con, paths.lance, n_recipes=30, seed=2, dim=16, k=40)
    settings = [("textual_cloze", KnobParams.preset_for("textual_cloze", 0, 1, 0)),
                ("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 1))]
    ids = [s["dataset_id"] for s in generate_datasets(con, settings, seed=0, encoder_id=ENC, lance_uri=paths.lance,
                                                      progress=False)]
    write_bias_metrics(con, compute_bias_metrics(con, ids, lance_uri=paths.lance, progress=False))
    # a check measured on the textual dataset as it is now (an `mrqa af-check --record` row)
    con.execute("INSERT INTO af_checks (dataset_id, content_sha256, task, n, accuracy, computed_at) "
                "SELECT dataset_id, content_sha256, task, n_questions, 0.3, now() FROM datasets WHERE dataset_id = ?",
                [ids[0]])
    con.execute("CHECKPOINT")
    other = tmp_path / "other"
    shutil.copytree(paths.home, other)
    return {"here": paths.home, "other": other, "ids": ids, "settings": settings}


def _compare(homes, *extra):
    return CliRunner().invoke(app, ["--home", str(homes["here"]), "compare", str(homes["other"]), *extra])


def test_a_copied_home_is_the_same(homes, con):
    con.close()
    r = _compare(homes)
    assert r.exit_code == 0, r.output
    assert "datasets: 2 the same, 0 different" in r.output and "bias_metrics: 2 rows alike, 0 different" in r.output
    assert "af_checks: 1 rows alike, 0 different" in r.output and "older content" not in r.output
    assert r.output.rstrip().endswith("the same")


def test_each_difference_is_named_and_neither_home_is_written(homes, con, paths):
    import duckdb

    from features.datasets.generate import generate_datasets
    con.close()
    db = duckdb.connect(str(homes["other"] / "warehouse.duckdb"))
    try:                                   # the other home moves as another machine's run would
        db.execute("UPDATE steps SET title = title || ' again' WHERE step_idx = 1")
        generate_datasets(db, homes["settings"][:1], seed=0, encoder_id=ENC, lance_uri=str(homes["other"] / "lance"),
                          progress=False)
        db.execute("UPDATE bias_metrics SET qo_acc = 0.5 WHERE dataset_id = ?", [homes["ids"][1]])
        extra = generate_datasets(db, homes["settings"][1:], seed=1, encoder_id=ENC,
                                  lance_uri=str(homes["other"] / "lance"), progress=False)[0]["dataset_id"]
        db.execute("CHECKPOINT")
    finally:
        db.close()
    before = {k: _sha(homes[k] / "warehouse.duckdb") for k in ("here", "other")}
    r = _compare(homes)
    assert r.exit_code == 1, r.output
    text, tc, vc = r.output, homes["ids"][0], homes["ids"][1]
    assert "datasets: 1 the same, 1 different, 0 only here, 1 only in the other" in text
    assert f"differs: {tc}: content_sha256" in text and f"only in the other: {extra}" in text
    assert f"{vc}: qo_acc " in text and "-> 0.5" in text
    # the check row is the same in both, but in the other home its dataset has moved on: named as stale there
    assert "af_checks: 1 rows alike" in text
    assert ("measured on an older content of their dataset in the other (the reading gate leaves them out): "
            f"{tc}") in text
    assert "older content of their dataset here" not in text
    assert text.rstrip().endswith("different")
    j = _compare(homes, "--json")
    assert j.exit_code == 1
    res = json.loads(j.output)
    assert res["same"] is False and res["datasets"]["same"] == [vc] and list(res["datasets"]["differ"]) == [tc]
    assert "content_sha256" in res["datasets"]["differ"][tc]["fields"]
    assert res["figures"]["bias_metrics"]["differ"][vc]["qo_acc"][1] == 0.5
    assert res["datasets"]["only_other"] == [extra]
    assert res["figures"]["af_checks"]["stale_other"] == [tc] and res["figures"]["af_checks"]["stale_here"] == []
    assert {k: _sha(homes[k] / "warehouse.duckdb") for k in ("here", "other")} == before     # read-only


def test_bad_homes_are_refused_in_one_line(homes, con, tmp_path):
    con.close()
    r = CliRunner().invoke(app, ["--home", str(homes["here"]), "compare", str(tmp_path / "nowhere")])
    assert r.exit_code == 2 and "no warehouse there" in r.output
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(b"not a database at all" * 100)
    r = CliRunner().invoke(app, ["--home", str(homes["here"]), "compare", str(junk)])
    assert r.exit_code == 2 and "is not a usable DuckDB warehouse" in r.output, r.output
    r = CliRunner().invoke(app, ["--home", str(tmp_path / "empty"), "compare", str(homes["other"])])
    assert r.exit_code == 2 and "no warehouse at" in r.output
