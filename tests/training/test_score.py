"""`mrqa score`: any model's predictions judged as the reading benchmark judges its readers. The ablation plan
is the trainer's own context ablation; scoring our reader's written predictions gives back the figures
`mrqa evaluate` measured; every file format gives the same figures; bad files are one line with what to do;
the warehouse is only read."""
from __future__ import annotations

import csv
import hashlib
import json

import duckdb
import numpy as np
import pytest
from typer.testing import CliRunner

from flows.cli import app
from training.score import (
    ScoreError,
    SplitQuestions,
    context_plan,
    difference_interval,
    list_datasets,
    load_split,
    read_predictions,
    recorded_figures,
    score,
)


def _split(toy_home, task="visual_cloze", knobs="0-0-0", split="test", export=True) -> SplitQuestions:
    did = toy_home["ids"][(task, knobs)]
    if export:
        return load_split(did, split, toy_home["export"])
    con = duckdb.connect(str(toy_home["home"] / "warehouse.duckdb"), read_only=True)
    try:
        return load_split(did, split, con=con)
    finally:
        con.close()


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("task, knobs", [("visual_cloze", "0-0-0"), ("visual_coherence", "0-0-0"),
                                         ("visual_ordering", "0-0-0"), ("visual_cloze", "recipeqa")])
def test_the_plan_is_the_context_ablation_the_trainer_runs(toy_home, task, knobs):
    """The plan names, for each question, the recipe whose steps the trainer's context ablation
    (training.data.foreign_context_rows on the loaded split) gives it: never its own, always one of the split."""
    from training.ablation import foreign_context_rows
    from training.data import load_qa_dataset
    qs = _split(toy_home, task, knobs)
    wq = _split(toy_home, task, knobs, export=False)                # the warehouse's, the same
    assert (wq.qids, wq.recipe_ids, wq.answers.tolist()) == (qs.qids, qs.recipe_ids, qs.answers.tolist())
    ds = load_qa_dataset(toy_home["export"], qs.dataset_id, "vectors")
    sp = ds.splits["test"]
    assert sp.qids == qs.qids                                   # the same questions, in the same order
    rows, own = foreign_context_rows(sp.recipe_row)
    row_of = {int(row): rid for rid, row in zip(qs.recipe_ids, sp.recipe_row)}
    trainer = [row_of[int(r)] for r in rows]
    plan = context_plan(qs)
    assert plan == trainer and own == 0
    assert all(p != r for p, r in zip(plan, qs.recipe_ids)) and set(plan) <= set(qs.recipe_ids)


def test_scoring_our_readers_written_predictions_gives_back_its_figures(trained, toy_home, tmp_path):
    """`mrqa evaluate --predictions --ablation-predictions`, then `mrqa score`: the accuracy, the accuracy
    with another recipe's steps and their difference are those the trainer measured."""
    pred, abl = tmp_path / "pred.json", tmp_path / "abl.json"
    r = CliRunner().invoke(app, ["evaluate", "--run", trained["run_id"], "--dataset", trained["dataset_id"],
                                 "--export", str(toy_home["export"]), "--predictions", str(pred),
                                 "--ablation-predictions", str(abl)])
    assert r.exit_code == 0, r.output
    ev = json.loads(r.output)
    wh = toy_home["home"] / "warehouse.duckdb"
    before = _sha(wh)
    r = CliRunner().invoke(app, ["score", "--dataset", trained["dataset_id"], "--predictions", str(pred),
                                 "--context-ablation", str(abl), "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["model"]["accuracy"] == pytest.approx(ev["accuracy"], abs=1e-4)
    assert res["model"]["missing"] == 0 and res["n_questions"] == ev["n"]
    ab = res["context_ablation"]
    assert ab["accuracy"] == pytest.approx(ev["context_ablation"]["foreign_context_acc"], abs=1e-4)
    assert ab["cost"] == pytest.approx(ev["context_ablation"]["drop"], abs=1e-4)
    lo, hi = res["model"]["ci"]
    assert lo <= res["model"]["accuracy"] <= hi
    assert ab["cost_ci"][0] <= ab["cost"] <= ab["cost_ci"][1]
    assert _sha(wh) == before                                      # read-only
    # from the export alone (no warehouse figures needed), the same figures
    r2 = CliRunner().invoke(app, ["score", "--dataset", trained["dataset_id"], "--predictions", str(pred),
                                  "--context-ablation", str(abl), "--export", str(toy_home["export"]), "--json"])
    assert r2.exit_code == 0, r2.output
    assert json.loads(r2.output)["model"] == res["model"]


def test_every_format_gives_the_same_figures_and_missing_questions_count_as_wrong(toy_home, tmp_path):
    qs = _split(toy_home)
    rng = np.random.default_rng(0)
    guess = np.where(rng.random(qs.n) < 0.6, qs.answers, (qs.answers + 1) % qs.n_choices)
    files = {"dict.json": json.dumps({q: int(g) for q, g in zip(qs.qids, guess)}),
             "list.json": json.dumps([int(g) for g in guess]),
             "task.json": json.dumps({"visual_cloze": [int(g) for g in guess]}),
             "lines.jsonl": "\n".join(json.dumps({"qid": q, "prediction": int(g)}) for q, g in zip(qs.qids, guess)),
             "floats.json": json.dumps({q: float(g) for q, g in zip(qs.qids, guess)})}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with (tmp_path / "rows.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["qid", "prediction"])
        w.writerows(zip(qs.qids, guess.tolist()))
    (tmp_path / "excel.csv").write_bytes(b"\xef\xbb\xbf" + (tmp_path / "rows.csv").read_bytes())   # with a BOM
    got = {p.name: read_predictions(p, qs) for p in sorted(tmp_path.iterdir())}
    for name, arr in got.items():
        assert np.array_equal(arr, guess), name
    res = score(qs, guess)
    assert res["model"]["accuracy"] == pytest.approx(float((guess == qs.answers).mean()), abs=1e-4)
    assert score(qs, qs.answers.copy())["model"]["accuracy"] == 1.0
    assert score(qs, (qs.answers + 1) % qs.n_choices)["model"]["accuracy"] == 0.0
    part = tmp_path / "part.json"
    part.write_text(json.dumps({q: int(a) for q, a in list(zip(qs.qids, qs.answers))[:-5]}))
    pred = read_predictions(part, qs)
    assert (pred[-5:] == -1).all()
    res = score(qs, pred)
    assert res["model"]["missing"] == 5 and res["model"]["answered"] == qs.n - 5
    assert res["model"]["accuracy"] == pytest.approx((qs.n - 5) / qs.n, abs=1e-4)


def test_the_verdict_needs_the_lead_and_the_ablations_cost(toy_home):
    """Reads the recipe: 20 points above the strongest question-only figure and 15 lost with another
    recipe's steps; either short says which; without an ablation or any question-only figure: not judged."""
    qs = _split(toy_home)
    right, wrong = qs.answers.copy(), (qs.answers + 1) % qs.n_choices
    rng = np.random.default_rng(1)

    def at(share):                                    # right on about `share` of the questions
        return np.where(rng.random(qs.n) < share, right, wrong)
    strong, weak = at(0.9), at(0.3)
    res = score(qs, strong, ablated=weak, question_only=weak)
    v, q = res["verdict"], res["question_only"]
    assert v["reads_the_recipe"] is True and v["question_only_from"] == "your question-only predictions"
    assert q["lead"] == pytest.approx(res["model"]["accuracy"] - q["accuracy"], abs=2e-4) == v["lead"]
    assert q["lead_ci"][0] <= q["lead"] <= q["lead_ci"][1]
    v = score(qs, strong, ablated=strong.copy(), question_only=weak)["verdict"]
    assert v["reads_the_recipe"] is False and "another recipe's steps cost it 0.0 points" in v["why"][0]
    v = score(qs, strong, ablated=weak, question_only=at(0.85))["verdict"]
    assert v["reads_the_recipe"] is False and v["why"][0].startswith("leads your question-only predictions by")
    v = score(qs, strong, question_only=weak)["verdict"]
    assert v["reads_the_recipe"] is None and "no context ablation" in v["why"][0]
    v = score(qs, strong, ablated=weak)["verdict"]
    assert v["reads_the_recipe"] is None and "no question-only figure" in v["why"][0]
    # a recorded figure stronger than the user's question-only predictions is the bar
    rec = {"question_only_probe_test": 0.8, "reading_check": {"question_only": 0.5}}
    v = score(qs, strong, ablated=weak, question_only=weak, recorded=rec)["verdict"]
    assert v["question_only"] == 0.8 and v["reads_the_recipe"] is False


def test_difference_interval_covers_the_mean_and_is_seeded():
    groups = np.repeat(np.arange(40), 3)
    diff = np.random.default_rng(2).choice([-1.0, 0.0, 1.0], size=len(groups), p=[0.1, 0.5, 0.4])
    lo, hi = difference_interval(diff, groups)
    assert lo < diff.mean() < hi and hi - lo < 0.5
    assert difference_interval(diff, groups) == (lo, hi)
    assert difference_interval(np.zeros(0), np.zeros(0, np.int64)) is None


def test_recorded_figures_only_for_the_same_questions(toy_home):
    qs = _split(toy_home, export=False)
    con = duckdb.connect(str(toy_home["home"] / "warehouse.duckdb"), read_only=True)
    try:
        same = recorded_figures(con, qs)
        other = recorded_figures(con, SplitQuestions(qs.dataset_id, qs.task, qs.setting, qs.split, qs.qids,
                                                     qs.recipe_ids, (qs.answers + 1) % 4, qs.n_choices))
    finally:
        con.close()
    assert "note" not in same and same["reading_check"] is None
    assert "not the one scored" in other["note"]
    assert recorded_figures(None, qs) == {"note": "no warehouse: no recorded figures"}


def test_bad_input_is_one_line_with_what_to_do(toy_home, tmp_path):
    qs = _split(toy_home)
    did = qs.dataset_id
    bad = {"unknown.json": (json.dumps({"no-such-q": 1}), "are not test questions"),
           "dup.jsonl": ("\n".join(json.dumps({"qid": qs.qids[0], "prediction": 1}) for _ in range(2)),
                         "predicted twice"),
           "range.json": (json.dumps({qs.qids[0]: 4}), "choice 4 does not exist"),
           "half.json": (json.dumps({qs.qids[0]: 1.5}), "0-based integer"),
           "word.json": (json.dumps({qs.qids[0]: "two"}), "0-based integer"),
           "bool.json": (json.dumps({qs.qids[0]: True}), "0-based integer"),
           "broken.json": ('{"a": ', "not JSON"),
           "short.json": (json.dumps([0, 1]), f"2 predictions in qid order for the {qs.n} test questions"),
           "empty.json": ("{}", "holds no predictions"),
           "noheader.csv": ("a,b\n1,2\n", "needs a header with qid and prediction"),
           "badline.jsonl": ('{"qid": "x", "prediction": 1}\nnot json\n', "line 2: not JSON"),
           "scalar.json": ("3", "give {qid: index}"),
           "latin1.json": (None, "cannot read predictions")}
    wh = toy_home["home"] / "warehouse.duckdb"
    before = _sha(wh)
    runner = CliRunner()
    for name, (text, says) in bad.items():
        if text is None:
            (tmp_path / name).write_bytes(b'{"caf\xe9": 1}')                   # not UTF-8
        else:
            (tmp_path / name).write_text(text)
        r = runner.invoke(app, ["score", "--dataset", did, "--predictions", str(tmp_path / name)])
        assert r.exit_code == 2, (name, r.output)
        assert r.output.count("\n") == 1 and r.output.startswith("error: ") and says in r.output, (name, r.output)
    (tmp_path / "ok.json").write_text(json.dumps({q: 0 for q in qs.qids}))
    for args, says in ((["--predictions", str(tmp_path / "nope.json")], "no predictions file"),
                       ([], "give --predictions FILE"),
                       (["--plan", str(tmp_path / "p.csv"), "--predictions", str(tmp_path / "ok.json")],
                        "--plan writes the ablation plan and stops"),
                       (["--predictions", str(tmp_path / "ok.json"), "--split", "dev"], "--split must be"),
                       (["--predictions", str(tmp_path / "ok.json"), "--export", str(tmp_path)],
                        "is not a Parquet export"),
                       (["--plan", str(tmp_path)], "is a folder")):
        r = runner.invoke(app, ["score", "--dataset", did, *args])
        assert r.exit_code == 2 and r.output.startswith("error: ") and says in r.output, (args, r.output)
    r = runner.invoke(app, ["score", "--dataset", "vc-nope", "--predictions", str(tmp_path / "ok.json")])
    assert r.exit_code == 2 and "holds no test questions of dataset 'vc-nope'" in r.output
    assert _sha(wh) == before
    with pytest.raises(ScoreError, match="no warehouse and no --export"):
        load_split(did, "test")


def test_no_warehouse_and_no_export_is_refused_and_creates_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("MRQA_HOME", str(tmp_path / "home"))
    (tmp_path / "p.json").write_text("{}")
    r = CliRunner().invoke(app, ["score", "--dataset", "d", "--predictions", str(tmp_path / "p.json")])
    assert r.exit_code == 2 and "no warehouse at" in r.output and "--export" in r.output
    assert not (tmp_path / "home" / "warehouse.duckdb").exists()


def test_the_plan_file_csv_and_parquet(toy_home, tmp_path):
    qs = _split(toy_home)
    for name in ("plan.csv", "plan.parquet"):
        r = CliRunner().invoke(app, ["score", "--dataset", qs.dataset_id, "--plan", str(tmp_path / name)])
        assert r.exit_code == 0, r.output
        assert f"wrote the context-ablation plan of {qs.n} test questions" in r.output
    rows = list(csv.DictReader((tmp_path / "plan.csv").open()))
    assert [r["qid"] for r in rows] == qs.qids and [r["context_recipe_id"] for r in rows] == context_plan(qs)
    pq = duckdb.sql(f"SELECT * FROM read_parquet('{tmp_path / 'plan.parquet'}')").fetchall()
    assert [tuple(r.values()) for r in rows] == [tuple(map(str, r)) for r in pq]
    # a plan is written again over itself; any other file (the user's predictions) is kept and refused
    for name in ("plan.csv", "plan.parquet"):
        r = CliRunner().invoke(app, ["score", "--dataset", qs.dataset_id, "--plan", str(tmp_path / name)])
        assert r.exit_code == 0, r.output
    mine = tmp_path / "my-predictions.json"
    mine.write_text('{"a": 1}')
    for target in (mine, tmp_path / "notes.csv"):
        if target.suffix == ".csv":
            target.write_text("qid,prediction\nx,1\n")
        before = target.read_bytes()
        r = CliRunner().invoke(app, ["score", "--dataset", qs.dataset_id, "--plan", str(target)])
        assert r.exit_code == 2 and "is not a context-ablation plan" in r.output, r.output
        assert target.read_bytes() == before
    r = CliRunner().invoke(app, ["score", "--dataset", "all", "--plan", str(tmp_path / "plans.csv")])
    assert r.exit_code == 2 and "several datasets need a folder" in r.output and not (tmp_path / "plans.csv").exists()


def test_the_cards_rule_for_the_other_recipe_is_the_plan(toy_home):
    """The dataset card says in words how to pick the other recipe (for users without `mrqa`); that rule,
    written out here on its own, gives the plan, and the card of the export says it."""
    assert "## Scoring a model" in (toy_home["export"] / "README.md").read_text()
    for task, knobs in (("visual_cloze", "0-0-0"), ("visual_coherence", "0-0-0"), ("visual_cloze", "recipeqa")):
        qs = _split(toy_home, task, knobs)
        order = sorted(range(qs.n), key=lambda i: (qs.recipe_ids[i], qs.qids[i]))
        g = max(qs.recipe_ids.count(r) for r in set(qs.recipe_ids))
        said = [None] * qs.n
        for k, i in enumerate(order):
            said[i] = qs.recipe_ids[order[(k + g) % qs.n]]
        assert said == context_plan(qs)


def test_a_folder_of_predictions_scores_each_dataset_as_alone_and_sums_up(toy_home, tmp_path):
    """A benchmark at once: one <dataset_id> file per dataset (any format), ablations for some; each
    dataset's figures are those it gets scored alone, and the summary counts the verdicts."""
    a, b = _split(toy_home, "visual_cloze", "0-0-0"), _split(toy_home, "visual_coherence", "0-0-0")
    preds, abl, qo = (tmp_path / n for n in ("preds", "abl", "qo"))
    for d in (preds, abl, qo):
        d.mkdir()
    (preds / f"{a.dataset_id}.json").write_text(json.dumps({q: int(x) for q, x in zip(a.qids, a.answers)}))
    (preds / f"{b.dataset_id}.jsonl").write_text("\n".join(json.dumps({"qid": q, "prediction": 0}) for q in b.qids))
    (abl / f"{a.dataset_id}.json").write_text(json.dumps({q: int((x + 1) % 4) for q, x in zip(a.qids, a.answers)}))
    (qo / f"{a.dataset_id}.json").write_text(json.dumps({q: int((x + 2) % 4) for q, x in zip(a.qids, a.answers)}))
    r = CliRunner().invoke(app, ["score", "--predictions", str(preds), "--context-ablation", str(abl),
                                 "--question-only", str(qo), "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert [d["dataset_id"] for d in res["datasets"]] == sorted([a.dataset_id, b.dataset_id])
    assert res["summary"] == {"datasets": 2, "reads_the_recipe": 1, "not_shown": 0, "not_judged": 1}
    alone = CliRunner().invoke(app, ["score", "--dataset", a.dataset_id, "--predictions",
                                     str(preds / f"{a.dataset_id}.json"), "--context-ablation",
                                     str(abl / f"{a.dataset_id}.json"), "--question-only",
                                     str(qo / f"{a.dataset_id}.json"), "--json"])
    assert json.loads(alone.output) == next(d for d in res["datasets"] if d["dataset_id"] == a.dataset_id)
    r = CliRunner().invoke(app, ["score", "--predictions", str(preds)])
    assert r.exit_code == 0 and "reads the recipe on 0 of 2 datasets (0 not shown, 2 not judged)" in r.output
    # a file that names no dataset, several datasets with one file, a folder against a file: one line each
    (preds / "vc-nope.json").write_text("{}")
    for args, says in ((["--predictions", str(preds)], "no dataset 'vc-nope' has test questions"),
                       (["--dataset", "all", "--predictions", str(preds / f"{a.dataset_id}.json")],
                        "several datasets need a folder"),
                       (["--predictions", str(preds), "--context-ablation", str(abl / f"{a.dataset_id}.json")],
                        "--context-ablation must be a folder"),
                       (["--predictions", str(abl), "--dataset", b.dataset_id], f"no predictions for {b.dataset_id}")):
        r = CliRunner().invoke(app, ["score", *args])
        assert r.exit_code == 2 and r.output.startswith("error: ") and says in r.output, (args, r.output)


def test_plans_for_every_dataset_and_recipeqa_json_qids(toy_home, tmp_path):
    """`--dataset all --plan FOLDER` writes one plan per dataset of the split; predictions keyed by the
    RecipeQA JSON export's qids (<dataset_id>.<qid>) score as the export's own."""
    r = CliRunner().invoke(app, ["score", "--export", str(toy_home["export"]), "--dataset", "all",
                                 "--plan", str(tmp_path / "plans")])
    assert r.exit_code == 0, r.output
    ids = list_datasets("test", toy_home["export"])
    assert sorted(p.stem for p in (tmp_path / "plans").iterdir()) == ids
    assert len(ids) == len(set(toy_home["ids"].values()))
    qs = _split(toy_home)
    rows = list(csv.DictReader((tmp_path / "plans" / f"{qs.dataset_id}.csv").open()))
    assert [r["context_recipe_id"] for r in rows] == context_plan(qs)
    from features.datasets.export import QID_SEPARATOR
    f = tmp_path / "rq.json"
    f.write_text(json.dumps({f"{qs.dataset_id}{QID_SEPARATOR}{q}": int(x) for q, x in zip(qs.qids, qs.answers)}))
    assert np.array_equal(read_predictions(f, qs), qs.answers)


def test_the_printed_table_says_each_figure_and_why_the_verdict(toy_home):
    from training.score import format_score
    qs = _split(toy_home)
    wrong = (qs.answers + 1) % qs.n_choices
    res = score(qs, qs.answers.copy(), ablated=wrong, question_only=wrong)
    text = format_score(res).splitlines()
    assert text[0] == (f"{qs.dataset_id} (visual_cloze 0-0-0), test split: {qs.n} questions, chance 25.0%")
    assert text[1].split()[:3] == ["your", "model", "100.0%"]
    assert "cost 100.0 points" in text[2] and "your model leads it by 100.0 points" in text[3]
    assert text[-1].startswith("  verdict: reads the recipe") and text[-1].endswith(
        "leads your question-only predictions (0.0%) by 100.0 points; another recipe's steps cost it 100.0")
    text = format_score(score(qs, qs.answers.copy())).splitlines()
    assert text[-1].startswith("  verdict: not judged") and "no question-only figure" in text[-1]


HOLDER = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
print("holding", flush=True)
time.sleep(120)
"""


def test_a_busy_warehouse_scores_from_the_export_and_says_so(toy_home, tmp_path, monkeypatch):
    """Another process writing the warehouse (a pipeline run): with --export the predictions are scored from
    the export and the output says why no figures are recorded; without it, the lock's one-line error."""
    import shutil
    import subprocess
    import sys
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(toy_home["home"] / "warehouse.duckdb", home / "warehouse.duckdb")
    monkeypatch.setenv("MRQA_HOME", str(home))
    qs = _split(toy_home)
    (tmp_path / "p.json").write_text(json.dumps({q: int(a) for q, a in zip(qs.qids, qs.answers)}))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(home / "warehouse.duckdb")], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        args = ["score", "--dataset", qs.dataset_id, "--predictions", str(tmp_path / "p.json")]
        r = CliRunner().invoke(app, args + ["--export", str(toy_home["export"]), "--json"])
        assert r.exit_code == 0, r.output
        res = json.loads(r.output)
        assert res["model"]["accuracy"] == 1.0
        note = res["recorded"]["note"]
        assert note.startswith("no recorded figures: ") and f"PID {holder.pid}" in note
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 2 and r.output.startswith("error: ") and "locked by another process" in r.output
        assert r.output.count("\n") == 1
    finally:
        holder.kill()
        holder.wait()


def test_the_export_ships_the_context_ablation_of_every_question(toy_home):
    """context_ablation.parquet (a config of the card, like recipes) holds, for every exported question, the
    recipe `mrqa score --plan` names: the ablation comes with the benchmark, no `mrqa` needed to run it."""
    export = toy_home["export"]
    rows = duckdb.sql(f"SELECT dataset_id, split, qid, recipe_id, context_recipe_id FROM "
                      f"read_parquet('{export / 'context_ablation.parquet'}')").fetchall()
    n = duckdb.sql(f"SELECT count(*) FROM read_parquet('{export / 'questions' / '**' / '*.parquet'}')").fetchall()[0][0]
    assert len(rows) == n and rows == sorted(rows)
    for did in sorted({r[0] for r in rows}):
        for split in ("train", "val", "test"):
            mine = [r for r in rows if r[0] == did and r[1] == split]
            if not mine:
                continue
            qs = load_split(did, split, export)
            assert [r[2] for r in mine] == qs.qids and [r[3] for r in mine] == qs.recipe_ids
            assert [r[4] for r in mine] == context_plan(qs)
            assert all(r[3] != r[4] for r in mine) or len(set(qs.recipe_ids)) == 1
    card = (export / "README.md").read_text()
    assert 'config_name: "context_ablation"' in card
    assert "`context_ablation.parquet` (config `context_ablation`)" in card
