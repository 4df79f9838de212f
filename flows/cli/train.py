"""`mrqa train`, `evaluate`, `baselines`, `sweep`: train and score the GM3C models on exported datasets."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from flows.cli.common import echo_json, fail

app = typer.Typer()



def _training_export(dataset: str, export: Optional[Path]) -> Path:
    """The Parquet export holding `dataset`: --export, else MRQA_HOME/exports/all when it has it,
    else MRQA_HOME/exports/<dataset> (exported with vectors now if missing)."""
    from etl.config import Paths
    from training.data import list_datasets
    paths = Paths.from_env().ensure()
    if export is not None:
        if not (export / "questions").is_dir():
            fail(f"{export} is not a Parquet export; run `mrqa export --all --with-vectors`")
        return export
    for cand in (paths.exports / "all", paths.exports / dataset):
        if (cand / "questions").is_dir() and any(d["dataset_id"] == dataset for d in list_datasets(cand)):
            return cand
    from etl.warehouse import connect
    from features.datasets.export import export_parquet
    con = connect(paths)
    try:
        if not con.execute("SELECT 1 FROM datasets WHERE dataset_id = ?", [dataset]).fetchall():
            fail(f"no dataset {dataset!r} in the warehouse or exports; `mrqa datasets` lists them")
        export_parquet(con, [dataset], paths.exports / dataset, with_vectors=True, lance_uri=paths.lance)
    finally:
        con.close()
    return paths.exports / dataset


def _train_configs(scorer: str, text_features: str, tiny: bool, size: Optional[str] = None,
                   layers: Optional[int] = None, width: Optional[int] = None, **over):
    from dataclasses import replace as _replace
    from training.config import SCORERS, SIZES, configs_for
    if scorer not in SCORERS:
        fail(f"scorer {scorer!r}: --scorer(s) must be one of {', '.join(SCORERS)}")
    if text_features not in ("tokens", "vectors"):
        fail(f"--text-features must be tokens or vectors, got {text_features!r}")
    size = size or ("tiny" if tiny else "paper")
    if size not in SIZES:
        fail(f"--size must be one of {', '.join(SIZES)}, got {size!r}")
    for flag, v in (("--layers", layers), ("--width", width)):
        if v is not None and v < 1:
            fail(f"{flag} must be >= 1, got {v}")
    if over.get("lr") is not None and not over["lr"] > 0:
        fail(f"--lr must be > 0, got {over['lr']}")
    model_kw = {k: v for k, v in (("n_layers", layers), ("d_model", width)) if v is not None}
    try:
        mc, tc = configs_for(size, scorer=scorer, text_features=text_features, **model_kw)
        mc.validate()
    except ValueError as e:                       # e.g. a width that is not a multiple of the heads
        fail(f"{e} (--width must be a multiple of the size's heads)")
    return mc, _replace(tc, **{k: v for k, v in over.items() if v is not None})


_LAYERS_HELP = "Transformer scorer layers (default: the size's; paper 4)."
_WIDTH_HELP = "Transformer scorer width d_model (default: the size's; paper 512)."
_LR_HELP = "Adam learning rate (default 5e-4, the paper's)."


@app.command("train")
def train_cmd(dataset: str = typer.Option(..., "--dataset", help="dataset_id (see `mrqa datasets`)."),
              scorer: str = typer.Option("transformer", "--scorer", help="transformer (HTRN) | bidaf | "
                                         "impatient | hasty (context-free)."),
              text_features: str = typer.Option("tokens", "--text-features", help="tokens (learned "
                                                "embeddings + BiLSTM) | vectors (precomputed step-text vectors)."),
              tiny: bool = typer.Option(False, "--tiny", help="Tiny model + short training (CPU demo)."),
              size: Optional[str] = typer.Option(None, "--size", help="paper (appendix defaults, the default) "
                                                 "| small (CPU sweeps) | tiny (same as --tiny)."),
              export: Optional[Path] = typer.Option(None, "--export", help="Parquet export directory "
                                                    "(default MRQA_HOME/exports/all or exported now)."),
              max_epochs: Optional[int] = typer.Option(None, "--max-epochs", help="Epoch cap (default 30, tiny 3)."),
              patience: Optional[int] = typer.Option(None, "--patience", help="Early stopping patience in epochs."),
              batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Questions per (global) batch."),
              seed: Optional[int] = typer.Option(None, "--seed", help="Seed (weights, shuffling)."),
              threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch (per process)."),
              layers: Optional[int] = typer.Option(None, "--layers", help=_LAYERS_HELP),
              width: Optional[int] = typer.Option(None, "--width", help=_WIDTH_HELP),
              lr: Optional[float] = typer.Option(None, "--lr", help=_LR_HELP),
              device: Optional[str] = typer.Option(None, "--device", help="auto (CUDA + AMP when present) | cpu | cuda."),
              nproc: int = typer.Option(1, "--nproc", help="Processes: > 1 runs torchrun DDP on this machine "
                                        "(gloo on CPU, NCCL with one GPU per process).")):
    """Train GM3C on a dataset (early stopping on val accuracy), test it, record the run."""
    from training.data import DatasetError
    from training.train import train_run
    mc, tc = _train_configs(scorer, text_features, tiny, size, layers, width, max_epochs=max_epochs,
                            patience=patience, batch_size=batch_size, seed=seed, threads=threads, device=device,
                            lr=lr)
    exp = _training_export(dataset, export)
    if nproc < 1:
        fail("--nproc must be >= 1")
    try:
        if nproc > 1:
            from training.ddp import launch
            argv = ["--export", str(exp), "--dataset", dataset, "--scorer", scorer, "--text-features", text_features,
                    "--size", size or ("tiny" if tiny else "paper")]
            for flag, v in (("--max-epochs", max_epochs), ("--patience", patience), ("--batch-size", batch_size),
                            ("--seed", seed), ("--threads", threads), ("--device", device),
                            ("--layers", layers), ("--width", width), ("--lr", lr)):
                argv += [flag, str(v)] if v is not None else []
            m = launch(nproc, argv)
        else:
            m = train_run(exp, dataset, mc, tc)
    except (DatasetError, ValueError, RuntimeError) as e:
        fail(str(e))
    echo_json({k: v for k, v in m.items() if k not in ("history", "model_args", "train_config")})


@app.command("evaluate")
def evaluate_cmd(run: str = typer.Option(..., "--run", help="run_id, run directory or ckpt.pt."),
                 dataset: str = typer.Option(..., "--dataset", help="dataset_id to score."),
                 export: Optional[Path] = typer.Option(None, "--export", help="Parquet export directory."),
                 split: str = typer.Option("test", "--split", help="train | val | test."),
                 cross_dataset: bool = typer.Option(False, "--cross-dataset", help="Allow another dataset "
                                                    "of the same task and encoder than the run's."),
                 predictions: Optional[Path] = typer.Option(None, "--predictions", help="Write RecipeQA-style "
                                                            "predictions {task: [index, ...]} (qid order) here.")):
    """Score a trained run on a dataset; checks encoder, task and dataset hash first."""
    from training.data import DatasetError
    from training.train import CheckpointError, evaluate_run
    exp = _training_export(dataset, export)
    try:
        res = evaluate_run(run, exp, dataset, split=split, cross_dataset=cross_dataset)
    except (CheckpointError, DatasetError, ValueError) as e:
        fail(str(e))
    if predictions:
        predictions.parent.mkdir(parents=True, exist_ok=True)
        predictions.write_text(json.dumps({res["task"]: res["predictions"]}))
    echo_json({k: v for k, v in res.items() if k not in ("predictions", "qids")})


@app.command("baselines")
def baselines_cmd(dataset: str = typer.Option(..., "--dataset", help="dataset_id to score."),
                  export: Optional[Path] = typer.Option(None, "--export", help="Parquet export directory."),
                  split: str = typer.Option("test", "--split", help="train | val | test.")):
    """Model-free references on a dataset: Hasty Student (reads only the question) and, for visual
    cloze, the step-text match (reads the recipe: the choice image closest to its step texts), also
    with another recipe's steps; next to a run's `context_ablation` they tell what the recipe is worth."""
    from etl.config import Paths
    from training.data import DatasetError, foreign_context_rows, load_qa_dataset
    from training.hasty import hasty_student_accuracy, step_text_match_accuracy
    exp = _training_export(dataset, export)
    try:
        ds = load_qa_dataset(exp, dataset, "vectors", lance_uri=Paths.from_env().lance)
    except (DatasetError, ValueError) as e:
        fail(str(e))
    if split not in ds.splits:
        fail(f"{dataset} has no {split} questions (has {', '.join(sorted(ds.splits))})")
    sp = ds.splits[split]
    res = {"dataset_id": dataset, "task": ds.task, "split": split, "n": len(sp),
           "chance": round(1 / sp.query.shape[1], 4),
           "hasty_student": round(hasty_student_accuracy(ds, split)[0], 4)}
    if ds.task == "visual_cloze":
        match = step_text_match_accuracy(ds, split)
        res["step_text_match"] = {k: round(v, 4) if isinstance(v, float) else v for k, v in match.items()}
        foreign = step_text_match_accuracy(ds, split, foreign_context_rows(sp.recipe_row)[0])
        res["step_text_match_foreign_recipe"] = round(foreign["any_step"], 4)
    echo_json(res)


@app.command("sweep")
def sweep_cmd(scorers: str = typer.Option("transformer,bidaf,impatient", "--scorers", help="Comma list of scorers."),
              tasks: str = typer.Option("visual_cloze,visual_coherence,visual_ordering", "--tasks",
                                        help="Comma list of tasks."),
              knobs: Optional[str] = typer.Option(None, "--knobs", help="Comma list of knob labels "
                                                  "(e.g. recipeqa,0-1-0); default all."),
              text_features: str = typer.Option("tokens", "--text-features", help="tokens | vectors."),
              tiny: bool = typer.Option(False, "--tiny", help="Tiny models + short training."),
              size: Optional[str] = typer.Option(None, "--size", help="paper (default) | small (CPU sweeps) | tiny."),
              max_epochs: Optional[int] = typer.Option(None, "--max-epochs", help="Epoch cap per run."),
              patience: Optional[int] = typer.Option(None, "--patience", help="Early stopping patience."),
              max_train: Optional[int] = typer.Option(None, "--max-train-questions", help="Cap train questions per run."),
              seed: Optional[int] = typer.Option(None, "--seed", help="Seed of every run."),
              threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch."),
              layers: Optional[int] = typer.Option(None, "--layers", help=_LAYERS_HELP),
              width: Optional[int] = typer.Option(None, "--width", help=_WIDTH_HELP),
              lr: Optional[float] = typer.Option(None, "--lr", help=_LR_HELP),
              export: Optional[Path] = typer.Option(None, "--export", help="Parquet export (default MRQA_HOME/exports/all)."),
              out: Optional[Path] = typer.Option(None, "--out", help="Report directory (default MRQA_HOME/reports/sweep).")):
    """Train scorers x knob settings x tasks; write accuracy.parquet, accuracy.md and accuracy.png."""
    from etl.config import Paths
    from training.sweep import sweep
    paths = Paths.from_env().ensure()
    exp = export or paths.exports / "all"
    if not (exp / "questions").is_dir():
        fail(f"no Parquet export at {exp}; run `mrqa export --all --with-vectors` first")
    sc = [s.strip() for s in scorers.split(",") if s.strip()]
    mc, tc = _train_configs(sc[0] if sc else "", text_features, tiny, size, layers, width, max_epochs=max_epochs,
                            patience=patience, max_train_questions=max_train, threads=threads, seed=seed, lr=lr)
    for s in sc:
        _train_configs(s, text_features, tiny, size)
    try:
        res = sweep(exp, out or paths.reports / "sweep", sc, [t.strip() for t in tasks.split(",")],
                    [k.strip() for k in knobs.split(",")] if knobs else None, mc, tc, text_features)
    except ValueError as e:
        fail(str(e))
    typer.echo(Path(res["out"], "accuracy.md").read_text())
    typer.echo(f"wrote {res['out']}/accuracy.parquet, accuracy.md, accuracy.png")
