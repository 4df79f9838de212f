"""Load recipe records into the warehouse: idempotent upserts keyed on natural keys."""
from __future__ import annotations

import hashlib
import json
from datetime import datetime

import duckdb

from etl.records import RecipeRecord, image_id
from etl.splits import split_of, split_unit
from etl.warehouse import transaction, utcnow


def recipe_content_sha256(rec: RecipeRecord) -> str:
    return hashlib.sha256(json.dumps(rec.to_json(), sort_keys=True).encode()).hexdigest()


def load_recipe(con: duckdb.DuckDBPyConnection, rec: RecipeRecord, source: str,
                split: str | None = None, fetched_at: datetime | None = None,
                status: str = "ok", status_reason: str | None = None) -> dict:
    """Upsert one recipe with its steps and image rows.

    Steps of the recipe are replaced as a whole (a re-scrape may change their number). Image rows
    keep their download state when the URL is unchanged; new URLs start as `pending`.
    Returns counts {steps, images_new, images_kept}.
    """
    split = split or split_of(rec.recipe_id, rec.author, split_unit(con))
    sha = recipe_content_sha256(rec)
    with transaction(con):
        con.execute("""INSERT OR REPLACE INTO recipes (recipe_id, source, url, title, category, channel,
                       author, license, split, fetched_at, content_sha256, status, status_reason)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                    [rec.recipe_id, source, rec.url, rec.title, rec.category, rec.channel,
                     rec.author, rec.license, split, fetched_at or utcnow(), sha, status,
                     status_reason])
        con.execute("DELETE FROM steps WHERE recipe_id = ?", [rec.recipe_id])
        if rec.steps:
            con.executemany(
                "INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?, ?)",
                [[rec.recipe_id, s.step_idx, s.title, s.body, s.title, s.body, s.n_videos]
                 for s in rec.steps])
        existing = dict(con.execute("SELECT image_id, url FROM images WHERE recipe_id = ?",
                                    [rec.recipe_id]).fetchall())
        wanted = {image_id(rec.recipe_id, s.step_idx, k): url
                  for s in rec.steps for k, url in enumerate(s.images)}
        stale = [i for i in existing if i not in wanted]
        if stale:
            con.execute("DELETE FROM images WHERE list_contains(?, image_id)", [stale])
        new = [(iid, url) for iid, url in wanted.items() if existing.get(iid) != url]
        if new:
            con.executemany(
                """INSERT OR REPLACE INTO images (image_id, recipe_id, step_idx, ord, url, status)
                   VALUES (?, ?, ?, ?, ?, 'pending')""",
                [[iid, rec.recipe_id, *_step_ord(rec.recipe_id, iid), url] for iid, url in new])
    return {"steps": len(rec.steps), "images_new": len(new), "images_kept": len(wanted) - len(new)}


def _step_ord(recipe_id: str, iid: str) -> tuple[int, int]:
    step, ord_ = iid[len(recipe_id) + 1:-len(".jpg")].split("_")
    return int(step), int(ord_)


def mark_recipe(con: duckdb.DuckDBPyConnection, recipe_id: str, source: str, url: str | None,
                status: str, reason: str) -> None:
    """Record a recipe that could not be ingested (keeps any earlier content)."""
    con.execute("""INSERT INTO recipes (recipe_id, source, url, status, status_reason, fetched_at)
                   VALUES (?, ?, ?, ?, ?, ?)
                   ON CONFLICT (recipe_id) DO UPDATE SET status = excluded.status,
                        status_reason = excluded.status_reason, fetched_at = excluded.fetched_at""",
                [recipe_id, source, url, status, reason, utcnow()])
