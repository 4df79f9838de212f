"""`mrqa bench decode`, `bench embed`, `bench ann`, `bench knn`, `bench encoder-train`: figures of the
embedding and neighbour stages and of the encoder's training."""
from __future__ import annotations

import os
from typing import Optional

import typer

from flows.cli.choices import KnnData
from flows.cli.common import echo_json, fail

app = typer.Typer()
ANN_MIN = 200                      # `bench ann --n`: the smallest size `bench knn` takes too
SYNTHETIC_MIN = 16                 # features.embed.bench.bench_image_files: smallest synthetic JPEG side


@app.command("decode")
def bench_decode_cmd(n: int = typer.Option(4096, "--n", help="Images (warehouse images, else synthetic JPEGs)."),
                     image_size: int = typer.Option(224, "--image-size", help="Model input side (ViT-B-32: 224)."),
                     workers: int = typer.Option(2, "--workers", help="Decode threads / processes."),
                     batch_size: int = typer.Option(128, "--batch-size", help="Images per batch."),
                     synthetic: bool = typer.Option(False, "--synthetic", help="Always use synthetic JPEGs."),
                     synthetic_size: int = typer.Option(640, "--synthetic-size", min=SYNTHETIC_MIN,
                                                        help="Side of the synthetic "
                                                        "JPEGs (real instructables photos are ~600).")):
    """Decode-only images/s of the embed loaders: threads (default) vs DataLoader processes vs none."""
    from etl.config import Paths
    from etl.warehouse import connect
    from features.embed.bench import bench_decode, bench_image_files
    if n < 1 or workers < 1 or batch_size < 1 or image_size < 8:
        fail("--n, --workers and --batch-size must be >= 1 and --image-size >= 8")
    paths = Paths.from_env()
    con = connect(paths) if not synthetic and paths.warehouse.exists() else None
    with bench_image_files(n, synthetic, synthetic_size, con, paths) as (files, source):
        res = bench_decode(files, image_size, batch_size, workers)
    if con is not None:
        con.close()
    echo_json({**res, "source": source})


@app.command("embed")
def bench_embed_cmd(encoder: Optional[str] = typer.Option(None, "--encoder", help="Registered encoder_id "
                                                           "(default: the latest)."),
                    clip_model: Optional[str] = typer.Option(None, "--clip-model", help="Time this open_clip "
                                                             "architecture (random weights) instead."),
                    image_size: Optional[int] = typer.Option(None, "--image-size", help="With --clip-model."),
                    n: int = typer.Option(1024, "--n", min=1, help="Images (warehouse images, else synthetic "
                                          "JPEGs)."),
                    batch_size: int = typer.Option(128, "--batch-size", min=1, help="Images per batch."),
                    workers: int = typer.Option(2, "--workers", min=0, help="Decode workers vs 0 in the same run."),
                    synthetic: bool = typer.Option(False, "--synthetic", help="Always use synthetic JPEGs."),
                    synthetic_size: int = typer.Option(256, "--synthetic-size", min=SYNTHETIC_MIN,
                                                       help="Side of the synthetic "
                                                       "JPEGs in pixels (real instructables photos are ~600).")):
    """Embedding images/s: end to end (uint8 pixels normalised on the device vs float input; workers
    vs 0), model only, batched vs one image at a time."""
    from etl.config import Paths
    from etl.warehouse import connect
    from features.embed.bench import bench_embed, bench_image_files
    from features.embed.encoders import Encoder, EncoderUnavailable, build_model, embed_dim, load_encoder, pick_device
    paths = Paths.from_env()
    con = connect(paths)
    try:
        if clip_model:
            dev = pick_device()
            model, pre, tok = build_model(clip_model, None, dev, image_size)
            enc = Encoder(f"{clip_model}-random", clip_model, model, pre, tok, dev, embed_dim(model))
        else:
            enc = load_encoder(con, encoder, paths=paths)
    except EncoderUnavailable as e:
        fail(str(e))
    with bench_image_files(n, synthetic, synthetic_size, con, paths) as (files, source):
        res = bench_embed(enc, files, batch_size, workers)
    res["source"] = source
    echo_json(res)


@app.command("ann")
def bench_ann_cmd(n: Optional[int] = typer.Option(None, "--n", min=ANN_MIN, help="Synthetic clustered "
                                                  f"vectors, at least {ANN_MIN} (default: the store's vectors "
                                                  "if >= 4096, else 20000)."),
                  dim: int = typer.Option(256, "--dim", help="Synthetic dimension."),
                  k: int = typer.Option(100, "--k", help="Neighbours per query."),
                  queries: int = typer.Option(1000, "--queries", help="Query sample size."),
                  encoder: Optional[str] = typer.Option(None, "--encoder", help="Use this encoder's vectors."),
                  seed: int = typer.Option(0, "--seed", help="Seed of data and query sample.")):
    """recall@K and q/s of LanceDB IVF_HNSW_SQ, IVF_PQ and IVF_FLAT (nprobes/refine sweep) vs exact search."""
    from features.vectors.bench import bench_ann_store_or_synthetic
    if k < 1 or queries < 1 or dim < 2:
        fail("need --k >= 1, --queries >= 1 and --dim >= 2")
    enc = encoder
    if enc is None and n is None:                  # the store's vectors of the latest encoder, if enough
        from etl.warehouse import connect
        from features.embed.encoders import latest_encoder_id
        enc = latest_encoder_id(connect())
    try:
        res = bench_ann_store_or_synthetic(enc, n, dim, k, queries, seed, require_store=encoder is not None)
    except ValueError as e:
        fail(str(e))
    echo_json(res)


@app.command("knn")
def bench_knn_cmd(n: int = typer.Option(100000, "--n", help="Largest number of synthetic vectors."),
                  sizes: Optional[str] = typer.Option(None, "--sizes", help="Comma-separated sizes "
                                                      "(default 5000,10000,20000,50000 and --n)."),
                  dim: int = typer.Option(256, "--dim", help="Vector dimension."),
                  k: int = typer.Option(100, "--k", help="Neighbours per image."),
                  queries: int = typer.Option(2000, "--queries", min=1, help="Sampled queries for exact "
                                              "timing and recall (exact cost scales linearly)."),
                  data: KnnData = typer.Option(KnnData.recipes, "--data", help="recipes (kinds/recipes/"
                                               "splits) or clustered (isolated clusters of 50: worst case)."),
                  lance: bool = typer.Option(False, "--lance", help="Also time the LanceDB index "
                                             "route (default index build + batched queries) on train."),
                  seed: int = typer.Option(0, "--seed", help="Seed of data and query sample.")):
    """Neighbour-table build: IVF ANN build vs numpy and torch exact search, recall@K, crossover."""
    from features.vectors.bench import bench_knn, format_knn_row
    try:
        size_list = ([int(x) for x in sizes.split(",") if x.strip()] if sizes
                     else [x for x in (5000, 10000, 20000, 50000) if x < n] + [n])
    except ValueError:
        fail("--sizes must be comma-separated integers, e.g. 10000,20000,50000,100000")
    if not size_list or min(size_list) < 200 or k < 1 or dim < 2:
        fail("need sizes >= 200, --k >= 1 and --dim >= 2")
    typer.echo(f"uptime load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    typer.echo(f"{data} vectors, d={dim}, K={k}, each split on its own, same-recipe pairs excluded; "
               f"exact: {queries} sampled queries x full split, scaled to all rows; ANN: full build")
    res = bench_knn(sorted(size_list), dim, k, queries, seed, lance=lance, data=data.value,
                    log=lambda row: typer.echo(format_knn_row(row, k)))
    typer.echo(res["crossover_note"])
    typer.echo(f"uptime load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    echo_json(res)


@app.command("encoder-train")
def bench_encoder_train_cmd(epochs: int = typer.Option(2, "--epochs", min=1, help="Epochs per training run."),
                            repeats: int = typer.Option(1, "--repeats", min=1, help="Runs of each mode, "
                                                        "alternating."),
                            seed: int = typer.Option(0, "--seed", help="Training seed.")):
    """Encoder training seconds on the home's train split: the two towers on two threads (the default)
    vs one thread, and whether both give the same weights. The encoders it trains are removed again."""
    from etl.config import Paths
    from etl.warehouse import connect
    from features.embed.bench import bench_encoder_training
    from features.embed.train_encoder import TrainingDataError
    paths = Paths.from_env()
    if not paths.warehouse.exists():
        fail(f"no warehouse at {paths.warehouse}: run `mrqa demo` (or ingest + clean) first")
    con = connect(paths)
    try:
        res = bench_encoder_training(con, paths, epochs, repeats, seed)
    except TrainingDataError as e:
        fail(str(e))
    finally:
        con.close()
    echo_json(res)
