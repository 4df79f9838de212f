"""`mrqa query` is read-only for real: every attack below is refused (rc 2, one `error:` line, no
traceback) and leaves the warehouse byte-for-byte unchanged; ordinary analyst queries still work.
Runs the real `mrqa` command against a warehouse filled by the real RecipeQA importer."""
from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from etl.analyst import AnalystQueryFailed, AnalystQueryRefused, connect_analyst, run_analyst_query
from etl.config import Paths
from etl.recipeqa import import_recipeqa
from etl.warehouse import connect


@pytest.fixture(scope="module")
def home(tmp_path_factory, recipeqa_doc) -> Path:
    """A warehouse with one imported recipe (steps, images, four original questions)."""
    home = tmp_path_factory.mktemp("query_home")
    src = home / "val.json"
    src.write_text(json.dumps(recipeqa_doc()))
    con = connect(Paths(home))
    import_recipeqa(con, [src])
    con.close()
    other = duckdb.connect(str(home / "other.duckdb"))
    other.execute("CREATE TABLE t (a INTEGER)")
    other.close()
    return home


def _attacks(home: Path) -> dict[str, str]:
    db, other = Paths(home).warehouse, home / "other.duckdb"
    return {
        "copy_over_warehouse": f"COPY (SELECT 'garbage' AS x) TO '{db}' (FORMAT csv)",
        "copy_elsewhere": f"COPY recipes TO '{home / 'stolen.csv'}' (FORMAT csv)",
        "copy_from": f"COPY recipes FROM '{home / 'val.json'}'",
        "read_text_passwd": "SELECT * FROM read_text('/etc/passwd')",
        "read_csv_passwd": "SELECT * FROM read_csv('/etc/passwd')",
        "read_parquet": f"SELECT * FROM read_parquet('{home}/*.parquet')",
        "glob": "SELECT * FROM glob('/etc/*')",
        "replacement_scan_file": "SELECT * FROM '/etc/passwd'",
        "attach_then_insert": f"ATTACH '{other}' AS o (READ_WRITE); INSERT INTO o.t VALUES (1)",
        "attach": f"ATTACH '{other}' AS o (READ_WRITE)",
        "detach": "DETACH warehouse",
        "install": "INSTALL httpfs",
        "load": "LOAD httpfs",
        "pragma": "PRAGMA database_size",
        "set_external_access": "SET enable_external_access = true",
        "reset": "RESET threads",
        "two_statements": "SELECT 1; DROP TABLE recipes",
        "delete": "DELETE FROM recipes",
        "update": "UPDATE recipes SET title = 'x'",
        "insert": "INSERT INTO rejects VALUES ('s', 'k', 'r', NULL, now())",
        "create": "CREATE TABLE evil AS SELECT 1 AS x",
        "create_temp": "CREATE TEMP TABLE evil AS SELECT 1 AS x",
        "drop": "DROP TABLE recipes",
        "export": f"EXPORT DATABASE '{home / 'dump'}'",
        "call": "CALL pragma_version()",
        "explain_analyze_delete": "EXPLAIN ANALYZE DELETE FROM recipes",
        "checkpoint": "CHECKPOINT",
        "vacuum": "VACUUM",
        "transaction": "BEGIN TRANSACTION",
        "empty": "  ;  ",
    }


ATTACKS = sorted(_attacks(Path("/x")))
# with external access off, DuckDB does not even read a quoted path as a file: an unknown table
NOT_A_FILE_ANY_MORE = {"replacement_scan_file"}


@pytest.mark.parametrize("attack", ATTACKS)
def test_attack_is_refused_and_changes_nothing(home, attack, run_mrqa, warehouse_fingerprint):
    sql = _attacks(home)[attack]
    other_before = (home / "other.duckdb").read_bytes()
    before = warehouse_fingerprint(home)
    res = run_mrqa("query", sql, home=home)
    line = res.assert_refused()
    assert ("does not exist" if attack in NOT_A_FILE_ANY_MORE else "refused") in line, line
    assert warehouse_fingerprint(home) == before
    assert (home / "other.duckdb").read_bytes() == other_before
    assert not (home / "stolen.csv").exists() and not (home / "dump").exists()
    assert "root:" not in res.stdout + res.stderr


def test_query_errors_are_one_line(home, run_mrqa, warehouse_fingerprint):
    before = warehouse_fingerprint(home)
    for sql, words in (("SELEC 1", "syntax error"), ("SELECT * FROM nope", "nope"),
                       ("SELECT 'a'::INTEGER", "Conversion Error")):
        res = run_mrqa("query", sql, home=home)
        line = res.assert_refused()
        assert line.startswith("error: query failed") and words in line, line
    assert warehouse_fingerprint(home) == before


@pytest.mark.parametrize("sql, expect", [
    ("SELECT count(*) AS n FROM recipes", [{"n": 1}]),
    ("WITH s AS (SELECT * FROM steps) SELECT count(*) AS n FROM s", [{"n": 4}]),
    ("FROM images SELECT count(*) AS n", [{"n": 8}]),
    ("SELECT task, answer FROM v_questions ORDER BY task",
     [{"task": "textual_cloze", "answer": 0}, {"task": "visual_cloze", "answer": 0},
      {"task": "visual_coherence", "answer": 1}, {"task": "visual_ordering", "answer": 0}]),
])
def test_legit_queries_still_work(home, run_mrqa, sql, expect):
    res = run_mrqa("query", sql, "--format", "json", home=home)
    assert res.rc == 0, res.stderr
    assert json.loads(res.stdout) == expect


@pytest.mark.parametrize("sql, word", [("DESCRIBE recipes", "recipe_id"), ("SHOW TABLES", "questions"),
                                       ("EXPLAIN SELECT * FROM steps", "physical_plan"),
                                       ("EXPLAIN ANALYZE SELECT count(*) FROM steps", "analyzed_plan"),
                                       ("SUMMARIZE steps", "step_idx")])
def test_describe_show_explain(home, run_mrqa, sql, word):
    res = run_mrqa("query", sql, "--format", "csv", home=home)
    assert res.rc == 0, res.stderr
    assert word in res.stdout


def test_no_warehouse_is_a_clean_error(tmp_path, run_mrqa):
    res = run_mrqa("query", "SELECT 1", home=tmp_path / "empty")
    assert "no warehouse" in res.assert_refused()


def test_connection_is_locked(home):
    """The settings cannot be turned back on, and Python variables are not scannable by name."""
    con = connect_analyst(Paths(home))
    secret = pa.table({"s": ["only in Python"]})  # noqa: F841 (what a replacement scan would find)
    assert con.execute("SELECT current_setting('enable_external_access'), "
                       "current_setting('lock_configuration')").fetchone() == (False, True)
    with pytest.raises(duckdb.Error, match="configuration has been locked"):
        con.execute("SET enable_external_access = true")
    with pytest.raises(AnalystQueryRefused):
        run_analyst_query(con, "SET lock_configuration = false")
    with pytest.raises(Exception, match="secret"):
        run_analyst_query(con, "SELECT * FROM secret")
    assert run_analyst_query(con, "SELECT count(*) AS n FROM steps").to_pylist() == [{"n": 4}]
    con.close()


def test_a_runaway_query_is_stopped_by_its_timeout_and_frees_the_warehouse(home, run_mrqa):
    import time
    t0 = time.monotonic()
    res = run_mrqa("query", "--timeout", "1", "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
                   "SELECT count(*) FROM r", home=home)
    line = res.assert_refused()
    assert line.startswith("error: query stopped after 1 s (--timeout)"), line
    assert time.monotonic() - t0 < 60
    con = connect(Paths(home))                    # the lock is free: a writer opens the warehouse at once
    con.close()
    with pytest.raises(Exception, match="stopped after 0.5 s"):    # the library call too
        run_analyst_query(connect_analyst(Paths(home)), "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL "
                          "SELECT n + 1 FROM r) SELECT count(*) FROM r", timeout=0.5)


@pytest.mark.parametrize("value", ["inf", "1e308", "40000000"])
def test_a_timeout_no_clock_can_hold_is_refused_before_the_query(home, run_mrqa, value):
    """A timer past the platform's clock (inf, 1e308) used to kill the watchdog thread and run the query
    unguarded: now one line, before the query."""
    line = run_mrqa("query", "--timeout", value, "SELECT 1", home=home).assert_refused()
    assert line.startswith("error: --timeout:") and "0 means no limit" in line, line


def test_the_timeout_thread_has_ended_when_the_query_returns(home):
    """The --timeout timer holds the connection (to interrupt it). If its thread outlived the call, the
    connection could be freed on that thread while the interpreter exits, and DuckDB's destructor then
    aborts the process (rc -6, "FATAL: exception not rethrown") after a clean one-line error."""
    import threading
    con = connect_analyst(Paths(home))
    before = {t.ident for t in threading.enumerate()}
    for sql in ("SELECT count(*) AS n FROM steps", "SELECT * FROM nope", "SELECT 'a'::INTEGER"):
        for _ in range(20):
            try:
                run_analyst_query(con, sql, timeout=60)
            except AnalystQueryFailed:
                pass
            assert {t.ident for t in threading.enumerate()} == before, sql
    con.close()


def test_json_output_is_strict_json(home, run_mrqa):
    res = run_mrqa("query", "SELECT 'nan'::DOUBLE AS a, 'inf'::DOUBLE AS b, 1.5::DOUBLE AS c", "--format", "json",
                   home=home)
    assert res.rc == 0, res.stderr
    assert json.loads(res.stdout, parse_constant=lambda c: pytest.fail(f"not JSON: {c}")) == [
        {"a": None, "b": None, "c": 1.5}]


def test_nested_blob_and_interval_values_are_written_as_duckdb_writes_them(home, run_mrqa):
    """CSV holds DuckDB's text of each value (as its own CSV writer), JSON its JSON: structs and maps as
    objects, lists as arrays, blobs and intervals as DuckDB's text; never a Python repr (b'..', Decimal(..),
    MonthDayNano(..)). Repeated column names are kept in CSV."""
    sql = ("SELECT '\\xAA'::BLOB AS b, {'x': 1, 'y': [1.5, 'nan'::DOUBLE]} AS s, INTERVAL 3 DAY AS i, "
           "[1.5, 2] AS l, MAP {'k': 1} AS m, 1.25::DECIMAL(5, 2) AS d, 'é' AS e")
    res = run_mrqa("query", sql, "--format", "json", home=home)
    assert res.rc == 0, res.stderr
    assert json.loads(res.stdout, parse_constant=lambda c: pytest.fail(f"not JSON: {c}")) == [
        {"b": "\\xAA", "s": {"x": 1, "y": [1.5, None]}, "i": "3 days", "l": [1.5, 2.0], "m": {"k": 1},
         "d": 1.25, "e": "é"}]
    res = run_mrqa("query", sql + ", 2 AS b", "--format", "csv", home=home)
    assert res.rc == 0, res.stderr
    assert "\r" not in res.stdout                     # LF, as DuckDB's own CSV writer
    head, row = res.stdout.splitlines()
    assert head == "b,s,i,l,m,d,e,b"
    assert row == "\\xAA,\"{'x': 1, 'y': [1.5, nan]}\",3 days,\"[1.5, 2.0]\",{k=1},1.25,é,2"
    for repr_ in ("b'", "Decimal(", "MonthDayNano", "[('k'"):
        assert repr_ not in res.stdout


def test_types_arrow_or_python_cannot_hold_keep_their_value(home, run_mrqa):
    """Values are turned into text inside DuckDB: a UHUGEINT beyond 64 bits, a time with its offset, a BIT
    string, a 38-digit decimal and a JSON column keep DuckDB's value; in CSV the empty string and NULL
    stay apart ("" against an empty field), as COPY ... (FORMAT csv) writes them."""
    sql = ("SELECT 340282366920938463463374607431768211455::UHUGEINT AS u, TIMETZ '12:00:00+02' AS t, "
           "BIT '0101' AS b, 123456789012345678901234567890.123::DECIMAL(38, 3) AS d, '{\"a\": [1]}'::JSON AS j, "
           "'' AS e, NULL::VARCHAR AS n")
    res = run_mrqa("query", sql, "--format", "json", home=home)
    assert res.rc == 0, res.stderr
    from decimal import Decimal
    got = json.loads(res.stdout, parse_float=Decimal)
    assert got == [{"u": 340282366920938463463374607431768211455, "t": "12:00:00+02", "b": "0101",
                    "d": Decimal("123456789012345678901234567890.123"), "j": {"a": [1]}, "e": "", "n": None}]
    res = run_mrqa("query", sql, "--format", "csv", home=home)
    assert res.rc == 0, res.stderr
    assert res.stdout.splitlines()[1] == ('340282366920938463463374607431768211455,12:00:00+02,0101,'
                                          '123456789012345678901234567890.123,"{""a"": [1]}","",')
    res = run_mrqa("query", "SELECT 340282366920938463463374607431768211455::UHUGEINT AS u, TIMETZ '12:00:00+02' AS t, "
                   "BIT '0101' AS b", home=home)           # the table too: those types as DuckDB's text
    assert res.rc == 0, res.stderr
    for text in ("340282366920938463463374607431768211455", "12:00:00+02", "0101"):
        assert text in res.stdout, (text, res.stdout)
