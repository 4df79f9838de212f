"""Every table, view and column of the warehouse has a DuckDB comment (sql/schema/092_comments.sql and
the view files), on a fresh warehouse and on one migrated before the comments existed; comment-only
edits of an applied schema file are accepted."""
from __future__ import annotations

import hashlib
import shutil

import duckdb
import pytest

from etl.config import SQL_DIR
from etl.warehouse import SchemaError, migrate

MAIN_TABLES = ("recipes", "steps", "step_tokens", "images", "pages", "rejects", "datasets", "questions",
               "runs", "encoders", "neighbours", "text_neighbours", "generation_skips", "bias_metrics",
               "vocab_stats", "pipeline_stages")
VIEWS = ("v_recipe_steps", "v_questions", "v_reject_summary")


def _missing(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Tables, views and columns without a comment, as 'table' or 'table.column'."""
    tables = con.execute("SELECT table_name FROM duckdb_tables() WHERE coalesce(comment, '') = '' "
                         "UNION ALL SELECT view_name FROM duckdb_views() "
                         "WHERE NOT internal AND coalesce(comment, '') = ''").fetchall()
    cols = con.execute("SELECT table_name || '.' || column_name FROM duckdb_columns() "
                       "WHERE NOT internal AND coalesce(comment, '') = ''").fetchall()
    return sorted(r[0] for r in tables + cols)


def test_every_table_view_and_column_has_a_comment(con):
    assert _missing(con) == [], ("add COMMENT ON statements (tables: a new sql/schema file; views: "
                                 "their own file) and describe them in docs/data-model.md")
    names = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() UNION ALL "
                                       "SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    assert set(MAIN_TABLES + VIEWS) <= names
    comment = con.execute("SELECT comment FROM duckdb_columns() WHERE table_name = 'questions' "
                          "AND column_name = 'answer'").fetchone()[0]
    assert "0-based index" in comment


def _without_comments(sql_dir):
    """The schema as it was before comments: neither the 092 file nor any later one listed, views
    without COMMENT statements."""
    order = sql_dir / "migrations.txt"
    lines = order.read_text().splitlines(keepends=True)
    order.write_text("".join(lines[:next(i for i, ln in enumerate(lines) if "092_comments" in ln)]))
    for view in (sql_dir / "schema").glob("*_v_*.sql"):
        view.write_text("".join(ln for ln in view.read_text().splitlines(keepends=True)
                                if not ln.startswith("COMMENT ON")))


def test_an_older_warehouse_gets_the_comments_on_migration(tmp_path):
    sql_dir = tmp_path / "sql"
    shutil.copytree(SQL_DIR, sql_dir)
    _without_comments(sql_dir)
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    migrate(con, sql_dir)
    assert "v_questions" in _missing(con) and "recipes.recipe_id" in _missing(con)
    shutil.rmtree(sql_dir)
    shutil.copytree(SQL_DIR, sql_dir)
    applied = migrate(con, sql_dir)
    assert "092_comments.sql" in applied and "012_v_questions.sql" in applied   # views re-created
    assert _missing(con) == []
    assert migrate(con, sql_dir) == []


def test_comment_lines_of_an_applied_file_may_change_but_not_its_sql(tmp_path):
    sql_dir = tmp_path / "sql"
    shutil.copytree(SQL_DIR, sql_dir)
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    migrate(con, sql_dir)
    recipes = sql_dir / "schema" / "002_recipes.sql"
    whole_text = hashlib.sha256(recipes.read_text().encode()).hexdigest()   # what older runners recorded
    con.execute("UPDATE schema_version SET sha256 = ? WHERE file_name = '002_recipes.sql'", [whole_text])
    assert migrate(con, sql_dir) == []
    recipes.write_text("-- a reworded explanation\n" + recipes.read_text())
    assert migrate(con, sql_dir) == []
    recipes.write_text(recipes.read_text().replace("title           VARCHAR,", "title TEXT NOT NULL,"))
    with pytest.raises(SchemaError, match="changed after it was applied"):
        migrate(con, sql_dir)
