"""`mrqa generate`, `datasets`, `export`: make the QA datasets with the control knobs, list and export them
(their bias report: flows/cli/report.py; the adversarial filter's own commands: flows/cli/adversarial.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from flows.cli.choices import AfDrop, Distractors, ExportFormat, K3Mode, ListFormat, Preset, Task, TwinRule, VectorsOf
from flows.cli.common import check_out_path, echo_json, fail, one_of, require_warehouse, run_flow, wait_option

app = typer.Typer()


@app.command("generate")
def generate_cmd(
        task: Optional[Task] = typer.Option(None, "--task", help="The question family (one task)."),
        knobs: Optional[str] = typer.Option(None, "--knobs", "--setting", help="The knob setting by name: "
                                            "K1-K2-K3 (each 0 or 1), then -all/-balanced, then -matched (visual "
                                            "coherence) or -kitchen (visual cloze) at K2 = K3 = 0, then -af, e.g. "
                                            "0-1-0, 0-0-1-balanced, 0-1-1-af, 0-0-0-kitchen-af (docs/knobs.md); "
                                            "0,1,0 and 0-0-1:balanced are read too."),
        preset: Optional[Preset] = typer.Option(None, "--preset", help="recipeqa: the biased RecipeQA-style "
                                                "reference."),
        all_: bool = typer.Option(False, "--all", help="Every knob setting of every task, the knob-3 balanced "
                                  "variants and the presets."),
        seed: int = typer.Option(0, "--seed", help="Seed of every random decision."),
        encoder: Optional[str] = typer.Option(None, "--encoder", help="encoder_id (default: the latest)."),
        k3_mode: Optional[K3Mode] = typer.Option(None, "--k3-mode", help="When K3=1: coin (paper, p=0.5 per "
                                                 "question; the default), all, or balanced (closer-distractor "
                                                 "count uniform 0..3); same as the -all/-balanced of the name."),
        k: Optional[int] = typer.Option(None, "--k", help="Neighbours used for m_d/s_d and candidates (default 100)."),
        ratio: Optional[float] = typer.Option(None, "--questions-per-step", help="Knob 1: at most "
                                              "floor(#steps * ratio) questions per recipe."),
        extra_removal: Optional[bool] = typer.Option(None, "--extra-removal/--no-extra-removal",
                                                     help="Knob 1: also remove a random other step."),
        ball_lo: Optional[float] = typer.Option(None, "--ball-lo-sd", help="Knob 2: lower ball bound "
                                                "m_d + x*s_d (omit for distance 0)."),
        ball_hi: Optional[float] = typer.Option(None, "--ball-hi-sd", help="Knob 2: upper ball bound m_d + x*s_d."),
        n_constrained: Optional[int] = typer.Option(None, "--k3-constrained", help="Knob 3 (coin/all): "
                                                    "distractors closer to the question than the answer."),
        k3_prob: Optional[float] = typer.Option(None, "--k3-prob", help="Knob 3 coin probability (paper 0.5)."),
        weight_power: Optional[float] = typer.Option(None, "--ordering-weight-power", help="Ordering: "
                                                     "wrong orderings drawn with weight S**power."),
        adversarial: Optional[bool] = typer.Option(None, "--adversarial/--no-adversarial", help="Adversarial "
                                                   "filtering: the setting's AF variant (distractors a learned "
                                                   "question-only ensemble cannot reject; visual cloze, coherence, "
                                                   "textual cloze, and ordering's wrong orders). --all makes the "
                                                   "AF variants (ordering's not) unless --no-adversarial."),
        af_rounds: Optional[int] = typer.Option(None, "--af-rounds", help="Adversarial filtering rounds (default 3)."),
        af_drop: AfDrop = typer.Option(AfDrop.linear, "--af-drop", help="AF's drop of the questions its question-only "
                                       "ensemble still solves: linear (AF's own ensemble) or pooled (visual cloze, "
                                       "coherence, ordering and textual cloze: none here; `mrqa af-pool "
                                       "--min-kept 0.4` must "
                                       "follow and drops by the stronger pooled GM3C adversary, with that room)."),
        distractors: Optional[Distractors] = typer.Option(
            None, "--distractors", help="ball (default): the knob-2 ball (the paper); matched: visual coherence "
            "at knobs 0-0 only, the foreign image whose cosines to the shown ones match a photo of the recipe's own "
            "(beyond the paper; the setting is named K1-0-0-matched[-af], which --knobs also takes); author: the "
            "same, the foreign image from another recipe of the question's author (K1-0-0-author[-af]); kitchen: "
            "visual cloze at knobs 0-0 only, distractors from the question's own recipe, its kitchen "
            "(K1-0-0-kitchen[-af]); redrawn: made by `mrqa redraw`, not here."),
        twin_rule: TwinRule = typer.Option(TwinRule.words, "--twin-rule", help="Visual cloze AF: which distractor "
                                           "is a twin of the answer's step, never shown: words (the steps' words, "
                                           "AF's rule) or items (the sample kitchen's ground truth: the same action "
                                           "done to an item of the same name; `mrqa redraw` at knob 2 = 0)."),
        wait: float = wait_option()):
    """Generate Meta-RecipeQA datasets and register them (re-running replaces a dataset)."""
    from features.datasets.generate import POOLED_DROP_TASKS
    from flows.generate import generate_flow
    if af_drop is AfDrop.pooled and adversarial is False:
        fail("--af-drop pooled is about the AF datasets; leave out --no-adversarial")
    if knobs is not None and not knobs.strip():
        fail("--knobs is empty: give a setting such as 0-1-0 or 0-1-1-af (docs/knobs.md), or leave it out for 0-0-0")
    overrides = {name: v for name, v in (("k", k), ("questions_per_step", ratio),
                                         ("extra_step_removal", extra_removal), ("ball_hi_sd", ball_hi),
                                         ("k3_n_constrained", n_constrained), ("k3_prob", k3_prob),
                                         ("ordering_weight_power", weight_power)) if v is not None}
    if ball_lo is not None:
        overrides["ball_lo_sd"] = ball_lo
    if distractors is not None:
        overrides["distractors"] = distractors.value
    if all_:
        if task or knobs or preset or overrides:
            fail("--all generates the paper settings; leave out --task/--knobs/--preset and parameters")
        kw = {"all_settings": True}
    else:
        if task is None:
            fail(f"--task must be one of {one_of(Task)} (or use --all)")
        if preset and knobs:
            fail("give either --knobs or --preset, not both")
        if preset:
            kw = {"all_settings": False, "task_name": task.value, "preset": preset.value}
        else:
            kw = {"all_settings": False, "task_name": task.value, "knobs": knobs or "0-0-0",
                  "k3_mode": k3_mode.value if k3_mode else None}
    named_af = bool(knobs) and knobs.strip().lower().endswith("-af")
    if af_rounds is not None and not (adversarial or named_af or (all_ and adversarial is None)):
        fail("--af-rounds goes with --adversarial (or --all)")
    kw.update({"adversarial": adversarial, **({"af_rounds": af_rounds} if af_rounds is not None else {})})
    from features.datasets.generate import settings_for
    try:
        made = settings_for(kw.get("task_name"), kw.get("knobs"), kw.get("preset"), kw.get("k3_mode"),
                            overrides or None, all_settings=kw["all_settings"], adversarial=adversarial,
                            **({"af_rounds": af_rounds} if af_rounds is not None else {}))
    except (ValueError, TypeError) as e:
        fail(str(e))
    if twin_rule is TwinRule.items and (all_ or any(t != "visual_cloze" or not p.af_rounds or p.distractors != "ball"
                                                    for t, p in made)):
        fail("--twin-rule items is a rule of AF's visual cloze distractors from the knob-2 ball: give --task "
             "visual_cloze and an -af setting of the knobs (docs/knobs.md, \"The items twin rule\")")
    try:
        summary = run_flow(generate_flow, seed=seed, encoder_id=encoder, overrides=overrides or None,
                           af_pooled_drop=POOLED_DROP_TASKS if af_drop is AfDrop.pooled else (),
                           twin_rule=twin_rule.value, **kw)
    except (ValueError, LookupError) as e:
        fail(str(e))
    for s in summary["datasets"]:
        typer.echo(f"{s['dataset_id']:32s} {s['n_questions']:>7,d} questions {s['n_recipes']:>6,d} recipes "
                   f"{s['seconds']:6.2f}s  positions {s['answer_positions']}  "
                   f"distance-probe {s['distance_probe_accuracy']}  skipped {s['skips'] or '-'}")
    typer.echo(f"{summary['n_datasets']} dataset(s), {summary['n_questions']:,d} questions in "
               f"{summary['seconds']:.1f}s (RecipeQA: 7,986 visual cloze questions from 5,684 recipes; "
               "Meta-RecipeQA: 8K-22K per task; ours scale with the corpus)")


@app.command("datasets")
def datasets_cmd(fmt: ListFormat = typer.Option(ListFormat.table, "--format", help="Output format."),
                 wait: float = wait_option()):
    """List generated datasets with question/recipe counts and skips."""
    from etl.warehouse import connect_reader, load_query
    require_warehouse()
    con = connect_reader()
    try:
        cur = con.execute(load_query("datasets_listing"))
        columns = [d[0] for d in cur.description]
        rows = cur.fetchall()
    finally:
        con.close()
    if fmt == "json":
        echo_json([dict(zip(columns, r)) for r in rows])
        return
    if not rows:
        typer.echo("no datasets; run `mrqa generate --all`")
    for r in rows:
        typer.echo(f"{r[0]:40s} {r[1]:17s} {r[2]:18s} seed={r[3]} questions={r[5]:,d} recipes={r[6]:,d} "
                   f"skips={r[7]}")


@app.command("export")
def export_cmd(dataset: Optional[list[str]] = typer.Option(None, "--dataset", "--datasets", help="dataset_id to "
                                                            "export (repeat, or comma-separated)."),
               all_: bool = typer.Option(False, "--all", help="Export every dataset."),
               fmt: ExportFormat = typer.Option(ExportFormat.parquet, "--format", help="Export format."),
               out: Optional[Path] = typer.Option(None, "--out", help="Output directory "
                                                  "(default MRQA_HOME/exports/<dataset or all>, recipeqa-json: "
                                                  "<dataset or all>-recipeqa)."),
               with_vectors: bool = typer.Option(False, "--with-vectors", help="Parquet: add the image "
                                                 "and step-text (title and body) vectors of the exported splits."),
               vectors_of: VectorsOf = typer.Option(VectorsOf.splits, "--vectors-of", help="With --with-vectors: "
                                                    "every vector of the splits, or only those the questions' "
                                                    "models read (smaller; to train on another machine)."),
               with_images: bool = typer.Option(False, "--with-images", help="Parquet: add images.parquet, "
                                                "the image files of the exported splits (Hugging Face Image "
                                                "layout: bytes + path)."),
               images: bool = typer.Option(True, "--images/--no-images", help="recipeqa-json: copy "
                                           "the referenced images (RecipeQA layout)."),
               reading_only: bool = typer.Option(False, "--reading-only", help="Only the datasets no "
                                                 "context-free figure of `mrqa report` answers above 35% "
                                                 "(and, if AF, that kept 40% of their knob questions): the "
                                                 "card's \"Read before use\" rules; and a learned GM3C "
                                                 "question-only model checked apart from AF (`mrqa af-check "
                                                 "--dataset ID --record` at or below 35%; af-pool's own "
                                                 "adversaries do not count); and "
                                                 "a reader that reads (`mrqa reading-check --dataset ID "
                                                 "--record`: 20 points above question-only, 15 lost with "
                                                 "another recipe's steps); the others are named."),
               wait: float = wait_option()):
    """Export datasets as a Parquet dataset (hive folders + README.md card: one `datasets.load_dataset`
    config per dataset, named by task and setting) or as RecipeQA JSON (with --all, one folder per dataset)."""
    from etl.config import Paths
    from etl.warehouse import connect_reader
    from features.datasets.export import export_parquet, export_recipeqa_json, storage_uri
    if out is not None and not storage_uri(out):    # a local folder, not a URI; ~ expanded (--out=~/x)
        out = check_out_path("--out", out)
    if vectors_of != VectorsOf.splits and not with_vectors:
        fail("--vectors-of chooses which vectors --with-vectors exports: give --with-vectors too")
    require_warehouse()                             # a mistyped --home is an error, not a new warehouse
    paths = Paths.from_env()                        # read-only: the export makes its own folder
    from contextlib import closing
    with closing(connect_reader(paths)) as con:          # closed whichever way the command ends
        known = [r[0] for r in con.execute("SELECT dataset_id FROM datasets ORDER BY 1").fetchall()]
        wanted = [d.strip() for x in dataset or [] for d in x.split(",") if d.strip()]
        if all_ == bool(wanted):
            fail("give exactly one of --dataset ID (repeat, or comma-separated) or --all")
        for d in wanted:
            if d not in known:
                fail(f"no dataset {d!r}; `mrqa datasets` lists them")
        ids = known if all_ else list(dict.fromkeys(wanted))
        if not ids:
            fail("no datasets to export; run `mrqa generate --all` first")
        left_out: dict[str, str] = {}
        if reading_only:
            from features.datasets.card import reading_gate
            ids, left_out = reading_gate(con, ids)
            for did, why in left_out.items():
                typer.echo(f"left out {did}: {why}", err=True)
            if not ids:
                fail("no dataset passes --reading-only (each left out above); `mrqa report` measures them, "
                     "`mrqa af-check --dataset ID --record` checks one with GM3C question-only, `mrqa "
                     "reading-check --dataset ID --record` with a reader, `mrqa af-pool` filters the AF ones further")
        if out is None:     # exports/all, exports/<id>, or one folder per set of ids; RecipeQA JSON's end in
            import hashlib  # -recipeqa: those are the Parquet exports training reads
            digest = hashlib.sha256(",".join(sorted(ids)).encode()).hexdigest()[:8]
            out = paths.exports / ((("all-reading" if reading_only else "all") if all_ else ids[0] if len(ids) == 1
                                    else f"datasets-{digest}") + ("" if fmt == "parquet" else "-recipeqa"))
        try:
            if fmt == "parquet":
                res = export_parquet(con, ids, out, with_vectors=with_vectors, lance_uri=paths.lance,
                                     with_images=with_images, home=paths.home, left_out=left_out or None,
                                     vectors_of=vectors_of.value)
            else:
                res = export_recipeqa_json(con, ids, out, home=paths.home, with_images=images)
        except (ValueError, LookupError) as e:
            fail(str(e))
        echo_json({**res, "left_out": left_out} if reading_only else res)

