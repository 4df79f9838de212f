"""`vector_rows`, the one builder of vector rows: column order and types, repeated scalars, clear
errors on mismatched lengths, and a round trip through the LanceDB store and DuckDB."""
from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from features.vectors.store import IMAGE_TABLE, FeatureStore, vector_rows


def test_columns_types_and_repeated_scalars():
    vecs = np.arange(6, dtype=np.float64).reshape(3, 2)
    t = vector_rows(["a", "b", "c"], vecs, recipe_id=["r", "r", "s"], step_idx=np.array([0, 1, 0], np.int32),
                    encoder_id="enc", sha256=[None, None, None])
    assert t.column_names == ["id", "recipe_id", "step_idx", "encoder_id", "sha256", "vector"]
    assert t.schema.field("vector").type == pa.list_(pa.float32(), 2)
    assert t.schema.field("step_idx").type == pa.int32() and t.schema.field("sha256").type == pa.string()
    assert t["encoder_id"].to_pylist() == ["enc"] * 3
    assert np.array_equal(np.array(t["vector"].to_pylist()), vecs)
    empty = vector_rows([], np.zeros((0, 4)), id_column="item_id", vector_column="vec", split=[])
    assert empty.num_rows == 0 and empty.schema.field("vec").type == pa.list_(pa.float32(), 4)
    assert empty.schema.field("split").type == pa.string()


def test_mismatched_lengths_are_a_clear_error():
    with pytest.raises(ValueError, match="column recipe_id has 1 values for 2 ids"):
        vector_rows(["a", "b"], np.zeros((2, 3)), recipe_id=["r"])
    with pytest.raises(ValueError, match=r"vectors of shape \(3, 3\) for 2 ids"):
        vector_rows(["a", "b"], np.zeros((3, 3)))


def test_rows_round_trip_through_the_store_and_duckdb(tmp_path):
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(5, 8)).astype(np.float32)
    ids = [f"R{i}_0_0.jpg" for i in range(5)]
    rows = vector_rows(ids, vecs, recipe_id=[f"R{i}" for i in range(5)], step_idx=[0] * 5, split="train",
                       encoder_id="enc", sha256="x")
    store = FeatureStore(str(tmp_path / "lance"))
    assert store.upsert(IMAGE_TABLE, rows) == 5
    got_ids, mat = store.image_vectors("enc")
    assert got_ids == ids and np.array_equal(mat, vecs)
    fetched = duckdb.sql("SELECT id, vector FROM rows ORDER BY id").fetchall()
    assert np.allclose(np.array([v for _, v in fetched]), vecs)
