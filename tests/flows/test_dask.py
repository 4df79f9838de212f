"""Scale-out: the embed stage on a Dask LocalCluster (2 worker processes) gives the local run's
vectors, rows and rejects; Parquet exports to a URI; the task-runner setting."""
from __future__ import annotations

import shutil
import time

import duckdb
import lancedb
import numpy as np
import pyarrow.parquet as pq
import pytest
import toy_kitchen

from etl.config import Paths
from etl.warehouse import connect
from features.embed.train_encoder import TrainConfig, train_encoder
from features.vectors.store import IMAGE_TABLE, FeatureStore
from flows import scale


def test_task_runner_follows_the_address_setting(monkeypatch):
    from prefect.task_runners import ThreadPoolTaskRunner
    from prefect_dask import DaskTaskRunner
    monkeypatch.delenv(scale.ENV_ADDRESS, raising=False)
    assert isinstance(scale.task_runner(), ThreadPoolTaskRunner)
    monkeypatch.setenv(scale.ENV_ADDRESS, "  ")
    assert scale.dask_address() is None and not scale.is_dask(scale.task_runner())
    monkeypatch.setenv(scale.ENV_ADDRESS, "tcp://127.0.0.1:8786")
    runner = scale.task_runner()
    assert isinstance(runner, DaskTaskRunner) and runner.address == "tcp://127.0.0.1:8786"
    assert scale.task_runner("tcp://10.0.0.1:1").address == "tcp://10.0.0.1:1"   # argument wins
    assert scale.describe() == "dask tcp://127.0.0.1:8786"


def _home_with_encoder(root) -> tuple[Paths, str]:
    paths = Paths.from_env(root / "local").ensure()
    con = connect(paths)
    try:
        toy_kitchen.build_toy_warehouse(con, paths, n_recipes=8, steps=3, images_per_step=2, seed=5)
        bad = paths.images / "Toy-Recipe-0" / "Toy-Recipe-0_1_0.jpg"
        bad.write_bytes(bad.read_bytes()[:200])                       # truncated JPEG
        (paths.images / "Toy-Recipe-1" / "Toy-Recipe-1_2_1.jpg").unlink()  # missing file
        enc = train_encoder(con, paths, TrainConfig(epochs=1, batch_size=16, image_size=32,
                                                    eval_max_pairs=20))["encoder_id"]
    finally:
        con.close()
    return paths, enc


def _table(paths: Paths):
    db = lancedb.connect(paths.lance)
    return db.open_table(IMAGE_TABLE).to_arrow()


def _rejects(paths: Paths) -> list:
    with duckdb.connect(str(paths.warehouse), read_only=True) as c:
        return c.execute("SELECT key, reason FROM rejects WHERE stage = 'embed' ORDER BY key").fetchall()


@pytest.mark.slow      # a Dask cluster and a Prefect run (~16 s)
def test_embed_on_dask_local_cluster_matches_the_local_run(tmp_path, monkeypatch, prefect_harness):
    from flows.embed import embed_flow, run_embed
    local, enc = _home_with_encoder(tmp_path)
    shutil.copytree(local.home, tmp_path / "dask")       # same warehouse, images and weights
    shutil.copytree(local.home, tmp_path / "plain")
    dask_home, plain_home = Paths.from_env(tmp_path / "dask"), Paths.from_env(tmp_path / "plain")

    monkeypatch.delenv(scale.ENV_ADDRESS, raising=False)
    monkeypatch.setenv("MRQA_HOME", str(local.home))
    t0 = time.perf_counter()
    a = embed_flow(encoder_id=enc, k=5, num_workers=0, batch_size=8)
    t_local = time.perf_counter() - t0

    with scale.local_cluster(n_workers=2, threads_per_worker=1, processes=True) as cluster:
        monkeypatch.setenv("MRQA_HOME", str(dask_home.home))
        monkeypatch.setenv(scale.ENV_ADDRESS, cluster.scheduler_address)
        t0 = time.perf_counter()
        b = embed_flow(encoder_id=enc, k=5, num_workers=0, batch_size=8)
        t_dask = time.perf_counter() - t0
        assert len(cluster.scheduler_info["workers"]) == 2
        # `mrqa embed --no-prefect`: the same batches as plain Dask futures
        monkeypatch.setenv("MRQA_HOME", str(plain_home.home))
        c = run_embed(enc, k=5, num_workers=0, batch_size=8)
    print(f"embed local {t_local:.1f}s, dask (2 workers) {t_dask:.1f}s")

    assert b["fanout"] == f"dask {cluster.scheduler_address}" and b["batches"] == 6
    for key in ("images_total", "images_encoded", "images_rejected", "texts_encoded"):
        assert a[key] == b[key], key
    assert a["images_encoded"] == 46 and a["images_rejected"] == 2
    # same rows and dtype (float32[128]); compared by id, as the local path may write rows it
    # found in the training pixel cache first
    ta, tb = _table(local).sort_by("id"), _table(dask_home).sort_by("id")
    assert ta["id"].to_pylist() == tb["id"].to_pylist()
    assert ta.schema == tb.schema
    for col in ("recipe_id", "step_idx", "split", "encoder_id", "sha256"):
        assert ta[col].to_pylist() == tb[col].to_pylist(), col
    ids_a, va = FeatureStore(local.lance).image_vectors(enc)
    ids_b, vb = FeatureStore(dask_home.lance).image_vectors(enc)
    assert ids_a == ids_b and va.dtype == vb.dtype == np.float32
    assert float(np.abs(va - vb).max()) <= 1e-6
    assert c["fanout"] == b["fanout"] and c["images_encoded"] == b["images_encoded"]
    assert _table(plain_home).equals(_table(dask_home))          # Prefect or plain Dask: same rows
    # the only difference is torch's intra-op thread count (Dask workers run 1 thread): the first
    # batch encoded in this process with 1 thread gives the workers' vectors bit for bit
    import torch

    from features.embed.decode import image_items
    from features.embed.fanout import encode_batch, encoder_spec
    with duckdb.connect(str(dask_home.warehouse), read_only=True) as c:
        spec, batch = encoder_spec(c, enc, dask_home), image_items(c, dask_home)[:8]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one = encode_batch(spec, [str(it.path) for it in batch])
    finally:
        torch.set_num_threads(threads)
    assert [e[:2] for e in one["errors"]] == [(2, "image_decode_error")]
    rows = [ids_b.index(batch[p].image_id) for p in one["ok"]]
    assert np.array_equal(one["vectors"], vb[rows])
    assert _rejects(local) == _rejects(dask_home) == [
        ("Toy-Recipe-0_1_0.jpg", "image_decode_error"), ("Toy-Recipe-1_2_1.jpg", "missing_file")]

    # incremental on Dask too: nothing new -> no batches submitted
    monkeypatch.setenv("MRQA_HOME", str(dask_home.home))
    monkeypatch.setenv(scale.ENV_ADDRESS, "tcp://127.0.0.1:9")   # never contacted when no work
    again = embed_flow(encoder_id=enc, k=5, num_workers=0, batch_size=8)
    assert again["images_encoded"] == 0 and "batches" not in again


def test_parquet_export_and_lance_on_uris(tmp_path, monkeypatch):
    """LanceDB at a file:// URI (MRQA_LANCE_URI) and a Parquet export to a file:// URI (the
    object-storage code path of pyarrow.fs) give the same bytes as the local-path export."""
    from features.datasets.export import export_parquet, tree_sha256
    from features.datasets.generate import generate_datasets, settings_for
    from features.datasets.synthetic import build_world
    lance_dir = tmp_path / "bucket" / "lance"
    monkeypatch.setenv("MRQA_LANCE_URI", f"file://{lance_dir}")
    paths = Paths.from_env(tmp_path / "home").ensure()
    assert paths.lance == f"file://{lance_dir}" and FeatureStore().uri == paths.lance
    con = connect(paths)
    try:
        build_world(con, paths.lance, n_recipes=40, seed=2, dim=16, k=20)
        assert (lance_dir / f"{IMAGE_TABLE}.lance").is_dir()       # written at the URI...
        assert not (paths.home / "lance").exists()                  # ...not under MRQA_HOME
        ids = [s["dataset_id"] for s in generate_datasets(
            con, settings_for("visual_cloze", preset="recipeqa"), seed=0,
            encoder_id="synthetic-enc-0001", lance_uri=paths.lance, progress=False)]
        local = export_parquet(con, ids, tmp_path / "out_local", with_vectors=True,
                               lance_uri=paths.lance)
        uri = f"file://{tmp_path}/bucket/exports/x"
        stale = tmp_path / "bucket" / "exports" / "x" / "questions" / "stale.parquet"   # an earlier export's
        stale.parent.mkdir(parents=True)
        stale.write_bytes(b"old")
        remote = export_parquet(con, ids, uri, with_vectors=True, lance_uri=paths.lance)
        theirs = tmp_path / "bucket" / "exports" / "z" / "notes.txt"                  # not an export: kept
        theirs.parent.mkdir(parents=True)
        theirs.write_text("mine")
        with pytest.raises(ValueError, match=r"refusing to replace .*/bucket/exports/z: it holds more than an export"):
            export_parquet(con, ids, f"file://{tmp_path}/bucket/exports/z")
        assert theirs.read_text() == "mine" and [p.name for p in theirs.parent.iterdir()] == ["notes.txt"]
        # typer/pathlib turn s3://b/x into s3:/b/x: that form is understood too
        mangled = export_parquet(con, ids, f"file:{tmp_path}/bucket/exports/y")
    finally:
        con.close()
    assert local["questions"] > 0 and local["image_vectors"] > 0
    assert remote["out"] == uri and remote["sha256"] == local["sha256"]
    assert tree_sha256(tmp_path / "bucket" / "exports" / "x") == local["sha256"]   # replaced, equal
    assert mangled["out"] == f"file://{tmp_path}/bucket/exports/y"
    t_local = pq.read_table(tmp_path / "out_local" / "image_vectors.parquet")
    t_uri = pq.read_table(f"{uri}/image_vectors.parquet")          # readable back through the URI
    assert t_uri.equals(t_local)


def test_worker_refuses_missing_or_other_weights(tmp_path):
    """A worker without the encoder's weights at the same path, or with other weights, fails with
    a message saying so (never silently encodes with another model)."""
    from features.embed.encoders import EncoderUnavailable
    from features.embed.fanout import EncoderSpec, worker_encoder
    spec = EncoderSpec("enc-x", "mrqa-tiny-clip", str(tmp_path / "nope.safetensors"), "ab" * 32,
                       32, 128)
    with pytest.raises(EncoderUnavailable, match="not found at .* on this worker"):
        worker_encoder(spec)
    (tmp_path / "other.safetensors").write_bytes(b"not these weights")
    other = EncoderSpec("enc-x", "mrqa-tiny-clip", str(tmp_path / "other.safetensors"), "ab" * 32,
                        32, 128)
    with pytest.raises(EncoderUnavailable, match="sha256 differs"):
        worker_encoder(other)
