"""The test run's own set-up: `make test` runs the tests in pytest-xdist workers, and each worker must have
its own Prefect and MRQA homes below the ones the caller set (CI sets one of each), so that two workers
never share a warehouse, a lock or a Prefect database."""
from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.mark.parametrize("var", ["PREFECT_HOME", "MRQA_HOME"])
def test_each_worker_has_its_own_home(var):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        pytest.skip("not in a pytest-xdist worker (`make test` runs the tests in workers)")
    caller = os.environ.get(f"MRQA_TESTS_CALLER_{var}")
    if not caller:
        pytest.skip(f"the caller set no {var}; a test that needs a home makes its own")
    assert Path(os.environ[var]) == Path(caller) / worker
