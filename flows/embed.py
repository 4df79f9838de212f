"""Prefect flow `embed`: encoder (train the default if missing) -> image and step-text vectors in
LanceDB (incremental) -> indexes -> the `neighbours` table.

Thin wrapper over features/ (encoders, encoder_train, embedding, store, neighbours).

Scale-out: with a Dask scheduler address (`dask_address=` or MRQA_DASK_ADDRESS, see flows/scale.py)
the image decode + encode batches run as Prefect tasks on that cluster (features/embed/fanout.py);
the flow process still selects the work, records rejects and writes LanceDB in the local order.
"""
from __future__ import annotations

import logging

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from etl.config import Paths
from etl.warehouse import connect
from features.diagnostics.look_statistics import filling_in_background
from features.embed import state
from features.embed.embedding import EmbedConfig, embed_images, embed_step_texts
from features.embed.encoders import EncoderUnavailable, latest_encoder_id, load_encoder
from features.embed.fanout import embed_images_fanout, encode_batch, encode_batch_task, encoder_spec
from features.embed.train_encoder import TrainConfig, train_encoder
from features.vectors.neighbours import build_neighbour_table
from features.vectors.store import IMAGE_TABLE, TEXT_TABLE, FeatureStore
from flows import scale
from flows.params import DecodeMode, NeighbourMethod
from flows.tasks import in_flow_run

log = logging.getLogger(__name__)


@task(cache_policy=NO_CACHE)
def resolve_encoder_task(con, paths: Paths, encoder_id: str | None, train_if_missing: bool) -> str:
    encoder_id = encoder_id or latest_encoder_id(con)
    if encoder_id is None:
        if not train_if_missing:
            raise EncoderUnavailable("no encoder registered; run `mrqa encoder train`")
        encoder_id = train_encoder(con, paths, TrainConfig())["encoder_id"]
    return encoder_id


@task(cache_policy=NO_CACHE)
def embed_images_task(con, store, encoder, paths, cfg) -> dict:
    return embed_images(con, store, encoder, paths, cfg)


def embed_images_distributed(con, store, paths, encoder_id: str, cfg: EmbedConfig,
                             address: str, device: str | None = None, prefect: bool = True) -> dict:
    """Image batches on the Dask cluster at `address`: as `encode-image-batch` Prefect tasks through
    prefect-dask (prefect=True), or as plain Dask futures (the `--no-prefect` path)."""
    spec = encoder_spec(con, encoder_id, paths, device)
    where = scale.describe(address)
    if not prefect:
        from distributed import Client
        with Client(address, set_as_default=False) as client:
            def submit_plain(spec, files):
                return client.submit(encode_batch, spec, files, pure=False)
            return embed_images_fanout(con, store, spec, paths, cfg, submit_plain, where=where)
    with scale.task_runner(address) as runner:
        def submit(spec, files):
            return runner.submit(encode_batch_task, parameters={"spec": spec, "files": files})
        return embed_images_fanout(con, store, spec, paths, cfg, submit, where=where)


@task(cache_policy=NO_CACHE)
def embed_texts_task(con, store, encoder) -> dict:
    return embed_step_texts(con, store, encoder)


@task(cache_policy=NO_CACHE)
def index_task(store, encoder_id: str) -> dict:
    return {"images": store.finish_writes(IMAGE_TABLE, encoder_id),
            "texts": store.finish_writes(TEXT_TABLE, encoder_id)}


@task(cache_policy=NO_CACHE)
def neighbours_task(con, store, encoder_id: str, k: int, method: str) -> dict:
    return build_neighbour_table(con, store, encoder_id, k=k, method=method)


def run_embed(encoder_id: str | None = None, train_if_missing: bool = True, k: int = 100,
              num_workers: int = 2, batch_size: int = 128, neighbour_method: str = "auto",
              device: str | None = None, tasks: bool = False, dask_address: str | None = None,
              decode: str = "threads") -> dict:
    """The embed stage as a plain function (tasks=True runs the steps as Prefect tasks). A run whose
    inputs are those of the last run that found nothing to do returns that run's summary at once
    (features/embed/state.py).

    `dask_address` (default: MRQA_DASK_ADDRESS) sends the image batches to that Dask cluster.
    """
    call = (lambda t, *a: t(*a)) if tasks else (lambda t, *a: t.fn(*a))
    address = scale.dask_address(dask_address)
    paths = Paths.from_env().ensure()
    params = state.embed_params(encoder_id, train_if_missing, k, num_workers, batch_size, neighbour_method,
                                device, address, decode)
    con = connect(paths)
    try:
        known = state.known_noop(con, paths, params)
        if known is not None:
            log.info("embed: nothing changed since the last run found nothing to do; its summary stands")
            return known
        # the look probe's photo statistics, on a background process while the encoder trains and embeds
        # (its two threads leave part of two cores idle): `mrqa report` then finds them cached
        with filling_in_background(con, paths.home):
            store = FeatureStore(paths.lance)
            encoder_id = call(resolve_encoder_task, con, paths, encoder_id, train_if_missing)
            encoder = load_encoder(con, encoder_id, device=device, paths=paths)
            cfg = EmbedConfig(batch_size=batch_size, num_workers=num_workers, decode=decode)
            summary = {"encoder_id": encoder_id, "device": str(encoder.device)}
            text_only = getattr(encoder, "kind", None) == "words"
            if text_only:        # no image tower: step texts only, and no image neighbours
                summary.update(images_encoded=0, vectors_deleted=0,
                               images="none: a words encoder has no image tower")
            elif address:
                summary.update(embed_images_distributed(con, store, paths, encoder_id, cfg, address, device,
                                                         prefect=tasks))
            else:
                summary.update(call(embed_images_task, con, store, encoder, paths, cfg))
            summary.update(call(embed_texts_task, con, store, encoder))
            summary["indexes"] = call(index_task, store, encoder_id)
            if text_only:
                summary["neighbours"] = "none: a words encoder has no image vectors (text neighbours: generate)"
            elif summary["images_encoded"] or summary["vectors_deleted"] or not con.execute(
                    "SELECT count(*) FROM neighbours WHERE encoder_id = ?", [encoder_id]).fetchall()[0][0]:
                summary["neighbours"] = call(neighbours_task, con, store, encoder_id, k, neighbour_method)
            else:
                summary["neighbours"] = "unchanged (no new or deleted image vectors)"
            state.remember(con, paths, params, summary)
        return summary
    finally:
        con.close()


@flow(name="embed", log_prints=True)
def embed_flow(encoder_id: str | None = None, train_if_missing: bool = True, k: int = 100,
               num_workers: int = 2, batch_size: int = 128, neighbour_method: NeighbourMethod = "auto",
               dask_address: str | None = None, decode: DecodeMode = "threads") -> dict:
    """Embed new images and step texts with an encoder and rebuild its neighbour table.

    With `dask_address` (or MRQA_DASK_ADDRESS) the image batches run on that Dask cluster.
    """
    return run_embed(encoder_id, train_if_missing, k, num_workers, batch_size, neighbour_method,
                     tasks=in_flow_run(), dask_address=dask_address, decode=decode)
