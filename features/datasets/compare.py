"""Two homes compared: are their datasets, their figures and their reading benchmark the same?

The pipeline promises that the same inputs give the same outputs byte for byte: a second `make demo` in a fresh
home, on the same machine and package versions, makes the same 80 datasets, the same `bias_metrics`, `af_checks`
and `reading_checks` rows and the same reading benchmark. On another machine the encoder may train other weights
(another instruction set), and then everything after it moves. `compare_homes` says which, for two warehouses
opened read-only:

- **datasets**, by `dataset_id`: the same (content hash, question and recipe counts, encoder and `params` all
  equal), different (with what differs: the content, the counts, the params), or in one home only;
- **figures**: per table of measured figures (FIGURE_TABLES, keyed by `dataset_id`), the rows alike in every
  column but the time they were computed (TIMESTAMP columns), and for the others the columns that differ with
  both values; rows are compared as stored, and those measured on an older content of their dataset (a check's
  `content_sha256` no longer the dataset's, which the reading gate does not count) are named per home;
- **the reading benchmark**: the datasets `mrqa export --all --reading-only` would export from each home
  (features/datasets/card.py `reading_gate`), and those in one list only.

`same` is true only when all three agree. `mrqa compare OTHER_HOME` prints it (rc 0 when the same, 1 when not,
as `diff` does)."""
from __future__ import annotations

import json
import math

import duckdb

FIGURE_TABLES = ("bias_metrics", "af_checks", "reading_checks", "pixel_checks")
DATASET_FIELDS = ("content_sha256", "n_questions", "n_recipes", "encoder_id")
MAX_LISTED = 12                  # per kind, the dataset ids the printed summary names (all are in the result)


def _datasets(con: duckdb.DuckDBPyConnection) -> dict[str, dict]:
    rows = con.execute(f"SELECT dataset_id, {', '.join(DATASET_FIELDS)}, params::VARCHAR FROM datasets "
                       "ORDER BY dataset_id").fetchall()
    out = {}
    for r in rows:
        d = dict(zip(DATASET_FIELDS, r[1:-1]))
        d["params"] = json.loads(r[-1]) if r[-1] else None
        out[r[0]] = d
    return out


def _has_table(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [table]).fetchall()[0][0])


def _figures(con: duckdb.DuckDBPyConnection, table: str) -> tuple[list[str], dict[str, tuple]]:
    """The table's columns but `dataset_id` and its TIMESTAMP ones, and {dataset_id: their values}."""
    if not _has_table(con, table):
        return [], {}
    cols = [c for c, t in con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ? "
                                      "ORDER BY column_index", [table]).fetchall()
            if c != "dataset_id" and not t.startswith("TIMESTAMP")]
    sel = ", ".join(f'"{c}"::VARCHAR' if c == "params" else f'"{c}"' for c in cols)
    rows = con.execute(f'SELECT dataset_id, {sel} FROM "{table}" ORDER BY dataset_id').fetchall()
    return cols, {r[0]: tuple(r[1:]) for r in rows}


def _stale(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    """The dataset ids whose row of `table` (a table with `content_sha256`) was measured on another content than
    the dataset's now (the reading gate does not count such a row)."""
    return [r[0] for r in con.execute(f'SELECT t.dataset_id FROM "{table}" t JOIN datasets d USING (dataset_id) '
                                      "WHERE t.content_sha256 IS DISTINCT FROM d.content_sha256 ORDER BY 1").fetchall()]


def _equal(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _reading(con: duckdb.DuckDBPyConnection) -> list[str] | None:
    """What `mrqa export --all --reading-only` would export; None where the home has no figures yet, or figures
    of a schema too old for the gate to read."""
    from features.datasets.card import reading_gate
    if not _has_table(con, "bias_metrics"):
        return None
    ids = [r[0] for r in con.execute("SELECT dataset_id FROM datasets ORDER BY 1").fetchall()]
    try:
        return reading_gate(con, ids)[0]
    except duckdb.Error:                    # a column the gate reads is missing: that home predates it
        return None


def compare_homes(a: duckdb.DuckDBPyConnection, b: duckdb.DuckDBPyConnection) -> dict:
    """Compare warehouse `a` (this home) with `b` (the other); see the module doc. Nothing is written."""
    da, db = _datasets(a), _datasets(b)
    same, differ = [], {}
    for did in sorted(set(da) & set(db)):
        x, y = da[did], db[did]
        what = [f for f in (*DATASET_FIELDS, "params") if x[f] != y[f]]
        if what:
            differ[did] = {"fields": what, "n_questions": [x["n_questions"], y["n_questions"]]}
        else:
            same.append(did)
    figures = {}
    for table in FIGURE_TABLES:
        ca, ra = _figures(a, table)
        cb, rb = _figures(b, table)
        cols = [c for c in ca if c in cb]
        ia, ib = [ca.index(c) for c in cols], [cb.index(c) for c in cols]
        alike, moved = 0, {}
        for did in sorted(set(ra) & set(rb)):
            diffs = {c: [ra[did][i], rb[did][j]] for c, i, j in zip(cols, ia, ib)
                     if not _equal(ra[did][i], rb[did][j])}
            if diffs:
                moved[did] = diffs
            else:
                alike += 1
        figures[table] = {"alike": alike, "differ": moved, "only_here": sorted(set(ra) - set(rb)),
                          "only_other": sorted(set(rb) - set(ra)),
                          "columns_not_compared": sorted(set(ca) ^ set(cb)),
                          "stale_here": _stale(a, table) if "content_sha256" in ca else [],
                          "stale_other": _stale(b, table) if "content_sha256" in cb else []}
    la, lb = _reading(a), _reading(b)
    reading = {"here": la, "other": lb,
               "only_here": sorted(set(la or ()) - set(lb or ())), "only_other": sorted(set(lb or ()) - set(la or ()))}
    out = {"datasets": {"same": same, "differ": differ, "only_here": sorted(set(da) - set(db)),
                        "only_other": sorted(set(db) - set(da))},
           "figures": figures, "reading_benchmark": reading}
    out["same"] = (not differ and not out["datasets"]["only_here"] and not out["datasets"]["only_other"]
                   and all(not f["differ"] and not f["only_here"] and not f["only_other"] for f in figures.values())
                   and la == lb)
    return out


def _ids(ids, limit: int = MAX_LISTED) -> str:
    ids = list(ids)
    return ", ".join(ids[:limit]) + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def _value(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return f"{v[:12]}..." if isinstance(v, str) and len(v) > 16 else str(v)     # a content hash: its start


def format_comparison(res: dict, here: str, other: str) -> str:
    """The printed summary of `compare_homes`: one block per part, the differences named."""
    d = res["datasets"]
    lines = [f"this home:  {here}", f"other home: {other}",
             f"datasets: {len(d['same'])} the same, {len(d['differ'])} different, {len(d['only_here'])} only here, "
             f"{len(d['only_other'])} only in the other"]
    for did, x in list(d["differ"].items())[:MAX_LISTED]:
        n = x["n_questions"]
        lines.append(f"  differs: {did}: {', '.join(x['fields'])}"
                     + (f" ({n[0]:,} questions here, {n[1]:,} there)" if n[0] != n[1] else ""))
    if len(d["differ"]) > MAX_LISTED:
        lines.append(f"  ... and {len(d['differ']) - MAX_LISTED} more")
    for key, label in (("only_here", "only here"), ("only_other", "only in the other")):
        if d[key]:
            lines.append(f"  {label}: {_ids(d[key])}")
    for table, f in res["figures"].items():
        lines.append(f"{table}: {f['alike']} rows alike, {len(f['differ'])} different, {len(f['only_here'])} only "
                     f"here, {len(f['only_other'])} only in the other")
        for did, cols in list(f["differ"].items())[:MAX_LISTED]:
            shown = list(cols.items())[:4]
            lines.append(f"  {did}: " + "; ".join(f"{c} {_value(x)} -> {_value(y)}" for c, (x, y) in shown)
                         + (f"; and {len(cols) - 4} more columns" if len(cols) > 4 else ""))
        if len(f["differ"]) > MAX_LISTED:
            lines.append(f"  ... and {len(f['differ']) - MAX_LISTED} more")
        for key, label in (("stale_here", "here"), ("stale_other", "in the other")):
            if f[key]:
                lines.append(f"  measured on an older content of their dataset {label} (the reading gate leaves them "
                             f"out): {_ids(f[key])}")
        if f["columns_not_compared"]:
            lines.append(f"  columns in one home only (not compared): {', '.join(f['columns_not_compared'])}")
    r = res["reading_benchmark"]
    if r["here"] is None or r["other"] is None:
        lines.append("reading benchmark: not compared (a home without `mrqa report` figures, or with figures of "
                     "an older schema)")
    else:
        lines.append(f"reading benchmark: {len(r['here'])} datasets here, {len(r['other'])} in the other"
                     + ("" if r["here"] == r["other"] else f"; only here: {_ids(r['only_here']) or '-'}; "
                        f"only in the other: {_ids(r['only_other']) or '-'}"))
    lines.append("the same" if res["same"] else "different")
    return "\n".join(lines)
