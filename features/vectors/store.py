"""The LanceDB feature store: `image_vectors` and `step_text_vectors` with ANN + scalar indexes.

Columns: image_vectors(id = image_id, recipe_id, step_idx, split, encoder_id,
sha256, vector fixed_size_list<float32>[d]); step_text_vectors(id = "<recipe_id>_<step_idx>_<field>",
recipe_id, step_idx, field in {title, body}, split, encoder_id, text_sha256, vector). Vectors are
L2-normalised; distance is cosine everywhere (index build and query).

A fixed-size vector column holds one dimension, so encoders of another dimension than the one a
table was created with go to `<table>_d<dim>` (e.g. ViT-B-32's 512-d next to the default 128-d).

Indexes: BITMAP on split and encoder_id, BTREE on recipe_id and id (the prefilters); an ANN index on
`vector` once a table has ANN_MIN_ROWS rows (IVF_PQ on < 256 rows builds an empty index, and below
a few thousand rows exact search is as fast). The default ANN index, IVF_FLAT (sqrt(n) partitions,
nprobes 10%), was chosen with `mrqa bench ann` on batched queries, 20k x 256, K=100, same run:
IVF_FLAT 1,247 q/s at recall@100 0.9998 (8 probes; build 3.4 s) vs IVF_HNSW_SQ 42.5 q/s at 0.998
(build 20 s) vs exact torch 829 q/s on recipe-structured vectors (features.vectors.bench.recipe_vectors);
IVF_PQ needs refine_factor to pass 0.95 and is then slower still (recall 0.29-0.53 without).
On isolated clusters of 50 (no structure beyond them) IVF_FLAT reaches only 0.72-0.87 and
IVF_HNSW_SQ 0.97 at 36 q/s: pass AnnConfig("IVF_HNSW_SQ") for such spaces. This index serves
`search()` and the neighbour build's "lance" method; the bulk neighbour table is built by
features/vectors/ivf.py (no per-query calls, recall checked on a sample). `optimize()` runs after every
append so new rows are indexed (tested).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from etl.config import Paths

log = logging.getLogger(__name__)

IMAGE_TABLE = "image_vectors"
REDRAWN_TABLE = "redrawn_image_vectors"     # photos drawn again in another kitchen (features/datasets/redraw.py)
TEXT_TABLE = "step_text_vectors"
ANN_MIN_ROWS = 4096
TEXT_FIELDS = ("title", "body")


@dataclass
class AnnConfig:
    """ANN index + query settings (defaults chosen by `mrqa bench ann`)."""
    index_type: str = "IVF_FLAT"        # or IVF_HNSW_SQ, IVF_PQ (see the module docstring)
    num_partitions: int | None = None  # None: ~sqrt(n)/4 for HNSW (large partitions), sqrt(n) for PQ
    m: int = 20                        # HNSW
    ef_construction: int = 300         # HNSW
    num_sub_vectors: int | None = None  # PQ: None = dim / 8
    nprobes: int | None = None         # None: IVF_FLAT 10% of the partitions, others 3/4; at least 8
    ef: int | None = None              # HNSW query candidates; None: 2 * limit
    refine_factor: int | None = None   # PQ: re-rank refine_factor * limit candidates exactly

    def partitions_for(self, n: int) -> int:
        if self.num_partitions:
            return self.num_partitions
        root = math.sqrt(max(n, 1))
        return max(1, int(root / 4) if self.index_type == "IVF_HNSW_SQ" else int(root))

    def index_config(self, n: int, dim: int):
        from lancedb.index import IvfFlat, IvfHnswSq, IvfPq
        parts = self.partitions_for(n)
        if self.index_type == "IVF_FLAT":
            return IvfFlat(distance_type="cosine", num_partitions=parts)
        if self.index_type == "IVF_HNSW_SQ":
            return IvfHnswSq(distance_type="cosine", num_partitions=parts, m=self.m,
                             ef_construction=self.ef_construction)
        if self.index_type == "IVF_PQ":
            sub = self.num_sub_vectors or max(1, dim // 8)
            while dim % sub:
                sub -= 1
            return IvfPq(distance_type="cosine", num_partitions=parts, num_sub_vectors=sub)
        raise ValueError(f"index_type must be IVF_HNSW_SQ, IVF_PQ or IVF_FLAT, not {self.index_type!r}")


def image_schema(dim: int) -> pa.Schema:
    return pa.schema([("id", pa.string()), ("recipe_id", pa.string()), ("step_idx", pa.int32()),
                      ("split", pa.string()), ("encoder_id", pa.string()), ("sha256", pa.string()),
                      ("vector", pa.list_(pa.float32(), dim))])


def text_schema(dim: int) -> pa.Schema:
    return pa.schema([("id", pa.string()), ("recipe_id", pa.string()), ("step_idx", pa.int32()),
                      ("field", pa.string()), ("split", pa.string()), ("encoder_id", pa.string()),
                      ("text_sha256", pa.string()), ("vector", pa.list_(pa.float32(), dim))])


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _in_list(col: str, values) -> str:
    return f"{col} IN ({', '.join(_sql_str(v) for v in values)})"


def vectors_column(matrix: np.ndarray) -> pa.FixedSizeListArray:
    """An (n, d) matrix as one fixed_size_list<float32>[d] column (DuckDB reads it as FLOAT[d])."""
    m = np.ascontiguousarray(matrix, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(m.reshape(-1)), m.shape[1])


def vectors_matrix(column, dim: int | None = None) -> np.ndarray:
    """A vector column (list or fixed_size_list of floats, chunked) as an (n, d) float32 matrix: the inverse
    of `vectors_column`. `dim` where the column may be empty and its width is known."""
    flat = np.asarray(column.combine_chunks().flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
    if dim is None and not len(column):
        return np.zeros((0, 0), np.float32)
    return flat.reshape(-1, dim) if dim is not None else flat.reshape(len(column), -1)


def vector_rows(ids, vectors: np.ndarray, id_column: str = "id", vector_column: str = "vector",
                **columns) -> pa.Table:
    """Arrow rows of `ids` and their vectors: every writer of vector rows (the store's image and
    step-text tables, the export's vector files, the generator's DuckDB views) builds them here.

    Columns, in order: `id_column` (string) = ids; then `columns` -- a str is repeated on every
    row, a numpy array keeps its dtype, an Arrow array is taken as is, any other sequence becomes a
    column of its values (string when it is empty or all None); then `vector_column` = the (n, d)
    matrix as fixed_size_list<float32>[d]. Raises ValueError when a column's length is not len(ids).
    """
    n = len(ids)
    mat = np.asarray(vectors, dtype=np.float32)

    def column(name, value):
        if isinstance(value, str):
            return pa.array([value] * n, pa.string())
        arr = value if isinstance(value, (pa.Array, pa.ChunkedArray)) else pa.array(
            value if isinstance(value, np.ndarray) and value.dtype != object else list(value))
        if pa.types.is_null(arr.type):
            arr = arr.cast(pa.string())
        if len(arr) != n:
            raise ValueError(f"vector rows: column {name} has {len(arr)} values for {n} ids")
        return arr

    data = {id_column: column(id_column, ids)}
    data.update((name, column(name, value)) for name, value in columns.items())
    if mat.ndim != 2 or len(mat) != n:
        raise ValueError(f"vector rows: vectors of shape {mat.shape} for {n} ids (expected ({n}, d))")
    data[vector_column] = vectors_column(mat)
    return pa.table(data)


class FeatureStore:
    def __init__(self, uri: str | None = None, ann: AnnConfig | None = None):
        self.uri = uri or Paths.from_env().lance
        import lancedb  # here, not at the top: a trainer reading an export's vectors needs no LanceDB
        self.db = lancedb.connect(self.uri)
        self.ann = ann or AnnConfig()

    # ------------------------------------------------------------------ tables

    def _names(self) -> list[str]:
        res = self.db.list_tables()
        names = getattr(res, "tables", res)
        return list(names)

    @staticmethod
    def _dim_of(tbl) -> int:
        return tbl.schema.field("vector").type.list_size

    def _candidates(self, base: str) -> list[str]:
        return [n for n in self._names() if n == base or n.startswith(f"{base}_d")]

    def table_for(self, base: str, dim: int, create: bool = True):
        """The table of `base` holding `dim`-d vectors (created when missing and create=True)."""
        for name in self._candidates(base):
            tbl = self.db.open_table(name)
            if self._dim_of(tbl) == dim:
                return tbl
        if not create:
            return None
        name = base if base not in self._names() else f"{base}_d{dim}"
        schema = image_schema(dim) if base in (IMAGE_TABLE, REDRAWN_TABLE) else text_schema(dim)
        return self.db.create_table(name, schema=schema)

    def find_table(self, base: str, encoder_id: str):
        """The table that holds vectors of `encoder_id` (None when it has none)."""
        for name in self._candidates(base):
            tbl = self.db.open_table(name)
            if tbl.count_rows(f"encoder_id = {_sql_str(encoder_id)}"):
                return tbl
        return None

    # ------------------------------------------------------------------ writes

    def keys(self, base: str, encoder_id: str) -> dict[str, str]:
        """{id: sha256 (images) or text_sha256 (texts)} already stored for the encoder."""
        tbl = self.find_table(base, encoder_id)
        if tbl is None:
            return {}
        col = "sha256" if base in (IMAGE_TABLE, REDRAWN_TABLE) else "text_sha256"
        t = (tbl.search().where(f"encoder_id = {_sql_str(encoder_id)}")
             .select(["id", col]).limit(None).to_arrow())
        return dict(zip(t["id"].to_pylist(), t[col].to_pylist()))

    def delete(self, base: str, encoder_id: str, ids) -> int:
        tbl = self.find_table(base, encoder_id)
        ids = list(ids)
        if tbl is None or not ids:
            return 0
        for s in range(0, len(ids), 2000):
            tbl.delete(f"encoder_id = {_sql_str(encoder_id)} AND {_in_list('id', ids[s:s + 2000])}")
        return len(ids)

    def upsert(self, base: str, rows: pa.Table) -> int:
        """Replace rows with the same (encoder_id, id), append the rest."""
        if rows.num_rows == 0:
            return 0
        dim = rows.schema.field("vector").type.list_size
        tbl = self.table_for(base, dim)
        rows = rows.cast(tbl.schema)
        for enc in set(rows["encoder_id"].to_pylist()):
            ids = [i for i, e in zip(rows["id"].to_pylist(), rows["encoder_id"].to_pylist())
                   if e == enc]
            for s in range(0, len(ids), 2000):
                tbl.delete(f"encoder_id = {_sql_str(enc)} AND {_in_list('id', ids[s:s + 2000])}")
        tbl.add(rows)
        return rows.num_rows

    def finish_writes(self, base: str, encoder_id: str) -> dict:
        """Compact, index new rows (optimize) and build missing indexes; returns what it did. The redrawn
        photos' table is read by id only, never searched by vector: it gets no ANN index, and one an older
        version built is dropped (optimizing it cost time on every redraw and filled the log with Lance's
        partition warnings)."""
        tbl = self.find_table(base, encoder_id)
        if tbl is None:
            return {"rows": 0}
        searched = base != REDRAWN_TABLE
        if not searched:
            for ix in tbl.list_indices():
                if ix.columns[0] == "vector":
                    tbl.drop_index(ix.name)
        tbl.optimize()
        return self.ensure_indexes(tbl, ann_index=searched)

    def ensure_indexes(self, tbl, ann: AnnConfig | None = None, force_ann: bool = False,
                       ann_index: bool = True) -> dict:
        ann = ann or self.ann
        n = tbl.count_rows()
        have = {ix.columns[0]: ix for ix in tbl.list_indices()}
        done = {"rows": n, "table": tbl.name}
        for col, kind in (("split", "BITMAP"), ("encoder_id", "BITMAP"), ("recipe_id", "BTREE"),
                          ("id", "BTREE")):
            if col not in have and n:
                tbl.create_scalar_index(col, index_type=kind)
                done[f"scalar_{col}"] = kind
        vec = have.get("vector")
        if ann_index and (n >= ANN_MIN_ROWS or force_ann):
            stale = False
            if vec is not None and not force_ann:
                stats = tbl.index_stats(vec.name)
                # the IVF partitions were trained on far fewer rows: retrain
                stale = stats is not None and stats.num_indexed_rows * 2 < n
            if vec is None or stale or force_ann:
                tbl.create_index("vector", config=ann.index_config(n, self._dim_of(tbl)),
                                 replace=True)
                done["ann"] = f"{ann.index_type} ({ann.partitions_for(n)} partitions)"
        return done

    def has_ann_index(self, tbl) -> bool:
        return any(ix.columns[0] == "vector" for ix in tbl.list_indices())

    # ------------------------------------------------------------------ reads

    def _read(self, base: str, encoder_id: str, ids=None, split=None, field=None
              ) -> tuple[list[str], np.ndarray, pa.Table]:
        tbl = self.find_table(base, encoder_id)
        if tbl is None:
            return [], np.zeros((0, 0), np.float32), pa.table({})
        where = [f"encoder_id = {_sql_str(encoder_id)}"]
        if split is not None:
            where.append(f"split = {_sql_str(split)}")
        if field is not None:
            where.append(f"field = {_sql_str(field)}")
        parts = []
        id_chunks = [None] if ids is None else [list(ids)[s:s + 2000] for s in range(0, len(ids), 2000)]
        for chunk in id_chunks:
            w = where + ([_in_list("id", chunk)] if chunk is not None else [])
            if chunk is not None and not chunk:
                continue
            parts.append(tbl.search().where(" AND ".join(w)).limit(None).to_arrow())
        t = pa.concat_tables(parts) if parts else tbl.schema.empty_table()
        t = t.sort_by("id")
        dim = self._dim_of(tbl)
        return t["id"].to_pylist(), vectors_matrix(t["vector"], dim), t

    def image_vectors(self, encoder_id: str, ids: list[str] | None = None, split: str | None = None,
                      redrawn: bool = True) -> tuple[list[str], np.ndarray]:
        """(ids sorted, float32 matrix [n, d]) of the encoder's image vectors; with `redrawn`, those of the
        photos drawn again in another kitchen (`redrawn_image_vectors`) too, which datasets beyond the paper
        show (a generator's feature space never takes them: it keeps the warehouse's `images` rows)."""
        got, mat, _ = self._read(IMAGE_TABLE, encoder_id, ids, split)
        if not redrawn:
            return got, mat
        more, extra, _ = self._read(REDRAWN_TABLE, encoder_id, ids, split)
        if not more:
            return got, mat
        if not got:
            return more, extra
        both = np.array(got + more, dtype=object)
        order = np.argsort(both, kind="stable")
        return both[order].tolist(), np.concatenate([mat, extra])[order]

    def redrawn_vectors(self, encoder_id: str, ids: list[str] | None = None) -> tuple[list[str], np.ndarray]:
        """(ids sorted, matrix) of the photos drawn again in another kitchen only (`redrawn_image_vectors`)."""
        got, mat, _ = self._read(REDRAWN_TABLE, encoder_id, ids)
        return got, mat

    def image_rows(self, encoder_id: str, split: str | None = None) -> pa.Table:
        """The full rows (with recipe_id, split) sorted by id: the recipes' own photos only."""
        return self._read(IMAGE_TABLE, encoder_id, None, split)[2]

    def text_vectors(self, encoder_id: str, field: str, ids: list[str] | None = None,
                     split: str | None = None) -> tuple[list[str], np.ndarray]:
        """(ids sorted, matrix) of step-text vectors; ids are "<recipe_id>_<step_idx>_<field>"."""
        if field not in TEXT_FIELDS:
            raise ValueError(f"field must be one of {TEXT_FIELDS}")
        got, mat, _ = self._read(TEXT_TABLE, encoder_id, ids, split, field)
        return got, mat

    def search(self, encoder_id: str, queries: np.ndarray, limit: int, split: str | None = None,
               exact: bool = False, ann: AnnConfig | None = None) -> pa.Table:
        """Batched vector search on image_vectors: columns query_index, id, recipe_id, _distance."""
        ann = ann or self.ann
        tbl = self.find_table(IMAGE_TABLE, encoder_id)
        if tbl is None:
            raise LookupError(f"no image vectors for encoder {encoder_id}")
        where = f"encoder_id = {_sql_str(encoder_id)}"
        if split is not None:
            where += f" AND split = {_sql_str(split)}"
        q = (tbl.search(np.ascontiguousarray(queries, np.float32), vector_column_name="vector")
             .distance_type("cosine").where(where, prefilter=True)
             .select(["id", "recipe_id", "_distance"]).limit(limit))
        if exact or not self.has_ann_index(tbl):
            q = q.bypass_vector_index()
        else:
            stats = tbl.index_stats(next(ix.name for ix in tbl.list_indices()
                                         if ix.columns[0] == "vector"))
            parts = getattr(stats, "num_partitions", None) or ann.partitions_for(tbl.count_rows())
            share = 0.1 if ann.index_type == "IVF_FLAT" else 0.75
            q = q.nprobes(ann.nprobes or max(8, math.ceil(parts * share)))
            if ann.index_type == "IVF_HNSW_SQ":
                q = q.ef(ann.ef or 2 * limit)
            if ann.refine_factor:
                q = q.refine_factor(ann.refine_factor)
        t = q.to_arrow()
        if "query_index" not in t.column_names:      # a single query returns no query_index
            t = t.append_column("query_index", pa.array(np.zeros(t.num_rows, np.int32)))
        return t
