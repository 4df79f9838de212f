"""The corpus's order of step titles: the counts the order probe (order_probe.py) and AF's order members
(features/datasets/adversarial.py ORDER_MEMBERS) read.

`TitleOrder` counts, over the train split's recipes, how often each step title (lower-cased, as a string)
comes before each other title in one recipe, how often it stands in each fifth of its recipe, and how often
it occurs. Nothing is learned from questions or answers. Per choice of a textual cloze question it gives 6
figures from those counts, with two recipes left out: the question's own and the choice's own (a distractor
is another recipe's title), so every choice is scored as a title of recipes the counts never saw, as the
val and test splits' titles are. The log share of the choice's occurrences that follow the titles shown
before the blank, that precede those after it, the same for the title just before and just after the blank
alone, the log share of its occurrences in the blank's fifth (its place among the question's items), and
the log of its count. `features` gives them for one choice; `batch` for many at once (sorted integer keys),
the same figures bit for bit.

This module imports nothing of the project, so the generator (features/datasets/generate.py) and the
probes can both use it."""
from __future__ import annotations

from collections import Counter

import duckdb
import numpy as np

TITLE_SUFFIX = "_title"        # a title item's id: <recipe_id>_<step_idx>_title (LanceDB step_text_vectors)
ORDER_BINS = 5                 # a title's place in its recipe, in fifths (first fifth ... last fifth)
ORDER_ALPHA = 0.5              # add-alpha smoothing of the counts
N_ORDER_FEATURES = 6


def title_key(title: str) -> str:
    """A title as the counts key it: lower-cased, runs of white space as one space."""
    return " ".join(title.lower().split())


def place_bin(i: int, n: int) -> int:
    """The fifth of a sequence of n that place i (0-based) falls in."""
    return min(ORDER_BINS - 1, int(ORDER_BINS * i / max(n, 1)))


class TitleOrder:
    """The title-order counts of the train split's recipes (module doc), and every titled step's row: `ids`
    (the title item ids textual cloze questions resolve to, `index` their rows), `key`, `recipe`."""

    def __init__(self, con: duckdb.DuckDBPyConnection):
        rows = con.execute("SELECT s.recipe_id, s.step_idx, trim(s.title), coalesce(r.split, '') FROM steps s "
                           "LEFT JOIN recipes r USING (recipe_id) WHERE s.title IS NOT NULL "
                           "AND trim(s.title) <> '' ORDER BY s.recipe_id, s.step_idx").fetchall()
        ids = [f"{r}_{i}{TITLE_SUFFIX}" for r, i, _, _ in rows]
        self.ids, self.index = ids, {i: n for n, i in enumerate(ids)}
        self.key = [title_key(t) for _, _, t, _ in rows]
        self.recipe = [r for r, *_ in rows]
        by_recipe: dict[str, list[str]] = {}
        split: dict[str, str] = {}
        for (rid, _, _, sp), k in zip(rows, self.key):
            by_recipe.setdefault(rid, []).append(k)
            split[rid] = sp
        # per train recipe its own counts (left out when it is the question's or a choice's recipe)
        self.own: dict[str, tuple[Counter, Counter, Counter]] = {}
        self.tables: tuple[Counter, Counter, Counter] = (Counter(), Counter(), Counter())   # pairs, count, place
        for rid, ts in by_recipe.items():
            if split[rid] != "train":
                continue
            pairs, count, place = Counter(), Counter(), Counter()
            for i, a in enumerate(ts):
                count[a] += 1
                place[(a, place_bin(i, len(ts)))] += 1
                for b in ts[i + 1:]:
                    pairs[(a, b)] += 1
            self.own[rid] = (pairs, count, place)
            for t, c in zip(self.tables, (pairs, count, place)):
                t.update(c)
        self.n_recipes = len(self.own)
        self._arrays()

    def _arrays(self) -> None:
        """The counts as sorted integer keys (`batch` looks up many at once): titles and recipes coded, a pair
        (a, b) keyed a * T + b, a recipe's own pair (r * T + a) * T + b, its own title r * T + a, its own
        place (r * T + a) * ORDER_BINS + fifth."""
        uniq = sorted(set(self.key))
        tcode = {k: i for i, k in enumerate(uniq)}
        self.recipe_index = {r: i for i, r in enumerate(sorted(set(self.recipe)))}
        self.code = np.array([tcode[k] for k in self.key], dtype=np.int64)
        self.rcode = np.array([self.recipe_index[r] for r in self.recipe], dtype=np.int64)
        T = self.n_titles = len(uniq)
        pairs, count, place = self.tables
        self.count = np.zeros(T, np.int64)
        for k, n in count.items():
            self.count[tcode[k]] = n
        self.place = np.zeros((T, ORDER_BINS), np.int64)
        for (k, b), n in place.items():
            self.place[tcode[k], b] = n

        def table(items):
            keys = np.fromiter((k for k, _ in items), np.int64, len(items))
            vals = np.fromiter((v for _, v in items), np.int64, len(items))
            o = np.argsort(keys, kind="stable")
            return keys[o], vals[o]
        self.pairs = table([(tcode[a] * T + tcode[b], n) for (a, b), n in pairs.items()])
        own_pairs, own_count, own_place = [], [], []
        for rid, (p, c, pl) in self.own.items():
            r = self.recipe_index[rid]
            own_pairs += [((r * T + tcode[a]) * T + tcode[b], n) for (a, b), n in p.items()]
            own_count += [(r * T + tcode[a], n) for a, n in c.items()]
            own_place += [((r * T + tcode[a]) * ORDER_BINS + b, n) for (a, b), n in pl.items()]
        self.own_pairs, self.own_count, self.own_place = table(own_pairs), table(own_count), table(own_place)

    @staticmethod
    def _get(table: tuple[np.ndarray, np.ndarray], q: np.ndarray) -> np.ndarray:
        keys, vals = table
        if len(keys) == 0:
            return np.zeros(q.shape, np.int64)
        i = np.minimum(np.searchsorted(keys, q), len(keys) - 1)
        return np.where(keys[i] == q, vals[i], 0)

    def batch(self, shown: np.ndarray, length: np.ndarray, blank: np.ndarray, choice: np.ndarray,
              recipe: np.ndarray) -> np.ndarray:
        """`features` of many choices at once: (K, M, N_ORDER_FEATURES) float64 for K questions with M choices
        each. shown (K, S): rows of the shown titles in order, the first length[k] of each real; blank (K,):
        the blank's place; choice (K, M): rows, -1 for none (zeros); recipe (K,): the question's recipe code
        (`recipe_index`, -1 for none). The same figures as `features`, summed in its order."""
        T, a = self.n_titles, ORDER_ALPHA
        K, M = choice.shape
        ok = choice >= 0
        c = np.where(ok, self.code[np.maximum(choice, 0)], 0)
        q = np.asarray(recipe, np.int64)[:, None]
        cr = np.where(ok, self.rcode[np.maximum(choice, 0)], -1)
        other = (cr != q) & (cr >= 0)                      # the choice's own recipe, left out once

        def left(glob, own, key_q, key_c):            # global count minus the left-out recipes' own counts
            n = glob - np.where(q >= 0, self._get(own, key_q), 0)
            return n - np.where(other, self._get(own, key_c), 0)

        def n_pair(s, t):                             # pair (s, t) of title codes, (K, M)
            return left(self._get(self.pairs, s * T + t), self.own_pairs,
                        (np.maximum(q, 0) * T + s) * T + t, (np.maximum(cr, 0) * T + s) * T + t)
        nc = left(self.count[c], self.own_count, np.maximum(q, 0) * T + c, np.maximum(cr, 0) * T + c)
        denom = np.log(nc + 2 * a)
        scode = np.where(shown >= 0, self.code[np.maximum(shown, 0)], 0)
        length, blank = np.asarray(length)[:, None], np.asarray(blank)[:, None]
        f_before, f_after = np.zeros((K, M)), np.zeros((K, M))
        for j in range(shown.shape[1]):
            s = scode[:, j:j + 1]
            f_before += np.where(j < blank, np.log(n_pair(s, c) + a) - denom, 0.0)
            f_after += np.where((j >= blank) & (j < length), np.log(n_pair(c, s) + a) - denom, 0.0)
        rows = np.arange(K)
        prev = scode[rows, np.maximum(blank[:, 0] - 1, 0)][:, None]
        nxt = scode[rows, np.minimum(blank[:, 0], shown.shape[1] - 1)][:, None]
        f_prev = np.where(blank > 0, np.log(n_pair(prev, c) + a) - denom, 0.0)
        f_next = np.where(blank < length, np.log(n_pair(c, nxt) + a) - denom, 0.0)
        fifth = np.minimum(ORDER_BINS - 1, (ORDER_BINS * blank) // np.maximum(length + 1, 1))
        n_place = left(self.place[c, fifth], self.own_place, (np.maximum(q, 0) * T + c) * ORDER_BINS + fifth,
                       (np.maximum(cr, 0) * T + c) * ORDER_BINS + fifth)
        f_place = np.log(n_place + a) - np.log(nc + ORDER_BINS * a)
        out = np.stack([f_before, f_after, f_prev, f_next, f_place, np.log(nc + 1.0)], -1)
        return np.where(ok[..., None], out, 0.0)

    def _n(self, table: int, key, out: list) -> float:
        return self.tables[table][key] - sum(o[table].get(key, 0) for o in out)

    def features(self, shown: list[int], blank: int, choice: int, recipe_id: str) -> list[float]:
        """The 6 order features (module doc) of the choice at row `choice` at place `blank` among the items
        of a question of recipe `recipe_id` whose shown titles are rows `shown` (in order, the blank's place
        excluded)."""
        c = self.key[choice]
        out = [o for o in (self.own.get(r) for r in sorted({recipe_id, self.recipe[choice]})) if o is not None]
        nc = self._n(1, c, out)
        denom = np.log(nc + 2 * ORDER_ALPHA)
        before = [self.key[r] for r in shown[:blank]]
        after = [self.key[r] for r in shown[blank:]]
        f_before = sum(np.log(self._n(0, (s, c), out) + ORDER_ALPHA) - denom for s in before)
        f_after = sum(np.log(self._n(0, (c, s), out) + ORDER_ALPHA) - denom for s in after)
        f_prev = np.log(self._n(0, (before[-1], c), out) + ORDER_ALPHA) - denom if before else 0.0
        f_next = np.log(self._n(0, (c, after[0]), out) + ORDER_ALPHA) - denom if after else 0.0
        f_place = (np.log(self._n(2, (c, place_bin(blank, len(shown) + 1)), out) + ORDER_ALPHA)
                   - np.log(nc + ORDER_BINS * ORDER_ALPHA))
        return [float(f_before), float(f_after), float(f_prev), float(f_next), float(f_place), float(np.log(nc + 1))]
