"""`mrqa score`: any model's predictions on a benchmark split, judged as the reading benchmark judges its own
readers: accuracy with a 95% interval, the lead over question-only models, and what another recipe's steps
cost the model (training/score.py). One dataset, or a whole benchmark from a folder of predictions.
Read-only: it never writes the warehouse."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from flows.cli.choices import Split
from flows.cli.common import check_out_path, echo_json, fail

app = typer.Typer()
FORMATS = ("JSON {qid: index}, a JSON list in qid order (or {task: list}, as `mrqa evaluate --predictions` writes), "
           "JSON Lines {\"qid\", \"prediction\"} (.jsonl) or CSV qid,prediction (.csv); 0-based; qids as in the "
           "Parquet export or the RecipeQA JSON export")


@app.command("score")
def score_cmd(dataset: Optional[str] = typer.Option(None, "--dataset", help="dataset_id (see `mrqa datasets`), "
                                                    "several comma-separated, or all (every dataset of the export "
                                                    "or warehouse with questions in the split). Default with a "
                                                    "folder of predictions: the datasets it has files for."),
              predictions: Optional[Path] = typer.Option(None, "--predictions", help=f"Your model's choices: "
                                                         f"{FORMATS}. A folder: one <dataset_id>.json|.jsonl|.csv "
                                                         "per dataset."),
              context_ablation: Optional[Path] = typer.Option(None, "--context-ablation", help="The same model's "
                                                              "choices when each question is given the steps of "
                                                              "the recipe `--plan` names (same formats; a folder "
                                                              "as for --predictions)."),
              question_only: Optional[Path] = typer.Option(None, "--question-only", help="Choices of a model that "
                                                           "never sees the recipe (same formats; a folder as for "
                                                           "--predictions)."),
              plan: Optional[Path] = typer.Option(None, "--plan", help="Write the split's context-ablation plan "
                                                  "(qid, recipe_id, context_recipe_id) and stop: a file (CSV, or "
                                                  "Parquet for a .parquet name) for one dataset, a folder of "
                                                  "<dataset_id>.csv for several."),
              split: Split = typer.Option(Split.test, "--split", help="The split the predictions are for."),
              export: Optional[Path] = typer.Option(None, "--export", help="Read the questions from this Parquet "
                                                    "export (`mrqa export`) instead of the warehouse."),
              as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON.")):
    """Score a model's predictions on a dataset's split: accuracy [95% interval], what another recipe's
    steps cost it, its lead over question-only figures, and whether that shows it reads the recipe
    (20 points above question-only, 15 lost with another recipe's steps)."""
    if plan is None and predictions is None:
        fail("give --predictions FILE|FOLDER to score, or --plan FILE|FOLDER to write the context-ablation plan first")
    if plan is not None and (predictions or context_ablation or question_only):
        fail("--plan writes the ablation plan and stops: give it without --predictions, --context-ablation "
             "and --question-only")
    folder = predictions is not None and predictions.is_dir()
    for option, path in (("--context-ablation", context_ablation), ("--question-only", question_only)):
        if path is not None and path.is_dir() != folder:
            fail(f"{option} must be a {'folder' if folder else 'file'}, as --predictions is")
    names = [d.strip() for d in (dataset or "").split(",") if d.strip()]
    several = names == ["all"] or len(names) > 1
    if not names and not folder:
        fail("missing --dataset (an option); see --help")
    if several and predictions is not None and not folder:
        fail("several datasets need a folder of predictions (<dataset_id>.json each), not one file")
    if plan is not None:
        if several and plan.suffix in (".csv", ".parquet"):
            fail(f"--plan: several datasets need a folder (one <dataset_id>.csv each), not the file name {plan}")
        plan = check_out_path("--plan", plan, want_dir=several)
    from etl.config import Paths
    from training import score as sc
    paths = Paths.from_env()
    con, busy = None, None
    if paths.warehouse.exists():
        from etl.warehouse import WarehouseLocked, connect
        try:
            con = connect(paths, read_only=True)
        except WarehouseLocked as e:
            if export is None:
                fail(str(e))
            busy = str(e).split(";")[0]      # scored from the export alone: say why no figures are recorded
    elif export is None:
        fail(f"no warehouse at {paths.warehouse} and no --export: give the export the predictions were made on, "
             "or check --home")
    try:
        results = _run(sc, names, several, predictions, context_ablation, question_only, plan, split.value, export,
                       con)
        for r in results or []:
            if busy:
                r["recorded"] = {"note": f"no recorded figures: {busy}"}
    except sc.ScoreError as e:
        fail(str(e))
    finally:
        if con is not None:
            con.close()
    if results is None:
        return
    if as_json:
        echo_json(results[0] if len(results) == 1 and not several and not folder else
                  {"datasets": results, "summary": sc.summarise(results)})
    else:
        typer.echo("\n\n".join(sc.format_score(r) for r in results))
        if len(results) > 1 or several or folder:
            typer.echo("\n" + sc.format_summary(results))
    for r in results:
        if r["model"]["missing"]:
            typer.secho(f"warning: {r['dataset_id']}: {r['model']['missing']} of {r['n_questions']} questions have "
                        "no prediction and count as wrong", err=True)


def _run(sc, names, several, predictions, ablation, question_only, plan, split, export, con):
    """Write the plan(s) (returns None), or score every dataset asked for (returns the results)."""
    if names == ["all"]:
        names = sc.list_datasets(split, export, con)
    if plan is not None:
        for did in names:
            qs = sc.load_split(did, split, export, con)
            out = plan / f"{did}.csv" if several else plan
            own = sc.write_plan(qs, out)
            typer.echo(f"wrote the context-ablation plan of {qs.n} {qs.split} questions of {did} to {out}"
                       + (f" ({own} keep their own recipe: one recipe holds over half the split)" if own else ""))
        return None
    if not predictions.is_dir():
        qs = sc.load_split(names[0], split, export, con)
        return [_score_one(sc, qs, predictions, ablation, question_only, con)]
    files = sc.prediction_files(predictions)
    known = set(sc.list_datasets(split, export, con))
    strays = sorted(set(files) - known)
    if strays:
        raise sc.ScoreError(f"{files[strays[0]]}: no dataset {strays[0]!r} has {split} questions here; name the "
                            "files <dataset_id>.json (`mrqa datasets`)")
    todo = names or sorted(files)
    if not todo:
        raise sc.ScoreError(f"{predictions} holds no <dataset_id>.json, .jsonl or .csv predictions")
    missing = [d for d in todo if d not in files]
    if missing:
        raise sc.ScoreError(f"{predictions} has no predictions for {missing[0]} ({len(missing)} dataset(s) in all)")
    extra = {name: sc.prediction_files(folder) if folder else {} for name, folder in
             (("ablation", ablation), ("question_only", question_only))}
    return [_score_one(sc, sc.load_split(did, split, export, con), files[did], extra["ablation"].get(did),
                       extra["question_only"].get(did), con) for did in todo]


def _score_one(sc, qs, predictions, ablation, question_only, con) -> dict:
    pred = sc.read_predictions(predictions, qs)
    ablated = sc.read_predictions(ablation, qs) if ablation else None
    qo = sc.read_predictions(question_only, qs) if question_only else None
    return sc.score(qs, pred, ablated, qo, sc.recorded_figures(con, qs))


def _datasets_opt(default: str):
    return typer.Option(None, "--dataset", help=f"dataset_id(s), comma-separated (`mrqa datasets`). Default: {default}")


AF_OPT = typer.Option(False, "--af", help="Only the adversarially filtered datasets.")
JSON_OPT = typer.Option(False, "--json", help="Print the figures as JSON.")


@app.command("look-probe")
def look_probe_cmd(dataset: Optional[str] = _datasets_opt("every dataset of a visual task."),
                   adversarial_only: bool = AF_OPT,
                   seed: int = typer.Option(0, "--seed", help="Seed of the folds and the models."),
                   as_json: bool = JSON_OPT):
    """Question-only models on the photos' pixel statistics, outside the encoder's space: a thumbnail, a
    colour histogram and the colours of the frame of every photo, a linear model and gradient-boosted
    trees, each question scored by models that never saw its recipe. The knobs and AF filter in the
    encoder's space; this says what a model that looks at the photos themselves reads without the
    recipe, and how alike photos of one recipe or one author are (the background cue). Read-only."""
    from features.diagnostics import look_probe as lp
    _probe(dataset, adversarial_only, seed, as_json, "('visual_cloze', 'visual_coherence', 'visual_ordering')",
           "visual datasets", lambda con, home, names: lp.look_probe_rows(con, home, names, seed=seed,
                                                                           progress=not as_json), lp.format_table)


@app.command("pixel-probe")
def pixel_probe_cmd(dataset: Optional[str] = _datasets_opt("every dataset of a visual task."),
                    adversarial_only: bool = AF_OPT,
                    seed: int = typer.Option(0, "--seed", help="Seed of the folds and the models."),
                    side: int = typer.Option(64, "--side", help="Photos scaled to SIDE x SIDE pixels (8-128)."),
                    epochs: int = typer.Option(15, "--epochs", help="At most this many epochs per fold's model "
                                               "(early-stopped on held-back recipes)."),
                    workers: Optional[int] = typer.Option(None, "--workers", help="Processes for the folds' models "
                                                          "(default: one per core; the same figures)."),
                    record: bool = typer.Option(False, "--record", help="Write each figure to pixel_checks, where "
                                                "`mrqa export --reading-only` reads it for a visual dataset."),
                    as_json: bool = JSON_OPT):
    """A small CNN trained end to end on the photos, question-only (the look probe reads fixed statistics), each
    question scored by a model that never saw its recipe (the val and test splits held out whole). About 5
    minutes per 1,000 questions on 2 cores (a quarter of that with --side 32). Read-only unless --record."""
    if workers is not None and workers < 1:
        fail("--workers must be 1 or more")
    from features.diagnostics.pixel_probe import format_table
    from flows.train import pixel_check
    _probe(dataset, adversarial_only, seed, as_json, "('visual_cloze', 'visual_coherence', 'visual_ordering')",
           "visual datasets", lambda paths, names: pixel_check(paths, names, seed=seed, side=side, epochs=epochs,
                                                              workers=workers, record=record), format_table, True)


@app.command("words-probe")
def words_probe_cmd(dataset: Optional[str] = _datasets_opt("every textual cloze dataset."),
                    adversarial_only: bool = AF_OPT,
                    seed: int = typer.Option(0, "--seed", help="Seed of the folds and the models."),
                    as_json: bool = JSON_OPT):
    """Question-only models on the step titles' own words, outside the encoder's space: TF-IDF of every
    title's words and word pairs on its principal axes, a linear model and gradient-boosted trees, each
    question scored by models that never saw its recipe. Textual cloze (its questions and choices are
    titles). Read-only."""
    from features.diagnostics import words_probe as wp
    _probe(dataset, adversarial_only, seed, as_json, "('textual_cloze')", "textual cloze datasets",
           lambda con, home, names: wp.words_probe_rows(con, names, seed=seed), wp.format_table)


@app.command("order-probe")
def order_probe_cmd(dataset: Optional[str] = _datasets_opt("every textual cloze dataset."),
                    adversarial_only: bool = AF_OPT,
                    seed: int = typer.Option(0, "--seed", help="Seed of the folds and the model."),
                    as_json: bool = JSON_OPT):
    """A question-only model that knows what a reader of many recipes knows of step titles: over the train
    split's recipes, which titles come before which and where in a recipe each stands (the question's and
    each choice's own recipe left out). A linear model on those counts, each question scored by models that
    never saw its recipe. Textual cloze. Read-only."""
    from features.diagnostics import order_probe as op
    _probe(dataset, adversarial_only, seed, as_json, "('textual_cloze')", "textual cloze datasets",
           lambda con, home, names: op.order_probe_rows(con, names, seed=seed), op.format_table)


def _probe(dataset: str | None, adversarial_only: bool, seed: int, as_json: bool, tasks: str, what: str,
           rows, table, on_paths: bool = False) -> None:
    """The shared body of the probes outside the encoder's space: the datasets named (or with `--af` the AF
    datasets of `tasks`, an SQL list), read-only, `rows(con, home, names)` (`on_paths`: `rows(paths, names)` after
    the connection is closed, opening its own) printed by `table` or as JSON."""
    from etl.config import Paths
    from etl.warehouse import WarehouseLocked, connect
    if seed < 0:
        fail("--seed must be 0 or more")
    paths = Paths.from_env()
    if not paths.warehouse.exists():
        fail(f"no warehouse at {paths.warehouse}: run `mrqa demo` or the pipeline first, or check --home")
    names = [d.strip() for d in (dataset or "").split(",") if d.strip()]
    if dataset is not None and not names:
        fail("--dataset needs at least one dataset id")
    try:
        con = connect(paths, read_only=True)
    except WarehouseLocked as e:
        fail(str(e))
    try:
        if adversarial_only and not names:
            names = [d for (d,) in con.execute(f"SELECT dataset_id FROM datasets WHERE adversarial AND task IN {tasks} "
                                               "ORDER BY task, dataset_id").fetchall()]
            if not names:
                fail(f"no adversarially filtered {what} in the warehouse")
        res = None if on_paths else rows(con, paths.home, names or None)
    except ValueError as e:
        fail(str(e))
    finally:
        con.close()
    try:
        res = rows(paths, names or None) if on_paths else res
    except (ValueError, WarehouseLocked) as e:
        fail(str(e))
    if as_json:
        echo_json(res)
    else:
        typer.echo(table(res))
