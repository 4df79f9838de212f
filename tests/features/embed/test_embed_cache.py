"""`mrqa embed` reuses the pixels the encoder training decoded: same vectors as decoding, fewer decodes;
its default uint8 decoders (pixels normalised by the encoder) give the float path's vectors and rejects."""
from __future__ import annotations

import numpy as np
from toy_kitchen import build_toy_warehouse

from etl.config import Paths
from etl.warehouse import connect
from features.embed.embedding import EmbedConfig, embed_images
from features.embed.encoders import load_encoder
from features.embed.train_encoder import TrainConfig, train_encoder
from features.vectors.store import FeatureStore


def test_embed_from_pixel_cache_equals_decoding_and_still_rejects(tmp_path):
    paths = Paths.from_env(tmp_path / "home").ensure()
    con = connect(paths)
    build_toy_warehouse(con, paths, n_recipes=10, steps=3, images_per_step=2, seed=4)
    (paths.images / "Toy-Recipe-7" / "Toy-Recipe-7_0_0.jpg").unlink()      # a val image, missing
    res = train_encoder(con, paths, TrainConfig(epochs=1, batch_size=16, image_size=32, eval_max_pairs=10))
    enc = load_encoder(con, res["encoder_id"], paths=paths)
    n_train = res["metrics"]["n_train_images"]

    cached = FeatureStore(str(tmp_path / "lance_a"))
    s1 = embed_images(con, cached, enc, paths, EmbedConfig(batch_size=8, num_workers=0))
    decoded = FeatureStore(str(tmp_path / "lance_b"))
    s2 = embed_images(con, decoded, enc, paths, EmbedConfig(batch_size=8, num_workers=0, pixel_cache=False))
    floats = FeatureStore(str(tmp_path / "lance_c"))
    s3 = embed_images(con, floats, enc, paths, EmbedConfig(batch_size=8, num_workers=0, pixel_cache=False,
                                                          pixels=False))
    assert s2["image_input"] == "uint8" and s3["image_input"] == "float32"
    assert s1["images_from_pixel_cache"] == n_train > 0 and s2["images_from_pixel_cache"] == 0
    assert s3["images_encoded"] == s2["images_encoded"] and s3["images_known_bad"] == 1
    assert s1["images_encoded"] == s2["images_encoded"] == s1["images_total"] - 1
    assert s1["images_rejected"] == 1 and s2["images_known_bad"] == 1          # the missing file
    ids_a, va = cached.image_vectors(res["encoder_id"])
    ids_b, vb = decoded.image_vectors(res["encoder_id"])
    order_a, order_b = np.argsort(ids_a), np.argsort(ids_b)
    assert sorted(ids_a) == sorted(ids_b)
    assert np.allclose(va[order_a], vb[order_b], atol=1e-5)
    ids_c, vc = floats.image_vectors(res["encoder_id"])
    order_c = np.argsort(ids_c)
    assert sorted(ids_c) == sorted(ids_b) and float(np.abs(vc[order_c] - vb[order_b]).max()) <= 1e-6
    again = embed_images(con, cached, enc, paths, EmbedConfig(num_workers=0))   # incremental
    assert again["images_encoded"] == 0
    con.close()
