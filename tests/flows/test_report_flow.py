"""`mrqa report` / report_flow on a small synthetic warehouse: report folder, bias_metrics rows,
Prefect table artifacts, printed ordering; bad input answered with a clear error (exit code 2)."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from flows.cli import app

ENC = "synthetic-enc-0001"


@pytest.fixture
def world(paths, con):
    from features.datasets.generate import generate_datasets
    from features.datasets.knobs import KnobParams
    from features.datasets.synthetic import build_world
    build_world(con, paths.lance, n_recipes=30, seed=2, dim=16, k=40)
    settings = [("visual_cloze", KnobParams.recipeqa_preset()),
                ("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 1)),
                ("visual_ordering", KnobParams.preset_for("visual_ordering", 0, 0, 0))]
    s = generate_datasets(con, settings, seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False)
    con.close()                     # the flow opens the warehouse itself
    return [x["dataset_id"] for x in s]


def test_report_flow_writes_folder_metrics_and_artifacts(world, paths, prefect_harness):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from etl.warehouse import connect
    from flows.report import report_flow
    res = report_flow()
    out = paths.reports / "latest"
    assert res["index"] == str(out / "index.html") and (out / "index.html").is_file()
    assert (out / "hist_visual_cloze.png").is_file() and (out / "hist_visual_ordering.png").is_file()
    con = connect(paths, read_only=True)
    got = {r[0] for r in con.execute("SELECT dataset_id FROM bias_metrics").fetchall()}
    con.close()
    assert got == set(world)
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(
            any_=["bias-visual-cloze", "bias-visual-ordering", "bias-report-summary"])))
    kinds = {a.key: a.type for a in arts}
    assert kinds.get("bias-visual-cloze") == "table" and kinds.get("bias-report-summary") == "markdown"


def test_cli_report_subset_and_ordering(world, paths, prefect_harness, tmp_path):
    out = tmp_path / "rep"
    r = CliRunner().invoke(app, ["report", "--datasets", ",".join(world[:2]), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "report written" in r.output and (out / "index.html").is_file()
    assert not (out / "hist_visual_ordering.png").exists()          # only the chosen datasets


def test_cli_report_bad_input(paths, con):
    runner = CliRunner()
    r = runner.invoke(app, ["report"])
    assert r.exit_code == 2 and "mrqa generate --all" in r.output
    r = runner.invoke(app, ["report", "--datasets", "nope"])
    assert r.exit_code == 2 and "unknown dataset" in r.output
    r = runner.invoke(app, ["report", "--probe", "tree"])
    assert r.exit_code == 2 and "logreg or svm" in r.output
