"""sql/schema/094 on a warehouse written before setting names: knob3 '1:balanced' becomes the INTEGER 1
with k3_mode 'balanced', `setting` is what features.datasets.knobs.setting_name says for every kind of row,
v_datasets_legacy (095) gives old queries the VARCHAR knob3 back, and 097 renames bias_metrics.knobs."""
from __future__ import annotations

import json
import shutil

import duckdb

from etl.config import SQL_DIR
from etl.warehouse import migrate
from features.datasets.knobs import parse_setting, setting_name

# (dataset_id, knob1, knob2, old knob3, preset, params) as the generator wrote them before 094
OLD_ROWS = [
    ("vc-k000-s0-e", 0, 0, "0", None, {"k3_mode": "off"}),
    ("vc-k011-s0-e", 0, 1, "1", None, {"k3_mode": "coin"}),
    ("vc-k001-s0-e-pdabfed", 0, 0, "1:balanced", None, {"k3_mode": "balanced"}),
    ("vc-k011-s0-e-p1a2b3c", 0, 1, "1:all", None, {"k3_mode": "all"}),
    ("vc-k011-af-s0-e", 0, 1, "1", None, {"k3_mode": "coin", "af_rounds": 3}),
    ("vc-k011-af-s0-e-p9f9f9f", 0, 1, "1:balanced", None, {"k3_mode": "balanced", "af_rounds": 3}),
    ("vc-k100-af-s0-e", 1, 0, "0", None, {"k3_mode": "off", "af_rounds": 3}),
    ("vc-recipeqa-s0-e", None, None, None, "recipeqa", {"k3_mode": "off"}),
    ("recipeqa-original-visual_cloze", None, None, None, "recipeqa-original", {"source": "recipeqa"}),
]
EXPECTED = {"vc-k000-s0-e": "0-0-0", "vc-k011-s0-e": "0-1-1", "vc-k001-s0-e-pdabfed": "0-0-1-balanced",
            "vc-k011-s0-e-p1a2b3c": "0-1-1-all", "vc-k011-af-s0-e": "0-1-1-af",
            "vc-k011-af-s0-e-p9f9f9f": "0-1-1-balanced-af", "vc-k100-af-s0-e": "1-0-0-af",
            "vc-recipeqa-s0-e": "recipeqa", "recipeqa-original-visual_cloze": "recipeqa-original"}


def _warehouse_before(tmp_path, migration: str):
    """A warehouse migrated up to (not including) `migration`; returns it, the copied SQL folder and a
    function that restores the full migration list."""
    sql_dir = tmp_path / "sql"
    shutil.copytree(SQL_DIR, sql_dir)
    order = sql_dir / "migrations.txt"
    full = order.read_text()
    lines = full.splitlines(keepends=True)
    order.write_text("".join(lines[:next(i for i, ln in enumerate(lines) if migration in ln)]))
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    migrate(con, sql_dir)
    return con, sql_dir, lambda: order.write_text(full)


def test_migration_names_old_rows_like_setting_name(tmp_path):
    con, sql_dir, restore = _warehouse_before(tmp_path, "094_datasets_setting")
    assert con.execute("SELECT data_type FROM duckdb_columns() WHERE table_name = 'datasets' "
                       "AND column_name = 'knob3'").fetchone()[0] == "VARCHAR"
    con.executemany("""INSERT INTO datasets (dataset_id, task, knob1, knob2, knob3, preset, seed, encoder_id, params,
                       created_at, n_questions, n_recipes) VALUES (?, 'visual_cloze', ?, ?, ?, ?, 0, 'e', ?,
                       TIMESTAMP '2026-01-01', 1, 1)""",
                    [[d, k1, k2, k3, pre, json.dumps(p)] for d, k1, k2, k3, pre, p in OLD_ROWS])
    # the report's rows as it labelled them then: k1-k2-<knob3>, -af from the id
    con.executemany("""INSERT INTO bias_metrics (dataset_id, task, knobs, n_questions, n_scored, chance, probe_model,
                       probe_folds, computed_at) VALUES (?, 'visual_cloze', ?, 1, 1, 0.25, 'logreg', 5,
                       TIMESTAMP '2026-01-01')""",
                    [[d, pre or f"{k1}-{k2}-{k3}" + ("-af" if "-af-" in d else "")]
                     for d, k1, k2, k3, pre, _ in OLD_ROWS])
    restore()
    assert migrate(con, sql_dir)[:2] == ["094_datasets_setting.sql", "095_v_datasets_legacy.sql"]

    assert con.execute("SELECT data_type FROM duckdb_columns() WHERE table_name = 'datasets' "
                       "AND column_name = 'knob3'").fetchone()[0] == "INTEGER"
    rows = con.execute("SELECT dataset_id, knob1, knob2, knob3, k3_mode, adversarial, setting, preset "
                       "FROM datasets").fetchall()
    assert {r[0]: r[6] for r in rows} == EXPECTED
    for did, k1, k2, k3, mode, af, setting, preset in rows:
        if preset:
            assert (k3, mode, af) == (None, "off", False)
            continue
        assert setting == setting_name(k1, k2, k3, mode, af)        # the SQL and Python grammars agree
        assert parse_setting(setting) == parse_setting(f"{k1}-{k2}-{dict((r[0], r[3]) for r in OLD_ROWS)[did]}"
                                                       + ("-af" if af else ""))
    legacy = dict(con.execute("SELECT dataset_id, knob3 FROM v_datasets_legacy").fetchall())
    assert legacy == {d: k3 for d, _, _, k3, _, _ in OLD_ROWS}
    # an old query keeps working against the view
    assert con.execute("SELECT count(*) FROM v_datasets_legacy WHERE knob3 = '1:balanced'").fetchone()[0] == 2
    assert dict(con.execute("SELECT dataset_id, knobs FROM bias_metrics").fetchall()) == EXPECTED
    con.close()


def test_matched_datasets_made_before_their_own_name_are_renamed(tmp_path):
    """103: coherence datasets with matched foreign images, made when they carried the paper setting's
    name (ids with -p<hash>), get `K1-0-0-matched[-af]` in datasets and bias_metrics; the paper
    setting's own datasets keep theirs."""
    con, sql_dir, restore = _warehouse_before(tmp_path, "103_matched_setting_names")
    rows = [("vcoh-0-0-0-af-s0-e-p9671a4", 0, "0-0-0-af", True, {"distractors": "matched", "af_rounds": 3}),
            ("vcoh-1-0-0-s0-e-p1b2c3d", 1, "1-0-0", False, {"distractors": "matched"}),
            ("vcoh-0-0-0-af-s0-e", 0, "0-0-0-af", True, {"distractors": "ball", "af_rounds": 3}),
            ("vcoh-0-0-0-s0-e", 0, "0-0-0", False, {"distractors": "ball"})]
    con.executemany("""INSERT INTO datasets (dataset_id, task, knob1, knob2, knob3, k3_mode, adversarial, setting,
                       seed, encoder_id, params, created_at, n_questions, n_recipes)
                       VALUES (?, 'visual_coherence', ?, 0, 0, 'off', ?, ?, 0, 'e', ?, TIMESTAMP '2026-01-01', 1, 1)""",
                    [[d, k1, af, s, json.dumps(p)] for d, k1, s, af, p in rows])
    con.executemany("""INSERT INTO bias_metrics (dataset_id, task, knobs, n_questions, n_scored, chance, probe_model,
                       probe_folds, computed_at) VALUES (?, 'visual_coherence', ?, 1, 1, 0.25, 'logreg', 5,
                       TIMESTAMP '2026-01-01')""", [[d, s] for d, _, s, _, _ in rows])
    restore()
    assert migrate(con, sql_dir)[0] == "103_matched_setting_names.sql"     # then the later files
    want = {d: setting_name(k1, 0, 0, "off", af, p["distractors"]) for d, k1, _, af, p in rows}
    assert want == {"vcoh-0-0-0-af-s0-e-p9671a4": "0-0-0-matched-af", "vcoh-1-0-0-s0-e-p1b2c3d": "1-0-0-matched",
                    "vcoh-0-0-0-af-s0-e": "0-0-0-af", "vcoh-0-0-0-s0-e": "0-0-0"}
    assert dict(con.execute("SELECT dataset_id, setting FROM datasets").fetchall()) == want
    assert dict(con.execute("SELECT dataset_id, knobs FROM bias_metrics").fetchall()) == want
    migrate(con, sql_dir)                                          # idempotent
    assert dict(con.execute("SELECT dataset_id, setting FROM datasets").fetchall()) == want
    con.close()
