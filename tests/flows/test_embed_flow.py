"""The embed stage end to end on a toy warehouse: vectors, rejects, incrementality, neighbours."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from etl.warehouse import run_sql_tests
from features.embed.train_encoder import TrainConfig, train_encoder
from features.vectors.store import FeatureStore
from flows.embed import embed_flow, run_embed

_spec = importlib.util.spec_from_file_location(
    "toy_kitchen", Path(__file__).resolve().parent.parent / "features" / "toy_kitchen.py")
toy_kitchen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(toy_kitchen)


@pytest.fixture
def warehouse(paths, con):
    toy_kitchen.build_toy_warehouse(con, paths, n_recipes=12, steps=3, images_per_step=2, seed=2)
    # one truncated JPEG and one missing file: rejected, never a crash
    bad = paths.images / "Toy-Recipe-0" / "Toy-Recipe-0_1_0.jpg"
    bad.write_bytes(bad.read_bytes()[:200])
    (paths.images / "Toy-Recipe-1" / "Toy-Recipe-1_2_1.jpg").unlink()
    enc = train_encoder(con, paths, TrainConfig(epochs=1, batch_size=16, image_size=32,
                                                eval_max_pairs=20))["encoder_id"]
    return con, enc


def test_embed_is_incremental_rejects_bad_images_and_builds_neighbours(paths, warehouse,
                                                                       prefect_harness):
    con, enc = warehouse
    con.close()  # run_embed opens the warehouse itself (one writer)
    first = run_embed(enc, k=5, num_workers=0, batch_size=8)
    assert first["images_total"] == 72 and first["images_encoded"] == 70
    assert first["images_rejected"] == 2
    # the look probe's statistics of every readable photo were cached on the side (look_statistics.py)
    import numpy as np

    from features.diagnostics.look_statistics import cache_path
    with np.load(cache_path(paths.home)) as z:
        assert len(set(z["ids"].tolist())) == 70 and z["thumb"].shape == (70, 48)
    store = FeatureStore(paths.lance)
    ids, mat = store.image_vectors(enc)
    assert len(ids) == 70 and mat.shape == (70, 128)
    tids, tmat = store.text_vectors(enc, "title")
    assert len(tids) == 36 and tids[0].endswith("_title")
    assert len(store.text_vectors(enc, "body")[0]) == 36

    from etl.warehouse import connect
    con = connect(paths)
    rejects = dict(con.execute("SELECT key, reason FROM rejects WHERE stage = 'embed'").fetchall())
    assert rejects == {"Toy-Recipe-0_1_0.jpg": "image_decode_error",
                       "Toy-Recipe-1_2_1.jpg": "missing_file"}
    n_nb = con.execute("SELECT count(*) FROM neighbours WHERE encoder_id = ?", [enc]).fetchall()[0][0]
    assert n_nb == 70 * 5
    assert run_sql_tests(con)["neighbours_same_split_other_recipe"] == 0
    # add recipes: only theirs are encoded, the index/table stays queryable
    toy_kitchen.build_toy_warehouse(con, paths, n_recipes=3, steps=3, images_per_step=1, seed=9,
                                    prefix="New-Recipe")
    con.close()
    again = embed_flow(encoder_id=None, k=5, num_workers=0, batch_size=8)     # the Prefect flow
    assert again["encoder_id"] == enc
    assert again["images_encoded"] == 9 and again["images_already"] == 70
    assert again["images_known_bad"] == 2 and again["texts_encoded"] == 18
    assert len(store.image_vectors(enc)[0]) == 79
    # unchanged corpus: nothing encoded, neighbours left as they are
    third = run_embed(enc, k=5, num_workers=0, batch_size=8)
    assert third["images_encoded"] == 0 and third["texts_encoded"] == 0
    assert third["neighbours"].startswith("unchanged")


    # the no-op run recorded itself: the same run again returns its summary without the encoder,
    # `mrqa embed` prints it without importing torch, and any changed input means a full run again
    import json
    import os
    import subprocess
    import sys

    from features.embed import state
    params = state.embed_params(enc, True, 5, 0, 8, "auto", None, None, "threads")
    assert state.cached_summary(params) == third
    assert run_embed(enc, k=5, num_workers=0, batch_size=8) == third
    assert state.cached_summary({**params, "k": 6}) is None
    code = ("import sys; from flows.cli import app; app(['embed', '--encoder', sys.argv[1], '--k', '5', "
            "'--workers', '0', '--batch-size', '8'], standalone_mode=False); "
            "print('torch loaded' if 'torch' in sys.modules else 'no torch')")
    r = subprocess.run([sys.executable, "-c", code, enc], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "MRQA_HOME": str(paths.home)})
    assert r.returncode == 0, r.stderr
    printed, _, tail = r.stdout.rpartition("}")
    assert json.loads(printed + "}") == third and tail.strip() == "no torch"
    con = connect(paths)
    toy_kitchen.build_toy_warehouse(con, paths, n_recipes=1, steps=2, images_per_step=1, seed=11,
                                    prefix="Late-Recipe")
    assert state.known_noop(con, paths, params) is None
    con.close()
    fourth = run_embed(enc, k=5, num_workers=0, batch_size=8)
    assert fourth["images_encoded"] == 2 and not state.state_path(paths).exists()
