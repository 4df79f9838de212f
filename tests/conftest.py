"""Shared pytest fixtures: a fresh MRQA_HOME per test, the warehouse, and the real fixtures under MRQA_SHARED."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Tests run with --import-mode=importlib (so tests/etl/ never shadows the etl package); shared test
# helpers (site_builder.py, toy_kitchen.py, synthetic_home.py) are importable by name from these folders.
for _helpers in (REPO / "tests" / "etl", REPO / "tests" / "features"):
    sys.path.insert(0, str(_helpers))
SHARED = Path(os.environ.get("MRQA_SHARED", REPO.parent / "shared"))
FIXTURES = SHARED / "fixtures"

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
# `make test` runs the tests in pytest-xdist workers: each worker gets its own Prefect and MRQA homes
# below the ones the caller set (CI sets one of each), so two workers never share a database or a lock.
# The caller's homes are recorded before the workers start (they inherit the record; tests/test_workers.py).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
for _var in ("PREFECT_HOME", "MRQA_HOME"):
    _caller = os.environ.setdefault(f"MRQA_TESTS_CALLER_{_var}", os.environ.get(_var, ""))
    if _WORKER and _caller:
        os.environ[_var] = str(Path(_caller) / _WORKER)


@pytest.fixture
def shared_fixtures() -> Path:
    """../shared/fixtures (third-party data, never copied into the repo); skips when absent."""
    if not FIXTURES.is_dir():
        pytest.skip(f"needs ../shared/fixtures (not found at {FIXTURES}); "
                    "set MRQA_SHARED to the shared/ folder to run this test")
    return FIXTURES


@pytest.fixture(autouse=True)
def _cli_switches():
    """`mrqa --prefect/--no-prefect` and `--wait` set MRQA_PREFECT / MRQA_LOCK_WAIT for the whole
    process: a test that runs the CLI in-process must not hand its choice to the next test."""
    saved = {k: os.environ.pop(k, None) for k in ("MRQA_PREFECT", "MRQA_LOCK_WAIT")}
    yield
    for k, v in saved.items():
        os.environ.pop(k, None)
        if v is not None:
            os.environ[k] = v


@pytest.fixture
def paths(tmp_path, monkeypatch):
    from etl.config import Paths
    monkeypatch.setenv("MRQA_HOME", str(tmp_path / "home"))
    return Paths.from_env().ensure()


@pytest.fixture
def con(paths):
    from etl.warehouse import connect
    c = connect(paths)
    yield c
    c.close()


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory):
    """One temporary Prefect server for the whole session (it takes ~10 s to start)."""
    os.environ.setdefault("PREFECT_HOME", str(tmp_path_factory.mktemp("prefect_home")))
    from prefect.testing.utilities import prefect_test_harness
    with prefect_test_harness(server_startup_timeout=120):
        yield
