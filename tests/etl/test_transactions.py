"""The warehouse's two transaction helpers on a real DuckDB file: `transaction` keeps the block's
writes or none of them; `trial` never keeps them, and lets the block's error through."""
from __future__ import annotations

import pytest

from etl.warehouse import transaction, trial


def _count(con) -> int:
    return con.execute("SELECT count(*) FROM t").fetchone()[0]


@pytest.fixture
def tcon(con):
    con.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
    return con


def test_transaction_commits_the_block_or_nothing(tcon):
    with transaction(tcon):
        tcon.execute("INSERT INTO t VALUES (1), (2)")
    assert _count(tcon) == 2
    with pytest.raises(Exception, match="(?i)constraint|duplicate"), transaction(tcon):
        tcon.execute("INSERT INTO t VALUES (3)")
        tcon.execute("INSERT INTO t VALUES (1)")
    assert _count(tcon) == 2


def test_trial_keeps_nothing_and_reports_the_refusal(tcon):
    with trial(tcon):
        tcon.execute("INSERT INTO t VALUES (1), (2)")
        assert _count(tcon) == 2          # seen inside the block
    assert _count(tcon) == 0
    tcon.execute("INSERT INTO t VALUES (5)")
    with pytest.raises(Exception, match="(?i)constraint|duplicate"), trial(tcon):
        tcon.execute("INSERT INTO t VALUES (6)")
        tcon.execute("INSERT INTO t VALUES (5)")
    assert [r[0] for r in tcon.execute("SELECT x FROM t").fetchall()] == [5]
    with transaction(tcon):               # the connection is usable afterwards
        tcon.execute("INSERT INTO t VALUES (7)")
    assert _count(tcon) == 2
