"""Stage commands run their flow's function directly unless Prefect is asked for (`mrqa --prefect`,
PREFECT_API_URL): both paths give the same summaries and the same warehouse content; inside a flow run
the tasks are task runs (one `register-<dataset>` per generated dataset), outside one plain calls."""
from __future__ import annotations

import json
import os

from typer.testing import CliRunner

from etl.warehouse import connect, table_fingerprint
from flows.cli import app
from flows.cli.common import use_prefect

ARGS = ["generate", "--task", "visual_cloze", "--knobs", "0,1,0", "--seed", "4"]
TABLES = {"questions": (), "generation_skips": (), "datasets": ("created_at",)}


def test_prefect_is_used_only_when_asked_for(monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert not use_prefect()
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert use_prefect()
    monkeypatch.setenv("MRQA_PREFECT", "0")                 # mrqa --no-prefect
    assert not use_prefect()
    monkeypatch.delenv("PREFECT_API_URL")
    monkeypatch.setenv("MRQA_PREFECT", "1")                 # mrqa --prefect
    assert use_prefect()


def _generate(home, monkeypatch, *prefix: str) -> tuple[list[dict], dict[str, str]]:
    """`mrqa [prefix] generate ...` on a fresh synthetic warehouse in `home`: the listed datasets
    (without their creation time) and the fingerprints of the tables generation writes."""
    from etl.config import Paths
    from features.datasets.synthetic import build_world
    monkeypatch.setenv("MRQA_HOME", str(home))
    paths = Paths.from_env().ensure()
    con = connect(paths)
    build_world(con, paths.lance, n_recipes=24, seed=2, dim=16, k=50)
    con.close()
    r = CliRunner().invoke(app, [*prefix, *ARGS])
    assert r.exit_code == 0, r.output
    os.environ.pop("MRQA_PREFECT", None)
    r = CliRunner().invoke(app, ["datasets", "--format", "json"])
    listed = [{k: v for k, v in d.items() if k != "created_at"} for d in json.loads(r.output)]
    con = connect(paths, read_only=True)
    try:
        return listed, {t: table_fingerprint(con, t, ex) for t, ex in TABLES.items()}
    finally:
        con.close()


def test_generate_gives_the_same_datasets_with_and_without_prefect(tmp_path, monkeypatch, prefect_harness):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    direct = _generate(tmp_path / "direct", monkeypatch)
    flow_run = _generate(tmp_path / "prefect", monkeypatch, "--prefect")
    assert direct[0] and direct[0][0]["n_questions"] > 0
    assert direct == flow_run

    # the flow run wrote the dataset in its own task run, named after it
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterName
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(task_run_filter=TaskRunFilter(
            name=TaskRunFilterName(like_=f"register-{direct[0][0]['dataset_id']}")))
    assert runs and all(r.state.is_completed() for r in runs)


def test_the_generate_flow_function_gives_the_summary_of_the_flow_run(tmp_path, monkeypatch, prefect_harness):
    """generate_flow.fn (what a stage command calls) and generate_flow (a flow run): same summary
    but for the wall-clock seconds."""
    from etl.config import Paths
    from features.datasets.synthetic import build_world
    from flows.generate import generate_flow
    out = []
    for name, run in (("fn", generate_flow.fn), ("flow", generate_flow)):
        monkeypatch.setenv("MRQA_HOME", str(tmp_path / name))
        paths = Paths.from_env().ensure()
        con = connect(paths)
        build_world(con, paths.lance, n_recipes=24, seed=2, dim=16, k=50)
        con.close()
        res = run(all_settings=False, seed=1, task_name="visual_ordering", knobs=(0, 0, 0))
        out.append(json.loads(json.dumps({**res, "seconds": None, "datasets": [
            {**d, "seconds": None} for d in res["datasets"]]}, default=str)))
    assert out[0] == out[1] and out[0]["n_questions"] > 0
