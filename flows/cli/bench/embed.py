"""`mrqa bench decode`, `bench embed`, `bench ann`, `bench knn`: figures of the embedding and
neighbour stages."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer

from flows.cli.common import echo_json, fail

app = typer.Typer()



@app.command("decode")
def bench_decode_cmd(n: int = typer.Option(4096, "--n", help="Images (warehouse images, else synthetic JPEGs)."),
                     image_size: int = typer.Option(224, "--image-size", help="Model input side (ViT-B-32: 224)."),
                     workers: int = typer.Option(2, "--workers", help="Decode threads / processes."),
                     batch_size: int = typer.Option(128, "--batch-size", help="Images per batch."),
                     synthetic: bool = typer.Option(False, "--synthetic", help="Always use synthetic JPEGs."),
                     synthetic_size: int = typer.Option(640, "--synthetic-size", help="Side of the synthetic "
                                                        "JPEGs (real instructables photos are ~600).")):
    """Decode-only images/s of the embed loaders: threads (default) vs DataLoader processes vs none."""
    from etl.config import Paths
    from etl.warehouse import connect
    from features.embed.bench import bench_decode
    if n < 1 or workers < 1 or batch_size < 1 or image_size < 8:
        fail("--n, --workers and --batch-size must be >= 1 and --image-size >= 8")
    paths = Paths.from_env()
    con = connect(paths) if not synthetic and paths.warehouse.exists() else None
    with _bench_image_files(n, synthetic, synthetic_size, con, paths) as (files, source):
        res = bench_decode(files, image_size, batch_size, workers)
    if con is not None:
        con.close()
    echo_json({**res, "source": source})


@contextmanager
def _bench_image_files(n: int, synthetic: bool, synthetic_size: int, con=None, paths=None):
    """(files, source) for the image benchmarks: up to `n` warehouse images, or `n` synthetic JPEGs in
    a temporary folder when `synthetic`, without a warehouse (`con` None) or with fewer than min(n, 256)."""
    import tempfile
    from features.embed.bench import synthetic_jpegs
    from features.embed.decode import image_items
    files = [] if synthetic or con is None else [it.path for it in image_items(con, paths)][:n]
    if len(files) >= min(n, 256):
        yield files, "warehouse"
        return
    if synthetic_size < 16:
        fail("--synthetic-size must be >= 16")
    with tempfile.TemporaryDirectory() as tmp:
        yield synthetic_jpegs(Path(tmp), n, size=synthetic_size), f"synthetic {synthetic_size}px JPEGs"


@app.command("embed")
def bench_embed_cmd(encoder: Optional[str] = typer.Option(None, "--encoder", help="Registered encoder_id "
                                                           "(default: the latest)."),
                    clip_model: Optional[str] = typer.Option(None, "--clip-model", help="Time this open_clip "
                                                             "architecture (random weights) instead."),
                    image_size: Optional[int] = typer.Option(None, "--image-size", help="With --clip-model."),
                    n: int = typer.Option(1024, "--n", help="Images (warehouse images, else synthetic JPEGs)."),
                    batch_size: int = typer.Option(128, "--batch-size", help="Images per batch."),
                    workers: int = typer.Option(2, "--workers", help="Decode workers vs 0 in the same run."),
                    synthetic: bool = typer.Option(False, "--synthetic", help="Always use synthetic JPEGs."),
                    synthetic_size: int = typer.Option(256, "--synthetic-size", help="Side of the synthetic "
                                                       "JPEGs in pixels (real instructables photos are ~600).")):
    """Embedding images/s: end to end (uint8 pixels normalised on the device vs float input; workers
    vs 0), model only, batched vs one image at a time."""
    from etl.config import Paths
    from etl.warehouse import connect
    from features.embed.bench import bench_embed
    from features.embed.encoders import (Encoder, EncoderUnavailable, build_model, embed_dim, load_encoder,
                                   pick_device)
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
    with _bench_image_files(n, synthetic, synthetic_size, con, paths) as (files, source):
        res = bench_embed(enc, files, batch_size, workers)
    res["source"] = source
    echo_json(res)


def _bench_ann(n, dim, k, queries, encoder, seed):
    import numpy as np
    from features.vectors.bench import bench_ann, clustered_vectors
    from features.vectors.store import FeatureStore
    source = "synthetic clustered"
    if encoder or n is None:
        from etl.warehouse import connect
        from features.embed.encoders import latest_encoder_id
        enc = encoder or latest_encoder_id(connect())
        rows = FeatureStore().image_rows(enc) if enc else None
        if rows is not None and rows.num_rows >= 4096:
            d = rows.schema.field("vector").type.list_size
            vecs = rows["vector"].combine_chunks().flatten().to_numpy().reshape(-1, d)
            _, groups = np.unique(np.array(rows["recipe_id"].to_pylist(), dtype=object), return_inverse=True)
            return {"source": f"store ({enc})", **bench_ann(vecs, groups, k, queries, seed=seed)}
        if encoder:
            fail(f"encoder {encoder} has fewer than 4096 image vectors; omit --encoder for synthetic data")
    n = n or 20000
    vecs = clustered_vectors(n, dim, seed)
    groups = np.arange(n) // 4            # 4 images per "recipe"
    return {"source": source, **bench_ann(vecs, groups, k, queries, seed=seed)}


@app.command("ann")
def bench_ann_cmd(n: Optional[int] = typer.Option(None, "--n", help="Synthetic clustered vectors "
                                                  "(default: the store's vectors if >= 4096, else 20000)."),
                  dim: int = typer.Option(256, "--dim", help="Synthetic dimension."),
                  k: int = typer.Option(100, "--k", help="Neighbours per query."),
                  queries: int = typer.Option(1000, "--queries", help="Query sample size."),
                  encoder: Optional[str] = typer.Option(None, "--encoder", help="Use this encoder's vectors."),
                  seed: int = typer.Option(0, "--seed", help="Seed of data and query sample.")):
    """recall@K and q/s of LanceDB IVF_HNSW_SQ, IVF_PQ and IVF_FLAT (nprobes/refine sweep) vs exact search."""
    res = _bench_ann(n, dim, k, queries, encoder, seed)
    for c in res["configs"]:
        c["q_s_vs_exact_torch"] = round(c["q_s"] / res["exact_torch_q_s"], 3)
        c["q_s_vs_exact_numpy"] = round(c["q_s"] / res["exact_numpy_q_s"], 3)
    echo_json(res)


@app.command("knn")
def bench_knn_cmd(n: int = typer.Option(100000, "--n", help="Largest number of synthetic vectors."),
                  sizes: Optional[str] = typer.Option(None, "--sizes", help="Comma-separated sizes "
                                                      "(default 5000,10000,20000,50000 and --n)."),
                  dim: int = typer.Option(256, "--dim", help="Vector dimension."),
                  k: int = typer.Option(100, "--k", help="Neighbours per image."),
                  queries: int = typer.Option(2000, "--queries", help="Sampled queries for exact "
                                              "timing and recall (exact cost scales linearly)."),
                  data: str = typer.Option("recipes", "--data", help="recipes (kinds/recipes/splits) "
                                           "| clustered (isolated clusters of 50: worst case)."),
                  lance: bool = typer.Option(False, "--lance", help="Also time the LanceDB index "
                                             "route (default index build + batched queries) on train."),
                  seed: int = typer.Option(0, "--seed", help="Seed of data and query sample.")):
    """Neighbour-table build: IVF ANN build vs numpy and torch exact search, recall@K, crossover."""
    from features.vectors.bench import bench_knn
    try:
        size_list = ([int(x) for x in sizes.split(",") if x.strip()] if sizes
                     else [x for x in (5000, 10000, 20000, 50000) if x < n] + [n])
    except ValueError:
        fail("--sizes must be comma-separated integers, e.g. 10000,20000,50000,100000")
    if not size_list or min(size_list) < 200 or k < 1 or dim < 2 or data not in ("recipes", "clustered"):
        fail("need sizes >= 200, --k >= 1, --dim >= 2 and --data recipes|clustered")
    typer.echo(f"uptime load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    typer.echo(f"{data} vectors, d={dim}, K={k}, each split on its own, same-recipe pairs excluded; "
               f"exact: {queries} sampled queries x full split, scaled to all rows; ANN: full build")
    res = bench_knn(sorted(size_list), dim, k, queries, seed, lance=lance, data=data,
                    log=lambda row: typer.echo(_knn_row(row, k)))
    typer.echo(res["crossover_note"])
    typer.echo(f"uptime load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    echo_json(res)


def _knn_row(r: dict, k: int) -> str:
    line = (f"n={r['n']:>7}  numpy exact {r['numpy_s']:>7.1f} s  torch exact {r['torch_s']:>7.1f} s  "
            f"ANN build {r['ann_s']:>6.1f} s (index {r['ann_index_s']:.1f} s, scanned "
            f"{100 * r['ann_scanned_share']:.1f}%)  recall@{k} {r[f'recall@{k}']:.4f}  "
            f"ANN vs numpy x{r['ann_vs_numpy']:.2f}  vs torch x{r['ann_vs_torch']:.2f}  "
            f"load {r['load_1min']:.1f}")
    if "lance_train_split" in r:
        line += f"\n         LanceDB index route (train split): {r['lance_train_split']}"
    return line
