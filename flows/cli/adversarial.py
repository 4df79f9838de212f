"""`mrqa af-report`, `af-pool`, `af-check`, `reading-check`: what adversarial filtering did, the pooled
adversary over a task's AF datasets, its cross-fitted check, and the reading check (a reader against a
learned question-only model, and with another recipe's steps; docs/knobs.md, "Adversarial filtering")."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from flows.cli.choices import AfTask, Distractors, DropOrder, FloorBy, FoldBy, ListFormat, ReadingFolds, Size, SwapFirst
from flows.cli.common import echo_json, fail, parse_seeds, require_warehouse, run_flow, wait_option

ADV_SIZE_HELP = ("The GM3C question-only models' size: small (the default: 64 wide, CPU), paper (the appendix's "
                 "512 wide: a GPU's work, which reads a few points more) or tiny.")

app = typer.Typer()


@app.command("af-report")
def af_report_cmd(fmt: ListFormat = typer.Option(ListFormat.table, "--format", help="Output format.")):
    """What adversarial filtering did to each AF dataset: questions kept, the learned question-only
    probe before and after, the final adversary, the step-text oracle (docs/knobs.md)."""
    from etl.config import Paths
    from etl.warehouse import connect
    from features.datasets.af_report import af_report, format_table
    require_warehouse()
    con = connect(paths := Paths.from_env(), read_only=True)
    try:
        rows = af_report(con, paths.lance)
    except LookupError as e:
        fail(str(e))
    finally:
        con.close()
    if fmt == "json":
        echo_json(rows)
    else:
        typer.echo(format_table(rows))


JOBS_OUT_HELP = ("Write the GM3C models' jobs (an export with vectors, the alternates, seeds and configs) to this "
                 "folder and stop, nothing written: train them on a GPU machine with `python -m training.af_jobs DIR`.")
SCORES_FROM_HELP = "Go on from the logits of those jobs (DIR/scores.json); give the options of --jobs-out."


@app.command("af-pool")
def af_pool_cmd(task: AfTask = typer.Option(AfTask.visual_cloze, "--task", help="The task whose AF "
                                            "datasets are filtered together (textual_cloze: GM3C question-only "
                                            "reads the titles' vectors, and a swap writes the title)."),
                tau: float = typer.Option(0.5, "--tau", help="Drop a question the out-of-fold question-only "
                                          "model solves with at least this probability of the answer."),
                min_kept: float = typer.Option(0.4, "--min-kept", help="Never keep fewer than this share of the "
                                               "plain setting's questions (0.4: the kept-share bound; 0: none)."),
                folds: int = typer.Option(4, "--folds", help="Folds of recipes."),
                rounds: int = typer.Option(2, "--rounds", help="Rounds of swapping in distractors the adversary "
                                           "finds plausible (coherence: foreign photos; ordering: orders; 0: none)."),
                solved_share: float = typer.Option(0.25, "--solved-share", help="Swap rounds: the share of a "
                                                   "dataset's questions the adversary may still solve."),
                keep_solved: float = typer.Option(0.0, "--keep-solved", help="The drop stops where the adversary "
                                                  "still solves this share of the kept questions (0: no cap; "
                                                  "0.25: never below chance)."),
                fresh_drop: bool = typer.Option(False, "--fresh-drop", help="Decide the drop by a model trained "
                                                "anew after the last round (one more pass), not the last round's."),
                adversaries: int = typer.Option(1, "--adversaries", help="Pooled models per pass, each its own "
                                                "seed and fold split; their mean logits decide swaps and drop."),
                linear: bool = typer.Option(False, "--linear/--no-linear", help="The drop also takes what the "
                                            "linear learned question-only probe solves (cross-fitted, folds "
                                            "apart from the report's); the demo's drop does."),
                tree: bool = typer.Option(False, "--tree/--no-tree", help="The drop also takes what the tree "
                                          "probe solves (gradient-boosted trees on the choice-set cues, pooled, "
                                          "cross-fitted on folds of its own), a third list in turn."),
                words: bool = typer.Option(False, "--words/--no-words", help="Textual cloze: the drop also takes "
                                           "what the words probe (`mrqa words-probe`) solves, two more lists."),
                look: bool = typer.Option(False, "--look/--no-look", help="Visual tasks: the drop also takes what "
                                          "the look probe (`mrqa look-probe`: the photos' pixels) solves, two more."),
                pixel: int = typer.Option(0, "--pixel", min=0, max=128, help="Visual tasks: and what the pixel probe "
                                          "(`mrqa pixel-probe`: a CNN) solves at this side, e.g. 32; 0: not."),
                pixel_swaps: bool = typer.Option(False, "--pixel-swaps", help="Coherence, with --pixel: the swap "
                                                 "rounds also read that CNN (a foreign photo both find plausible)."),
                order: bool = typer.Option(False, "--order/--no-order", help="Textual cloze: and what the order "
                                           "probe (`mrqa order-probe`) solves, one more list."),
                rules: bool = typer.Option(False, "--rules/--no-rules", help="The drop also takes what the report's "
                                           "distance rule solves (the centre of the choices; the closest pair)."),
                drop_order: DropOrder = typer.Option(DropOrder.votes, "--drop-order", help="Where the floor binds: "
                                                     "votes (questions on more lists first) or minimax (off the list "
                                                     "whose adversary solves most of the kept questions)."),
                seed: int = typer.Option(0, "--seed", help="The datasets' seed, and the folds' and models'."),
                distractors: Distractors = typer.Option(Distractors.ball, "--distractors", help="Which AF "
                                                        "datasets: the knob settings' (ball), coherence's matched "
                                                        "variants (matched, author), visual cloze's kitchen variants "
                                                        "(kitchen) or redrawn ones (`mrqa redraw`); never pooled "
                                                        "together."),
                workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Processes for the "
                                                      "--adversaries models (default: one per CPU core, at most one "
                                                      "per model); more than the models: their folds side by side."),
                floor_by: FloorBy = typer.Option(FloorBy.dataset, "--floor-by", help="Hold the --min-kept floor "
                                                 "per dataset, or in each split of it (split: the test split "
                                                 "is filtered as deeply as the training split)."),
                fold_by: FoldBy = typer.Option(FoldBy.recipe, "--fold-by", help="The adversary's folds: of "
                                               "recipes over every split, or with the val and test splits held "
                                               "out whole (split: a held-out question's images never trained)."),
                swap_first: SwapFirst = typer.Option(SwapFirst.auto, "--swap-first", help="Which solved questions "
                                                     "the swap rounds move first: the most confident, or those an "
                                                     "alternate can move (auto: movable for ordering)."),
                size: Size = typer.Option(Size.small, "--size", help=ADV_SIZE_HELP),
                jobs_out: Optional[Path] = typer.Option(None, "--jobs-out", help=JOBS_OUT_HELP + " One GM3C "
                                                        "pass: --rounds 1 or --rounds 0."),
                scores_from: Optional[Path] = typer.Option(None, "--scores-from", help=SCORES_FROM_HELP),
                wait: float = wait_option()):
    """The pooled adversary: a GM3C question-only model trained on all AF settings of a task at once scores
    every question out of fold. For `--rounds` rounds, the questions it solves beyond a quarter get knob-valid
    distractors it scores above the answer (the alternates AF recorded; coherence: a foreign image; ordering:
    the wrong orders AF considered). Then what it (and the lists asked for) still solves confidently is
    dropped (skip `af_pooled_predictable`, params.af_pooled). Run after generating the AF settings."""
    from flows.af_pool import af_pool_flow
    try:
        res = run_flow(af_pool_flow, task=task.value, tau=tau, min_kept=min_kept, folds=folds, seed=seed,
                       rounds=rounds, solved_share=solved_share, fresh_drop=fresh_drop, keep_solved=keep_solved,
                       adversaries=adversaries, linear=linear, distractors=distractors.value, workers=workers,
                       floor_by=floor_by.value, fold_by=fold_by.value, swap_first=swap_first.value, tree=tree,
                       size=size.value, jobs_out=jobs_out and str(jobs_out), words=words, rules=rules, order=order,
                       scores_from=scores_from and str(scores_from), drop_order=drop_order.value, look=look,
                       pixel=pixel, pixel_swaps=pixel_swaps)
    except ValueError as e:
        fail(str(e))
    if _jobs_written(res):
        return
    for r in res["datasets"]:
        typer.echo(f"{r['dataset_id']:34s} dropped {r['dropped']:5d}  kept {r['kept']:5d}  out-of-fold "
                   f"question-only {100 * (r['oof_question_only_acc'] or 0):.1f}% -> "
                   f"{100 * (r['oof_question_only_acc_kept'] or 0):.1f}%")


def _ids(option: str, text: str | None) -> tuple[str, ...]:
    """The comma-separated dataset ids of `option` (each once, in order); () when not given; none: refused."""
    if text is None:
        return ()
    ids = tuple(dict.fromkeys(d.strip() for d in text.split(",") if d.strip()))
    if not ids:
        fail(f"{option} needs at least one dataset id (`mrqa datasets` lists them)")
    return ids


def _jobs_written(res: dict) -> bool:
    """`--jobs-out`: say where the jobs are and what to run next (True), else nothing (False)."""
    if not res.get("jobs_written"):
        return False
    out = Path(res["jobs_written"])
    typer.echo(f"jobs of {res['runs']} model run(s) written to {out}; nothing was written to the warehouse.\n"
               f"Train them where the GPU is (this repository with torch, numpy, pyarrow and duckdb): python -m "
               f"training.af_jobs {out}\nthen run this command again with --scores-from "
               f"{out / 'scores.json'} in place of --jobs-out")
    return True


@app.command("af-check")
def af_check_cmd(task: AfTask = typer.Option(AfTask.visual_cloze, "--task", help="The task whose AF "
                                             "datasets are checked (textual cloze: GM3C question-only on the "
                                             "titles' vectors)."),
                 seeds: str = typer.Option("0,1,2", "--seeds", help="Comma-separated seeds of the check's "
                                           "models (each its own fold split, apart from the adversary's)."),
                 folds: int = typer.Option(4, "--folds", min=2, help="Folds of recipes."),
                 seed: int = typer.Option(0, "--seed", min=0, max=2 ** 32 - 1, help="The datasets' seed."),
                 as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
                 distractors: Distractors = typer.Option(Distractors.ball, "--distractors", help="Which AF "
                                                         "datasets: the knob settings' (ball), coherence's matched "
                                                         "variants (matched, author), visual cloze's kitchen ones "
                                                         "(kitchen) or redrawn ones (redrawn)."),
                 workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Processes for the "
                                                       "seeds' models (default: one per CPU core, at most one per "
                                                       "seed; with more cores, all from 2,000 questions on); more "
                                                       "than the seeds: their folds side by side."),
                 record: bool = typer.Option(False, "--record", help="Also write each figure to the "
                                             "warehouse (af_checks), for the dataset card and `mrqa export "
                                             "--reading-only`; without it nothing is written."),
                 fold_by: FoldBy = typer.Option(FoldBy.split, "--fold-by", help="The check's folds: of "
                                               "recipes over every split, or with the val and test splits "
                                               "held out whole (split: a held-out question's images were "
                                               "never in training, as in a test split)."),
                 size: Size = typer.Option(Size.small, "--size", help=ADV_SIZE_HELP),
                 jobs_out: Optional[Path] = typer.Option(None, "--jobs-out", help=JOBS_OUT_HELP),
                 scores_from: Optional[Path] = typer.Option(None, "--scores-from", help=SCORES_FROM_HELP),
                 dataset: Optional[str] = typer.Option(None, "--dataset", help="Check these datasets instead "
                                                       "(comma-separated ids of one task, adversarial or not, "
                                                       "e.g. a RecipeQA-style preset; --task is then theirs)."),
                 wait: float = wait_option()):
    """GM3C question-only accuracy on every question of the AF datasets, cross-fitted: per check seed, a
    pooled model per fold scores the questions it did not train on (--fold-by split, the default: the val
    and the test split each a fold, the train split in folds of recipes); the mean over seeds with a 95%
    interval, and split by split. Read-only unless --record. It reads every question, not a test split."""
    from flows.af_pool import af_check_flow
    ss = parse_seeds(seeds)
    try:
        res = run_flow(af_check_flow, task=task.value, seeds=ss, folds=folds, seed=seed,
                       distractors=distractors.value, workers=workers, record=record, fold_by=fold_by.value,
                       size=size.value, jobs_out=jobs_out and str(jobs_out),
                       scores_from=scores_from and str(scores_from), datasets=_ids("--dataset", dataset))
    except ValueError as e:
        fail(str(e))
    if _jobs_written(res):
        return
    if as_json:
        echo_json(res)
        return
    for head, name, gap, key in (("", "GM3C question-only (cross-fitted)  by seed" + " " * 10, 14, None),
                                 ("\n", "tree probe (cross-fitted, folds alike)   by seed" + " " * 3, 21, "tree")):
        typer.echo(f"{head}{'setting':20s} {'questions':>9s}  {name}by split: questions, accuracy")
        for r in res["datasets"]:
            t = r[key] if key else r
            lo, hi = t["ci"]
            seeds_ = " ".join(f"{100 * v:.1f}" for v in t["by_seed"].values())
            typer.echo(f"{r['setting']:20s} {r['n']:9d}  {100 * t['accuracy']:5.1f}% [{100 * lo:4.1f}, {100 * hi:4.1f}]"
                       + " " * gap + seeds_ + "   "
                       + "  ".join(f"{k} {v['n']} {100 * v['accuracy']:.1f}%" for k, v in t["by_split"].items()))


@app.command("reading-check")
def reading_check_cmd(dataset: Optional[str] = typer.Option(None, "--dataset", help="Check these datasets "
                                                            "(comma-separated ids, any reader task; those of one "
                                                            "task are pooled). Default: the newest AF visual cloze "
                                                            "dataset of each knob setting."),
                      seed: int = typer.Option(0, "--seed", help="The models' seed (and, without --dataset, the "
                                               "datasets' seed)."),
                      workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Processes for the "
                                                            "models (default: one per CPU core)."),
                      record: bool = typer.Option(False, "--record", help="Also write each dataset's figures to "
                                                  "the warehouse (reading_checks), which `mrqa export "
                                                  "--reading-only` needs; without it nothing is written."),
                      waiting: bool = typer.Option(False, "--waiting", help="Also every dataset of the seed "
                                                   "that `mrqa export --reading-only` holds back only for want "
                                                   "of a reading check (without --dataset)."),
                      folds: ReadingFolds = typer.Option(ReadingFolds.test, "--folds", help="test: score the "
                                                         "test split; split: every split held out in turn, each "
                                                         "question scored by models trained on the other splits "
                                                         "(3 times the work; small homes)."),
                      as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
                      wait: float = wait_option()):
    """Does a model have to read the recipe? Per task, a reader (4-layer transformer, step-text vectors) and a
    learned question-only model train on the datasets' train questions together and score each test split, the
    reader also with another recipe's steps. `mrqa export --reading-only` needs a lead of 20 points and a cost of
    15 (docs/knobs.md, `mrqa reading-check`)."""
    from etl.config import Paths
    from flows.train import reading_check
    paths = Paths.from_env().ensure()
    try:
        if waiting and dataset is not None:
            fail("give --dataset or --waiting, not both")
        res = reading_check(paths, seed=seed, workers=workers, datasets=_ids("--dataset", dataset), record=record,
                            waiting=waiting, folds=folds.value)
    except ValueError as e:
        fail(str(e))
    if as_json:
        echo_json(res)
        return
    if res.get("skipped"):
        fail(f"nothing to check: {res['skipped']}; name the datasets with --dataset")
    from flows.train import reading_table
    typer.echo(reading_table(res))
    if record:
        typer.echo(f"recorded {res['recorded']} datasets in reading_checks")
