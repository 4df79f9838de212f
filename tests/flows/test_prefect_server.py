"""`prefect_server_early` (flows/cli/common.py): `mrqa demo` and `mrqa pipeline` start Prefect's temporary
server on a thread while they import their libraries. Each case runs in a fresh process with its own Prefect
home, so the server singleton and settings of this test session are not touched."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

EARLY = r"""
import logging, time
logging.basicConfig(level=logging.INFO)
from flows.cli.common import prefect_server_early
wait = prefect_server_early()
wait()
from prefect.server.api.server import SubprocessASGIServer
server = SubprocessASGIServer()
assert server.running and server.server_process.poll() is None, "no server after the wait"
import httpx
assert httpx.get(server.api_url + "/health").status_code == 200
port = server.port
from prefect import flow

@flow
def one():
    return 1

assert one() == 1
assert SubprocessASGIServer().port == port, "the flow run started another server"
assert list(SubprocessASGIServer._instances) == [None]
print("OK", port)
"""

NOT_NEEDED = r"""
from flows.cli.common import prefect_server_early
wait = prefect_server_early()
wait()
from prefect.server.api.server import SubprocessASGIServer
assert not SubprocessASGIServer._instances, "a server was started although PREFECT_API_URL names one"
print("OK")
"""


def _run(code: str, tmp_path: Path, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=180,
                          env={**base, "PREFECT_HOME": str(tmp_path / "prefect"), **env})


@pytest.mark.slow      # a real Prefect server started by the CLI (~29 s)
def test_the_server_started_early_is_the_one_the_flow_run_uses(tmp_path):
    res = _run(EARLY, tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.startswith("OK")
    # one start, on the thread: the flow run found it up
    assert (res.stdout + res.stderr).count("Starting temporary server") == 1


def test_nothing_starts_when_a_server_is_named(tmp_path):
    res = _run(NOT_NEEDED, tmp_path, PREFECT_API_URL="http://127.0.0.1:9/api")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Starting temporary server" not in res.stdout + res.stderr
