"""Deployments on a REAL local Prefect server (SQLite, loopback): `mrqa deploy` registers them, the
weekly schedule has its cron, a process worker runs the pipeline deployment on a tiny sample kitchen
served by this test, and the run COMPLETES; server and worker shut down cleanly."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from etl.sample.generate import build_sample
from etl.sample.server import SiteServer
from flows.deploy import COLLISION_STRATEGY, DEPLOYMENTS, POOL_CONCURRENCY, WEEKLY_CRON, render_prefect_yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen, timeout: float = 30) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()
            return proc.wait(timeout)
    return proc.returncode


@pytest.fixture
def prefect_server(tmp_path):
    """`prefect server start` on a free loopback port, SQLite in a fresh PREFECT_HOME."""
    port = _free_port()
    home = tmp_path / "prefect_home"
    api = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": api,
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "PREFECT_UI_ENABLED": "false",
           "PREFECT_LOGGING_LEVEL": "WARNING", "PREFECT_WORKER_QUERY_SECONDS": "2",
           "PREFECT_WORKER_PREFETCH_SECONDS": "5", "MRQA_HOME": str(tmp_path / "mrqa_home")}
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1",
                               "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT,
                              cwd=tmp_path)
    deadline = time.time() + 300        # ~10 s on a quiet machine; minutes when 2 cores are shared
    while True:
        try:
            if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
        assert time.time() < deadline, "prefect server did not start in 300 s"
        time.sleep(0.5)
    yield env
    assert _stop(server) is not None
    log.close()


def _api(env):
    """Settings context pointing this process's Prefect client at the test server."""
    from prefect.settings import PREFECT_API_URL, temporary_settings
    return temporary_settings({PREFECT_API_URL: env["PREFECT_API_URL"]})


def test_prefect_yaml_matches_mrqa_deploy():
    """prefect.yaml and `mrqa deploy` define the same deployments, entrypoints and schedule."""
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    from_yaml = {d["name"]: d for d in spec["deployments"]}
    assert set(from_yaml) == {d.name for d in DEPLOYMENTS}
    for d in DEPLOYMENTS:
        y = from_yaml[d.name]
        assert y["entrypoint"] == d.entrypoint
        assert [s["cron"] for s in y.get("schedules", [])] == ([d.cron] if d.cron else [])
        assert y.get("parameters", {}) == d.parameters
        assert " ".join(y["description"].split()) == d.description
        assert tuple(y["tags"]) == d.tags
        assert y["work_pool"]["name"] == "mrqa-process"
        assert y["concurrency_limit"] == {"limit": 1, "collision_strategy": "ENQUEUE"}
        module, func = d.entrypoint.split(":")
        assert f"def {func}(" in (REPO / module).read_text()


def test_prefect_yaml_is_generated_from_the_python_list(tmp_path):
    """Deployments are declared once: the committed prefect.yaml is exactly the text generated from
    DEPLOYMENTS (`mrqa deploy --write-yaml` rewrites it), and a changed spec changes that text."""
    assert (REPO / "prefect.yaml").read_text() == render_prefect_yaml()
    import dataclasses

    import flows.deploy as deploy
    changed = (dataclasses.replace(DEPLOYMENTS[0], cron="0 4 * * 1"), *DEPLOYMENTS[1:])
    try:
        deploy.DEPLOYMENTS = changed
        assert '- cron: "0 4 * * 1"' in render_prefect_yaml()
    finally:
        deploy.DEPLOYMENTS = DEPLOYMENTS
    r = subprocess.run([str(BIN / "mrqa"), "deploy", "--write-yaml"], cwd=REPO, capture_output=True, text=True,
                       env={**os.environ, "MRQA_HOME": str(tmp_path)}, timeout=120)
    assert r.returncode == 0 and "already up to date" in r.stdout, r.stdout + r.stderr


def test_every_deployment_writes_the_warehouse_one_run_at_a_time():
    assert COLLISION_STRATEGY == "ENQUEUE" and POOL_CONCURRENCY == 1
    assert all(d.concurrency_limit == 1 for d in DEPLOYMENTS)


def test_deployment_parameters_are_parameters_of_their_flows():
    """A renamed flow parameter cannot leave a deployment passing the old name."""
    import importlib
    import inspect
    for d in DEPLOYMENTS:
        module, func = d.entrypoint.split(":")
        fn = getattr(importlib.import_module(module.removesuffix(".py").replace("/", ".")), func)
        assert set(d.parameters) <= set(inspect.signature(fn.fn).parameters), d.name


def _deploy(env, pool, *names):
    args = [a for n in names for a in ("--name", n)]
    out = subprocess.run([str(BIN / "mrqa"), "deploy", "--pool", pool, *args], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.mark.slow      # a real Prefect server started for it (~35 s)
def test_mrqa_deploy_registers_deployments_with_weekly_cron(prefect_server):
    env = prefect_server
    pool = "mrqa-test-pool"
    stdout = _deploy(env, pool)
    assert "pipeline/mrqa-weekly-refresh" in stdout and f"prefect worker start --pool {pool}" in stdout
    from prefect.client.orchestration import get_client
    with _api(env), get_client(sync_client=True) as client:
        assert client.read_work_pool(pool).type == "process"
        assert client.read_work_pool(pool).concurrency_limit == POOL_CONCURRENCY
        weekly = client.read_deployment_by_name("pipeline/mrqa-weekly-refresh")
        assert [s.schedule.cron for s in weekly.schedules] == [WEEKLY_CRON]
        assert all(s.active for s in weekly.schedules)
        assert weekly.parameters == {"rescrape": True, "stale_days": 7}
        assert weekly.work_pool_name == pool
        assert weekly.job_variables["env"]["MRQA_HOME"] == env["MRQA_HOME"]
        for d in DEPLOYMENTS:
            flow_name = d.entrypoint.split(":")[1].removesuffix("_flow")
            dep = client.read_deployment_by_name(f"{flow_name}/{d.name}")
            assert dep.entrypoint == d.entrypoint and dep.work_pool_name == pool
            assert len(dep.schedules) == (1 if d.cron else 0)
            assert dep.global_concurrency_limit.limit == 1
            assert dep.concurrency_options.collision_strategy == "ENQUEUE"
    # registering again is idempotent (same deployments, updated in place)
    _deploy(env, pool, "mrqa-weekly-refresh")
    with _api(env), get_client(sync_client=True) as client:
        assert client.read_deployment_by_name("pipeline/mrqa-weekly-refresh").id == weekly.id


@pytest.mark.slow      # ~4.5 minutes on the shared 2-core machine (encoder training in the run)
def test_worker_completes_a_pipeline_deployment_run(prefect_server, tmp_path):
    env = prefect_server
    pool = "mrqa-test-pool"
    _deploy(env, pool, "mrqa-pipeline")
    from prefect.client.orchestration import get_client
    with _api(env), get_client(sync_client=True) as client:
        on_demand = client.read_deployment_by_name("pipeline/mrqa-pipeline")

    sample = tmp_path / "kitchen"
    build_sample(sample, 8, seed=3, workers=1, progress=False)
    worker_log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", pool, "--limit", "1"],
                              env=env, cwd=REPO, stdout=worker_log, stderr=subprocess.STDOUT)
    try:
        with SiteServer(sample / "site") as site, _api(env), get_client(sync_client=True) as client:
            run = client.create_flow_run_from_deployment(
                on_demand.id, parameters={"listing": f"{site.url}/cooking/", "allow_private": True,
                                          "source": "sample", "delay_s": 0.0, "report": False})
            deadline = time.time() + 600
            while True:
                state = client.read_flow_run(run.id).state
                if state.is_final():
                    break
                assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
                assert time.time() < deadline, f"flow run still {state.name} after 600 s"
                time.sleep(2)
            assert state.is_completed(), (state.message, (tmp_path / "worker.log").read_text()[-4000:])
    finally:
        rc = _stop(worker)
        worker_log.close()
    assert rc is not None and worker.poll() is not None

    # the run wrote the deployment's MRQA_HOME (set by `mrqa deploy` from the environment)
    import duckdb
    con = duckdb.connect(str(Path(env["MRQA_HOME"]) / "warehouse.duckdb"), read_only=True)
    try:
        stages = dict(con.execute("SELECT stage, status FROM pipeline_stages").fetchall())
        n_questions = con.execute("SELECT count(*) FROM questions").fetchone()[0]
        n_competence = con.execute("SELECT count(*) FROM competence_datasets").fetchone()[0]
    finally:
        con.close()
    assert stages == {"ingest": "completed", "clean": "completed", "embed": "completed",
                      "generate": "completed", "competence": "completed"}
    assert n_questions > 0 and n_competence == 6
