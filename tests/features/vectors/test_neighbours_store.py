"""The neighbour table on a real LanceDB store: ANN (IVF build and LanceDB index route) vs exact,
idempotent rebuilds, appended recipes, and the `bench knn` command on a tiny run."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

import features.vectors.store as store_mod
from etl.warehouse import run_sql_tests, table_fingerprint
from features.vectors.bench import bench_knn, recipe_vectors
from features.vectors.ivf import IvfKnnConfig
from features.vectors.neighbours import build_neighbour_table, compute_neighbours, recall_at_k
from features.vectors.store import IMAGE_TABLE, FeatureStore, vector_rows

K = 20


def rows_for(vecs, recipe, split, enc="enc-a", prefix="R"):
    n = len(vecs)
    step = [int(i) for i in np.arange(n) - np.searchsorted(recipe, recipe)]
    return vector_rows([f"{prefix}{r}_{s}_0.jpg" for r, s in zip(recipe, step)], vecs,
                       recipe_id=[f"{prefix}{r}" for r in recipe], step_idx=np.array(step, np.int32),
                       split=list(split), encoder_id=enc, sha256=[f"s{i}" for i in range(n)])


def warehouse_rows(con, rows):
    con.register("_rows", rows.select(["id", "recipe_id", "step_idx", "split"]))
    con.execute("INSERT INTO recipes (recipe_id, source, split) "
                "SELECT DISTINCT recipe_id, 'sample', split FROM _rows")
    con.execute("INSERT INTO images (image_id, recipe_id, step_idx, ord, path, sha256, status) "
                "SELECT id, recipe_id, step_idx, 0, 'x', 'y', 'ok' FROM _rows")
    con.unregister("_rows")


def as_index(table, ids):
    pos = {s: i for i, s in enumerate(ids)}
    out = np.full((len(ids), K), -1)
    for a, r, b in zip(table["image_id"].to_pylist(), table["rank"].to_pylist(),
                       table["neighbour_id"].to_pylist()):
        out[pos[a], r - 1] = pos[b]
    return out


@pytest.fixture
def store_1500(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "ANN_MIN_ROWS", 256)
    st = FeatureStore(str(tmp_path / "lance"))
    vecs, recipe, split = recipe_vectors(1500, dim=32, seed=5)
    rows = rows_for(vecs, recipe, split)
    st.upsert(IMAGE_TABLE, rows)
    st.finish_writes(IMAGE_TABLE, "enc-a")
    return st, rows


def test_ann_methods_match_exact_and_rebuild_is_idempotent(store_1500, con):
    st, rows = store_1500
    ids = sorted(rows["id"].to_pylist())
    ex, _ = compute_neighbours(st, "enc-a", k=K, method="exact")
    ivf, ivf_sum = compute_neighbours(st, "enc-a", k=K, method="ann", ivf=IvfKnnConfig(nprobe=3))
    lance, lance_sum = compute_neighbours(st, "enc-a", k=K, method="lance")
    assert {s["method"] for s in ivf_sum["splits"].values()} == {"ann"}
    assert {s["method"] for s in lance_sum["splits"].values()} == {"lance"}
    assert ex.num_rows == ivf.num_rows == lance.num_rows
    assert recall_at_k(as_index(ivf, ids), as_index(ex, ids)) >= 0.95
    assert recall_at_k(as_index(lance, ids), as_index(ex, ids)) >= 0.9
    warehouse_rows(con, rows)
    build_neighbour_table(con, st, "enc-a", k=K, method="ann")
    assert run_sql_tests(con)["neighbours_same_split_other_recipe"] == 0
    n_per = con.execute("SELECT count(*), count(DISTINCT image_id), max(rank) FROM neighbours").fetchone()
    assert n_per == (ex.num_rows, 1500, K)
    first = table_fingerprint(con, "neighbours")
    build_neighbour_table(con, st, "enc-a", k=K, method="ann")      # same rows, no duplicates
    assert table_fingerprint(con, "neighbours") == first
    with pytest.raises(ValueError):
        compute_neighbours(st, "enc-a", k=K, method="nope")


def test_appended_recipes_are_indexed_and_get_neighbours(store_1500, con):
    st, rows = store_1500
    tbl = st.find_table(IMAGE_TABLE, "enc-a")
    assert st.has_ann_index(tbl)
    vecs, recipe, split = recipe_vectors(300, dim=32, seed=6)
    new = rows_for(vecs, recipe, split, prefix="N")
    st.upsert(IMAGE_TABLE, new)
    st.finish_writes(IMAGE_TABLE, "enc-a")                          # optimize(): new rows indexed
    tbl = st.find_table(IMAGE_TABLE, "enc-a")
    vec_ix = next(ix for ix in tbl.list_indices() if ix.columns[0] == "vector")
    stats = tbl.index_stats(vec_ix.name)
    assert stats.num_indexed_rows == 1800 and stats.num_unindexed_rows == 0
    # the index still answers: a new image's own vector finds itself first, through the index
    hit = st.search("enc-a", vecs[:5], 3)
    qi, dist, got = hit["query_index"].to_numpy(), hit["_distance"].to_numpy(), hit["id"].to_pylist()
    nearest = [got[np.flatnonzero(qi == q)[np.argmin(dist[qi == q])]] for q in range(5)]
    assert nearest == new["id"].to_pylist()[:5]
    warehouse_rows(con, pa.concat_tables([rows, new]))
    build_neighbour_table(con, st, "enc-a", k=K, method="lance")
    got = con.execute("SELECT count(DISTINCT image_id) FROM neighbours WHERE image_id LIKE 'N%'").fetchone()[0]
    assert got == 300
    assert run_sql_tests(con)["neighbours_same_split_other_recipe"] == 0


def test_bench_knn_tiny_run_and_cli(tmp_path):
    lines = []
    res = bench_knn([600, 1200], dim=16, k=10, queries=100, seed=0, log=lines.append)
    assert [r["n"] for r in res["sizes"]] == [600, 1200] and len(lines) == 2
    for r in res["sizes"]:
        assert 0.9 <= r["recall@10"] <= 1.0 and r["numpy_s"] >= 0 and r["ann_s"] > 0
        assert r["ann_vs_numpy"] > 0 and r["ann_scanned_share"] > 0
    assert res["crossover_n"] in (None, 600, 1200)
    from typer.testing import CliRunner

    from flows.cli import app
    out = CliRunner().invoke(app, ["bench", "knn", "--sizes", "500", "--dim", "8", "--k", "5",
                                   "--queries", "50"])
    assert out.exit_code == 0, out.output
    assert "recall@5" in out.output and "uptime load average" in out.output
    # the JSON document the command prints (log lines of other modules may follow it in one process)
    doc, _ = json.JSONDecoder().raw_decode(out.output[out.output.index("{"):])
    assert doc["sizes"][0]["n"] == 500, out.output
    bad = CliRunner().invoke(app, ["bench", "knn", "--sizes", "a,b"])
    assert bad.exit_code == 2


def test_bench_knn_lance_route(tmp_path):
    """`bench knn --lance` also builds the LanceDB index route on the train split and reports it."""
    res = bench_knn([900], dim=16, k=10, queries=100, seed=1, lance=True, workdir=str(tmp_path))
    lance = res["sizes"][0]["lance_train_split"]
    assert lance["q_s"] > 0 and lance["index_build_s"] >= 0 and 0.5 <= lance["recall@10"] <= 1.0
