"""`mrqa train`, `evaluate`, `baselines`, `sweep`: train and score the GM3C models on exported datasets.

The model size (--size/--tiny, --layers, --width, --lr, ...) is resolved by training.config.resolve_configs,
the same function the torchrun entry point (python -m training.train) and the training flows use."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from flows.cli.choices import ReaderTask, Scorer, Size, Split, TextFeatures, VisualTask
from flows.cli.common import check_out_path, echo_json, fail, parse_choices, wait_option

app = typer.Typer()
LAYERS_HELP = "Transformer scorer layers (default: the size's; paper 4)."
WIDTH_HELP = "Transformer scorer width d_model (default: the size's; paper 512)."
LR_HELP = "Adam learning rate (default 5e-4, the paper's)."
ALIGN_HELP = ("The readers' explicit step alignment (each image's cosine profile over the step texts); "
              "default on with --text-features vectors, never for question_only.")
SIZE_HELP = "paper (appendix defaults, the default), small (CPU sweeps) or tiny (same as --tiny)."


def configs(scorer: str, text_features: str, tiny: bool, size: Optional[str], **overrides):
    """(ModelConfig, TrainConfig) from the options (training.config.resolve_configs); a bad value
    ends the command with its one-line reason."""
    from training.config import resolve_configs
    try:
        return resolve_configs(size, tiny=tiny, scorer=scorer, text_features=text_features, **overrides)
    except ValueError as e:
        fail(str(e))


def export_for(dataset: str, export: Optional[Path]) -> Path:
    """The Parquet export to train or score `dataset` on (training.data.training_export)."""
    from training.data import DatasetError, training_export
    try:
        return training_export(dataset, export)
    except DatasetError as e:
        fail(str(e))


@app.command("train")
def train_cmd(dataset: str = typer.Option(..., "--dataset", help="dataset_id (see `mrqa datasets`)."),
              scorer: Scorer = typer.Option(Scorer.transformer, "--scorer", help="transformer (HTRN), bidaf, "
                                            "impatient, or question_only (context-free)."),
              text_features: TextFeatures = typer.Option(TextFeatures.tokens, "--text-features", help="tokens "
                                                         "(learned embeddings + BiLSTM) or vectors (precomputed "
                                                         "step-text vectors)."),
              tiny: bool = typer.Option(False, "--tiny", help="Tiny model + short training (CPU demo)."),
              size: Optional[Size] = typer.Option(None, "--size", help=SIZE_HELP),
              export: Optional[Path] = typer.Option(None, "--export", help="Parquet export directory "
                                                    "(default MRQA_HOME/exports/all if it holds the dataset as "
                                                    "the warehouse has it, else exported now)."),
              max_epochs: Optional[int] = typer.Option(None, "--max-epochs", help="Epoch cap (default 30, tiny 3)."),
              patience: Optional[int] = typer.Option(None, "--patience", help="Early stopping patience in epochs."),
              batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Questions per (global) batch."),
              seed: Optional[int] = typer.Option(None, "--seed", help="Seed (weights, shuffling)."),
              threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch (per process)."),
              layers: Optional[int] = typer.Option(None, "--layers", help=LAYERS_HELP),
              width: Optional[int] = typer.Option(None, "--width", help=WIDTH_HELP),
              lr: Optional[float] = typer.Option(None, "--lr", help=LR_HELP),
              align: Optional[bool] = typer.Option(None, "--align/--no-align", help=ALIGN_HELP),
              device: Optional[str] = typer.Option(None, "--device", help="auto (CUDA + AMP when present), cpu, "
                                                   "cuda or a torch device such as cuda:1."),
              nproc: int = typer.Option(1, "--nproc", help="Processes: > 1 runs torchrun DDP on this machine "
                                        "(gloo on CPU, NCCL with one GPU per process)."),
              wait: float = wait_option()):
    """Train GM3C on a dataset (early stopping on val accuracy), test it, record the run."""
    if nproc < 1:
        fail(f"--nproc must be >= 1, got {nproc}")
    given = {"--max-epochs": max_epochs, "--patience": patience, "--batch-size": batch_size, "--seed": seed,
             "--threads": threads, "--device": device, "--layers": layers, "--width": width, "--lr": lr}
    mc, tc = configs(scorer.value, text_features.value, tiny, size and size.value, layers=layers, width=width,
                     align=align, max_epochs=max_epochs, patience=patience, batch_size=batch_size, seed=seed,
                     threads=threads, device=device, lr=lr)
    from training.data import DatasetError
    from training.train import train_run
    exp = export_for(dataset, export)
    try:
        if nproc > 1:               # every rank resolves the same configs from the same options
            from training.ddp import launch
            argv = ["--export", str(exp), "--dataset", dataset, "--scorer", scorer.value,
                    "--text-features", text_features.value] + (["--tiny"] if tiny else [])
            argv += ["--size", size.value] if size else []
            for flag, v in given.items():
                argv += [flag, str(v)] if v is not None else []
            argv += [] if align is None else ["--align" if align else "--no-align"]
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
                 split: Split = typer.Option(Split.test, "--split", help="The split to score."),
                 cross_dataset: bool = typer.Option(False, "--cross-dataset", help="Allow another dataset "
                                                    "of the same task and encoder than the run's."),
                 predictions: Optional[Path] = typer.Option(None, "--predictions", help="Write RecipeQA-style "
                                                            "predictions {task: [index, ...]} (qid order) here."),
                 ablation_predictions: Optional[Path] = typer.Option(None, "--ablation-predictions", help="Write the "
                                                                     "choices made with another recipe's steps "
                                                                     "(the context ablation; same format) here.")):
    """Score a trained run on a dataset; checks encoder, task and dataset hash first."""
    if predictions is not None:
        predictions = check_out_path("--predictions", predictions, want_dir=False)
    if ablation_predictions is not None:
        ablation_predictions = check_out_path("--ablation-predictions", ablation_predictions, want_dir=False)
    from training.data import DatasetError
    from training.train import CheckpointError, evaluate_run
    exp = export_for(dataset, export)
    try:
        res = evaluate_run(run, exp, dataset, split=split.value, cross_dataset=cross_dataset)
    except (CheckpointError, DatasetError, ValueError) as e:
        fail(str(e))
    if predictions:
        predictions.parent.mkdir(parents=True, exist_ok=True)
        predictions.write_text(json.dumps({res["task"]: res["predictions"]}))
    if ablation_predictions:
        ablation_predictions.parent.mkdir(parents=True, exist_ok=True)
        ablation_predictions.write_text(json.dumps({res["task"]: res["ablation_predictions"]}))
    echo_json({k: v for k, v in res.items() if k not in ("predictions", "ablation_predictions", "qids")})


@app.command("baselines")
def baselines_cmd(dataset: str = typer.Option(..., "--dataset", help="dataset_id to score."),
                  export: Optional[Path] = typer.Option(None, "--export", help="Parquet export directory."),
                  split: str = typer.Option("test", "--split", help="A split of the dataset: train, val or test.")):
    """Model-free references on a dataset: Hasty Student (reads only the question) and, for visual
    cloze, the step-text match (reads the recipe: the choice image closest to its step texts), also
    with another recipe's steps; next to a run's `context_ablation` they tell what the recipe is worth."""
    from etl.config import Paths
    from training.baselines import reference_scores
    from training.data import DatasetError, load_qa_dataset
    exp = export_for(dataset, export)
    try:
        ds = load_qa_dataset(exp, dataset, "vectors", lance_uri=Paths.from_env().lance)
    except (DatasetError, ValueError) as e:
        fail(str(e))
    if split not in ds.splits:       # a dataset may lack a split, so this is checked on the data
        fail(f"--split: {dataset} has no {split} questions (has {', '.join(sorted(ds.splits))})")
    echo_json(reference_scores(ds, split))


@app.command("sweep")
def sweep_cmd(scorers: str = typer.Option("transformer,bidaf,impatient", "--scorers",
                                          help=f"Comma list of scorers ({', '.join(Scorer)})."),
              tasks: str = typer.Option(",".join(VisualTask), "--tasks", help="Comma list of tasks "
                                        f"({', '.join(ReaderTask)}; textual_cloze reads the steps' photos "
                                        "and needs --text-features vectors)."),
              knobs: Optional[str] = typer.Option(None, "--knobs", help="Comma list of knob labels "
                                                  "(e.g. recipeqa,0-1-0); default all."),
              text_features: TextFeatures = typer.Option(TextFeatures.tokens, "--text-features",
                                                         help="Step texts as tokens or vectors."),
              tiny: bool = typer.Option(False, "--tiny", help="Tiny models + short training."),
              size: Optional[Size] = typer.Option(None, "--size", help=SIZE_HELP),
              max_epochs: Optional[int] = typer.Option(None, "--max-epochs", help="Epoch cap per run."),
              patience: Optional[int] = typer.Option(None, "--patience", help="Early stopping patience."),
              max_train: Optional[int] = typer.Option(None, "--max-train-questions",
                                                      help="Cap train questions per run."),
              seed: Optional[int] = typer.Option(None, "--seed", help="Seed of every run."),
              threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch."),
              layers: Optional[int] = typer.Option(None, "--layers", help=LAYERS_HELP),
              width: Optional[int] = typer.Option(None, "--width", help=WIDTH_HELP),
              lr: Optional[float] = typer.Option(None, "--lr", help=LR_HELP),
              align: Optional[bool] = typer.Option(None, "--align/--no-align", help=ALIGN_HELP),
              export: Optional[Path] = typer.Option(None, "--export",
                                                    help="Parquet export (default MRQA_HOME/exports/all)."),
              out: Optional[Path] = typer.Option(None, "--out",
                                                 help="Report directory (default MRQA_HOME/reports/sweep)."),
              pooled: bool = typer.Option(False, "--pooled", help="Per task and scorer, train once on the "
                                          "union of the selected settings' train/val questions (one recipe "
                                          "split for all) and test on each setting; needs --text-features "
                                          "vectors."),
              wait: float = wait_option()):
    """Train scorers x knob settings x tasks; write accuracy.parquet, accuracy.md and accuracy.png."""
    from etl.config import Paths
    sc = parse_choices("--scorers", scorers, Scorer)
    task_list = parse_choices("--tasks", tasks, ReaderTask)
    if "textual_cloze" in task_list and text_features.value != "vectors":
        fail("--tasks textual_cloze needs --text-features vectors (its context is the steps' photos, as vectors)")
    if out is not None:
        out = check_out_path("--out", out)
    if pooled and text_features.value != "vectors":
        fail("--pooled needs --text-features vectors (token vocabularies differ between datasets)")
    mc, tc = configs(sc[0], text_features.value, tiny, size and size.value, layers=layers, width=width,
                     align=align,
                     max_epochs=max_epochs, patience=patience, max_train_questions=max_train, threads=threads,
                     seed=seed, lr=lr)
    from training.sweep import sweep
    paths = Paths.from_env().ensure()
    exp = export or paths.exports / "all"
    if not (exp / "questions").is_dir():
        fail(f"no Parquet export at {exp}; run `mrqa export --all --with-vectors` first")
    _say_if_stale(paths, exp, task_list, [k.strip() for k in knobs.split(",")] if knobs else None)
    try:
        res = sweep(exp, out or paths.reports / "sweep", sc, task_list,
                    [k.strip() for k in knobs.split(",")] if knobs else None, mc, tc, text_features.value,
                    align=align, pooled=pooled)
    except ValueError as e:
        fail(str(e))
    typer.echo(Path(res["out"], "accuracy.md").read_text())
    typer.echo(f"wrote {res['out']}/accuracy.parquet, accuracy.md, accuracy.png")


def _say_if_stale(paths, exp: Path, tasks: list[str], knobs: list[str] | None) -> None:
    """A warning on stderr when the datasets the sweep selects from the export are not the warehouse's: generated
    or filtered again since it was written, or gone from it (features/datasets/export.py export_freshness);
    the sweep runs on the export as it is."""
    if not paths.warehouse.exists():
        return
    from contextlib import closing

    from etl.warehouse import connect_reader
    from features.datasets.export import export_freshness
    from training.data import DatasetError, list_datasets
    from training.sweep import selected
    try:
        ids = [d["dataset_id"] for d in selected(list_datasets(exp), tasks, knobs)]
    except DatasetError:
        return                                  # the sweep says why it cannot read the export
    if not ids:
        return
    with closing(connect_reader(paths)) as con:
        try:
            fr = export_freshness(con, exp, ids)
        except ValueError:
            return
    old = fr["changed"] + fr["gone"]
    if old:
        said = "; ".join(f"{len(fr[k])} {w}" for k, w in (("changed", "generated or filtered again since it was "
                                                                      "written"),
                                                           ("gone", "no longer in the warehouse")) if fr[k])
        typer.echo(f"warning: {exp} is stale for this sweep: of the {len(ids)} datasets it selects, {said} "
                   f"({', '.join(old[:3])}{', ...' if len(old) > 3 else ''}); the sweep reads them as they are: "
                   "`mrqa export --all --with-vectors` writes the export again", err=True)
