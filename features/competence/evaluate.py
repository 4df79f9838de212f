"""Baselines, a reference reader and their EM / F1 per competence family.

Methods (fitted on the train split, scored on a held-out split, default test):
- answer_prior      the most frequent train answer of the question's family and template
- question_only     a bag-of-words classifier (multinomial naive Bayes) per template, from the
                    question text alone: it learns e.g. that "How do you slice ..." means a knife
- context_only      the recipe's most frequent entity (participant), the question unseen
- reader            a rule-based reader: it parses the question's template, reads the recipe's steps
                    with the role extractor (etl/roles/extract.py) and looks the role up; "N/A" when
                    the recipe has no such role. A hidden tool or habitat is the one the recipe itself
                    names with that action elsewhere, else the one the train split's recipes name
                    most with that verb (`learned_defaults`: read from recipe text, never from answers)
- reader_other_recipe  the same reader given another recipe's steps (the next recipe of the split)

A family where one of the three baselines gets more than 40% EM is flagged: its answers can be
guessed without reading the recipe.
"""
from __future__ import annotations

import re
from collections import Counter, defaultdict

import duckdb

from etl.roles.evaluate import head
from etl.roles.lexicon import inflections
from features.competence.generate import FAMILIES, NA, Frame, at, frames_from_text, join, participle
from features.competence.scoring import score

PRIOR_FLAG_EM = 40.0
BASELINES = ("answer_prior", "question_only", "context_only")
METHODS = ("answer_prior", "question_only", "context_only", "reader", "reader_other_recipe")
COMBINE = ("mix", "combine", "whisk", "beat", "blend", "stir", "cream")
MIXTURE_WORDS = ("batter", "dough", "mixture", "filling", "sauce", "glaze", "frosting", "icing", "marinade",
                 "dressing", "paste", "cream", "syrup", "custard", "crust", "soup", "stew", "topping", "base",
                 "puree", "smoothie", "jam", "broth", "stock", "blend", "crumble", "mix")

_PATTERNS = [
    ("time", re.compile(r"^For how long should you (\S+) the (.+)\?$")),
    ("temperature", re.compile(r"^At what temperature should you (\S+) the (.+)\?$")),
    ("tool", re.compile(r"^How do you (\S+) the (.+)\?$")),
    ("habitat", re.compile(r"^Where should the (.+) be when you (\S+) (?:it|them)\?$")),
    ("contents", re.compile(r"^What's in the (.+)\?$")),
    ("ingredients", re.compile(r"^How many ingredients go into the (.+)\?$")),
    ("habitat_steps", re.compile(r"^How many steps use the (.+)\?$")),
    ("quantity", re.compile(r"^How many (.+) should you (\S+)\?$")),
    ("object", re.compile(r"^What should be (\S+?)(?: (?:for|at|with the|in the) (.+))?\?$")),
]


def _matches(obj: str, name: str) -> bool:
    a, b = obj.lower(), name.lower()
    return a == b or a in b or b in a or head(a) == head(b)


class Reader:
    """Answer a competence question from a recipe's step texts, by role lookup."""

    def __init__(self, steps: list[tuple[int, str]], defaults: dict | None = None):
        self.frames: list[Frame] = frames_from_text(steps)
        self.text = " ".join(b for _, b in steps).lower()
        self.step_text = {i: b.lower() for i, b in steps}
        self.defaults = defaults or {}
        self.mentions = {kind: [getattr(f, kind)[0] for f in self.frames if getattr(f, kind) and getattr(f, kind)[1]]
                         for kind in ("tool", "habitat")}

    def _specific(self, kind: str, value: str, verb: str) -> str:
        """A hidden role resolved: the recipe's own wording of it ("knife" -> "chef's knife"), else the
        wording that recipes of the training split use most with this verb."""
        value = self.defaults.get((kind, verb), value)
        for m in self.mentions[kind]:
            if head(m) == head(value):
                return m
        return value

    def _find(self, verb: str, obj: str | None) -> list[Frame]:
        fs = [f for f in self.frames if f.event == verb]
        if obj is None:
            return fs
        named = [f for f in fs if any(_matches(obj, n) for n, _ in f.participants)]
        if named:
            return named
        if obj.lower() not in self.text:
            return []
        implied = [f for f in fs if not f.participants]
        if implied:
            return implied
        # the text may say the action with another verb ("Cut the eggs into small dice"): a frame of
        # the object in a step whose text has a form of the asked verb
        forms = inflections(verb)
        return [f for f in self.frames if any(_matches(obj, n) for n, _ in f.participants)
                and forms & set(re.findall(r"[a-z]+", self.step_text.get(f.step_idx, "")))]

    def answer(self, question: str) -> str:
        for kind, pat in _PATTERNS:
            m = pat.match(question)
            if m:
                return getattr(self, f"_{kind}")(*m.groups())
        return NA

    def _time(self, verb, obj):
        return next((f.time for f in self._find(verb, obj) if f.time), NA)

    def _temperature(self, verb, obj):
        return next((f.temperature for f in self._find(verb, obj) if f.temperature), NA)

    def _tool(self, verb, obj):
        fs = self._find(verb, obj)
        f = next((f for f in fs if f.tool), None)
        if f is None:
            learned = self.defaults.get(("tool", verb))
            return f"by using a {self._specific('tool', learned, verb)}" if fs and learned else NA
        return f"by using a {f.tool[0] if f.tool[1] else self._specific('tool', f.tool[0], f.event)}"

    def _habitat(self, obj, verb):
        fs = self._find(verb, obj)
        f = next((f for f in fs if f.habitat), None)
        if f is None:
            learned = self.defaults.get(("habitat", verb))
            return at(self._specific("habitat", learned, verb)) if fs and learned else NA
        return at(f.habitat[0] if f.habitat[1] else self._specific("habitat", f.habitat[0], f.event))

    def _made(self):
        """The frame that lists a mixture's parts: the first one with two or more participants in a
        step that combines ("Put the a, b and c in a blender and blend")."""
        combining = {f.step_idx for f in self.frames if f.event in COMBINE}
        return next((f for f in self.frames if f.step_idx in combining and len(f.participants) >= 2), None)

    def _contents(self, mixture):
        f = self._made()
        return join([n for n, _ in f.participants]) if f and mixture.lower() in self.text else NA

    def _ingredients(self, mixture):
        f = self._made()
        return str(len(f.participants)) if f and mixture.lower() in self.text else NA

    def _habitat_steps(self, habitat):
        steps = {f.step_idx for f in self.frames if f.habitat and f.habitat[1] and _matches(habitat, f.habitat[0])
                 and f.habitat[0].split()[-1] == habitat.split()[-1]}
        return str(len(steps)) if steps else NA

    def _quantity(self, obj, verb):
        return next((f.quantity for f in self._find(verb, obj) if f.quantity), NA)

    def _object(self, word, adjunct=None):
        fs = [f for f in self.frames if participle(f.event) == word and not f.participants]
        if adjunct:
            fs = [f for f in fs if adjunct in (f.time, f.temperature, f.tool and f.tool[0], f.habitat and f.habitat[0])]
        if not fs:
            return NA
        counts = Counter(w for w in re.findall(r"[a-z]+", self.text) if w in MIXTURE_WORDS)
        if counts:
            return counts.most_common(1)[0][0]         # ties: the first named in the text
        before = [n for f in self.frames if f.step_idx < fs[0].step_idx for n, e in f.participants if e]
        return before[-1] if before else NA


def _steps(con: duckdb.DuckDBPyConnection, recipe_ids: list[str]) -> dict[str, list[tuple[int, str]]]:
    rows = con.execute("SELECT recipe_id, step_idx, coalesce(body, '') FROM steps WHERE recipe_id IN "
                       "(SELECT unnest(?)) ORDER BY recipe_id, step_idx", [recipe_ids]).fetchall()
    out: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for rid, idx, body in rows:
        out[rid].append((idx, body))
    return out


def learned_defaults(con: duckdb.DuckDBPyConnection, split: str = "train") -> dict:
    """(kind, verb) -> the tool / habitat that the split's recipes name most often in the same
    sentence after that verb (explicit mentions of the rules layer): the commonsense a reader brings,
    read from recipe text, never from answers."""
    rows = con.execute("""
        SELECT e.value, r.role, r.value, substr(s.body, e.span_start + 1, r.span_start - e.span_start)
        FROM step_roles e JOIN step_roles r USING (recipe_id, step_idx, source)
        JOIN steps s USING (recipe_id, step_idx) JOIN recipes USING (recipe_id)
        WHERE e.source = 'rules' AND e.role = 'event' AND r.role IN ('tool', 'habitat') AND r.explicit
          AND recipes.split = ? AND r.span_start > e.span_start
        ORDER BY ALL""", [split]).fetchall()
    counts: Counter = Counter()
    for verb, kind, value, between in rows:
        if not re.search(r"[.!?;\n]", between or ""):
            counts[(kind, verb, value)] += 1
    out: dict = {}
    for (kind, verb, value), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if n >= 3:
            out.setdefault((kind, verb), value)
    return out


def _question_only(train: list[dict], test: list[dict]) -> list[str]:
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.naive_bayes import MultinomialNB
    by_t: dict[str, list[dict]] = defaultdict(list)
    for r in train:
        by_t[r["template"]].append(r)
    prior = mode(Counter(r["answer"] for r in train)) if train else NA
    preds = []
    models = {}
    for r in test:
        rows = by_t.get(r["template"])
        if not rows:
            preds.append(prior)
            continue
        if r["template"] not in models:
            answers = sorted({x["answer"] for x in rows})
            if len(answers) == 1:
                models[r["template"]] = answers[0]
            else:
                vec = CountVectorizer(token_pattern=r"[a-z']+", ngram_range=(1, 2), lowercase=True)
                x = vec.fit_transform([x["question"] for x in rows])
                models[r["template"]] = (vec, MultinomialNB(alpha=0.1).fit(x, [x_["answer"] for x_ in rows]))
        m = models[r["template"]]
        preds.append(m if isinstance(m, str) else str(m[1].predict(m[0].transform([r["question"]]))[0]))
    return preds


def mode(counts: Counter) -> str:
    """The most frequent value; a tie goes to the smallest value, so the answer does not depend on the
    order the rows came in (Counter.most_common keeps the first seen, and a query's row order is not fixed)."""
    return min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def evaluate(con: duckdb.DuckDBPyConnection, questions: dict[str, list[dict]], split: str = "test") -> dict:
    """family -> method -> {n, em, f1} on `split` (train questions fit the learned baselines)."""
    all_ids = sorted({r["recipe_id"] for rows in questions.values() for r in rows})
    steps = _steps(con, all_ids)
    ctx = con.execute("SELECT recipe_id, value FROM step_roles WHERE source = 'rules' AND role = 'participant' "
                      "AND recipe_id IN (SELECT unnest(?))", [all_ids]).fetchall()
    entity: dict[str, Counter] = defaultdict(Counter)
    for rid, v in ctx:
        entity[rid][v] += 1
    readers: dict[str, Reader] = {}
    defaults = learned_defaults(con)

    def reader(rid: str) -> Reader:
        if rid not in readers:
            readers[rid] = Reader(steps.get(rid, []), defaults)
        return readers[rid]

    out: dict[str, dict] = {}
    for fam in FAMILIES:
        rows = questions.get(fam, [])
        train = [r for r in rows if r["split"] == "train"]
        test = [r for r in rows if r["split"] == split]
        if not test:
            continue
        golds = [r["answer"] for r in test]
        prior_of = {t: Counter(r["answer"] for r in train if r["template"] == t) for t in {r["template"] for r in test}}
        fallback = mode(Counter(r["answer"] for r in train)) if train else NA
        preds = {
            "answer_prior": [mode(prior_of[r["template"]]) if prior_of[r["template"]] else fallback for r in test],
            "question_only": _question_only(train, test),
            "context_only": [mode(entity[r["recipe_id"]]) if entity[r["recipe_id"]] else NA
                             for r in test],
            "reader": [reader(r["recipe_id"]).answer(r["question"]) for r in test],
        }
        ids = sorted({r["recipe_id"] for r in test})
        other = {rid: ids[(k + 1) % len(ids)] for k, rid in enumerate(ids)}
        preds["reader_other_recipe"] = [reader(other[r["recipe_id"]]).answer(r["question"]) if len(ids) > 1 else NA
                                        for r in test]
        out[fam] = {m: score(p, golds) for m, p in preds.items()}
        out[fam]["questions"] = len(rows)
        out[fam]["n_train"] = len(train)
        out[fam]["unanswerable_share"] = sum(not r["answerable"] for r in rows) / len(rows) if rows else 0.0
        out[fam]["prior_flag"] = max(out[fam][m]["em"] for m in BASELINES
                                     if train or m == "context_only") > PRIOR_FLAG_EM
    return out
