"""The migration runner and the warehouse's SQL data tests."""
from __future__ import annotations

import pytest

from etl.load import load_recipe
from etl.records import RecipeRecord, StepRecord
from etl.warehouse import SchemaError, connect, migrate, run_sql_tests, sql_tests


def test_migrations_apply_once_in_declared_order(con):
    versions = con.execute("SELECT version, file_name FROM schema_version ORDER BY version").fetchall()
    assert [v for v, _ in versions] == list(range(1, len(versions) + 1))
    assert versions[0][1] == "001_schema_version.sql"
    assert migrate(con) == []  # idempotent: nothing pending on a second run
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    for t in ("recipes", "steps", "step_tokens", "images", "pages", "rejects", "datasets",
              "questions", "runs", "v_recipe_steps", "v_questions", "v_reject_summary"):
        assert t in tables


def test_changed_applied_migration_is_refused(tmp_path):
    import shutil

    from etl.config import SQL_DIR
    sql_dir = tmp_path / "sql"
    shutil.copytree(SQL_DIR, sql_dir)
    c = connect(database=tmp_path / "w.duckdb")
    c.close()
    import duckdb
    c = duckdb.connect(str(tmp_path / "w.duckdb"))
    migrate(c, sql_dir)
    (sql_dir / "schema" / "002_recipes.sql").write_text("CREATE TABLE x (a INT);")
    with pytest.raises(SchemaError, match="changed after it was applied"):
        migrate(c, sql_dir)


def test_pending_migrations_says_what_migrate_would_apply(tmp_path):
    """`pending_migrations` (read-only) names exactly what `migrate` then applies; a view file (`_v_`) changed
    since is pending, a changed table file is refused by both."""
    import shutil

    import duckdb

    from etl.config import SQL_DIR
    from etl.warehouse import migration_files, pending_migrations
    sql_dir = tmp_path / "sql"
    shutil.copytree(SQL_DIR, sql_dir)
    c = duckdb.connect(str(tmp_path / "w.duckdb"))
    assert pending_migrations(c, sql_dir) == [p.name for p in migration_files(sql_dir)]    # a new warehouse
    migrate(c, sql_dir)
    assert pending_migrations(c, sql_dir) == []
    (sql_dir / "schema" / "999_extra.sql").write_text("CREATE TABLE extra (a INT);")
    with open(sql_dir / "migrations.txt", "a") as f:
        f.write("999_extra.sql\n")
    view = next(p for p in sorted((sql_dir / "schema").glob("*_v_*.sql")))
    view.write_text(view.read_text() + "\n-- a comment that changes nothing\nSELECT 1;\n")
    pending = pending_migrations(c, sql_dir)
    assert pending == [view.name, "999_extra.sql"]
    assert migrate(c, sql_dir) == pending and pending_migrations(c, sql_dir) == []
    (sql_dir / "schema" / "002_recipes.sql").write_text("CREATE TABLE x (a INT);")
    with pytest.raises(SchemaError, match="changed after it was applied"):
        pending_migrations(c, sql_dir)


def test_sql_data_tests_pass_on_good_data_and_catch_bad(con):
    rec = RecipeRecord("easy-soup", "http://x/easy-soup/", "Easy Soup", steps=[
        StepRecord(0, "Intro", "Soup.", ["http://x/a.jpg"]),
        StepRecord(1, "Boil", "Boil water.", ["http://x/b.jpg", "http://x/c.jpg"])])
    load_recipe(con, rec, source="sample")
    assert len(sql_tests()) >= 6
    assert all(n == 0 for n in run_sql_tests(con).values()), run_sql_tests(con)
    # an orphan step and an image with a bad name must be caught
    con.execute("INSERT INTO steps VALUES ('ghost', 1, 't', 'b', 't', 'b', 0)")
    con.execute("INSERT INTO images (image_id, recipe_id, step_idx, ord, status) "
                "VALUES ('wrong.jpg', 'easy-soup', 1, 0, 'pending')")
    res = run_sql_tests(con)
    assert res["steps_relationships"] == 1
    assert res["images_relationships"] == 1


def test_load_recipe_is_idempotent_and_keeps_image_state(con):
    rec = RecipeRecord("r1", None, "R1", steps=[StepRecord(0, "i", "b", ["u0"]),
                                                StepRecord(1, "s", "b", ["u1"])])
    load_recipe(con, rec, source="sample")
    con.execute("UPDATE images SET status='ok', sha256='x', path='p' WHERE image_id='r1_1_0.jpg'")
    load_recipe(con, rec, source="sample")
    assert con.execute("SELECT count(*) FROM steps").fetchone()[0] == 2
    assert con.execute("SELECT status FROM images WHERE image_id='r1_1_0.jpg'").fetchone()[0] == "ok"
    rec.steps = rec.steps[:1]
    load_recipe(con, rec, source="sample")
    assert con.execute("SELECT count(*) FROM images").fetchone()[0] == 1
