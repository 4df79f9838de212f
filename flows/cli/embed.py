"""`mrqa encoder ...` and `mrqa embed`: train or register encoders, and embed images and step texts."""
from __future__ import annotations

import math
import os
from typing import Optional

import typer

from flows.cli.choices import Decode, NeighbourMethod, Split, TwinMode
from flows.cli.common import PREFECT_ENV, echo_json, fail, run_flow, use_prefect, wait_option

app = typer.Typer()


encoder_app = typer.Typer(no_args_is_help=True, help="Image/text encoders (feature spaces): train the "
                                                     "default, register real open_clip weights, list, evaluate.")
app.add_typer(encoder_app, name="encoder")


@encoder_app.command("train")
def encoder_train_cmd(
        epochs: Optional[int] = typer.Option(None, "--epochs", help="Passes over the train steps "
                                             "(default: TrainConfig's, 16)."),
        batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Images per contrastive "
                                                 "batch (default 64)."),
        images_per_recipe: Optional[int] = typer.Option(None, "--images-per-recipe", help="Steps of one "
                                                        "recipe kept together in a batch (default 4)."),
        recipe_weight: Optional[float] = typer.Option(None, "--recipe-weight", help="Weight of the "
                                                      "same-recipe image-image term (default 0 = CLIP loss only; "
                                                      "> 0 teaches the kitchen cue)."),
        hard_share: Optional[float] = typer.Option(None, "--hard-share", help="Share of each epoch's "
                                                   "steps (from the 2nd on) batched with their look-alike "
                                                   "steps: hard negatives as knob 2 picks them (0-1)."),
        twins: Optional[TwinMode] = typer.Option(None, "--twins", help="Text twins in a batch (steps that "
                                                 "say the same): none (negatives, as CLIP), positive, or mask."),
        seed: int = typer.Option(0, "--seed", min=0, max=2**32 - 1, help="Seed of init, image picks and order."),
        image_size: Optional[int] = typer.Option(None, "--image-size", min=8, help="Input size in pixels, at "
                                                 "least one 8-pixel patch (default: the architecture's, 32)."),
        lr: Optional[float] = typer.Option(None, "--lr", help="Peak AdamW learning rate (default 1e-3)."),
        workers: int = typer.Option(0, "--workers", min=0, help="Decode workers for images not in the "
                                    "pixel cache."),
        threads: Optional[int] = typer.Option(None, "--threads", help="torch CPU threads (default 1: "
                                              "the tiny model gains little from more, a loaded machine loses a lot)."),
        max_steps: Optional[int] = typer.Option(None, "--max-train-steps", min=1,
                                                help="Use at most this many train steps (quick runs)."),
        wait: float = wait_option()):
    """Train the default encoder (mrqa-tiny-clip) on the train split: CLIP loss on (step image, step
    text) pairs, plus a same-recipe image-image term when --recipe-weight > 0."""
    if lr is not None and not (lr > 0 and math.isfinite(lr)):
        fail(f"--lr must be > 0 and finite, got {lr}")
    from etl.warehouse import connect
    from features.embed.train_encoder import TrainConfig, TrainingDataError, train_encoder
    given = {"epochs": epochs, "batch_size": batch_size, "images_per_recipe": images_per_recipe,
             "recipe_weight": recipe_weight, "lr": lr, "threads": threads, "hard_share": hard_share,
             "twins": twins.value if twins else None}
    cfg = TrainConfig(seed=seed, image_size=image_size, num_workers=workers,
                      max_train_pairs=max_steps, **{k: v for k, v in given.items() if v is not None})
    if cfg.epochs < 1 or cfg.batch_size < 2 or cfg.images_per_recipe < 1 or cfg.recipe_weight < 0:
        fail("--epochs and --images-per-recipe must be >= 1, --batch-size >= 2, --recipe-weight >= 0")
    if not 0 <= cfg.hard_share <= 1:
        fail("--hard-share must be between 0 and 1")
    if threads is not None and threads < 1:
        fail("--threads must be >= 1")
    try:
        res = train_encoder(connect(), cfg=cfg)
    except TrainingDataError as e:
        fail(str(e))
    echo_json(res)


@encoder_app.command("words")
def encoder_words_cmd(
        dim: int = typer.Option(128, "--dim", min=1, help="Principal axes kept (fewer when the vocabulary "
                                "is smaller)."),
        max_terms: int = typer.Option(4096, "--max-terms", min=2, help="Terms kept, those in most texts "
                                      "(the covariance is max-terms x max-terms)."),
        min_docs: int = typer.Option(2, "--min-docs", min=1, help="A term must be in at least this many texts."),
        split: str = typer.Option("train", "--split", help="The split whose step titles and bodies it is fitted on."),
        wait: float = wait_option()):
    """Fit the words encoder (text only, no photos or weights needed): the principal axes of the split's
    step titles' and bodies' TF-IDF. Prints its encoder_id and title-to-body retrieval; then `mrqa embed
    --encoder ID` and `mrqa generate --task textual_cloze ... --encoder ID`."""
    from etl.warehouse import connect
    from features.embed.words_encoder import WordsConfig, WordsDataError, fit_words_encoder
    try:
        res = fit_words_encoder(connect(), cfg=WordsConfig(dim=dim, max_terms=max_terms, min_docs=min_docs,
                                                           split=split))
    except WordsDataError as e:
        fail(str(e))
    echo_json(res)


@encoder_app.command("add")
def encoder_add_cmd(
        clip_model: str = typer.Option("ViT-B-32", "--clip-model", help="open_clip architecture name."),
        pretrained: str = typer.Option(..., "--pretrained", help="Weights: a local file or an open_clip "
                                       "tag (resolved from the HF cache; set HF_HUB_OFFLINE=1 offline)."),
        image_size: Optional[int] = typer.Option(None, "--image-size", help="Override input size."),
        wait: float = wait_option()):
    """Register an open_clip model with real weights as an encoder (prints its encoder_id)."""
    from etl.warehouse import connect
    from features.embed.encoders import EncoderUnavailable, register_pretrained_encoder
    try:
        typer.echo(register_pretrained_encoder(connect(), clip_model, pretrained, image_size))
    except EncoderUnavailable as e:
        fail(str(e))


@encoder_app.command("list")
def encoder_list_cmd():
    """Registered encoders with kind, dimension and validation metrics."""
    from etl.warehouse import connect
    from features.embed.encoders import list_encoders
    rows = list_encoders(connect())
    if not rows:
        typer.echo("no encoders; run `mrqa encoder train`")
    for r in rows:
        m = r["metrics"]
        typer.echo(f"{r['encoder_id']}  {r['kind']:10s} dim={r['dim']:<4d} {r['created_at']:%Y-%m-%d %H:%M}"
                   + (f"  val i2t R@1={m.get('i2t_r@1')} R@10={m.get('i2t_r@10')}" if m.get("n_pairs") else ""))


@encoder_app.command("eval")
def encoder_eval_cmd(encoder: Optional[str] = typer.Option(None, "--encoder", help="encoder_id "
                                                            "(default: the latest)."),
                     split: Split = typer.Option(Split.val, "--split", help="Pairs of this split."),
                     max_pairs: int = typer.Option(1000, "--max-pairs", min=2, help="Seeded sample size "
                                                   "(at least 2 pairs)."),
                     workers: int = typer.Option(2, "--workers", min=0, help="Image decode workers "
                                                 "(0 = in-process).")):
    """Image<->text retrieval recall@1/@10 on (step image, step text) pairs, with chance level."""
    from etl.config import Paths
    from etl.warehouse import connect
    from features.embed.decode import image_items
    from features.embed.encoders import EncoderUnavailable, load_encoder
    from features.embed.train_encoder import evaluate_retrieval
    paths = Paths.from_env()
    con = connect(paths)
    try:
        enc = load_encoder(con, encoder, paths=paths)
    except EncoderUnavailable as e:
        fail(str(e))
    if getattr(enc, "kind", None) == "words":       # text only: a title against its own step's body
        from features.embed.words_encoder import text_retrieval
        t = text_retrieval(con, enc, split.value, max_pairs)
        if not t:
            fail(f"fewer than 2 {split} steps with a title and a body; ingest recipes first")
        typer.echo(f"words encoder {enc.encoder_id} on {t['n_title_body_pairs']} {split} (title, body) pairs: "
                   f"title->body R@1 {t['title_body_r@1']:.3f}, R@10 {t['title_body_r@10']:.3f} "
                   f"(chance {t['chance_title_body_r@10']:.3f}); among its recipe's steps "
                   f"R@1 {t['title_body_in_recipe_r@1']:.3f} (chance {t['chance_in_recipe_r@1']:.3f})")
        return
    m = evaluate_retrieval(enc, image_items(con, paths, split=split.value), max_pairs, num_workers=workers)
    if m.get("n_pairs", 0) < 2:
        fail(f"fewer than 2 {split} pairs with images; ingest recipes first")
    typer.echo(f"encoder {enc.encoder_id} on {m['n_pairs']} {split} pairs (first image of a step, step text)")
    for k in (1, 10):
        typer.echo(f"  R@{k:<3d} image->text {m[f'i2t_r@{k}']:.3f}   text->image {m[f't2i_r@{k}']:.3f}"
                   f"   chance {m[f'chance_r@{k}']:.3f}"
                   f"   ({m[f'i2t_r@{k}'] / max(m[f'chance_r@{k}'], 1e-9):.0f}x / "
                   f"{m[f't2i_r@{k}'] / max(m[f'chance_r@{k}'], 1e-9):.0f}x chance)")
    typer.echo(f"  image->same-recipe R@1 {m['img_same_recipe_r@1']:.3f}   chance "
               f"{m['chance_same_recipe_r@1']:.3f}   (nearest other image is a step of the same recipe)")
    if "t2i_hard4" in m:
        typer.echo(f"  text->image 4-way: look-alike choices {m['t2i_hard4']:.3f}   look-alike, no text twin "
                   f"{m.get('t2i_hard4_distinct', float('nan')):.3f}   random choices {m['t2i_rand4']:.3f}   "
                   "chance 0.250   (own image vs the 3 nearest / 3 nearest of another text / 3 random "
                   "images of other recipes)")


@app.command("embed")
def embed_cmd(encoder: Optional[str] = typer.Option(None, "--encoder", help="encoder_id (default: the "
                                                     "latest; trains the default when none exists)."),
              k: int = typer.Option(100, "--k", help="Neighbours per image in the neighbours table."),
              workers: int = typer.Option(2, "--workers", help="Image decode workers (0 = in-process)."),
              decode: Decode = typer.Option(Decode.threads, "--decode", help="threads: a decode pool in "
                                            "this process, no worker start-up or tensor copies (1.5x the "
                                            "DataLoader here); processes: DataLoader workers."),
              batch_size: int = typer.Option(128, "--batch-size", min=1, help="Images per encoder batch."),
              method: NeighbourMethod = typer.Option(NeighbourMethod.auto, "--neighbours",
                                                     help="How the neighbours table is built."),
              no_train: bool = typer.Option(False, "--no-train", help="Fail instead of training an "
                                            "encoder when none is registered."),
              no_prefect: bool = typer.Option(False, "--no-prefect", hidden=True,
                                              help="Same as `mrqa --no-prefect embed`."),
              threads: Optional[int] = typer.Option(None, "--threads", help="torch CPU threads for the "
                                                    "encoder (default: torch's; 1 is faster on a loaded machine)."),
              wait: float = wait_option()):
    """Embed new images and step texts into LanceDB and rebuild the neighbours table (incremental).

    When nothing it reads changed since a run that found nothing to do, it prints that run's summary
    without loading the encoder or LanceDB (features/embed/state.py)."""
    if k < 1:
        fail(f"--k must be >= 1, got {k}")
    if workers < 0:
        fail(f"--workers must be >= 0, got {workers}")
    if threads is not None and threads < 1:
        fail("--threads must be >= 1")
    if encoder is not None:   # checked here: inside the flow it would be a logged traceback first
        from etl.warehouse import connect
        con = connect()
        known = [r[0] for r in con.execute("SELECT encoder_id FROM encoders ORDER BY created_at, encoder_id")
                 .fetchall()]
        con.close()
        if encoder not in known:
            fail(f"unknown encoder {encoder!r}; registered: {', '.join(known) or 'none'} "
                 "(see `mrqa encoder list`, `mrqa encoder train`)")
    if no_prefect:
        os.environ[PREFECT_ENV] = "0"
    if not use_prefect():         # a flow run checks the same inside run_embed
        from features.embed.state import cached_summary, embed_params
        from flows.scale import dask_address
        cached = cached_summary(embed_params(encoder, not no_train, k, workers, batch_size, method.value,
                                             None, dask_address(), decode.value))
        if cached is not None:
            echo_json(cached)
            return
    if threads is not None:
        import torch
        torch.set_num_threads(threads)
    from features.embed.encoders import EncoderUnavailable
    from features.embed.train_encoder import TrainingDataError
    from flows.embed import embed_flow
    try:
        res = run_flow(embed_flow, encoder, not no_train, k, workers, batch_size, method.value, decode=decode.value)
    except (EncoderUnavailable, LookupError, TrainingDataError) as e:
        fail(str(e))
    echo_json(res)
