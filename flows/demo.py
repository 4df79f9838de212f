"""`mrqa demo`: the pipeline flow (flows/pipeline.py) with the sample kitchen's parameters.

build the sample kitchen -> serve it on a free loopback port -> crawl it with the real crawler ->
clean + tokenize -> train the default encoder, embed, neighbours -> generate every dataset -> the
pooled step on the textual cloze AF datasets (flows/af_pool.py; `af_pool`: on the AF visual cloze ones
too) -> competence families -> bias report -> the independent GM3C question-only check of the AF
datasets waiting for one, then the reading check (flows/train.py `reading_check`): a reader of the
recipe against a learned question-only model, and the reader given another recipe's steps. The
visual cloze pooled step is off by default: the look probe reads the sample kitchen's visual datasets
from their pixels either way, and the demo stays within 15 minutes with the textual one, whose
datasets need reading (README). Each stage is a Prefect subflow, timed (wall
and CPU seconds); a re-run skips unchanged stages. `format_digest` is the final summary `mrqa demo`
prints.
"""
from __future__ import annotations

import logging
import time

from prefect import flow

from etl.config import DEMO_RECIPES
from features.diagnostics.background_cue import format_cue
from flows.params import SplitBy
from flows.pipeline import pipeline_flow, stage_summary
from flows.train import with_ci

log = logging.getLogger(__name__)
log.setLevel(logging.INFO)      # stage progress shows even under Prefect's WARNING root logger
DEFAULT_RECIPES = DEMO_RECIPES


@flow(name="demo", log_prints=True)
def demo_flow(recipes: int = DEFAULT_RECIPES, seed: int = 0, workers: int | None = None,
              crawl_workers: int = 8, train: bool = True, af_pool: bool = False,
              dask_address: str | None = None, matched_coherence: bool = False,
              textual_cloze_pooled: bool = True, redrawn: bool = False, split_by: SplitBy | None = None,
              author_coherence: bool = False, adversary_size: str = "small") -> dict:
    """The pipeline flow on the sample kitchen (build, serve, crawl, clean, embed, generate, report,
    the reading check); returns the pipeline summary plus the digest printed by `mrqa demo`."""
    t0 = time.perf_counter()
    summary = pipeline_flow(sample_recipes=recipes, sample_seed=seed, sample_workers=workers,
                            crawl_workers=crawl_workers, seed=seed, train=train, af_pool=af_pool,
                            matched_coherence=matched_coherence, textual_cloze_pooled=textual_cloze_pooled,
                            redrawn=redrawn, train_reading=True, split_by=split_by,
                            author_coherence=author_coherence, adversary_size=adversary_size,
                            dask_address=dask_address, raise_on_failure=False)
    summary["total_s"] = round(time.perf_counter() - t0, 1)
    summary["digest"] = demo_digest(summary)
    log.info("demo finished in %.1f s", summary["total_s"])
    return summary


# the benchmark that needs reading on the sample kitchen: the visual datasets are read from the photos'
# pixels (the look probe), the textual cloze AF ones pass once the pooled step has filtered them (README)
TEXTUAL_HINT = ("the benchmark that needs reading here is the textual cloze AF datasets after their pooled step, "
                "which this run left out (`--no-textual-cloze-pooled`): a plain `make demo` makes it (5 datasets on "
                "the sample kitchen, about 4 minutes more)")


def demo_digest(summary: dict) -> dict:
    """What `mrqa demo` prints: per-stage status/time/counts, in-vocab share, datasets, bias table
    (Hasty Student, distance probe, learned question-only probe), the competence families' table,
    model accuracy next to Hasty Student, where the report is."""
    ing, cln, emb = (stage_summary(summary, s) for s in ("ingest", "clean", "embed"))
    gen, rep, trn = (stage_summary(summary, s) for s in ("generate", "report", "train"))
    counts = {
        "ingest": {k: ing.get(k) for k in ("discovered", "loaded", "images_ok", "images_missing",
                                           "images_broken") if k in ing} | {"rejected": ing.get("rejected", {})},
        "clean": {k: cln.get(k) for k in ("recipes", "kept", "steps", "tokens") if k in cln}
                 | {"rejected": cln.get("rejected", {})},
        "embed": {k: emb.get(k) for k in ("encoder_id", "images_encoded", "images_already",
                                          "texts_encoded") if k in emb}
                 | ({"neighbour_rows": emb["neighbours"].get("rows")}
                    if isinstance(emb.get("neighbours"), dict) else {}),
        "generate": {k: gen.get(k) for k in ("n_datasets", "n_questions") if k in gen},
        "af_pool": {task: _pooled(r) for task, r in (gen.get("af_pool") or {}).items()}
                   | ({"textual_cloze": _pooled(gen["textual_cloze_pooled"])}
                      if gen.get("textual_cloze_pooled") else {})
                   | {f"visual_coherence ({kind})": _pooled(gen[f"{kind}_coherence"]["af_pool"])
                      for kind in ("matched", "author") if gen.get(f"{kind}_coherence")}
                   | {f"{task} (redrawn{what})": _pooled(r)
                      for key, what in (("af_pool", ""), ("af_pool_items", ", items rule"))
                      for task, r in ((gen.get("redrawn") or {}).get(key) or {}).items()
                      if task in ("visual_cloze", "visual_coherence")},
    }
    vocab = {ph: {k: cln.get(f"vocab_{ph}", {}).get(k) for k in ("types_in_dict_share", "tokens_in_dict_share")}
             for ph in ("before", "after")} if cln else {}
    datasets = [{k: d.get(k) for k in ("dataset_id", "task", "knobs", "n_questions")}
                for d in gen.get("datasets", [])]
    bias = {task: [{k: row.get(k) for k in ("setting", "questions", "Hasty Student", "distance probe",
                                            "learned probe, test split (95% CI)")}
                   for row in info.get("table", [])] for task, info in rep.get("tasks", {}).items()}
    models = list(trn.get("runs", []))
    reading, gm3c_check = trn.get("reading"), trn.get("gm3c_check")
    comp = stage_summary(summary, "competence")
    keys = ("stage", "status", "seconds", "cpu_s", "reason", "error")
    return {"stages": [{k: r.get(k) for k in keys if r.get(k) is not None} for r in summary.get("stages", [])],
            "total_s": summary.get("total_s"), "counts": counts, "in_vocab_share": vocab,
            "datasets": datasets, "bias": bias, "models": models, "reading": reading, "gm3c_check": gm3c_check,
            "gm3c_check_size": trn.get("gm3c_check_size", "small"), "pixel_check": trn.get("pixel_check") or {},
            "report": rep.get("index"), "background_cue": rep.get("background_cue") or [],
            # the train stage's reading check is recorded before its count: the gate needs it
            "reading_only": trn["reading_only"] if "reading_only" in trn else rep.get("reading_only"),
            "competence": {"source": comp.get("source"), "split": comp.get("split"),
                           "results": comp.get("results") or {}},
            "failed": summary.get("failed", {}).get("report")}


def _pooled(r: dict) -> str:
    """One task's pooled step in a line: why it was skipped, or what it kept and dropped."""
    if "skipped" in r:
        return r["skipped"]
    return (f"{sum(x['kept'] for x in r.values())} kept / {sum(x['dropped'] for x in r.values())} dropped over "
            f"{len(r)} datasets")


def _pct(x) -> str:
    return f"{100 * x:.1f}%" if isinstance(x, (int, float)) else str(x)


def format_digest(d: dict) -> str:
    """The demo's final summary as plain text."""
    out = ["", "=" * 78, "Meta-RecipeQA demo: summary", "=" * 78, "stages (wall seconds, cpu seconds):"]
    for s in d["stages"]:
        note = s.get("error") or s.get("reason") or ""
        out.append(f"  {s['stage']:<9} {s['status']:<9} {s['seconds']:>8.1f} {s.get('cpu_s', 0.0):>8.1f}  {note}")
    out.append(f"  total {d.get('total_s')} s")
    out.append("counts:")
    for stage, c in d["counts"].items():
        if c:
            out.append(f"  {stage:<9} " + ", ".join(f"{k}={v}" for k, v in c.items()))
    if d["in_vocab_share"]:
        b, a = d["in_vocab_share"]["before"], d["in_vocab_share"]["after"]
        out.append(f"in-vocabulary share (types / occurrences): before repair {b['types_in_dict_share']} / "
                   f"{b['tokens_in_dict_share']}, after {a['types_in_dict_share']} / {a['tokens_in_dict_share']}")
    by_task: dict[str, list[str]] = {}
    for ds in d["datasets"]:
        by_task.setdefault(ds["task"], []).append(f"{ds['knobs']}:{ds['n_questions']}")
    out.append(f"datasets ({len(d['datasets'])}; setting:questions):")
    out += [f"  {t:<16} " + " ".join(v) for t, v in by_task.items()]
    out.append("bias (setting: questions, Hasty Student and distance probe [95% Wilson], learned question-only "
               "probe on the test split [95% CI], look probe on the photos' pixels [95% CI]; chance 25%):")
    for task, rows in d["bias"].items():
        out.append(f"  {task}")
        out += [f"    {r['setting']:<17} {r['questions']!s:>6}  hasty {r['Hasty Student']}  "
                f"probe {r['distance probe']}  learned {r.get('learned probe, test split (95% CI)', '–')}"
                + (f"  look {r['look probe, pixels (95% CI)']}" if r.get("look probe, pixels (95% CI)", "–") != "–"
                   else "")
                for r in rows]
    if d.get("background_cue"):
        out += format_cue(d["background_cue"])
    ro = d.get("reading_only")
    if ro:
        passing: dict[str, list[str]] = {}
        for did in ro["datasets"]:
            passing.setdefault(did.split("-", 1)[0], []).append(did.split("-", 1)[1].rsplit("-s", 1)[0])
        out.append(f"reading benchmark (`mrqa export --all --reading-only`: no context-free figure above 35%, "
                   f"AF keeping 40%, GM3C question-only checked apart from AF, a reader that reads): "
                   f"{len(ro['datasets'])} datasets, {ro['left_out']} left out")
        out += [f"  {t:<16} " + " ".join(v) for t, v in passing.items()]
        if not ro["datasets"] and ro.get("reasons"):
            out.append("  none passes; what holds them back first: " + ", ".join(
                f"{why}: {n}" for why, n in sorted(ro["reasons"].items(), key=lambda x: (-x[1], x[0]))[:4]))
            if "textual_cloze" not in (d.get("counts", {}).get("af_pool") or {}):
                out.append(f"  {TEXTUAL_HINT}")
        if ro["datasets"]:
            out.append("  score a model of your own on it: `mrqa export --all --reading-only --out DIR`, then "
                       "`mrqa score --export DIR --predictions FOLDER --context-ablation FOLDER` (README, \"Scoring "
                       "your own model\")")
    comp = d.get("competence") or {}
    if comp.get("results"):
        from features.competence.report import format_table
        out += format_table(comp["results"], comp["source"], comp["split"]).splitlines()
    if d["models"]:
        out.append("model (tiny HTRN transformer) vs Hasty Student:")
        for m in d["models"]:
            if m.get("skipped"):
                out.append(f"  {m['dataset_id']}: skipped ({m['skipped']})")
            else:
                out.append(f"  {m['dataset_id']}: test acc {_pct(m.get('test_acc'))}, val acc "
                           f"{_pct(m.get('val_acc'))}, Hasty Student {_pct(m.get('hasty_student_acc'))}")
    checked = {k: v for t in (d.get("gm3c_check") or {}).values() for k, v in t.items() if k != "skipped"}
    if checked:
        size = "" if d.get("gm3c_check_size", "small") == "small" else f"{d['gm3c_check_size']}-size models, "
        out.append(f"independent GM3C question-only check ({size}every question, recorded): {len(checked)} datasets, "
                   f"{_pct(min(checked.values()))}-{_pct(max(checked.values()))}")
    pixel = d.get("pixel_check") or {}
    if pixel:
        out.append(f"pixel probe (a CNN on the photos, every question, recorded): {len(pixel)} datasets, "
                   f"{_pct(min(pixel.values()))}-{_pct(max(pixel.values()))}")
    out += _reading_lines(d.get("reading"))
    out.append(f"report: {d.get('report')}")
    if d.get("failed"):
        out.append(d["failed"])
    return "\n".join(out)


def _reading_lines(r: dict | None) -> list[str]:
    """The reading check in the summary: per dataset checked, the reader, the learned question-only model, the
    lead, and the reader with another recipe's steps (on the test split, or every split held out in turn;
    chance 25%)."""
    if not r:
        return []
    if r.get("skipped"):
        return [f"reading check: skipped ({r['skipped']})"]
    rows = r["settings"]
    label = {id(x): x["setting"] if x.get("task", "visual_cloze") == "visual_cloze" else f"{x['task']} {x['setting']}"
             for x in rows}
    w = max(10, *(len(v) for v in label.values()))
    every = r.get("folds") == "split"            # every split held out in turn (training/split_folds.py)
    lines = ["does a model have to read the recipe? (pooled per task: the datasets checked, in the demo what the "
             "reading-only export holds back for want of this check; "
             f"{'every split held out in turn' if every else 'test split'}; chance 25%)",
             f"  {'setting':<{w}} {'all q' if every else 'test q':>6}  {'reader [95% CI]':>20}  "
             f"{'question-only [95% CI]':>22}  {'lead':>6}  {'reader, another recipe':>22}"]
    lines += [f"  {label[id(x)]:<{w}} {x['n_test']:>6}  {with_ci(x['reader'], x.get('reader_ci')):>20}  "
              f"{with_ci(x['question_only'], x.get('question_only_ci')):>22}  "
              f"{100 * x['lead']:>+6.1f}  {_pct(x['reader_other_recipe']):>22}" for x in rows]
    lo = min(x["lead"] for x in rows)
    lines.append(f"  the reader leads question-only by {100 * lo:.1f} points or more on every setting; "
                 f"another recipe's steps cost it {100 * min(x['reader'] - x['reader_other_recipe'] for x in rows):.1f}"
                 f"-{100 * max(x['reader'] - x['reader_other_recipe'] for x in rows):.1f} points")
    return lines
