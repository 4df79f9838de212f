"""A warehouse another process holds (a real second process with a DuckDB write connection): one
`error:` line naming that process, rc 2, no traceback; `--wait` retries until the holder lets go."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from etl.warehouse import WarehouseLocked, connect

MRQA = Path(sys.executable).parent / "mrqa"
HOLDER = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
print("holding", flush=True)
time.sleep(float(sys.argv[2]))
con.close()
print("released", flush=True)
time.sleep(60)            # still alive: only the lock is gone
"""


@pytest.fixture
def hold(paths, con):
    """hold(seconds): a second process that opens the warehouse read-write and keeps it that long."""
    con.close()
    procs = []

    def start(seconds: float) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", HOLDER, str(paths.warehouse), str(seconds)],
                             stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "holding"
        procs.append(p)
        return p
    yield start
    for p in procs:
        p.kill()
        p.wait()


def _mrqa(paths, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(MRQA), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "MRQA_HOME": str(paths.home)})


def test_connect_names_the_process_holding_the_lock(paths, hold):
    holder = hold(60)
    for read_only in (False, True):
        with pytest.raises(WarehouseLocked) as err:
            connect(paths, read_only=read_only, wait=0)
        msg = str(err.value)
        assert "\n" not in msg
        assert f"locked by another process, PID {holder.pid} (python -c import sys, time, duckdb" in msg
        assert str(paths.warehouse) in msg and "--wait SECONDS" in msg
    t0 = time.monotonic()
    with pytest.raises(WarehouseLocked, match="after waiting 1 s"):
        connect(paths, wait=1)
    assert 1 <= time.monotonic() - t0 < 10


@pytest.mark.parametrize("args", [["query", "SELECT count(*) FROM recipes"], ["status"], ["init"]])
def test_cli_prints_one_line_and_exits_2(paths, hold, args):
    holder = hold(120)
    r = _mrqa(paths, *args)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith(f"error: the warehouse {paths.warehouse} is locked by another process, "
                               f"PID {holder.pid} (")
    assert r.stdout == ""


def test_wait_retries_until_the_holder_releases(paths, hold):
    holder = hold(3)
    r = _mrqa(paths, "query", "--wait", "90", "--format", "csv", "SELECT count(*) AS n FROM recipes")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["n", "0"]
    assert holder.stdout.readline().strip() == "released"       # it did hold the lock until then
    hold(120)
    t0 = time.monotonic()
    r = _mrqa(paths, "status", "--wait", "2")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "after waiting 2 s" in r.stderr and time.monotonic() - t0 >= 2


def test_vocab_report_waits_too(paths, hold):
    hold(120)
    r = _mrqa(paths, "vocab-report", "--wait", "1")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "after waiting 1 s" in r.stderr and "Traceback" not in r.stderr
