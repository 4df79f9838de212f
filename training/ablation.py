"""The context ablation: each question given another recipe's steps. The trainer's runs, the reading check,
the model-free baselines and `mrqa score` all take the other recipe from this one rule, so their figures
compare. numpy only: `mrqa score` and the export stay light."""
from __future__ import annotations

import numpy as np


def foreign_context_rows(recipe_row: np.ndarray) -> tuple[np.ndarray, int]:
    """For each question, the context row of a question from another recipe (the context-ablation
    check: does accuracy need the question's own recipe?). Questions sorted by recipe, each takes
    the recipe row `g` places further round (g = the largest recipe's question count), so a row is
    never its own unless one recipe has over half the questions; returns (rows, how many kept their own)."""
    n = len(recipe_row)
    if n == 0:
        return recipe_row.copy(), 0
    order = np.argsort(recipe_row, kind="stable")
    g = int(np.bincount(recipe_row).max())
    out = np.empty_like(recipe_row)
    out[order] = recipe_row[np.roll(order, -g)]
    return out, int((out == recipe_row).sum())


def other_recipes(recipe_ids: list[str]) -> list[str]:
    """The other recipe of each question of one split, its questions given in qid order with their
    recipes: `foreign_context_rows` over the recipes' rows in sorted order (the trainer numbers a dataset's
    recipes so), as recipe ids. The export's context_ablation.parquet and `mrqa score --plan` write it."""
    used = sorted(set(recipe_ids))
    row = {rid: i for i, rid in enumerate(used)}
    rows, _ = foreign_context_rows(np.array([row[r] for r in recipe_ids], np.int64))
    return [used[i] for i in rows]
