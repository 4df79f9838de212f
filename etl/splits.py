"""Stable recipe-level splits.

A recipe keeps its split across runs, corpus growth and knob settings: the split is a function of
the recipe id alone (a salted sha256 mapped to [0, 1)), so adding recipes never moves old ones.
Imported RecipeQA recipes keep RecipeQA's split. Hash-based assignment is stratified in
expectation (every category gets ~the same proportions); `split_report` measures the deviation.
"""
from __future__ import annotations

import hashlib

DEFAULT_FRACTIONS = (("train", 0.8), ("val", 0.1), ("test", 0.1))
SPLITS = ("train", "val", "test")


def stable_unit(key: str, salt: str = "mrqa-split-v1") -> float:
    h = hashlib.sha256(f"{salt}:{key}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


def assign_split(recipe_id: str, fractions=DEFAULT_FRACTIONS, salt: str = "mrqa-split-v1") -> str:
    u = stable_unit(recipe_id, salt)
    acc = 0.0
    for name, frac in fractions:
        acc += frac
        if u < acc:
            return name
    return fractions[-1][0]


def split_report(con) -> list[tuple]:
    """(category, split, n, share_in_category) for the warehouse's ok recipes."""
    return con.execute("""
        WITH c AS (SELECT category, split, count(*) AS n FROM recipes
                   WHERE status = 'ok' GROUP BY ALL)
        SELECT category, split, n, round(n / sum(n) OVER (PARTITION BY category), 3) AS share
        FROM c ORDER BY category, split""").fetchall()
