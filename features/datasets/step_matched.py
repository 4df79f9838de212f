"""Visual coherence: foreign photos that depict what a held-out step of the question's recipe does
(`mrqa redraw --task visual_coherence --foreign-pool steps`).

Drawn in the question's kitchen (features/datasets/redraw_coherence.py), a foreign photo no longer differs
by its counter and light, but it still differs by *what* it shows: AF's foreign photos come from the knob-2
ball of other recipes, whose actions are distributed otherwise than a recipe's own steps (on the demo, slicing
13.6% of the foreign photos against 7.0% of the shown ones, serving 1.2% against 10.5%), and a model of the 4
photos learns that without reading. Here the candidates are photos of other recipes of the question's split
that show what one of the recipe's *held-out* steps (a step with a photo, none of it shown) would show: the
same kind and action, then as many as can be of its state, vessel and tool; so the foreign photo is, by
its look, one more step of the recipe, and only its ingredients and the recipe's text tell it apart.

Per question, the held-out steps are taken in a seeded order and their candidates interleaved (best match
first, then the most of the recipe's shown items, then a seeded key), STEP_POOL in all; from a matched source
(`K1-0-0-matched-af`) only the step of its reference photo (the recipe's own photo whose place the foreign
one takes, features/datasets/matched.py), and the best match to the reference wins. A twin of a step of the
recipe is never one: by its step text (`words`, features/datasets/twins.py, the AF rule) or by the ground truth
(`items`: a step of the recipe does the same kind and action to an item the photo shows); and the
redraw then keeps a candidate only where the shown steps' texts tell it from the shown photos (AF's
answerability rule, adversarial.readable_coherence, on the redrawn photos' vectors) and the knobs hold in
the question's kitchen.
"""
from __future__ import annotations

import numpy as np

from features.datasets.knobs import stable_key
from features.datasets.twins import StepWords

STEP_POOL = 12                          # step-matched candidates per question
MATCH_FIELDS = ("state", "vessel", "tool")
TWIN_RULES = ("words", "items")


def item_names(truth, image_id: str) -> set[str]:
    """The names of the items a photo shows (its step's ground truth)."""
    return {it["name"] for it in truth.photos[image_id][2].get("items") or ()}


class StepPool:
    """Photos by (split, kind, action), the recipes' photos, and the steps' content words of a warehouse."""

    def __init__(self, con, truth, words: StepWords | None = None, twin_rule: str = "words"):
        if twin_rule not in TWIN_RULES:
            raise ValueError(f"--twin-rule {twin_rule}: one of {', '.join(TWIN_RULES)}")
        self.truth, self.twin_rule = truth, twin_rule
        self.split = dict(con.execute("SELECT recipe_id, split FROM recipes WHERE status = 'ok'").fetchall())
        self.by_recipe: dict[str, list[tuple[str, int, dict]]] = {}
        self.by_action: dict[tuple, list[str]] = {}
        for iid, (r, s, d) in sorted(truth.photos.items()):
            self.by_recipe.setdefault(r, []).append((iid, int(s), d))
            if r in self.split:
                self.by_action.setdefault((self.split[r], d.get("kind"), d.get("action")), []).append(iid)
        self.words = words or StepWords.from_warehouse(con)

    def held_out(self, rid: str, shown: list[str]) -> list[tuple[str, int, dict]]:
        """The recipe's photos of steps none of whose photos is shown (one per step: its first)."""
        steps = {self.truth.photos[i][1] for i in shown}
        out, seen = [], set()
        for iid, s, d in self.by_recipe.get(rid, ()):
            if s not in steps and s not in seen:
                seen.add(s)
                out.append((iid, s, d))
        return out

    def candidates(self, rid: str, shown: list[str], split: str, seed: int, qid: str, n: int = STEP_POOL,
                   only: int | None = None) -> list[tuple[str, str, int, int]]:
        """Up to `n` (photo, its recipe, the held-out step it matches, fields matched) for question `qid` of
        recipe `rid` showing photos `shown` (`only`: for held-out step `only` alone); no text twin of a step of
        the recipe."""
        shown_items = set().union(*(item_names(self.truth, i) for i in shown))
        held = sorted((h for h in self.held_out(rid, shown) if only is None or h[1] == only),
                      key=lambda h: stable_key("step-held", seed, qid, h[0]))
        lists = []
        for _hid, hs, hd in held:
            # the items the recipe's own steps of this kind and action show (an item twin shows one of them)
            twin_items = set().union(*({it["name"] for it in d.get("items") or ()}
                                       for _, _, d in self.by_recipe.get(rid, ())
                                       if (d.get("kind"), d.get("action")) == (hd.get("kind"), hd.get("action"))))
            ranked = []
            for c in self.by_action.get((split, hd.get("kind"), hd.get("action")), ()):
                cr, cs, cd = self.truth.photos[c]
                names = item_names(self.truth, c)
                if cr == rid or (self.twin_rule == "items" and names & twin_items):
                    continue
                score = sum(cd.get(k) == hd.get(k) for k in MATCH_FIELDS)
                share = len(names & shown_items) / max(len(names), 1)
                ranked.append((-score, -share, stable_key("step-cand", seed, qid, c), c, hs, score))
            ranked.sort()
            lists.append(ranked[:4 * n])
        picked, seen = [], set()
        for depth in range(max([len(x) for x in lists] + [0])):
            for ranked in lists:
                if depth < len(ranked) and ranked[depth][3] not in seen:
                    seen.add(ranked[depth][3])
                    picked.append(ranked[depth])
        if not picked:
            return []
        if self.twin_rule == "items":       # item twins were left out above
            return [(p[3], self.truth.photos[p[3]][0], p[4], p[5]) for p in picked][:n]
        # never a text twin of a step of the recipe (it would read as belonging to it)
        steps = self.words.recipe_rows([rid])[0]
        steps = steps[steps >= 0]
        rows = self.words.rows([self.truth.photos[p[3]][0] for p in picked],
                               [self.truth.photos[p[3]][1] for p in picked])
        twin = self.words.twins(rows[:, None], steps[None, :]).any(1) if len(steps) else \
            np.zeros(len(picked), dtype=bool)
        out = [(p[3], self.truth.photos[p[3]][0], p[4], p[5]) for p, t, r in zip(picked, twin, rows)
               if not t and r >= 0]
        return out[:n]
