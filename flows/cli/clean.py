"""`mrqa clean`, `tokenize`, `vocab-report`: clean and tokenize step texts, and the vocabulary's quality."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from flows.cli.common import echo_json, fail, require_warehouse, run_flow, wait_option

app = typer.Typer()


@app.command("clean")
def clean_cmd(workers: int = typer.Option(2, "--workers", min=1, help="Worker processes (1 = in-process)."),
              retrain_punkt: bool = typer.Option(False, "--retrain-punkt",
                                                 help="Retrain the Punkt sentence model on the corpus."),
              no_repair: bool = typer.Option(False, "--no-repair", help="Store tokens without OOV repair."),
              wait: float = wait_option()):
    """Clean all steps from raw text, reject non-recipes (rejects, stage clean), store step_tokens."""
    from etl.clean import CleanWorkerDied
    from flows.clean import clean_flow
    require_warehouse()                 # nothing to clean in a home that has none (a mistyped --home)
    try:
        summary = run_flow(clean_flow, workers=workers, retrain_punkt=retrain_punkt, repair=not no_repair)
    except CleanWorkerDied as e:
        fail(str(e), code=1)
    echo_json(summary)


@app.command("tokenize")
def tokenize_cmd(text: str = typer.Argument(..., help="Raw text (may hold HTML, Unicode junk, fused words)."),
                 title: bool = typer.Option(False, "--title", help="Clean it as a step title (drops 'Step 3:')."),
                 no_repair: bool = typer.Option(False, "--no-repair", help="Skip OOV repair.")):
    """Print the JSON list of token lists (one per sentence) the pipeline would store for TEXT."""
    from etl.clean_rules import clean_text, clean_title
    from etl.config import Paths
    from etl.repair import Repairer
    from etl.tokenize import load_punkt, tokenize_text, untrained_punkt
    punkt = load_punkt(Paths.from_env().models) or untrained_punkt()
    cleaned = clean_title(text) if title else clean_text(text)
    sents = tokenize_text(cleaned, punkt)
    if not no_repair:
        rep = Repairer()
        sents = [rep.repair_tokens(s) for s in sents]
    typer.echo(json.dumps(sents, ensure_ascii=False))


@app.command("vocab-report")
def vocab_report_cmd(
        ground_truth: Optional[Path] = typer.Option(None, "--ground-truth", help="A sample kitchen "
                                                    "ground_truth.jsonl: also score repairs and noise removal."),
        top: int = typer.Option(30, "--top", min=0, help="How many top OOV types to list."),
        wait: float = wait_option()):
    """Vocabulary quality before/after OOV repair (stored in vocab_stats); optionally repair accuracy."""
    from etl.config import Paths
    from etl.vocab import evaluate_on_ground_truth, vocab_report
    from etl.warehouse import connect
    out, scored = {}, None
    if ground_truth is not None:         # first: a file that is not a ground truth stores nothing
        if not ground_truth.is_file():
            fail(f"{ground_truth}: no such file (build one with etl.sample.generate.build_sample)")
        try:
            scored = evaluate_on_ground_truth(ground_truth)
        except ValueError as e:
            fail(f"--ground-truth {e}")
    if Paths.from_env().warehouse.exists():
        out = vocab_report(connect(), top=top)
    if scored is not None:
        out["ground_truth"] = scored
    if not out:
        fail("no warehouse yet: run `mrqa clean` first, or pass --ground-truth")
    echo_json(out)
