"""`mrqa roles ...` and `mrqa competence ...`: the cooking-role layer and the R2VQ-style competence
question families made from it (generate, evaluate, export)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from flows.cli.common import check_out_path, echo_json, fail, run_flow, wait_option

roles_app = typer.Typer(help="The cooking-role layer of the warehouse (step_roles).", no_args_is_help=True)
app = typer.Typer(help="Competence question families (R2VQ-style): generate, evaluate, export.",
                  no_args_is_help=True)

SOURCES = ("truth", "rules")


def _con():
    from etl.warehouse import SchemaError, connect
    try:
        return connect()
    except SchemaError as e:
        fail(str(e))


@roles_app.command("extract")
def roles_extract_cmd(wait: float = wait_option()):
    """Extract events, participants, tools, habitats, times and temperatures from every ok recipe's
    cleaned steps with the rules (source 'rules'; replaces the earlier rules rows)."""
    from etl.roles.store import extract_roles
    echo_json(extract_roles(_con()))


@roles_app.command("truth")
def roles_truth_cmd(ground_truth: Path = typer.Option(..., "--ground-truth", help="A sample kitchen's "
                                                      "ground_truth.jsonl (mrqa sample build)."),
                    wait: float = wait_option()):
    """Load the sample kitchen's planned roles (source 'truth', exact, with mixtures and hidden roles)."""
    from etl.roles.store import load_truth
    try:
        echo_json(load_truth(_con(), ground_truth))
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))


@roles_app.command("eval")
def roles_eval_cmd(ground_truth: Optional[Path] = typer.Option(None, "--ground-truth", help="Score against a "
                                                               "sample kitchen's planned roles."),
                   labels: Optional[Path] = typer.Option(None, "--labels", help="Hand labels of real steps "
                                                         "(JSON: recipes -> steps -> events, tools, ...)."),
                   records: Optional[Path] = typer.Option(None, "--records", help="The RecipeQA JSON holding "
                                                          "the labelled recipes' text (with --labels).")):
    """Precision / recall of the rule-based extractor per role."""
    from etl.roles.evaluate import score_real, score_sample
    if not ground_truth and not labels:
        fail("give --ground-truth FILE and/or --labels FILE --records FILE")
    if labels and not records:
        fail("--labels needs --records (the RecipeQA JSON with those recipes' text)")
    out = {}
    try:
        if ground_truth:
            if not ground_truth.is_file():
                fail(f"{ground_truth}: no such file")
            out["sample"] = score_sample(ground_truth)
        if labels:
            for f in (labels, records):
                if not f.is_file():
                    fail(f"{f}: no such file")
            out["real"] = score_real(labels, records)
    except (ValueError, KeyError) as e:
        fail(f"cannot score: {e}")
    except (TypeError, AttributeError) as e:      # a record of another shape deeper than the checks look
        fail(f"cannot score: a file of another shape ({type(e).__name__}: {e})")
    echo_json(out)


@app.command("generate")
def generate_cmd(seed: int = typer.Option(0, "--seed", help="Seed of the unanswerable draws."),
                 source: Optional[str] = typer.Option(None, "--source", help="Role layer to ask from: truth "
                                                      "(sample kitchen plans) or rules; default truth when loaded."),
                 ground_truth: Optional[Path] = typer.Option(None, "--ground-truth", help="Also (re)load this "
                                                             "sample kitchen ground truth first."),
                 roles: bool = typer.Option(True, "--roles/--no-roles", help="(Re)extract the rules role layer "
                                            "first."),
                 split: str = typer.Option("test", "--split", help="Split the baselines and reader are scored on."),
                 fmt: str = typer.Option("table", "--format", help="table | json"),
                 wait: float = wait_option()):
    """Generate the six competence families (cardinality, elision, implicit, lifespan, modifier,
    unanswerable) as datasets competence-<family>-s<seed>, and score the bias baselines and the reader."""
    from flows.competence import competence_flow
    if source is not None and source not in SOURCES:
        fail(f"--source must be one of {', '.join(SOURCES)}")
    if split not in ("train", "val", "test"):
        fail("--split must be one of train, val, test")
    if fmt not in ("table", "json"):
        fail("--format must be table or json")
    if ground_truth is not None and not ground_truth.is_file():
        fail(f"{ground_truth}: no such file; it is the ground_truth.jsonl of `mrqa sample build --out DIR`")
    try:
        res = run_flow(competence_flow, seed=seed, ground_truth=str(ground_truth) if ground_truth else None,
                       source=source, split=split, roles=roles)
    except ValueError as e:
        fail(str(e))
    if fmt == "json":
        echo_json(res)
    else:
        from features.competence.report import format_table
        typer.echo(format_table(res["results"], res["source"], split))


@app.command("evaluate")
def evaluate_cmd(seed: int = typer.Option(0, "--seed"), split: str = typer.Option("test", "--split"),
                 fmt: str = typer.Option("table", "--format", help="table | json"), wait: float = wait_option()):
    """Score the stored competence datasets again (baselines, reader, reader with another recipe)."""
    from features.competence.evaluate import evaluate
    from features.competence.report import format_table
    from features.competence.store import load_questions, write_metrics
    if split not in ("train", "val", "test"):
        fail("--split must be one of train, val, test")
    if fmt not in ("table", "json"):
        fail("--format must be table or json")
    con = _con()
    try:
        qs = load_questions(con, seed)
    except ValueError as e:
        fail(str(e))
    res = evaluate(con, qs, split)
    write_metrics(con, res, seed, split)
    src = con.execute("SELECT any_value(source) FROM competence_datasets WHERE seed = ?", [seed]).fetchall()[0][0]
    echo_json(res) if fmt == "json" else typer.echo(format_table(res, src, split))


@app.command("export")
def export_cmd(out: Path = typer.Option(..., "--out", help="Output folder."), seed: int = typer.Option(0, "--seed"),
               wait: float = wait_option()):
    """Export the competence datasets: Parquet partitioned by family and split, and R2VQ-style JSON."""
    from features.competence.store import export
    out = check_out_path("--out", out)
    try:
        echo_json(export(_con(), out, seed))
    except ValueError as e:
        fail(str(e))
