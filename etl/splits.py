"""Stable splits, drawn per recipe (the default) or per author.

A recipe keeps its split across runs, corpus growth and knob settings: the split is a function of a
key alone (a salted sha256 mapped to [0, 1)), so adding recipes never moves old ones. The key is the
recipe id, or with the warehouse's `split_by` setting at `author` the recipe's author, so every recipe of
an author lands in one split: the val and test splits then hold kitchens no model saw in training, and
an author's other recipes sit in the same split as the recipe (the pool of the author coherence
settings, features/datasets/matched.py). A recipe without an author falls back to its id.
Imported RecipeQA recipes keep RecipeQA's split. Hash-based assignment is stratified in
expectation (every category gets ~the same proportions); `split_report` measures the deviation.
"""
from __future__ import annotations

import hashlib
import logging
import re

log = logging.getLogger(__name__)

DEFAULT_FRACTIONS = (("train", 0.8), ("val", 0.1), ("test", 0.1))
SPLITS = ("train", "val", "test")
SPLIT_UNITS = ("recipe", "author")          # the warehouse setting `split_by`
SPLIT_SETTING = "split_by"
KEEPS_ITS_SPLIT = ("recipeqa",)             # sources whose recipes keep the split they came with
_SPACES = re.compile(r"[\t\n\f\r ]+")                 # the whitespace RE2's \s (DuckDB) matches


def stable_unit(key: str, salt: str = "mrqa-split-v1") -> float:
    h = hashlib.sha256(f"{salt}:{key}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


def assign_split(recipe_id: str, fractions=DEFAULT_FRACTIONS, salt: str = "mrqa-split-v1") -> str:
    """The split of a key (a recipe id, or `split_key`'s author key)."""
    u = stable_unit(recipe_id, salt)
    acc = 0.0
    for name, frac in fractions:
        acc += frac
        if u < acc:
            return name
    return fractions[-1][0]


def split_key(recipe_id: str, author: str | None, by: str = "recipe") -> str:
    """What a recipe's split is drawn from: its id, or (by author) its author's name, case and spacing
    ignored, so every recipe of an author gets one split; the id when the recipe names no author."""
    if by not in SPLIT_UNITS:
        raise ValueError(f"split_by must be one of {', '.join(SPLIT_UNITS)}, got {by!r}")
    name = _SPACES.sub(" ", author or "").strip(" ").lower()    # as the SQL of sql/ (RE2's \s) folds it
    return f"author:{name}" if by == "author" and name else recipe_id


def split_of(recipe_id: str, author: str | None, by: str = "recipe") -> str:
    return assign_split(split_key(recipe_id, author, by))


def split_unit(con) -> str:
    """The warehouse's `split_by` setting: `recipe` until `set_split_unit` says otherwise."""
    rows = con.execute("SELECT value FROM settings WHERE key = ?", [SPLIT_SETTING]).fetchall()
    return rows[0][0] if rows else "recipe"      # fetchall: an unfinished result would block the caller's next register


def set_split_unit(con, by: str) -> dict:
    """Store `split_by` and draw every recipe's split again by it, but for the sources that keep their
    own (RecipeQA imports) and the pages rejected before they had one. Idempotent: a second call moves
    nothing. Returns {split_by, moved, recipes, by_split} and warns when an encoder is registered, since it
    was trained on the old train split."""
    if by not in SPLIT_UNITS:
        raise ValueError(f"split_by must be one of {', '.join(SPLIT_UNITS)}, got {by!r}")
    from etl.warehouse import transaction, utcnow  # here: the CLI's choices import this module light
    rows = con.execute("SELECT recipe_id, author, split FROM recipes WHERE split IS NOT NULL "
                       "AND NOT list_contains(?, source)", [list(KEEPS_ITS_SPLIT)]).fetchall()
    moves = [(new, rid) for rid, author, old in rows if (new := split_of(rid, author, by)) != old]
    with transaction(con):
        con.execute("INSERT OR REPLACE INTO settings VALUES (?, ?, ?)", [SPLIT_SETTING, by, utcnow()])
        if moves:
            con.executemany("UPDATE recipes SET split = ? WHERE recipe_id = ?", moves)
    by_split = dict(con.execute("SELECT split, count(*) FROM recipes WHERE split IS NOT NULL "
                                "AND NOT list_contains(?, source) GROUP BY 1 ORDER BY 1",
                                [list(KEEPS_ITS_SPLIT)]).fetchall())
    if moves:
        log.info("splits drawn by %s: %d of %d recipes moved (%s)", by, len(moves), len(rows), by_split)
        n_enc = con.execute("SELECT count(*) FROM encoders").fetchall()[0][0]
        if n_enc:
            log.warning("%d recipes changed split, but the %d registered encoder(s) were trained on the old "
                        "train split: train a new one (`mrqa encoder train`), then run embed and generate "
                        "again", len(moves), n_enc)
    return {"split_by": by, "moved": len(moves), "recipes": len(rows), "by_split": by_split}


def split_report(con) -> list[tuple]:
    """(category, split, n, share_in_category) for the warehouse's ok recipes."""
    return con.execute("""
        WITH c AS (SELECT category, split, count(*) AS n FROM recipes
                   WHERE status = 'ok' GROUP BY ALL)
        SELECT category, split, n, round(n / sum(n) OVER (PARTITION BY category), 3) AS share
        FROM c ORDER BY category, split""").fetchall()
