"""The bias report on a synthetic warehouse (features.datasets.synthetic): tables, PNGs, bias_metrics rows,
per-split figures with Wilson intervals, the header and every plot's axis labels (parsed from the HTML),
determinism, and the report rendered in headless Chromium (tables present, images loaded, header and
axis labels in the DOM)."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from synthetic_home import synthetic_home

from features.datasets.knobs import KnobParams

ENC = "synthetic-enc-0001"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _settings():
    s = [("visual_cloze", KnobParams.recipeqa_preset())]
    s += [("visual_cloze", KnobParams.preset_for("visual_cloze", a, b, c))
          for a in (0, 1) for b in (0, 1) for c in (0, 1)]
    for task, knobs in (("visual_coherence", [(0, 0, 0), (0, 1, 1)]),
                        ("visual_ordering", [(0, 0, 0), (0, 1, 0)]),
                        ("textual_cloze", [(0, 0, 0), (0, 1, 1)])):
        s.append((task, KnobParams.recipeqa_preset()))
        s += [(task, KnobParams.preset_for(task, *k)) for k in knobs]
    return s


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from features.datasets.generate import generate_datasets
    from features.diagnostics.report import build_report
    with synthetic_home(tmp_path_factory, "report_home", n_recipes=40, seed=1, dim=16, k=60) as (home, paths, con):
        summaries = generate_datasets(con, _settings(), seed=0, encoder_id=ENC, lance_uri=paths.lance,
                                      progress=False)
        from features.datasets.export import export_parquet
        export_parquet(con, [s["dataset_id"] for s in summaries], paths.exports / "all")
        out = paths.reports / "latest"
        res = build_report(con, out, lance_uri=paths.lance, progress=False)
        _plant_pixel(con, {s["dataset_id"]: PIXEL_AT_CHANCE for s in summaries if s["task"] != "textual_cloze"})
        yield {"con": con, "paths": paths, "res": res, "out": out, "summaries": summaries}


PIXEL_AT_CHANCE = 0.25


def _plant_pixel(con, figures: dict[str, float]) -> None:
    """pixel_checks rows with the given figures, written by the function `mrqa pixel-probe --record` writes
    with: this world writes no photo files, so the gate's other rules are tested with the pixel probe's figure
    planted (test_pixel_probe.py runs the probe on real photo files; `test_a_visual_dataset_needs_the_pixel_probe`
    below, the gate's pixel rule and the train stage's check)."""
    from features.diagnostics.pixel_probe import record_pixel_checks
    task = dict(con.execute("SELECT dataset_id, task FROM datasets").fetchall())
    sha = dict(con.execute("SELECT dataset_id, content_sha256 FROM datasets").fetchall())
    record_pixel_checks(con, {"seed": 0, "side": 32, "epochs": 1, "datasets": [
        {"dataset_id": d, "content_sha256": sha[d], "task": task[d], "n_scored": 10, "accuracy": a, "ci": None,
         "test_accuracy": None, "n_test": 0, "train_folds": 2, "fewest_trained": 8} for d, a in figures.items()]})


def test_report_has_a_table_and_plots_per_task(report):
    res, out = report["res"], report["out"]
    assert res["n_datasets"] == len(report["summaries"])
    assert set(res["tasks"]) == {"visual_cloze", "visual_coherence", "visual_ordering", "textual_cloze"}
    page = (out / "index.html").read_text()
    for task, info in res["tasks"].items():
        assert f"id='{task}'" in page
        assert f"hist_{task}.png" in info["plots"] and (out / f"hist_{task}.png").is_file()
        assert len(info["table"]) == len(info["rows"])
        assert {r["setting"] for r in info["table"]} >= {"recipeqa", "0-0-0"}
    # the knob-effect plot needs pairs of settings that differ in one knob: all 8 for cloze
    assert "knobs_visual_cloze.png" in res["tasks"]["visual_cloze"]["plots"]
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    imgs = re.findall(r"<img src='([^']+)'", page)
    assert sorted(imgs) == sorted(p.name for p in out.glob("*.png"))
    # per task: the metrics and the per-split table; and the background cue (the encoder's space: this world's
    # photo files are not written, so the look space has none)
    assert page.count("<table") == 9 and page.count("<table class=\"cue\"") == 1
    assert [c["space"] for c in res["background_cue"]] == ["encoder"] and res["background_cue"][0]["n_photos"] > 0
    assert "Learned probe" in page and "learned probe, test split (95% CI)" in page


def test_bias_metrics_rows_match_the_report_and_the_generator(report):
    con, res = report["con"], report["res"]
    rows = con.execute("""SELECT dataset_id, task, n_questions, n_scored, hasty_student_acc, probe_acc,
                          recipe_coverage, question_overlap, answer_rank_share FROM bias_metrics""").fetchall()
    assert len(rows) == res["n_datasets"]
    by_id = {s["dataset_id"]: s for s in report["summaries"]}
    for did, task, nq, ns, hs, pr, cov, _jac, share in rows:
        assert nq == by_id[did]["n_questions"] and ns == nq       # every question has its vectors
        assert 0 <= hs <= 1 and 0 <= pr <= 1 and 0 < cov <= 1
        share = json.loads(share)
        assert sum(share) == pytest.approx(1, abs=1e-3)
        if task in ("visual_cloze", "textual_cloze"):
            # the Hasty Student's pick by mean distance and the nearest-to-mean choice coincide often;
            # the nearest-choice share is the generator's own distance-probe figure
            assert share[0] == pytest.approx(by_id[did]["distance_probe_accuracy"], abs=1e-3)
    # RecipeQA-style questions reuse steps; knob 1 removes the answer step: less overlap
    ov = dict(con.execute("SELECT dataset_id, question_overlap FROM bias_metrics "
                          "WHERE task = 'visual_cloze'").fetchall())
    pre = next(v for k, v in ov.items() if "recipeqa" in k)
    k1 = [v for k, v in ov.items() if "-k1" in k]
    assert all(v < pre for v in k1)


def test_ordering_printed_and_probe_finds_the_preset_bias(report):
    from features.diagnostics.report import format_ordering
    lines = format_ordering(report["res"]["tasks"])
    assert lines[0] == f"visual_cloze (encoder {ENC}):" and any("recipeqa" in ln for ln in lines)
    assert list(report["res"]["tasks"]["visual_cloze"]["ordering"]) == [ENC]
    cloze = report["res"]["tasks"]["visual_cloze"]["ordering"][ENC]
    # the learned probe, or the distance probe or the centre rule where that reads higher
    best = [max(v for v in (r["qo_acc"], r["probe_acc"], r["centre_rule_acc"]) if v is not None) for r in cloze]
    assert best == sorted(best, reverse=True)
    preset = next(r for r in cloze if r["knobs"] == "recipeqa")
    assert preset["probe_acc"] > 0.5           # synthetic world: a per-recipe style term = the cue
    assert preset["qo_acc"] > 0.5
    assert any(re.match(rf"\s+recipeqa\s+learned\s+{100 * preset['qo_acc']:.1f}%", ln) for ln in lines)


def test_learned_probe_in_table_rows_and_plot(report):
    """Every dataset has the learned probe's figures: overall and test split inside their intervals,
    the test questions a subset of the scored ones; the table shows them with the interval; one
    adversaries plot per task."""
    from features.diagnostics.report import setting_sort_key
    con, res, out = report["con"], report["res"], report["out"]
    rows = con.execute("""SELECT n_scored, chance, qo_acc, qo_ci_low, qo_ci_high, qo_n_test, qo_test_acc,
                                 qo_test_ci_low, qo_test_ci_high FROM bias_metrics""").fetchall()
    assert len(rows) == res["n_datasets"]
    for ns, chance, acc, lo, hi, nt, tacc, tlo, thi in rows:
        assert chance == 0.25 and lo <= acc <= hi and 0 <= nt < ns
        if nt:
            assert tlo <= tacc <= thi and thi - tlo >= hi - lo  # fewer questions, wider interval
        else:
            assert tacc is None and tlo is None and thi is None
    assert any(r[5] for r in rows)                              # the small world has some test recipes
    for task, info in res["tasks"].items():
        assert f"adversaries_{task}.png" in info["plots"] and (out / f"adversaries_{task}.png").is_file()
        for row, metrics in zip(info["table"], sorted(info["rows"], key=setting_sort_key)):
            assert re.fullmatch(r"\d+\.\d% \[\d+\.\d, \d+\.\d\]", row["learned probe (95% CI)"])
            test = row["learned probe, test split (95% CI)"]
            assert re.fullmatch(r"\d+\.\d% \[\d+\.\d, \d+\.\d\] n=\d+", test) or \
                (test == "–" and metrics["qo_n_test"] == 0)


def test_ordering_by_the_best_adversary():
    """The learned probe ranks unless the distance probe or the centre rule reads higher; missing
    figures last."""
    from features.diagnostics.report import ordering_by_probe
    rows = [{"dataset_id": "a", "qo_acc": 0.4, "probe_acc": 0.6}, {"dataset_id": "b", "qo_acc": 0.8, "probe_acc": 0.3},
            {"dataset_id": "c", "qo_acc": None, "probe_acc": 0.5},
            {"dataset_id": "d", "qo_acc": None, "probe_acc": None},
            {"dataset_id": "e", "qo_acc": 0.7, "probe_acc": 0.2},
            {"dataset_id": "f", "qo_acc": 0.3, "probe_acc": 0.3, "centre_rule_acc": 0.75}]
    assert [r["dataset_id"] for r in ordering_by_probe(rows)] == ["b", "f", "e", "a", "c", "d"]
    # the look probe counts too, and the figure shown is the one that ranks, with its adversary's name
    from features.diagnostics.report import best_adversary
    rows.append({"dataset_id": "g", "qo_acc": 0.25, "probe_acc": 0.2, "look_acc": 0.9})
    assert [r["dataset_id"] for r in ordering_by_probe(rows)][:2] == ["g", "b"]
    assert best_adversary(rows[-1]) == (0.9, "look probe") and best_adversary(rows[3]) == (None, None)
    assert best_adversary(rows[5]) == (0.75, "centre rule")


def test_report_is_deterministic_and_rerun_replaces_rows(report, tmp_path):
    from features.diagnostics.report import build_report
    con, paths = report["con"], report["paths"]
    ids = [s["dataset_id"] for s in report["summaries"] if s["task"] == "visual_cloze"]
    kw = {"lance_uri": paths.lance, "progress": False, "generated_at": "2026-01-02", "commit": "0123456789ab"}
    a = build_report(con, tmp_path / "a", ids, **kw)
    build_report(con, tmp_path / "b", ids, **kw)
    for name in ["index.html"] + [Path(p).name for p in a["images"]]:
        assert hashlib.sha256((tmp_path / "a" / name).read_bytes()).digest() == \
            hashlib.sha256((tmp_path / "b" / name).read_bytes()).digest(), name
    assert set(a["tasks"]) == {"visual_cloze"}
    n = con.execute("SELECT count(*) FROM bias_metrics").fetchall()[0][0]
    assert n == report["res"]["n_datasets"]


@pytest.mark.slow      # the bench runs each part both ways (~16 s)
def test_bench_report_home_times_each_part_both_ways_and_finds_them_the_same(report, tmp_path, monkeypatch):
    """`mrqa bench report-home`: the words probe and the plots (this home has no photo files: the look probe
    says so) in turn and in 2 processes, each line with both times, the ratio and "the same" (the words
    probe's figures; every PNG byte for byte and every panel's labels, as `build_report` draws them with
    `draw_plots`); then both parts with each pool started anew against in processes kept for both, the same
    figures and bytes; bad input is one line, rc 2."""
    from typer.testing import CliRunner

    from features.diagnostics.report_bench import bench_report_home
    from flows.cli import app
    con, paths = report["con"], report["paths"]
    lines = list(bench_report_home(con, paths.home, paths.lance, workers=2))
    timed = [x for x in lines if " in turn " in x]
    assert [x.split(" in turn ")[0].strip() for x in timed] == ["words probe (linear and trees)",
                                                                 f"the report's {len(report['res']['images'])} plots"]
    assert all(x.endswith("the same") and "2 processes" in x for x in timed), lines
    assert any(x.startswith("look probe: no photo readable") for x in lines), lines
    kept = [x for x in lines if x.startswith("probes and plots, pools anew")]     # as the report runs them
    assert len(kept) == 1 and "kept processes" in kept[0] and kept[0].endswith("the same"), lines
    with pytest.raises(ValueError, match="--workers must be 2 or more"):
        list(bench_report_home(con, paths.home, paths.lance, workers=1))
    monkeypatch.setenv("MRQA_HOME", str(tmp_path / "empty"))
    r = CliRunner().invoke(app, ["bench", "report-home"])
    assert r.exit_code == 2 and "no warehouse at" in r.output and "run `mrqa demo`" in r.output, r.output


def test_bias_metrics_are_the_same_on_one_or_several_threads(report):
    """The probes run on worker threads while this thread reads the next dataset: the rows, their
    order and every figure are those of a one-thread run."""
    from features.diagnostics.bias import compute_bias_metrics
    con, paths = report["con"], report["paths"]
    one = compute_bias_metrics(con, lance_uri=paths.lance, progress=False, workers=1)
    three = compute_bias_metrics(con, lance_uri=paths.lance, progress=False, workers=3)
    assert [r["dataset_id"] for r in one] == [r["dataset_id"] for r in three]
    assert len(one) == report["res"]["n_datasets"] and any(r["qo_acc"] is not None for r in one)
    assert one == three


def test_no_vectors_is_refused_and_the_stored_figures_stay(report, tmp_path, monkeypatch):
    """A home whose feature store is gone (no vectors of the datasets' encoder): the report stops with what
    to do instead of storing blank figures over the real ones; `--with-vectors` exports refuse before they
    replace anything; and a path the CLI cannot write is one line, not a traceback."""
    from typer.testing import CliRunner

    from features.datasets.export import export_parquet
    from features.diagnostics.report import build_report
    from flows.cli import app
    con = report["con"]
    ids = [r[0] for r in con.execute("SELECT dataset_id FROM datasets ORDER BY 1").fetchall()][:3]
    before = con.execute("SELECT * EXCLUDE (computed_at) FROM bias_metrics ORDER BY dataset_id").fetchall()
    with pytest.raises(LookupError, match="run `mrqa embed`"):
        build_report(con, tmp_path / "r", ids, lance_uri=str(tmp_path / "nolance"), progress=False)
    assert con.execute("SELECT * EXCLUDE (computed_at) FROM bias_metrics ORDER BY dataset_id").fetchall() == before
    old = tmp_path / "old-export"
    export_parquet(con, ids[:1], old)
    listing = sorted(p.relative_to(old) for p in old.rglob("*"))
    with pytest.raises(LookupError, match="--with-vectors: no image vectors"):
        export_parquet(con, ids[:1], old, with_vectors=True, lance_uri=str(tmp_path / "nolance"))
    assert sorted(p.relative_to(old) for p in old.rglob("*")) == listing      # the old export is untouched
    monkeypatch.setenv("MRQA_HOME", str(report["paths"].home))
    con.execute("CHECKPOINT")
    r = CliRunner().invoke(app, ["--no-prefect", "export", "--dataset", ids[0], "--out", "/proc/mrqa-x"])
    assert r.exit_code == 2 and "cannot write an export next to /proc/mrqa-x" in r.output and "Traceback" not in \
        r.output, r.output


def test_unknown_dataset_or_foreign_out_folder_is_a_clear_error(report, tmp_path):
    from features.diagnostics.report import build_report
    with pytest.raises(ValueError, match="unknown dataset"):
        build_report(report["con"], tmp_path / "x", ["no-such-dataset"], progress=False)
    keep = tmp_path / "mine"
    keep.mkdir()
    (keep / "notes.txt").write_text("precious")
    ids = [report["summaries"][0]["dataset_id"]]
    with pytest.raises(ValueError, match="refusing to replace"):
        build_report(report["con"], keep, ids, lance_uri=report["paths"].lance, progress=False)
    assert (keep / "notes.txt").read_text() == "precious"


# ----------------------------------------------------------------------------- in a browser

PROBE = """<script>
window.addEventListener('load', function () {
  var imgs = Array.prototype.map.call(document.images, function (i) {
    return {src: i.getAttribute('src'), w: i.naturalWidth, h: i.naturalHeight, done: i.complete}; });
  var tables = Array.prototype.map.call(document.querySelectorAll('table'), function (t) {
    return t.querySelectorAll('tbody tr').length; });
  var header = document.getElementById('report-header');
  var figures = Array.prototype.map.call(document.querySelectorAll('figure'), function (f) {
    return JSON.parse(f.getAttribute('data-axes')); });
  var pre = document.createElement('pre'); pre.id = 'probe-result';
  pre.textContent = JSON.stringify({images: imgs, tables: tables, figures: figures,
                                    header: header ? header.innerText : null});
  document.body.appendChild(pre);
});
</script>"""


def _chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
           f"--user-data-dir={profile}", "--virtual-time-budget=5000", *args]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(CHROMIUM is None, reason="needs headless Chromium (Debian package `chromium`: "
                                              "apt-get install -y chromium)")
def test_report_opens_in_a_browser(report, tmp_path):
    """The report's own page plus a load-time probe script, in a copy of the report folder: every
    table has rows and every image decoded (naturalWidth > 0). Also writes a screenshot."""
    site = tmp_path / "site"
    shutil.copytree(report["out"], site)
    page = (site / "index.html").read_text()
    (site / "index.html").write_text(page.replace("</body>", PROBE + "</body>"))
    proc = _chromium(["--dump-dom", (site / "index.html").as_uri()], tmp_path / "profile")
    m = re.search(r'<pre id="probe-result">(.*?)</pre>', proc.stdout, re.DOTALL)
    assert m, f"no probe result in the DOM; stderr: {proc.stderr[-2000:]}"
    result = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert len(result["tables"]) == 9 and all(n > 0 for n in result["tables"])     # 4 tasks x 2 and the cue
    n_png = len(list(report["out"].glob("*.png")))
    assert len(result["images"]) == n_png > 0
    assert len(result["figures"]) == n_png and all(a["x"] and a["y"] for f in result["figures"] for a in f)
    for needle in ("date", "git commit", ENC, "recipes", "steps", "images", "questions", "README.md"):
        assert needle in result["header"], needle
    for img in result["images"]:
        assert img["done"] and img["w"] > 0 and img["h"] > 0, img
    shot = report["paths"].reports / "latest-screenshot.png"
    proc = _chromium([f"--screenshot={shot}", "--window-size=1300,1800",
                      (report["out"] / "index.html").as_uri()], tmp_path / "profile2")
    assert shot.is_file() and shot.stat().st_size > 10_000, proc.stderr[-2000:]
    from PIL import Image
    with Image.open(shot) as im:
        arr = np.asarray(im.convert("L"))
    assert arr.std() > 10                      # not a blank page
    keep = os.environ.get("MRQA_REPORT_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


def test_generate_summary_probe_equals_the_report(report):
    """The learned-probe figures `mrqa generate` prints are the ones the report stores (same seed)."""
    from features.diagnostics.bias import learned_probe_rows
    from features.diagnostics.report import QO_KEYS
    from flows.generate import format_probe_line
    con = report["con"]
    ids = [s["dataset_id"] for s in report["summaries"] if s["task"] in ("visual_ordering", "visual_coherence")]
    got = learned_probe_rows(con, ids, lance_uri=report["paths"].lance, seed=0)
    stored = {r[0]: dict(zip(QO_KEYS, r[1:])) for r in con.execute(
        f"SELECT dataset_id, {', '.join(QO_KEYS)} FROM bias_metrics").fetchall()}
    assert set(got) == set(ids)
    for did, row in got.items():
        assert row == pytest.approx(stored[did])
        line = format_probe_line({"dataset_id": did, **row})
        assert did in line and "learned question-only probe" in line
        if row["qo_test_acc"] is not None:
            assert f"test split {100 * row['qo_test_acc']:.1f}% [" in line and "chance 25.0%" in line


def test_demo_summary_shows_the_learned_probe(report):
    """The demo's printed bias table carries the learned probe's test-split figure of every setting."""
    from flows.demo import demo_digest, format_digest
    res = report["res"]
    summary = {"stages": [{"stage": "report", "status": "completed", "seconds": 1.0, "cpu_s": 0.5,
                           "summary": res}], "total_s": 1.0}
    text = format_digest(demo_digest(summary))
    assert "learned question-only probe on the test split [95% CI]" in text
    for info in res["tasks"].values():
        for row in info["table"]:
            assert f"learned {row['learned probe, test split (95% CI)']}" in text



UNCHECKED = "no learned GM3C question-only figure"


def _gm3c_check(report, record: bool = True, visual: bool = False) -> dict:
    """A real `mrqa af-check --dataset ... --record` (tiny models, one seed, 2 folds) of the datasets of one
    task that only lack a learned GM3C question-only figure for the reading gate; its af_checks rows are
    taken out again by `_uncheck` (the module's other tests read the card without them)."""
    from etl.warehouse import connect
    from features.datasets.card import reading_gate
    from flows.af_pool import af_check_flow
    con = report["con"]
    ids = [r[0] for r in con.execute("SELECT dataset_id FROM datasets ORDER BY 1").fetchall()]
    _, why = reading_gate(con, ids)
    task = dict(con.execute("SELECT dataset_id, task FROM datasets").fetchall())
    waiting = [d for d, reason in why.items() if reason.startswith(UNCHECKED)
               and (not visual or task[d].startswith("visual_"))]
    assert waiting, "the report's figures pass some dataset the gate then holds back"
    pick = max(sorted({task[d] for d in waiting}), key=lambda t: sum(task[d] == t for d in waiting))
    con.close()
    try:
        return af_check_flow.fn(datasets=tuple(d for d in waiting if task[d] == pick), seeds=(0,), folds=2,
                                size="tiny", record=record)
    finally:
        report["con"] = connect(report["paths"])


def _uncheck(report) -> None:
    report["con"].execute("DELETE FROM af_checks")
    report["con"].execute("DELETE FROM reading_checks")


def test_a_visual_dataset_needs_the_pixel_probe(report):
    """A visual dataset every other question-only figure passes is held back until the pixel probe (a CNN on
    its photos) is recorded at or below the bound, and by its figure above it; the train stage's check
    (`pixel_check_waiting`) runs the real probe on exactly the visual datasets held back for want of it and
    records them, after which they wait for a reading check only."""
    from planted_photos import write_photos

    from etl.warehouse import connect
    from features.datasets.card import NOT_READ_CHECKED, READING_BOUND, UNCHECKED_PIXEL, reading_gate
    from flows.train import pixel_check_waiting
    home = report["paths"].home
    paths = [home / p for (p,) in report["con"].execute("SELECT path FROM images WHERE status = 'ok'").fetchall()]
    try:
        chk = _gm3c_check(report, visual=True)
        con = report["con"]
        ids = [r[0] for r in con.execute("SELECT dataset_id FROM datasets ORDER BY 1").fetchall()]
        passed = {r["dataset_id"] for r in chk["datasets"]
                  if max(r["accuracy"], r["tree"]["accuracy"] or 0) <= READING_BOUND}
        why = reading_gate(con, ids)[1]
        heard = sorted(d for d in passed if why.get(d, "").startswith(NOT_READ_CHECKED))
        assert heard, "the fixture has a visual dataset that waits for its reading check only"
        d = heard[0]
        con.execute("DELETE FROM pixel_checks WHERE dataset_id = ?", [d])
        assert reading_gate(con, ids)[1][d] == f"{UNCHECKED_PIXEL}: run `mrqa pixel-probe --dataset {d} --record`"
        _plant_pixel(con, {d: 0.5})
        assert reading_gate(con, ids)[1][d] == "pixel probe (a CNN on the photos) 50.0% > 35.0%"
        con.execute("DELETE FROM pixel_checks WHERE list_contains(?, dataset_id)", [heard])
        write_photos(con, home, planted=False)
        con.close()
        got = pixel_check_waiting(report["paths"], seed=0, side=32)
        report["con"] = con = connect(report["paths"])
        assert sorted(got) == heard and all(0 <= a <= 1 for a in got.values())
        rows = dict(con.execute("SELECT dataset_id, n FROM pixel_checks WHERE list_contains(?, dataset_id)",
                                [heard]).fetchall())
        assert sorted(rows) == heard and min(rows.values()) > 0
        why = reading_gate(con, ids)[1]
        for h in heard:
            assert why[h].startswith(NOT_READ_CHECKED) or why[h].startswith("pixel probe"), why[h]
    finally:
        for p in paths:
            p.unlink(missing_ok=True)
        report["con"].execute("DELETE FROM pixel_checks")
        _plant_pixel(report["con"], {s["dataset_id"]: PIXEL_AT_CHANCE for s in report["summaries"]
                                     if s["task"] != "textual_cloze"})
        _uncheck(report)


# the reading check's models at a test's size (the pipeline's: READING_READER, READING_QUESTION_ONLY)
TINY_READER = {"size": "tiny", "layers": 1, "max_epochs": 2}
TINY_QUESTION_ONLY = {"size": "tiny", "max_epochs": 2, "patience": 1}


def _reading_check(report, ids: list[str]) -> dict:
    """A real reading check (flows/train.py reading_check, tiny models), recorded, of the datasets `ids`."""
    from etl.warehouse import connect
    from flows.train import reading_check
    report["con"].close()
    try:
        return reading_check(report["paths"], datasets=tuple(ids), record=True, workers=1, reader=TINY_READER,
                             question_only=TINY_QUESTION_ONLY)
    finally:
        report["con"] = connect(report["paths"])


def _plant(report, figures: dict[str, tuple[float, float, float]]) -> None:
    """reading_checks rows with the given (reader, question-only, reader with another recipe's steps), written
    by the function the reading check records with, for the gate's bounds."""
    from etl.warehouse import connect
    from flows.train import record_reading_checks
    task = dict(report["con"].execute("SELECT dataset_id, task FROM datasets").fetchall())
    table = [{"dataset_id": d, "task": task[d], "n_test": 10, "reader": r, "question_only": q,
              "reader_other_recipe": o} for d, (r, q, o) in figures.items()]
    report["con"].close()
    try:
        record_reading_checks(report["paths"], table, 0, TINY_READER, TINY_QUESTION_ONLY)
    finally:
        report["con"] = connect(report["paths"])


def test_the_reading_gate_needs_a_learned_question_only_model_and_a_reader(report):
    """The report's probes alone do not clear a dataset for `mrqa export --reading-only`: one they pass is
    held back until `mrqa af-check --dataset ... --record` puts a GM3C question-only figure beside them, and
    is then held back (if that figure is at or below the bound) until `mrqa reading-check --record` shows a
    reader leading the learned question-only model by 20 points and losing 15 with another recipe's steps;
    it passes exactly when the reading check's figures meet those bounds."""
    from features.datasets.card import NOT_READ_CHECKED, READING_ABLATION, READING_BOUND, READING_LEAD, reading_gate
    con = report["con"]
    ids = [r[0] for r in con.execute("SELECT dataset_id FROM datasets ORDER BY 1").fetchall()]
    ok0, why0 = reading_gate(con, ids)
    assert ok0 == [], "no dataset of the fixture was filtered against GM3C or checked by it"
    try:
        chk = _gm3c_check(report)
        assert chk["recorded"] == len(chk["datasets"]) > 0
        ok1, why1 = reading_gate(report["con"], ids)
        assert ok1 == [], "a GM3C figure alone clears no dataset: the reading check is missing"
        heard = []
        for r in chk["datasets"]:
            d, acc = r["dataset_id"], r["accuracy"]
            assert why0[d].startswith(UNCHECKED) and "mrqa af-check --dataset" in why0[d]
            if acc <= READING_BOUND:
                assert why1[d].startswith(NOT_READ_CHECKED) and f"mrqa reading-check --dataset {d} --record" in why1[d]
                heard.append(d)
            else:
                assert why1[d] == f"GM3C question-only (af-check) {100 * acc:.1f}% > 35.0%"
        assert heard, "the tiny GM3C check hears some dataset of the fixture at or below the bound"
        from flows.train import waiting_for_reading
        assert waiting_for_reading(report["con"], 0) == sorted(heard)
        res = _reading_check(report, heard)
        assert res["recorded"] == len(heard) and [r["dataset_id"] for r in res["settings"]] == sorted(heard)
        ok, why = reading_gate(report["con"], ids)
        for r in res["settings"]:
            d = r["dataset_id"]
            reads = (r["lead"] >= READING_LEAD - 1e-9
                     and r["reader"] - r["reader_other_recipe"] >= READING_ABLATION - 1e-9)
            assert (d in ok) == reads, (d, r, why.get(d))
            if not reads:
                assert "(reading check" in why[d]
        assert set(ok) <= set(heard)
        others = set(ids) - set(heard)
        assert {d: w for d, w in why.items() if d in others} == {d: w for d, w in why1.items() if d in others}
    finally:
        _uncheck(report)


def test_the_pipelines_reading_check_reads_what_the_gate_holds_back_for_want_of_it(report):
    """`waiting` (the demo's train stage, `mrqa reading-check --waiting`): the check also reads every dataset
    the reading-only export holds back only for want of a reading check (here, with no AF settings, only
    those), pooled per task, and records them: afterwards none waits."""
    from etl.warehouse import connect
    from flows.train import reading_check, waiting_for_reading
    try:
        _gm3c_check(report)
        held = waiting_for_reading(report["con"], 0)
        assert held
        report["con"].close()
        try:
            res = reading_check(report["paths"], seed=0, record=True, waiting=True, workers=1, reader=TINY_READER,
                                question_only=TINY_QUESTION_ONLY)
        finally:
            report["con"] = connect(report["paths"])
        assert sorted(r["dataset_id"] for r in res["settings"]) == held and res["recorded"] == len(held)
        assert waiting_for_reading(report["con"], 0) == []
        assert reading_check(report["paths"], seed=0, workers=1)["skipped"].endswith("(seed 0)")
    finally:
        _uncheck(report)


def test_a_check_of_another_size_is_run_again_where_the_gate_would_admit_on_it(report):
    """With `--adversary-size paper` the train stage's check (flows/train.py gm3c_check_waiting) also takes the
    AF datasets that the gate admits, or holds back only for want of a reading check, on a recorded check of
    another size, so the stronger model has its say on every dataset the benchmark may hold; one held back by
    its figure, or checked at that size already, is not taken."""
    from features.datasets.card import READING_BOUND
    from flows.train import _checked_at_another_size
    try:
        chk = _gm3c_check(report)                                   # tiny models
        ids = [r["dataset_id"] for r in chk["datasets"]]
        heard = sorted(r["dataset_id"] for r in chk["datasets"] if r["accuracy"] <= READING_BOUND)
        assert heard
        con = report["con"]
        assert _checked_at_another_size(con, 0, "paper") == []     # no AF dataset among them yet
        con.execute("UPDATE datasets SET setting = setting || '-af' WHERE list_contains(?, dataset_id)", [ids])
        try:
            task = dict(con.execute("SELECT dataset_id, task FROM datasets").fetchall())
            assert _checked_at_another_size(con, 0, "paper") == [(d, task[d]) for d in heard]
            assert _checked_at_another_size(con, 0, "tiny") == []
            assert _checked_at_another_size(con, 1, "paper") == []     # another seed's datasets
        finally:
            con.execute("UPDATE datasets SET setting = left(setting, -3) WHERE list_contains(?, dataset_id)", [ids])
    finally:
        _uncheck(report)


def test_what_an_af_pool_adversary_read_of_its_own_questions_clears_nothing(report):
    """A dataset `mrqa af-pool` filtered is held back until an independent GM3C check is recorded, however
    little its own adversaries read of the questions they chose to keep (they chose them)."""
    from features.datasets.card import UNCHECKED_GM3C, reading_gate
    con = report["con"]
    ids = [r[0] for r in con.execute("SELECT dataset_id FROM datasets ORDER BY 1").fetchall()]
    _, why = reading_gate(con, ids)
    d = sorted(x for x, w in why.items() if w.startswith(UNCHECKED_GM3C))[0]
    before = con.execute("SELECT params FROM datasets WHERE dataset_id = ?", [d]).fetchall()[0][0]
    try:
        con.execute("UPDATE datasets SET params = json_merge_patch(params, ?) WHERE dataset_id = ?",
                    ['{"af_pooled": {"adversary": "GM3C question_only, pooled", "oof_question_only_acc_kept": 0.2}}',
                     d])
        ok, why = reading_gate(con, [d])
        assert ok == [] and why[d] == (f"{UNCHECKED_GM3C}: run `mrqa af-check --dataset {d} --record` (its af-pool "
                                       "adversary's own figure, 20.0%, was read on the questions it chose to keep)")
    finally:
        con.execute("UPDATE datasets SET params = ? WHERE dataset_id = ?", [before, d])


def test_the_reading_gate_bounds_on_recorded_reading_checks(report):
    """At the bounds: a lead of exactly 20 points and a cost of exactly 15 pass; 19.9 points of lead or 14.9
    of cost do not, each with its reason; the check's question-only figure on its test split only sets the
    lead (the 35% bound is judged on every question); a row measured on other content (a stale hash) is
    not read."""
    from features.datasets.card import NOT_READ_CHECKED, reading_gate
    try:
        _gm3c_check(report)
        con = report["con"]
        ids = [r[0] for r in con.execute("SELECT dataset_id FROM datasets ORDER BY 1").fetchall()]
        _, why = reading_gate(con, ids)
        waiting = sorted(d for d, w in why.items() if w.startswith(NOT_READ_CHECKED))
        assert len(waiting) >= 2, "the tiny GM3C check hears two datasets or more at or below the bound"
        cases = [(0.55, 0.35, 0.40, None), (0.549, 0.35, 0.40, "the reader leads question-only by 19.9 points < 20"),
                 (0.70, 0.36, 0.40, None),
                 (0.55, 0.30, 0.401, "another recipe's steps cost the reader 14.9 points < 15")]
        picked = [(d, c) for d, c in zip(waiting * len(cases), cases)][:len(cases)]
        for d, (r, q, o, reason) in picked:
            _plant(report, {d: (r, q, o)})
            ok, why = reading_gate(report["con"], [d])
            if reason is None:
                assert ok == [d] and why == {}
            else:
                assert ok == [] and why[d].startswith(reason) and why[d].endswith("(reading check, 10 test questions)")
        d = picked[0][0]
        _plant(report, {d: (0.55, 0.35, 0.40)})
        report["con"].execute("UPDATE reading_checks SET content_sha256 = 'stale' WHERE dataset_id = ?", [d])
        ok, why = reading_gate(report["con"], [d])
        assert ok == [] and why[d].startswith(NOT_READ_CHECKED)
    finally:
        _uncheck(report)


def test_demo_summary_names_the_reading_benchmark(report):
    """The report stage's summary carries what `mrqa export --reading-only` would export, and the demo
    prints it: the count, what is left out, and each passing dataset's setting under its task."""
    from features.datasets.card import NOT_READ_CHECKED, reading_gate
    from flows.demo import demo_digest, format_digest
    from flows.pipeline import _report_summary
    try:
        _gm3c_check(report)
        con = report["con"]
        ids = [r[0] for r in con.execute("SELECT dataset_id FROM datasets ORDER BY 1").fetchall()]
        _, why = reading_gate(con, ids)
        _plant(report, {d: (0.8, 0.3, 0.4) for d, w in why.items() if w.startswith(NOT_READ_CHECKED)})
        ok, why = reading_gate(report["con"], ids)
        rep = _report_summary(report["res"], report["paths"])
    finally:
        _uncheck(report)
    ro = rep["reading_only"]
    assert ro["datasets"] == ok and ro["left_out"] == len(why) and ok and why
    # each left-out dataset counted once, under the figure (or check) that holds it back
    assert sum(ro["reasons"].values()) == len(why)
    assert all(any(w.startswith(k) for w in why.values()) for k in ro["reasons"])
    text = format_digest(demo_digest({"stages": [{"stage": "report", "status": "completed", "seconds": 1.0,
                                                  "cpu_s": 0.5, "summary": rep}], "total_s": 1.0}))
    assert f"{len(ok)} datasets, {len(why)} left out" in text
    lines = text.split("reading benchmark")[1].splitlines()[1:]
    for did in ok:
        prefix, rest = did.split("-", 1)
        assert any(ln.split()[0] == prefix and rest.rsplit("-s", 1)[0] in ln.split()[1:] for ln in lines), did
    # none passing: the summary says what holds them back, the most common first
    none = {**rep, "reading_only": {"datasets": [], "left_out": 5,
                                    "reasons": {"look probe (pixels)": 3, "distance probe": 2}}}
    text = format_digest(demo_digest({"stages": [{"stage": "report", "status": "completed", "seconds": 1.0,
                                                  "cpu_s": 0.5, "summary": none}], "total_s": 1.0}))
    assert "0 datasets, 5 left out" in text
    assert "none passes; what holds them back first: look probe (pixels): 3, distance probe: 2" in text
    assert "(`--no-textual-cloze-pooled`): a plain `make demo` makes it" in text   # where the benchmark comes from
    gen = {"stage": "generate", "status": "completed", "seconds": 1.0, "cpu_s": 0.5,
           "summary": {"textual_cloze_pooled": {"tc-0-1-0-af-s0-x": {"dropped": 1, "kept": 3}}}}
    text = format_digest(demo_digest({"stages": [gen, {"stage": "report", "status": "completed", "seconds": 1.0,
                                                       "cpu_s": 0.5, "summary": none}], "total_s": 1.0}))
    assert "none passes" in text and "--no-textual-cloze-pooled" not in text   # it ran: no hint


# ----------------------------------------------------------------------------- the page, parsed

class _Page(HTMLParser):
    """The header's <dd> texts and links, the figures' data-axes, the tables' header and body cells."""

    def __init__(self):
        super().__init__()
        self.header, self.links, self.figures, self.tables = {}, [], [], []
        self._in_header, self._dd, self._cell, self._row = False, None, None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "header":
            self._in_header = True
        elif tag == "dd" and self._in_header:
            self._dd = a.get("class")
            self.header[self._dd] = ""
        elif tag == "a" and self._in_header:
            self.links.append(a["href"])
        elif tag == "figure":
            self.figures.append(json.loads(a["data-axes"]))
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self._row = []
            self.tables[-1].append(self._row)
        elif tag in ("td", "th"):
            self._cell = ""

    def handle_endtag(self, tag):
        if tag == "header":
            self._in_header = False
        elif tag == "dd":
            self._dd = None
        elif tag in ("td", "th") and self._cell is not None:
            self._row.append(self._cell)
            self._cell = None

    def handle_data(self, data):
        if self._dd is not None:
            self.header[self._dd] += data
        if self._cell is not None:
            self._cell += data


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text())
    return page


def test_header_says_what_when_which_code_encoder_corpus_and_links_the_export(report):
    con, out, paths = report["con"], report["out"], report["paths"]
    page = _parse(out / "index.html")
    assert set(page.header) == {"date", "code", "encoder", "corpus", "export", "measured"}
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", page.header["date"])
    assert re.fullmatch(r"git commit ([0-9a-f]{12}( \+ uncommitted changes)?|unknown)", page.header["code"])
    from features.diagnostics.report import short_encoder
    assert page.header["encoder"] == f"{short_encoder(ENC)} ({ENC})"
    recipes, steps = con.execute("SELECT count(DISTINCT r.recipe_id), count(s.recipe_id) FROM recipes r "
                                 "LEFT JOIN steps s USING (recipe_id) WHERE r.status = 'ok'").fetchall()[0]
    images = con.execute("SELECT count(*) FROM images i JOIN recipes r USING (recipe_id) "
                         "WHERE i.status = 'ok' AND r.status = 'ok'").fetchall()[0][0]
    questions = sum(s["n_questions"] for s in report["summaries"])
    assert page.header["corpus"] == (f"{recipes:,d} recipes, {steps:,d} steps, {images:,d} images; "
                                     f"{questions:,d} questions in {len(report['summaries'])} datasets")
    assert min(recipes, steps, images, questions) > 0
    export, card = page.links                                   # relative links that resolve
    assert (out / export).resolve() == (paths.exports / "all").resolve()
    assert (out / card).resolve() == (paths.exports / "all" / "README.md").resolve() and (out / card).is_file()
    assert "Hasty Student" in page.header["measured"] and "Wilson" in page.header["measured"]


def _older_generation(export: Path) -> None:
    """Make `export` hold an older generation of its first dataset: the answers of one of its files moved."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    f = sorted((export / "questions").rglob("*.parquet"))[0]
    t = pq.read_table(f)
    moved = pa.array([(a + 1) % 4 for a in t["answer"].to_pylist()], t.schema.field("answer").type)
    pq.write_table(t.set_column(t.schema.get_field_index("answer"), "answer", moved), f)


def test_the_header_links_the_export_holding_most_and_says_what_is_stale(report, tmp_path):
    """Each export is checked against the warehouse (its questions' content hashes): the report links the one
    holding the most reported datasets as they are (`all` first on a tie), says how many and what of it is
    stale (here a dataset whose answers moved, as one generated or filtered again after the export), passes
    over an incomplete one and one being written, and with none holding a dataset as it is says so."""
    from features.datasets.export import WRITING_PREFIX, export_freshness, export_parquet
    from features.diagnostics.report import find_export, render_header
    con, ids = report["con"], [s["dataset_id"] for s in report["summaries"]]
    n = len(ids)
    exports = tmp_path / "exports"
    export_parquet(con, ids, exports / "all")
    export_parquet(con, ids[:1], exports / "one")
    shutil.copytree(exports / "all", exports / f"{WRITING_PREFIX}all.123")
    assert find_export(con, exports, ids) == (exports / "all", f"holds {n} of the {n} datasets reported as they "
                                                                "are; passed over: one (1)")
    _older_generation(exports / "all")
    fr = export_freshness(con, exports / "all")
    assert len(fr["changed"]) == 1 and not fr["gone"] and not fr["missing"] and len(fr["current"]) == n - 1
    got, note = find_export(con, exports, ids)
    assert got == exports / "all" and note.startswith(f"holds {n - 1} of the {n} datasets")
    assert f"stale: 1 generated or filtered again since ({fr['changed'][0]})" in note   # named: which to re-export
    assert "passed over: one (1)" in note
    (exports / "all" / "steps.parquet").unlink()                    # incomplete: never linked
    got, note = find_export(con, exports, ids)
    assert got == exports / "one" and ("all is incomplete (1 generated or filtered again since "
                                       f"({fr['changed'][0]}); no steps.parquet)") in note
    _older_generation(exports / "one")
    got, note = find_export(con, exports, ids)
    assert got is None and note.startswith("none current: all is incomplete") and "one is stale (1 generated" in note
    header = {"date": "d", "commit": "c", "encoders": [], "measured": "m", "export": {"path": None, "note": note},
              "corpus": {"recipes": 1, "steps": 1, "images": 1, "questions": 1, "datasets": 1}}
    assert "none current: all is incomplete" in render_header(header) and "<a href" not in render_header(header)
    given, note = find_export(con, exports, ids, given=exports / "one")      # asked for: linked, said stale
    assert given == exports / "one" and note.startswith(f"holds 0 of the {n}") and "stale: 1 generated" in note


def test_every_plot_has_axis_labels(report):
    """Every figure of the page lists its panels' axis labels, taken from the matplotlib axes when the
    PNG was written (save_plot refuses a panel without both); the histogram grids included."""
    out, res = report["out"], report["res"]
    page = _parse(out / "index.html")
    n_png = len(list(out.glob("*.png")))
    assert len(page.figures) == n_png > 0
    for axes in page.figures:
        assert axes and all(a["x"].strip() and a["y"].strip() for a in axes), axes
    for task, info in res["tasks"].items():
        hist = info["axes"][f"hist_{task}.png"]
        assert len(hist) == len(info["rows"])                  # one labelled panel per setting of the grid
        assert all(a["y"] == "density (per unit distance)" and "distance" in a["x"] for a in hist)
        assert {a["y"] for a in info["axes"][f"splits_{task}.png"]} == {"accuracy (%)"}


def test_save_plot_refuses_a_panel_without_axis_labels(tmp_path):
    from matplotlib.figure import Figure

    from features.diagnostics.report import save_plot
    fig = Figure()
    ax = fig.add_subplot(1, 1, 1)
    ax.plot([0, 1], [0, 1])
    ax.set_xlabel("x only")
    with pytest.raises(ValueError, match="without axis labels"):
        save_plot(fig, tmp_path / "p.png")
    assert not (tmp_path / "p.png").exists()
    ax.set_ylabel("y")
    assert save_plot(fig, tmp_path / "p.png").axes == [{"title": "", "x": "x only", "y": "y"}]


def test_per_split_figures_with_wilson_intervals(report):
    """bias_metrics.split_metrics: per split the question counts add up, each accuracy lies in its
    Wilson interval (recomputed with scipy), `all` equals the overall figures; the page shows a row per
    setting and split."""
    from scipy.stats import binomtest
    con, res = report["con"], report["res"]
    rows = con.execute("SELECT dataset_id, n_scored, hasty_student_acc, probe_acc, qo_acc, qo_n_test, "
                       "split_metrics FROM bias_metrics").fetchall()
    assert len(rows) == res["n_datasets"]
    splits_seen = set()
    for did, n_scored, hasty, probe, qo, qo_n_test, sm in rows:
        sm = json.loads(sm)
        by = {e["split"]: e for e in sm}
        assert list(by)[-1] == "all" and by["all"]["n"] == n_scored
        assert sum(e["n"] for s, e in by.items() if s != "all") == n_scored
        splits_seen |= set(by) - {"all"}
        assert by["all"]["hasty_student_acc"] == pytest.approx(hasty, abs=1e-4)
        assert by["all"]["probe_acc"] == pytest.approx(probe, abs=1e-4)
        assert by["all"]["qo_acc"] == pytest.approx(qo, abs=1e-4)
        assert by.get("test", {"qo_n": 0})["qo_n"] == qo_n_test
        for e in sm:
            for m in ("hasty_student", "probe", "qo"):
                acc, n, ci = e[f"{m}_acc"], e[f"{m}_n"], e[f"{m}_ci"]
                assert 0 < n <= e["n"]
                k = round(acc * n)
                ref = binomtest(k, n).proportion_ci(0.95, method="wilson")
                assert ci == pytest.approx([ref.low, ref.high], abs=1e-3), (did, e["split"], m)
                assert ci[0] <= acc <= ci[1]
    assert splits_seen == {"train", "val", "test"}
    page = _parse(report["out"] / "index.html")
    split_tables = [t for t in page.tables if t and "split" in t[0]]
    assert len(split_tables) == 4
    n_rows = sum(len(t) - 1 for t in split_tables)
    assert n_rows == sum(len(json.loads(r[-1])) for r in rows)
    for t in split_tables:
        head = t[0]
        for cells in t[1:]:
            for col in ("Hasty Student (95% Wilson)", "distance probe (95% Wilson)",
                        "learned question-only probe (95% Wilson)"):
                assert re.fullmatch(r"\d+\.\d% \[\d+\.\d, \d+\.\d\]( n=[\d,]+)?", cells[head.index(col)])


def test_encoder_names_in_tables_are_short():
    from features.diagnostics.report import short_encoder
    long_id = "openai-clip-vit-base-patch32-0123456789ab-89abcdef"
    assert short_encoder(long_id) == "openai-clip-vit-base-pa…@012345"
    assert short_encoder("clip-b32-0123456789ab-89abcdef") == "clip-b32@012345"
    assert short_encoder(ENC) == ENC
    other = "x" * 40
    assert len(short_encoder(other)) <= 24 and short_encoder(other) != short_encoder("x" * 41)


def test_card_lists_the_configs_answered_without_reading(report, tmp_path):
    """An export's card, written after the bias figures: "Read before use" lists exactly the configs
    whose context-free figures (question-only probe, Hasty Student, distance probe, centre, closest pair)
    exceed the bound, each with its highest one."""
    from features.datasets.card import CONTEXT_FREE, READING_BOUND
    from features.datasets.export import export_parquet
    con = report["con"]
    ids = [s["dataset_id"] for s in report["summaries"]]
    export_parquet(con, ids, tmp_path / "card")
    text = (tmp_path / "card" / "README.md").read_text()
    config_of = {}
    for ln in text.splitlines():
        cells = [c.strip() for c in ln.split("|")]
        if len(cells) > 3 and cells[2] in ids:
            config_of[cells[2]] = cells[1]
    assert config_of, "the card's config table names the datasets"
    cols = [k for k, _ in CONTEXT_FREE if k not in ("gm3c_qo_acc", "tree_qo_acc", "pixel_acc")]    # the report's
    # (they are test_matched.py's)
    expected = {}
    for did, *vals in con.execute(f"SELECT dataset_id, {', '.join(cols)} FROM bias_metrics").fetchall():
        figs = [v for v in vals if v is not None and v > READING_BOUND]
        if did in config_of and figs:
            expected[config_of[did]] = f"{100 * max(figs):.1f}%"
    section = text.split("## Read before use")[1].split("\n## ")[0] if expected else ""
    listed = {c[1].strip(): c[3].strip() for c in (ln.split("|") for ln in section.splitlines())
              if len(c) == 5 and c[1].strip() not in ("config", "---")}
    assert listed == expected
    assert ("| config | highest context-free figure |" in text) == bool(expected)
    assert expected, "the fixture's preset is answered without reading (Hasty Student well above 35%)"


def test_export_reading_only_leaves_out_what_the_card_would_list(report, tmp_path):
    """`mrqa export --reading-only` exports exactly the datasets whose context-free figures are all at or
    below the bound (and, AF, kept enough) and whose recorded reading check shows reading, names each one
    left out with its worst figure (or the reading check's reason), and the card of what it exported has
    nothing to list under "Read before use"."""
    from typer.testing import CliRunner

    from features.datasets.card import CONTEXT_FREE, NOT_READ_CHECKED, READING_BOUND, reading_gate
    from flows.cli import app
    try:
        chk = _gm3c_check(report)
        _, why = reading_gate(report["con"], sorted(s["dataset_id"] for s in report["summaries"]))
        heard = sorted(d for d, w in why.items() if w.startswith(NOT_READ_CHECKED))
        assert len(heard) >= 2
        reads = {d: (0.8, 0.3, 0.4) for d in heard[1:]} | {heard[0]: (0.45, 0.3, 0.2)}    # one reader too weak
        _plant(report, reads)
        _export_reading_only(report, tmp_path, chk, CONTEXT_FREE, READING_BOUND, reading_gate, CliRunner, app,
                             weak=heard[0])
    finally:
        _uncheck(report)


def _export_reading_only(report, tmp_path, chk, CONTEXT_FREE, READING_BOUND, reading_gate, CliRunner, app, weak):
    con = report["con"]
    ids = sorted(s["dataset_id"] for s in report["summaries"])
    cols = [k for k, _ in CONTEXT_FREE if k not in ("gm3c_qo_acc", "tree_qo_acc", "pixel_acc")]    # the report's
    rows = con.execute(f"SELECT dataset_id, {', '.join(cols)} FROM bias_metrics").fetchall()
    figs = {did: [v for v in vals if v is not None] for did, *vals in rows}
    for r in chk["datasets"]:                                   # and the check's figures, recorded
        figs[r["dataset_id"]] += [r["accuracy"], r["tree"]["accuracy"]]
    checked = {r["dataset_id"] for r in chk["datasets"]}
    has_qo = {did for did, *vals in rows if vals[cols.index("qo_acc")] is not None}
    want = [d for d in ids if d in has_qo and d in checked and max(figs[d]) <= READING_BOUND and d != weak]
    ok, why = reading_gate(con, ids)
    assert ok == want and set(why) == set(ids) - set(want)
    assert want and why, "the fixture has datasets on both sides of the bound"
    assert why[weak] == "the reader leads question-only by 15.0 points < 20 (reading check, 10 test questions)"
    for did, reason in why.items():
        if did == weak:
            continue
        if figs.get(did) and max(figs[did]) > READING_BOUND:
            assert f"{100 * max(figs[did]):.1f}% > 35.0%" in reason, (did, reason)
        elif did in has_qo:
            assert reason.startswith(UNCHECKED), (did, reason)
    out = tmp_path / "reading"
    r = CliRunner().invoke(app, ["--home", str(report["paths"].home), "--no-prefect", "export", "--all",
                                 "--reading-only", "--out", str(out)])
    assert r.exit_code == 0, r.output
    for did in why:
        assert f"left out {did}: " in r.output
    got = json.loads(r.output[r.output.index("{"):])
    assert set(got["left_out"]) == set(why)
    import duckdb
    exported = {d for (d,) in duckdb.sql(f"SELECT DISTINCT dataset_id FROM read_parquet("
                                          f"'{out}/questions/**/*.parquet', hive_partitioning = true)").fetchall()}
    assert exported == set(want)
    card = (out / "README.md").read_text()
    assert "## Read before use" not in card
    listed = card.split("## Left out of this export")[1].split("\n## ")[0]
    for did, reason in why.items():
        assert f"| {did} | {reason} |" in listed
