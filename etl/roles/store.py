"""The warehouse's cooking-role layer (table step_roles): build it from the rules or the sample
kitchen's ground truth, read it back.

- `extract_roles(con)`: run the extractor over every ok recipe's cleaned steps (source 'rules').
- `load_truth(con, ground_truth)`: the sample kitchen's planned roles (source 'truth'), with spans
  located in the warehouse's step text where the role is explicit.
Each replaces its source's rows in one transaction, so re-running is safe and gives the same rows.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import duckdb
from tqdm import tqdm

from etl.roles.extract import extract_step
from etl.warehouse import transaction

log = logging.getLogger(__name__)

COLUMNS = ("recipe_id", "step_idx", "source", "seq", "role", "value", "explicit", "span_start", "span_end",
           "event", "detail")


def _steps(con: duckdb.DuckDBPyConnection) -> list[tuple[str, int, str]]:
    return con.execute("SELECT s.recipe_id, s.step_idx, coalesce(s.body, '') FROM steps s "
                       "JOIN recipes r USING (recipe_id) WHERE r.status = 'ok' "
                       "ORDER BY s.recipe_id, s.step_idx").fetchall()


def _replace(con: duckdb.DuckDBPyConnection, source: str, rows: list[tuple]) -> None:
    with transaction(con):
        con.execute("DELETE FROM step_roles WHERE source = ?", [source])
        if rows:
            import pyarrow as pa
            batch = pa.table({c: [r[k] for r in rows] for k, c in enumerate(COLUMNS)})  # noqa: F841 - read by DuckDB
            con.execute(f"INSERT INTO step_roles ({', '.join(COLUMNS)}) SELECT {', '.join(COLUMNS)} FROM batch")


def extract_roles(con: duckdb.DuckDBPyConnection, progress: bool = True) -> dict:
    """Extract the roles of every ok recipe's steps with the rules; returns counts per role."""
    rows: list[tuple] = []
    counts: dict[str, int] = {}
    steps = _steps(con)
    for rid, idx, body in tqdm(steps, desc="roles", unit="step", disable=not progress, mininterval=2):
        for seq, r in enumerate(extract_step(body)):
            rows.append((rid, idx, "rules", seq, r.role, r.value, r.explicit, r.start, r.end, r.event, None))
            key = f"{r.role}_{'explicit' if r.explicit else 'hidden'}"
            counts[key] = counts.get(key, 0) + 1
    _replace(con, "rules", rows)
    log.info("roles: %d rows over %d steps (rules)", len(rows), len(steps))
    return {"source": "rules", "steps": len(steps), "rows": len(rows), "by_role": dict(sorted(counts.items()))}


def truth_roles(step_roles: dict, body: str) -> list[tuple]:
    """(role, value, explicit, start, end, event, detail) rows of one planned step's roles, with the
    spans of its explicit values located in `body` (case-insensitive; null when the cleaner changed
    the words)."""
    low = body.lower()

    def span(value: str, explicit: bool) -> tuple[int | None, int | None]:
        if not explicit:
            return None, None
        at = low.find(value.lower())
        return (at, at + len(value)) if at >= 0 else (None, None)

    out = [("event", step_roles["event"], True, None, None, 0, None)]
    p = step_roles["participants"]
    for name in p["names"]:
        out.append(("participant", name, p["explicit"], *span(name, p["explicit"]), 0, None))
    for role in ("tool", "habitat"):
        r = step_roles[role]
        if r["name"]:
            out.append((role, r["name"], r["explicit"], *span(r["name"], r["explicit"]), 0, None))
    for role in ("time", "temperature", "quantity"):
        if step_roles.get(role):
            out.append((role, step_roles[role], True, *span(step_roles[role], True), 0, None))
    mix = step_roles.get("mixture")
    if mix:
        out.append(("mixture", mix["name"], mix["name"].lower() in low, *span(mix["name"], True), 0,
                    json.dumps({"parts": mix["parts"]})))
    return out


def load_truth(con: duckdb.DuckDBPyConnection, ground_truth: Path) -> dict:
    """Load a sample kitchen's planned roles for the recipes the warehouse holds (source 'truth').
    Raises ValueError, replacing nothing, when a line is not a ground-truth record, or when no record
    gives a planned role of a warehouse step (an empty file, another kitchen's ground truth)."""
    ground_truth = Path(ground_truth)
    if not ground_truth.is_file():
        raise FileNotFoundError(f"{ground_truth}: no such ground truth; it is the ground_truth.jsonl of a "
                                "sample kitchen build (`mrqa sample build --out DIR`)")
    bodies = {(rid, idx): body for rid, idx, body in _steps(con)}
    held = {rid for rid, _ in bodies}
    rows: list[tuple] = []
    recipes = set()
    n_read = n_held = 0
    try:
        with ground_truth.open(encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{ground_truth}:{n}: not JSON ({e.msg}); rebuild the sample kitchen; "
                                     "nothing replaced") from None
                steps = rec.get("steps", []) if isinstance(rec, dict) else None
                if not isinstance(rec, dict) or not isinstance(rec.get("recipe_id"), str) or not isinstance(
                        steps, list) or not all(isinstance(st, dict) and isinstance(st.get("step_idx"), int)
                                                for st in steps):
                    raise ValueError(f"{ground_truth}:{n}: not a sample kitchen ground-truth record (want an "
                                     "object with recipe_id and a steps list of objects with step_idx); "
                                     "nothing replaced")
                n_read += 1
                n_held += rec["recipe_id"] in held
                for st in steps:
                    key = (rec["recipe_id"], st["step_idx"])
                    if key not in bodies or not st.get("roles"):
                        continue
                    recipes.add(rec["recipe_id"])
                    try:
                        planned = truth_roles(st["roles"], bodies[key])
                    except (KeyError, TypeError, AttributeError) as e:
                        raise ValueError(f"{ground_truth}:{n}: step {st['step_idx']} has roles of another shape "
                                         f"({type(e).__name__}: {e}); nothing replaced") from None
                    for seq, r in enumerate(planned):
                        rows.append((*key, "truth", seq, *r))
    except UnicodeDecodeError as e:
        raise ValueError(f"{ground_truth}: not UTF-8 text ({e.reason} at byte {e.start}); nothing replaced") from None
    if not rows:
        why = ("no records" if not n_read else
               f"no record matches a recipe in the warehouse ({n_read} read)" if not n_held else
               f"its {n_held} record(s) of warehouse recipes plan no roles for their steps ({n_read} read)")
        raise ValueError(f"{ground_truth}: {why}; nothing replaced")
    _replace(con, "truth", rows)
    log.info("roles: %d truth rows over %d recipes", len(rows), len(recipes))
    return {"source": "truth", "recipes": len(recipes), "rows": len(rows)}


def role_counts(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    return con.execute("SELECT source, role, explicit, count(*) FROM step_roles GROUP BY ALL ORDER BY ALL").fetchall()
