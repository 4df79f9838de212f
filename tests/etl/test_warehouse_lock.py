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


READER = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
print("reading", flush=True)
time.sleep(60)
"""


def test_commands_that_only_read_open_the_warehouse_read_only(paths, con):
    """status, datasets and export take no write lock: they run beside another process that reads the
    warehouse (DuckDB lets readers share a file, never with a writer), where a writing command is refused."""
    from features.datasets.generate import generate_datasets
    from features.datasets.knobs import KnobParams
    from features.datasets.synthetic import build_world
    build_world(con, paths.lance, n_recipes=20, seed=1, dim=16, k=30)
    generate_datasets(con, [("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 0))], seed=0,
                      encoder_id="synthetic-enc-0001", lance_uri=paths.lance, progress=False)
    did = con.execute("SELECT dataset_id FROM datasets").fetchone()[0]
    con.close()
    reader = subprocess.Popen([sys.executable, "-c", READER, str(paths.warehouse)], stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "reading"
        r = _mrqa(paths, "status")
        assert r.returncode == 0 and "datasets" in r.stdout, r.stderr
        r = _mrqa(paths, "datasets")
        assert r.returncode == 0 and did in r.stdout, r.stderr
        out = paths.home / "exp"
        r = _mrqa(paths, "export", "--dataset", did, "--out", str(out))
        assert r.returncode == 0 and (out / "README.md").exists(), r.stderr
        r = _mrqa(paths, "--no-prefect", "generate", "--task", "visual_cloze", "--knobs", "0-0-0")
        assert r.returncode == 2 and "locked by another process" in r.stderr, r.stderr
    finally:
        reader.kill()
        reader.wait()


def test_a_home_the_user_cannot_write(paths, con):
    """A warehouse the user may read but not write: the commands that only read it work, and one that
    writes it says so (not "not a usable warehouse; move it aside"). The file is made read-only for the
    user, or immutable (`chattr +i`) where the user is root, whom file modes do not stop."""
    import shutil
    con.close()
    wh = paths.warehouse
    root = os.geteuid() == 0
    if root:
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(wh)], capture_output=True).returncode:
            pytest.skip("running as root, and this file system cannot make the warehouse immutable (chattr +i)")
    else:
        os.chmod(wh, 0o444)
        os.chmod(wh.parent, 0o555)
    try:
        r = _mrqa(paths, "status")
        assert r.returncode == 0 and "datasets" in r.stdout, r.stderr
        r = _mrqa(paths, "datasets")
        assert r.returncode == 0 and "no datasets" in r.stdout, r.stderr
        r = _mrqa(paths, "--no-prefect", "generate", "--task", "visual_cloze", "--knobs", "0-0-0")
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert f"cannot open the warehouse {wh} for writing" in r.stderr and "move it aside" not in r.stderr, r.stderr
    finally:
        if root:
            subprocess.run(["chattr", "-i", str(wh)], check=True)
        else:
            os.chmod(wh.parent, 0o755)
            os.chmod(wh, 0o644)
