"""A module-scoped MRQA_HOME holding the synthetic world (features/datasets/synthetic.py): the shared
set-up of the generation, AF, export and report test modules.

    with synthetic_home(tmp_path_factory, "gen_home", n_recipes=70, seed=1, dim=24, k=100) as (home, paths, con):
        ...

MRQA_HOME points at the new home inside the block and is restored after it; the connection is closed."""
from __future__ import annotations

import os
from contextlib import contextmanager


@contextmanager
def synthetic_home(tmp_path_factory, name: str, **world):
    from etl.config import Paths
    from etl.warehouse import connect
    from features.datasets.synthetic import build_world
    home = tmp_path_factory.mktemp(name)
    old = os.environ.get("MRQA_HOME")
    os.environ["MRQA_HOME"] = str(home)
    con = None
    try:
        paths = Paths.from_env().ensure()
        con = connect(paths)
        build_world(con, paths.lance, **world)
        yield home, paths, con
    finally:
        if con is not None:
            con.close()
        if old is None:
            os.environ.pop("MRQA_HOME", None)
        else:
            os.environ["MRQA_HOME"] = old


def assert_deterministic(world: dict, settings: list) -> None:
    """Generating `settings` again on the world's home (seed 0, one worker) gives the content hashes of its
    first generation (world["summaries"], in order), and seed 1 another dataset."""
    from features.datasets.generate import generate_datasets
    con, lance, enc = world["con"], world["paths"].lance, "synthetic-enc-0001"
    again = generate_datasets(con, settings, seed=0, encoder_id=enc, lance_uri=lance, progress=False, workers=1)
    assert [a["content_sha256"] for a in again] == [s["content_sha256"] for s in world["summaries"][:len(settings)]]
    other = generate_datasets(con, settings[:1], seed=1, encoder_id=enc, lance_uri=lance, progress=False)
    assert other[0]["content_sha256"] != world["summaries"][0]["content_sha256"]


@contextmanager
def exported_world(tmp_path_factory, name: str, settings: list, authors: int = 12, **world):
    """synthetic_home with an author per recipe (`authors` of them, round robin), `settings` generated (seed
    0) and exported with vectors to exports/<name>. Yields {con, paths, summaries, ids, rows (the exported
    questions, provenance parsed under "prov"), out (the export)}."""
    import json

    import duckdb

    from features.datasets.export import export_parquet
    from features.datasets.generate import generate_datasets
    with synthetic_home(tmp_path_factory, name, **world) as (home, paths, con):
        con.execute(f"""UPDATE recipes SET author = 'author-' ||
                        CAST(CAST(split_part(recipe_id, '-', 3) AS INTEGER) % {int(authors)} AS VARCHAR)""")
        summaries = generate_datasets(con, settings, seed=0, encoder_id="synthetic-enc-0001", lance_uri=paths.lance,
                                      progress=False)
        ids = [s["dataset_id"] for s in summaries]
        out = paths.exports / name
        export_parquet(con, ids, out, with_vectors=True, lance_uri=paths.lance)
        q = duckdb.sql(f"SELECT * FROM read_parquet('{out}/questions/**/*.parquet', hive_partitioning=true)")
        rows = [dict(zip(q.columns, r)) for r in q.fetchall()]
        for r in rows:
            r["prov"] = json.loads(r["provenance"])
        yield {"con": con, "paths": paths, "summaries": summaries, "ids": ids, "rows": rows, "out": out}


def dataset_rows(world: dict, did: str) -> list[dict]:
    """The exported question rows of dataset `did` (exported_world's rows)."""
    return [r for r in world["rows"] if r["dataset_id"] == did]


def item_step(item: str) -> tuple[str, int]:
    """(recipe_id, step_idx) of a synthetic image id `<recipe>_<step>_<k>.jpg`."""
    rid, step, _ = item.removesuffix(".jpg").rsplit("_", 2)
    return rid, int(step)
