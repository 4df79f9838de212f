"""Text twins: two recipe steps that say the same thing, so that a photo of one is as right an answer as
a photo of the other.

Knob 2 draws a cloze question's distractors from the answer photo's nearest neighbours. On a site where
many recipes bake in a dish or chop on a board, those neighbours are mostly photos of the *same* kind
of step in other recipes ("Bake" / "Into the Oven"): no reader can then tell the answer from them by
reading, however good it is. Adversarial filtering (`-af`) therefore never uses a text twin of the
answer step as a cloze distractor, nor, for coherence, a foreign photo whose step twins any step of
the question's recipe (the context shows every step).

Twin rule: the Jaccard overlap of the two steps' content words (title + body, lower-cased alphabetic
tokens of 2+ letters, English stop words out, and words found in more than `MAX_DF` of all steps, a
site's boilerplate) is at least `TWIN_JACCARD`. On the 1,000-recipe sample kitchen, against its
ground truth (same action = twin), over the 9,246 knob-picked distractors of the 0-1-1 setting (59%
show the answer's action): 0.15 flags 54% with precision 0.93 and recall 0.86 (0.10: 0.86 / 0.91;
0.20: 0.97 / 0.82); the encoder's title-vector cosine separates them less well (AUC 0.81, the word
overlap 0.94). Measured with `python -m features.datasets.twins --home H` (needs the sample kitchen's
ground truth).

`items` (`ItemTwins`, `mrqa generate --twin-rule items`, visual cloze AF on the sample kitchen): twins by the
ground truth instead of the words, two steps whose photos show the same kind and action done to an item of the
same name (a mixture counts by its name: "chill the mixture" of two recipes are twins). "Dice the almonds" and
"dice the carrots" say the same action the same way, so the words rule calls them twins (0.643 of the knob-2 = 0
setting's knob-picked distractors on the demo), but the photo shows which item, and the step's text names it:
a reader tells them apart, a question-only model cannot. By the items rule 0.211 of those distractors are twins.
Steps without ground truth fall back to the words rule.
"""
from __future__ import annotations

import re
from functools import cache

import numpy as np
from scipy import sparse

TWIN_JACCARD = 0.15
TWIN_RULES = ("words", "items")    # the cloze twin rule of AF (`mrqa generate --twin-rule`)
MAX_DF = 0.25            # words in more than this share of the steps are boilerplate, not content
_WORD = re.compile(r"[a-z]+")
_PAIR_CHUNK = 200_000


@cache
def _stop_words() -> frozenset:
    """English stop words (scikit-learn's list), loaded on first use: importing sklearn costs seconds."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS
    return frozenset(ENGLISH_STOP_WORDS)


def content_words(text: str | None) -> list[str]:
    """Sorted distinct content words of a text."""
    stop = _stop_words()
    return sorted({w for w in _WORD.findall((text or "").lower()) if len(w) > 1 and w not in stop})


class StepWords:
    """Binary content-word rows of recipe steps, keyed by (recipe_id, step_idx)."""

    def __init__(self, keys: list, texts: list[str], max_df: float = MAX_DF):
        vocab: dict[str, int] = {}
        indptr, indices = [0], []
        for t in texts:
            indices.extend(vocab.setdefault(w, len(vocab)) for w in content_words(t))
            indptr.append(len(indices))
        self.keys = list(keys)
        self.index = {k: i for i, k in enumerate(self.keys)}
        m = sparse.csr_matrix((np.ones(len(indices), np.float32), np.array(indices, np.int64),
                               np.array(indptr, np.int64)), shape=(len(texts), max(len(vocab), 1)))
        # corpus stop words: words in more than max_df of the steps ("step", a site's boilerplate)
        df = np.asarray((m > 0).sum(0)).ravel() / max(len(texts), 1)
        keep = sparse.diags((df <= max_df).astype(np.float32))
        self.m = sparse.csr_matrix(m @ keep)
        self.m.eliminate_zeros()
        self.n_words = np.diff(self.m.indptr).astype(np.float64)
        self._by_recipe: dict | None = None

    @classmethod
    def from_warehouse(cls, con) -> StepWords:
        rows = con.execute("""SELECT recipe_id, step_idx, coalesce(title, '') || ' ' || coalesce(body, '')
                              FROM steps ORDER BY recipe_id, step_idx""").fetchall()
        return cls([(r, int(s)) for r, s, _ in rows], [t for _, _, t in rows])

    def rows(self, recipe_ids, step_idx) -> np.ndarray:
        """Row of each (recipe_id, step_idx); -1 where the step is unknown."""
        return np.array([self.index.get((r, int(s)), -1) for r, s in zip(recipe_ids, step_idx)], np.int64)

    def recipe_rows(self, recipe_ids) -> np.ndarray:
        """(n, S) rows of every step of each recipe, -1 padded (keys must be (recipe_id, step_idx))."""
        if self._by_recipe is None:
            by: dict[str, list[int]] = {}
            for i, (rid, _) in enumerate(self.keys):
                by.setdefault(rid, []).append(i)
            self._by_recipe = {r: np.array(v, np.int64) for r, v in by.items()}
        lists = [self._by_recipe.get(r, np.zeros(0, np.int64)) for r in recipe_ids]
        out = np.full((len(lists), max([len(x) for x in lists] + [1])), -1, np.int64)
        for i, x in enumerate(lists):
            out[i, :len(x)] = x
        return out

    def jaccard(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Elementwise Jaccard overlap of rows a and b (broadcast together); 0 where either is -1."""
        a, b = np.broadcast_arrays(np.asarray(a, np.int64), np.asarray(b, np.int64))
        fa, fb = a.reshape(-1), b.reshape(-1)
        out = np.zeros(len(fa))
        ok = np.flatnonzero((fa >= 0) & (fb >= 0))
        for s in range(0, len(ok), _PAIR_CHUNK):
            k = ok[s:s + _PAIR_CHUNK]
            inter = np.asarray(self.m[fa[k]].multiply(self.m[fb[k]]).sum(1)).ravel()
            union = self.n_words[fa[k]] + self.n_words[fb[k]] - inter
            out[k] = np.where(union > 0, inter / np.maximum(union, 1), 0.0)
        return out.reshape(a.shape)

    def twins(self, a: np.ndarray, b: np.ndarray, threshold: float = TWIN_JACCARD) -> np.ndarray:
        return self.jaccard(a, b) >= threshold


class ItemTwins:
    """The items twin rule over the rows of a StepWords (same `rows`, `recipe_rows`, `index`): steps i and j
    are twins when a photo of each shows the same (kind, action, item name); where either step has no ground
    truth, the words rule decides. `photos`: image_id -> (recipe_id, step_idx, depicts), a sample kitchen
    build's ground truth (features/datasets/redraw.py, Truth.photos)."""

    def __init__(self, words: StepWords, photos: dict):
        self.words, self.index, self.keys = words, words.index, words.keys
        vocab: dict[tuple, int] = {}
        by_row: dict[int, set] = {}
        for _iid, (rid, step, d) in sorted(photos.items()):
            row = words.index.get((rid, int(step)))
            if row is None:
                continue
            triples = by_row.setdefault(row, set())
            triples.update(vocab.setdefault((d.get("kind"), d.get("action"), it["name"]), len(vocab))
                           for it in d.get("items") or ())
        indptr, indices = [0], []
        for i in range(len(words.keys)):
            indices.extend(sorted(by_row.get(i, ())))
            indptr.append(len(indices))
        self.m = sparse.csr_matrix((np.ones(len(indices), np.float32), np.array(indices, np.int64),
                                    np.array(indptr, np.int64)), shape=(len(words.keys), max(len(vocab), 1)))
        self.has_truth = np.array([i in by_row for i in range(len(words.keys))], bool)

    def rows(self, recipe_ids, step_idx) -> np.ndarray:
        return self.words.rows(recipe_ids, step_idx)

    def recipe_rows(self, recipe_ids) -> np.ndarray:
        return self.words.recipe_rows(recipe_ids)

    def twins(self, a: np.ndarray, b: np.ndarray, threshold: float = TWIN_JACCARD) -> np.ndarray:
        """Elementwise over rows a and b (broadcast together); False where either is -1."""
        a, b = np.broadcast_arrays(np.asarray(a, np.int64), np.asarray(b, np.int64))
        fa, fb = a.reshape(-1), b.reshape(-1)
        out = np.zeros(len(fa), bool)
        ok = np.flatnonzero((fa >= 0) & (fb >= 0))
        truth = self.has_truth[fa[ok]] & self.has_truth[fb[ok]]
        by_words = ok[~truth]
        out[by_words] = self.words.twins(fa[by_words], fb[by_words], threshold)
        ok = ok[truth]
        for s in range(0, len(ok), _PAIR_CHUNK):
            k = ok[s:s + _PAIR_CHUNK]
            out[k] = np.asarray(self.m[fa[k]].multiply(self.m[fb[k]]).sum(1)).ravel() > 0
        return out.reshape(a.shape)


def twin_rule_quality(home: str, dataset_pattern: str = "vc-0-1-1-s%") -> list[dict]:
    """Precision/recall of the twin rule against the sample kitchen's ground truth (a distractor showing
    the answer's action is a twin), over the visual cloze distractors of the matching datasets; with
    the share of distractors that show the answer's action, and of questions with at least one."""
    import glob
    import json
    from pathlib import Path

    import duckdb
    action = {}
    for f in glob.glob(str(Path(home) / "sample" / "*" / "ground_truth.jsonl")):
        for line in open(f):
            r = json.loads(line)
            for s in r.get("steps", []):
                action[(r["recipe_id"], s["step_idx"])] = (s.get("labels") or {}).get("action")
    if not action:
        raise FileNotFoundError(f"no sample-kitchen ground truth under {home}/sample: run `mrqa demo` there")
    con = duckdb.connect(str(Path(home) / "warehouse.duckdb"), read_only=True)
    words = StepWords.from_warehouse(con)
    a, d, y, any_same, n_q = [], [], [], 0, 0
    for choices, ans in con.execute("""SELECT choice_list, answer FROM questions WHERE task = 'visual_cloze'
                                       AND dataset_id LIKE ?""", [dataset_pattern]).fetchall():
        steps = [tuple(x.removesuffix(".jpg").rsplit("_", 2)[:2]) for x in choices]
        steps = [(r, int(s)) for r, s in steps]
        if steps[ans] not in action:
            continue
        same = [(st, action[st] == action[steps[ans]]) for j, st in enumerate(steps) if j != ans and st in action]
        n_q, any_same = n_q + 1, any_same + any(y_ for _, y_ in same)
        for st, y_ in same:
            a.append(words.index[steps[ans]])
            d.append(words.index[st])
            y.append(y_)
    con.close()
    jac, y = words.jaccard(np.array(a, np.int64), np.array(d, np.int64)), np.array(y, bool)
    out = []
    for t in (0.10, TWIN_JACCARD, 0.20):
        flag = jac >= t
        out.append({"threshold": t, "pairs": int(len(y)),
                    "same_action_share": round(float(y.mean()), 3) if len(y) else None,
                    "questions_with_a_same_action_distractor": round(any_same / n_q, 3) if n_q else None,
                    "flagged_share": round(float(flag.mean()), 3) if len(y) else None,
                    "precision": round(float(y[flag].mean()), 3) if flag.any() else None,
                    "recall": round(float(flag[y].mean()), 3) if y.any() else None})
    return out


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="Twin rule precision/recall on a sample-kitchen home.")
    ap.add_argument("--home", required=True)
    ap.add_argument("--datasets", default="vc-0-1-1-s%", help="dataset_id LIKE pattern")
    args = ap.parse_args()
    from pathlib import Path
    if not (Path(args.home) / "warehouse.duckdb").exists():
        ap.exit(2, f"error: no warehouse at {args.home}/warehouse.duckdb: run `mrqa --home {args.home} demo` first\n")
    try:
        rows = twin_rule_quality(args.home, args.datasets)
    except FileNotFoundError as e:
        ap.exit(2, f"error: {e}\n")
    for row in rows:
        print(row)
