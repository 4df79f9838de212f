"""LanceDB feature store, exact search and the neighbours table on deterministic synthetic vectors."""
from __future__ import annotations

import numpy as np
import pytest

import features.vectors.store as store_mod
from features.vectors.bench import clustered_vectors
from features.vectors.exact import exact_knn, numpy_exact_knn
from features.vectors.neighbours import build_neighbour_table, compute_neighbours, recall_at_k
from features.vectors.store import IMAGE_TABLE, FeatureStore, vector_rows


def image_rows(n, dim=32, enc="enc-a", per_recipe=3, seed=0, splits=("train", "val")):
    vecs = clustered_vectors(n, dim, seed, per_cluster=20, noise=0.4)
    rid = [f"R{i // per_recipe}" for i in range(n)]
    return vector_rows([f"R{i // per_recipe}_{i % per_recipe}_0.jpg" for i in range(n)], vecs, recipe_id=rid,
                       step_idx=np.array([i % per_recipe for i in range(n)], np.int32),
                       split=[splits[(i // per_recipe) % len(splits)] for i in range(n)], encoder_id=enc,
                       sha256=[f"s{i}" for i in range(n)]), vecs


def test_exact_knn_matches_brute_force_and_masks_groups():
    x = clustered_vectors(300, 16, seed=3)
    groups = np.arange(300) // 3
    idx, dist = exact_knn(x[:50], x, 10, query_groups=groups[:50], base_groups=groups, block=7)
    sim = x[:50] @ x.T
    sim[groups[:50, None] == groups[None, :]] = -np.inf
    ref = np.argsort(-sim, axis=1, kind="stable")[:, :10]
    assert (idx == ref).all()
    assert np.allclose(dist, 1 - np.take_along_axis(sim, ref, 1), atol=1e-5)
    assert (np.diff(dist, axis=1) >= -1e-6).all()
    mask = np.zeros((2, 300), bool)
    mask[:, :299] = True
    i2, d2 = exact_knn(x[:2], x, 3, exclude_mask=mask)
    assert (i2[:, 0] == 299).all() and (i2[:, 1:] == -1).all() and np.isinf(d2[:, 1:]).all()
    assert (numpy_exact_knn(x[:50], x, 5)[:, 0] == np.arange(50)).all()


def test_store_roundtrip_upsert_and_dimension_tables(tmp_path):
    st = FeatureStore(str(tmp_path / "lance"))
    rows, vecs = image_rows(60)
    st.upsert(IMAGE_TABLE, rows)
    ids, mat = st.image_vectors("enc-a")
    assert ids == sorted(rows["id"].to_pylist()) and mat.dtype == np.float32 and mat.shape == (60, 32)
    order = np.argsort(rows["id"].to_pylist())
    assert np.allclose(mat, vecs[order])
    val_ids, _ = st.image_vectors("enc-a", split="val")
    assert val_ids and all(i in ids for i in val_ids) and len(val_ids) < 60
    some, m2 = st.image_vectors("enc-a", ids=ids[:5])
    assert some == ids[:5] and np.allclose(m2, mat[:5])
    st.upsert(IMAGE_TABLE, rows.slice(0, 10))                  # idempotent: replaces, no duplicates
    assert st.find_table(IMAGE_TABLE, "enc-a").count_rows() == 60
    other, _ = image_rows(20, dim=8, enc="enc-b")              # another dimension, another table
    st.upsert(IMAGE_TABLE, other)
    assert st.image_vectors("enc-b")[1].shape == (20, 8)
    assert st.find_table(IMAGE_TABLE, "enc-b").name == "image_vectors_d8"
    assert st.delete(IMAGE_TABLE, "enc-a", ids[:4]) == 4
    assert len(st.image_vectors("enc-a")[0]) == 56
    assert st.keys(IMAGE_TABLE, "enc-a")[ids[10]].startswith("s")
    assert st.text_vectors("enc-a", "title") == ([], pytest.approx(np.zeros((0, 0))))


def test_small_table_gets_scalar_indexes_but_no_ann_index(tmp_path):
    st = FeatureStore(str(tmp_path / "lance"))
    rows, _ = image_rows(100)
    st.upsert(IMAGE_TABLE, rows)
    done = st.finish_writes(IMAGE_TABLE, "enc-a")
    tbl = st.find_table(IMAGE_TABLE, "enc-a")
    cols = {ix.columns[0] for ix in tbl.list_indices()}
    assert {"split", "encoder_id", "recipe_id", "id"} <= cols and "vector" not in cols
    assert "ann" not in done


def _warehouse_for(con, rows):
    """Recipes/images rows matching synthetic vectors, so the SQL data test can check them."""
    con.register("_rows", rows.select(["id", "recipe_id", "step_idx", "split"]))
    con.execute("INSERT INTO recipes (recipe_id, source, split) "
                "SELECT DISTINCT recipe_id, 'sample', split FROM _rows")
    con.execute("INSERT INTO images (image_id, recipe_id, step_idx, ord, path, sha256, status) "
                "SELECT id, recipe_id, step_idx, 0, 'x', 'y', 'ok' FROM _rows")
    con.unregister("_rows")


def test_neighbours_ann_matches_exact_and_respects_split_and_recipe(tmp_path, con, monkeypatch):
    monkeypatch.setattr(store_mod, "ANN_MIN_ROWS", 256)
    st = FeatureStore(str(tmp_path / "lance"))
    rows, _ = image_rows(1200, dim=32, per_recipe=3)
    st.upsert(IMAGE_TABLE, rows)
    done = st.finish_writes(IMAGE_TABLE, "enc-a")
    assert done["ann"].startswith(store_mod.AnnConfig().index_type)
    assert st.has_ann_index(st.find_table(IMAGE_TABLE, "enc-a"))
    k = 20
    ann_tbl, ann_sum = compute_neighbours(st, "enc-a", k=k, method="lance")   # the LanceDB index route
    ex_tbl, ex_sum = compute_neighbours(st, "enc-a", k=k, method="exact")
    assert {s["method"] for s in ann_sum["splits"].values()} == {"lance"}
    assert ann_tbl.num_rows == ex_tbl.num_rows == 1200 * k

    def as_idx(t):
        ids = sorted(set(t["image_id"].to_pylist()))
        pos = {s: i for i, s in enumerate(ids)}
        out = np.full((len(ids), k), -1)
        for a, r, b in zip(t["image_id"].to_pylist(), t["rank"].to_pylist(), t["neighbour_id"].to_pylist()):
            out[pos[a], r - 1] = hash(b) % (1 << 60)
        return out
    assert recall_at_k(as_idx(ann_tbl), as_idx(ex_tbl)) >= 0.9

    _warehouse_for(con, rows)
    summary = build_neighbour_table(con, st, "enc-a", k=k, method="ann")
    assert summary["rows"] == 1200 * k
    # clusters of 20 with k=20: the tail is noise, the IVF sample check finds recall < 0.95 -> exact
    assert {s["method"] for s in summary["splits"].values()} <= {"ann", "exact"}
    from etl.warehouse import run_sql_tests
    assert run_sql_tests(con)["neighbours_same_split_other_recipe"] == 0
    # distances are exact cosine distances of the stored vectors
    vec = dict(zip(rows["id"].to_pylist(), np.asarray(rows["vector"].to_pylist(), np.float32)))
    got = con.execute("SELECT image_id, neighbour_id, distance FROM neighbours LIMIT 200").fetchall()
    assert all(abs(1 - vec[a] @ vec[b] - d) < 1e-4 for a, b, d in got)
    build_neighbour_table(con, st, "enc-a", k=k, method="exact")     # replaces, no duplicates
    assert con.execute("SELECT count(*) FROM neighbours").fetchall()[0][0] == 1200 * k


def test_neighbours_with_fewer_candidates_than_k(tmp_path):
    st = FeatureStore(str(tmp_path / "lance"))
    rows, _ = image_rows(12, per_recipe=3, splits=("train",))
    st.upsert(IMAGE_TABLE, rows)
    t, summary = compute_neighbours(st, "enc-a", k=100)
    assert summary["splits"]["train"]["method"] == "exact"
    assert t.num_rows == 12 * 9                            # 3 other recipes x 3 images each
    with pytest.raises(LookupError):
        compute_neighbours(st, "nope", k=5)
