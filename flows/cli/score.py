"""`mrqa score`: any model's predictions on a benchmark split, judged as the reading benchmark judges its own
readers: accuracy with a 95% interval, the lead over question-only models, and what another recipe's steps
cost the model (training/score.py). Read-only: it never writes the warehouse."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from flows.cli.choices import Split
from flows.cli.common import check_out_path, echo_json, fail

app = typer.Typer()


@app.command("score")
def score_cmd(dataset: str = typer.Option(..., "--dataset", help="dataset_id (see `mrqa datasets`)."),
              predictions: Optional[Path] = typer.Option(None, "--predictions", help="Your model's choices: JSON "
                                                         "{qid: index}, a JSON list in qid order (or {task: list}, "
                                                         "as `mrqa evaluate --predictions` writes), JSON Lines "
                                                         "{\"qid\", \"prediction\"} (.jsonl) or CSV qid,prediction "
                                                         "(.csv); 0-based."),
              context_ablation: Optional[Path] = typer.Option(None, "--context-ablation", help="The same model's "
                                                              "choices when each question is given the steps of "
                                                              "the recipe `--plan` names (same formats)."),
              question_only: Optional[Path] = typer.Option(None, "--question-only", help="Choices of a model that "
                                                           "never sees the recipe (same formats)."),
              plan: Optional[Path] = typer.Option(None, "--plan", help="Write the split's context-ablation plan "
                                                  "here (qid, recipe_id, context_recipe_id; CSV, or Parquet for a "
                                                  ".parquet name) and stop."),
              split: Split = typer.Option(Split.test, "--split", help="The split the predictions are for."),
              export: Optional[Path] = typer.Option(None, "--export", help="Read the questions from this Parquet "
                                                    "export (`mrqa export`) instead of the warehouse."),
              as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON.")):
    """Score a model's predictions on a dataset's split: accuracy [95% interval], what another recipe's
    steps cost it, its lead over question-only figures, and whether that shows it reads the recipe
    (20 points above question-only, 15 lost with another recipe's steps)."""
    if plan is None and predictions is None:
        fail("give --predictions FILE to score, or --plan FILE to write the context-ablation plan first")
    if plan is not None and (predictions or context_ablation or question_only):
        fail("--plan writes the ablation plan and stops: give it without --predictions, --context-ablation "
             "and --question-only")
    if plan is not None:
        plan = check_out_path("--plan", plan, want_dir=False)
    from etl.config import Paths
    from training import score as sc
    paths = Paths.from_env()
    con = None
    if paths.warehouse.exists():
        from etl.warehouse import connect
        con = connect(paths, read_only=True)
    elif export is None:
        fail(f"no warehouse at {paths.warehouse} and no --export: give the export the predictions were made on, "
             "or check --home")
    try:
        qs = sc.load_split(dataset, split.value, export, con)
        if plan is not None:
            own = sc.write_plan(qs, plan)
            typer.echo(f"wrote the context-ablation plan of {qs.n} {qs.split} questions of {qs.dataset_id} to {plan}"
                       + (f" ({own} keep their own recipe: one recipe holds over half the split)" if own else ""))
            return
        pred = sc.read_predictions(predictions, qs)
        ablated = sc.read_predictions(context_ablation, qs) if context_ablation else None
        qo = sc.read_predictions(question_only, qs) if question_only else None
        res = sc.score(qs, pred, ablated, qo, sc.recorded_figures(con, qs))
    except sc.ScoreError as e:
        fail(str(e))
    finally:
        if con is not None:
            con.close()
    if as_json:
        echo_json(res)
    else:
        typer.echo(sc.format_score(res))
    missing = res["model"]["missing"]
    if missing:
        typer.secho(f"warning: {missing} of {qs.n} questions have no prediction and count as wrong", err=True)
