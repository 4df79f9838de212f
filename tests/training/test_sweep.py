"""`mrqa sweep` end to end on the toy export: every (dataset, scorer) cell is a recorded run, the
Parquet table holds what the runs measured, the summary is computed from those rows, and the
Markdown + plot are written; bad arguments are a clear error."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from flows.cli import app


@pytest.fixture(scope="module")
def swept(toy_export, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MRQA_HOME", str(toy_export["home"]))
        r = CliRunner().invoke(app, ["sweep", "--scorers", "transformer,bidaf,question_only", "--tasks", "visual_cloze",
                                     "--knobs", "recipeqa,0-0-0", "--text-features", "vectors", "--tiny",
                                     "--max-epochs", "2", "--seed", "0", "--out", str(out)])
    assert r.exit_code == 0, r.output
    return out, r.output


def test_sweep_table_is_what_the_runs_measured(swept, toy_home):
    out, printed = swept
    rows = pq.read_table(out / "accuracy.parquet").to_pylist()
    assert sorted((r["knobs"], r["scorer"]) for r in rows) == [
        ("0-0-0", "bidaf"), ("0-0-0", "question_only"), ("0-0-0", "transformer"),
        ("recipeqa", "bidaf"), ("recipeqa", "question_only"), ("recipeqa", "transformer")]
    from etl.warehouse import connect
    con = connect()
    for r in rows:
        assert 0.0 <= r["test_acc"] <= 1.0 and r["n_test"] > 0 and r["epochs"] <= 2
        assert 0.0 <= r["foreign_context_acc"] <= 1.0
        lo, hi = r["test_ci"]                 # Wilson 95% over the test questions, around the accuracy
        assert lo <= r["test_acc"] <= hi and 0.0 <= lo < hi <= 1.0
        p, n, z = r["test_acc"], r["n_test"], 1.959964
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5 / (1 + z * z / n)
        assert abs(lo - max(0.0, centre - half)) < 1e-3 and abs(hi - min(1.0, centre + half)) < 1e-3
        got = con.execute("SELECT dataset_id, scorer, CAST(json_extract(metrics, '$.test_acc') AS DOUBLE) "
                          "FROM runs WHERE run_id = ?", [r["run_id"]]).fetchall()
        assert got and got[0][:2] == (r["dataset_id"], r["scorer"])
        assert abs(got[0][2] - r["test_acc"]) < 1e-4
        if r["scorer"] == "transformer":      # visual cloze: the faithfulness figures are measured
            assert r["faithfulness_ratio"] > 0 and r["rollout_ratio"] > 0
        else:
            assert r["faithfulness_ratio"] is None
        if r["scorer"] == "question_only":            # context-free: another recipe's steps change nothing
            assert r["foreign_context_acc"] == r["test_acc"]
    con.close()
    for knobs in ("recipeqa", "0-0-0"):       # Hasty Student: one figure per dataset, whatever the scorer
        assert len({r["hasty_student_acc"] for r in rows if r["knobs"] == knobs}) == 1
    md = (out / "accuracy.md").read_text()
    assert md in printed
    for r in rows:
        assert (f"| visual_cloze | {r['knobs']} | {r['scorer']} | {r['test_acc']:.3f} | "
                f"{r['test_ci'][0]:.3f}-{r['test_ci'][1]:.3f} |") in md
        assert f"| {r['epochs']} | {r['foreign_context_acc']:.3f} |" in md
    acc = {(r["scorer"], r["knobs"]): r["test_acc"] for r in rows}
    for scorer in ("transformer", "bidaf", "question_only"):   # summary line: preset and knob mean from the rows
        assert f"| visual_cloze | {scorer} | {acc[scorer, 'recipeqa']:.3f} | {acc[scorer, '0-0-0']:.3f} (1) |" in md
    best = max(acc["transformer", "0-0-0"], acc["bidaf", "0-0-0"])
    assert (f"visual_cloze (knob mean): learned context-free scorer {acc['question_only', '0-0-0']:.3f}; the best "
            f"recipe-reading scorer adds {best - acc['question_only', '0-0-0']:+.3f}") in md
    assert (out / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {r["text_source"] for r in rows} == {"export:body"} and "step texts: titles only" not in md


def test_the_summary_names_the_datasets_read_from_step_titles():
    from training.sweep import checks
    rows = [{"task": "visual_cloze", "dataset_id": d, "text_source": src}
            for d, src in (("a", "export:title"), ("b", "export:body"), ("c", "export:title"))]
    assert checks(rows, []) == ["step texts: titles only for 2 dataset(s) (an export without body vectors and no "
                                "feature store): the readers read far less than from the steps; re-export with "
                                "`mrqa export --with-vectors`"]
    assert checks(rows[1:2], []) == []


def test_the_summary_knows_the_preset_by_its_setting_when_the_export_named_it_apart():
    """Where an export holds several RecipeQA-style preset datasets of a task (another seed, a `-p` one), their
    knobs= value adds the rest of the id; the summary still counts them as the preset, not as knob settings."""
    from training.sweep import summarize
    rows = [{"task": "visual_ordering", "scorer": "question_only", "knobs": k, "test_acc": a, "hasty_student_acc": h}
            for k, a, h in (("1-0-0", 0.6, 0.3), ("recipeqa-s0-3ff43695", 0.8, 0.5),
                            ("recipeqa-s0-3ff43695-p30bd61", 0.7, 0.4))]
    (s,) = summarize(rows)
    assert s["recipeqa_preset"] == 0.75 and s["hasty_preset"] == 0.45
    assert s["knob_mean"] == 0.6 and s["n_knob_settings"] == 1
    # twins of one knob setting count once: the mean over settings, each the mean of its datasets
    more = rows + [{"task": "visual_ordering", "scorer": "question_only", "knobs": k, "test_acc": a,
                    "hasty_student_acc": h} for k, a, h in (("1-0-0-s1-3ff43695", 0.4, 0.1), ("0-0-0", 0.9, 0.2))]
    (s,) = summarize(more)
    assert s["n_knob_settings"] == 2 and s["knob_mean"] == round((0.5 + 0.9) / 2, 4)
    assert s["hasty_knob_mean"] == round((0.2 + 0.2) / 2, 4)


def test_the_knob_mean_weighs_each_setting_once_however_many_twins_it_has():
    """An export holding a seed-1 twin and a `-p` twin of 0-1-1 besides 0-1-0: the knob mean is over the two
    settings (0-1-1 as its three datasets' mean), not over four datasets, and n says 2 settings; it was
    (0.2 + 0.4 + 0.4 + 0.4) / 4 = 0.35 over "4" settings."""
    from training.sweep import summarize
    rows = [{"task": "visual_cloze", "scorer": "question_only", "knobs": k, "test_acc": a, "hasty_student_acc": h}
            for k, a, h in (("0-1-0", 0.2, 0.3), ("0-1-1", 0.4, 0.5), ("0-1-1-s1-3ff43695", 0.4, 0.5),
                            ("0-1-1-s0-3ff43695-p7bbae2", 0.4, 0.5))]
    (s,) = summarize(rows)
    assert s["knob_mean"] == 0.3 and s["hasty_knob_mean"] == 0.4 and s["n_knob_settings"] == 2
    assert s["recipeqa_preset"] is None and s["hasty_preset"] is None


def test_knobs_select_a_setting_with_its_twins_or_one_twin_by_its_own_name():
    """`--knobs 0-1-1` takes every twin of the setting; `--knobs 0-1-1-s1-3ff43695`, a name the sweep's own
    error lists as what the export has, takes that twin alone (it matched nothing)."""
    from training.sweep import selected
    listed = [{"dataset_id": f"vc-{k}", "task": "visual_cloze", "knobs": k}
              for k in ("0-1-0", "0-1-1", "0-1-1-s1-3ff43695", "0-1-1-s0-3ff43695-p7bbae2")]
    pick = lambda knobs: [d["knobs"] for d in selected(listed, ["visual_cloze"], knobs)]
    assert pick(["0-1-1"]) == ["0-1-1", "0-1-1-s1-3ff43695", "0-1-1-s0-3ff43695-p7bbae2"]
    assert pick(["0-1-1-s1-3ff43695"]) == ["0-1-1-s1-3ff43695"]
    assert pick(["0,1,0", "0-1-1-s0-3ff43695-p7bbae2"]) == ["0-1-0", "0-1-1-s0-3ff43695-p7bbae2"]
    assert pick(["1-1-1"]) == []


def test_sweep_refuses_unknown_scorer_and_missing_knobs(toy_home, tmp_path):
    r = CliRunner().invoke(app, ["sweep", "--scorers", "nope", "--tasks", "visual_cloze", "--tiny",
                                 "--out", str(tmp_path)])
    assert r.exit_code == 2 and "nope" in r.output
    r = CliRunner().invoke(app, ["sweep", "--scorers", "bidaf", "--tasks", "visual_cloze", "--knobs", "9-9-9",
                                 "--tiny", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "no datasets" in r.output
    r = CliRunner().invoke(app, ["sweep", "--scorers", "bidaf", "--tasks", "visual_cloze", "--knobs", "1-1-1",
                                 "--tiny", "--out", str(tmp_path)])      # a setting the export lacks: say what it has
    assert r.exit_code == 2 and "no datasets of visual_cloze with knobs 1-1-1" in r.output
    assert "(it has: 0-0-0, recipeqa)" in " ".join(r.output.split())
    assert not (tmp_path / "accuracy.parquet").exists()


def test_sweep_warns_of_a_stale_export(toy_home, tmp_path):
    """An export holding a dataset older than the warehouse's (its answers moved here, as a dataset filtered
    again after the export would be) is swept as it is, with a warning naming it when the sweep selects it;
    a current one, or a sweep that leaves the stale dataset out, gets none."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq
    exp = tmp_path / "exp"
    shutil.copytree(toy_home["export"], exp)
    args = ["sweep", "--scorers", "question_only", "--tasks", "visual_cloze", "--tiny", "--max-epochs", "1",
            "--export", str(exp), "--out", str(tmp_path / "out")]
    r = CliRunner().invoke(app, args + ["--knobs", "0-0-0"])
    assert r.exit_code == 0 and "is stale" not in r.output
    f = next(p for p in sorted((exp / "questions").rglob("*.parquet")) if "task=visual_cloze/knobs=0-0-0" in str(p))
    t = pq.read_table(f)
    pq.write_table(t.set_column(t.schema.get_field_index("answer"), "answer",
                                pa.array([(a + 1) % 4 for a in t["answer"].to_pylist()], pa.int32())), f)
    r = CliRunner().invoke(app, args + ["--knobs", "0-0-0"])
    said = " ".join(r.output.split())
    assert r.exit_code == 0 and f"{exp} is stale for this sweep: of the 1 datasets it selects, 1 generated or " \
        "filtered again since it was written" in said
    assert toy_home["ids"][("visual_cloze", "0-0-0")] in said
    r = CliRunner().invoke(app, args + ["--knobs", "recipeqa"])          # the stale dataset left out: no word
    assert r.exit_code == 0 and "is stale" not in r.output


def test_the_interval_of_a_difference_of_accuracies_is_newcombes():
    """The reading check's lead and cost intervals (`difference_ci`): Newcombe's hybrid score interval, which
    gives 0.0524 to 0.3339 for 56/70 - 48/80 in his paper (1998, Table II, method 10); it holds the difference,
    flips with it, narrows with more questions, and is None without questions."""
    from training.sweep import difference_ci
    assert difference_ci(56 / 70, 48 / 80, 70, 80) == pytest.approx([0.0524, 0.3339], abs=2e-4)
    lo, hi = difference_ci(0.5, 0.25, 100)
    assert lo < 0.25 < hi and difference_ci(0.25, 0.5, 100) == [-hi, -lo]
    lo4, hi4 = difference_ci(0.5, 0.25, 400)
    assert lo < lo4 < 0.25 < hi4 < hi
    assert difference_ci(0.3, 0.3, 0) is None
