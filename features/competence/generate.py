"""Competence question families (R2VQ-style) from the warehouse's cooking-role layer.

Each recipe's steps become *frames*: one per event, with its participants, tool, habitat, time and
temperature, each explicit or hidden (step_roles, see etl/roles/). Templates over the frames make
six families; every question keeps the role rows that justify its answer (provenance):

- cardinality   "How many ingredients go into the {mixture}?" -> "3";
                "How many steps use the {habitat}?" -> "2" (explicit mentions);
                "How many {object} should you {verb}?" -> "4" (the count the step gives)
- elision       "What should be {participle}[ adjunct]?" for an event whose object the text leaves
                out ("Bake for 20 minutes.") -> the hidden participant ("batter")
- implicit      "How do you {verb} the {object}?" -> "by using a {tool}" and "Where should the {object}
                be when you {verb} it?" -> "in the {habitat}" (or "on the ..."), for hidden tools and habitats
- lifespan      "What's in the {mixture}?" -> its parts, as the step that makes it lists them
- modifier      "For how long should you {verb} the {object}?" -> "20 minutes"; "At what
                temperature should you {verb} the {object}?" -> "350 degrees F"
- unanswerable  the same templates where the recipe has no such role or no such entity: answer "N/A",
                at most 10 per recipe, each with two answerable questions of the same template and
                verb from any recipe (so a third of the family is "N/A", and neither the template
                nor the verb tells which questions are)

Within each answerable family no answer may hold more than PRIOR_CAP (35%) of its template's
questions: the surplus of a dominant answer (most habitats are used in one step: "1") is dropped,
deterministically by qid, and counted.

A question is only asked when its key (template, verb, object, adjunct) picks one frame of its
recipe, so the answer is unique, and only about objects and mixtures that the recipe's text names
(else no reader could give the answer's words). `lifespan` and the ingredient count need mixtures,
which only the sample kitchen's truth records. Deterministic: recipes in id order, one
`random.Random` per recipe seeded from (seed, recipe_id), and seeded hashes for the balancing.
"""
from __future__ import annotations

import hashlib
import json
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import duckdb

from etl.roles.extract import extract_step
from etl.roles.lexicon import IRREGULAR, inflections

FAMILIES = ("cardinality", "elision", "implicit", "lifespan", "modifier", "unanswerable")
NA = "N/A"
MAX_UNANSWERABLE = 10
ANSWERABLE_PER_NA = 2   # the unanswerable family: two answerable questions per "N/A" one
PRIOR_CAP = 0.35        # no answer may hold more than this share of its template's questions


@dataclass
class Frame:
    step_idx: int
    event: str
    participants: list[tuple[str, bool]] = field(default_factory=list)   # (name, explicit)
    tool: tuple[str, bool] | None = None
    habitat: tuple[str, bool] | None = None
    time: str | None = None
    temperature: str | None = None
    quantity: str | None = None
    mixture: tuple[str, list[str]] | None = None                       # (name, parts)
    rows: list[dict] = field(default_factory=list)                     # the step_roles rows it was built from

    @property
    def obj(self) -> str | None:
        return self.participants[0][0] if self.participants else None

    @property
    def object_hidden(self) -> bool:
        return bool(self.participants) and not any(e for _, e in self.participants)


def participle(lemma: str) -> str:
    """The past participle of an action ("baked", "beaten", "ground"; "cut" for cut, put, set, spread)."""
    for f in IRREGULAR.get(lemma, ()):
        if f.endswith("n") or f in ("ground", "brought"):
            return f
    eds = sorted(f for f in inflections(lemma) if f.endswith("ed"))
    return eds[0] if eds else lemma


_ON = ("board", "tray", "plate", "counter", "sheet", "surface", "platter", "rack", "griddle", "grill", "stove",
       "countertop", "stovetop", "burner", "foil", "paper", "wrap", "film")


def at(habitat: str) -> str:
    """The habitat as an answer: "on the cutting board", "in the mixing bowl"."""
    return f"{'on' if habitat.split()[-1] in _ON else 'in'} the {habitat}"


def _it(obj: str) -> str:
    return "them" if obj.endswith("s") and not obj.endswith("ss") else "it"


def join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def load_frames(con: duckdb.DuckDBPyConnection, source: str) -> dict[str, list[Frame]]:
    """recipe_id -> frames in step order, from step_roles of one source."""
    rows = con.execute("SELECT recipe_id, step_idx, role, value, explicit, span_start, event, detail, seq "
                       "FROM step_roles WHERE source = ? ORDER BY recipe_id, step_idx, seq", [source]).fetchall()
    by_step: dict[tuple[str, int], list[tuple]] = defaultdict(list)
    for r in rows:
        by_step[(r[0], r[1])].append(r)
    out: dict[str, list[Frame]] = defaultdict(list)
    for (rid, idx), rs in by_step.items():
        out[rid].extend(step_frames(idx, rs))
    return out


def frames_from_text(steps: list[tuple[int, str]]) -> list[Frame]:
    """Frames of a recipe's steps read by the rule-based extractor (what a reader sees)."""
    out: list[Frame] = []
    for idx, body in steps:
        rows = [("", idx, r.role, r.value, r.explicit, r.start, r.event, None, k)
                for k, r in enumerate(extract_step(body))]
        out.extend(step_frames(idx, rows))
    return out


def step_frames(idx: int, rs: list[tuple]) -> list[Frame]:
    """One step's frames from its role rows (recipe_id, step_idx, role, value, explicit, span_start,
    event, detail, seq): one frame per event; a role goes to its event, else to the event before it."""
    events = [r for r in rs if r[2] == "event"]
    frames = [Frame(idx, r[3]) for r in events]
    if not frames:
        return []
    starts = [r[5] for r in events]

    def owner(r) -> Frame:
        if r[6] is not None and r[6] < len(frames):
            return frames[r[6]]
        if r[5] is None or any(s is None for s in starts):
            return frames[0]
        before = [k for k, s in enumerate(starts) if s <= r[5]]
        return frames[before[-1] if before else 0]

    for f, r in zip(frames, events):
        f.rows.append(_row(r))
    for r in rs:
        role, value, explicit = r[2], r[3], bool(r[4])
        if role == "event":
            continue
        f = owner(r)
        f.rows.append(_row(r))
        if role == "participant":
            f.participants.append((value, explicit))
        elif role in ("tool", "habitat"):
            if getattr(f, role) is None or (explicit and not getattr(f, role)[1]):
                setattr(f, role, (value, explicit))
        elif role == "time" and f.time is None:
            f.time = value
        elif role == "temperature" and f.temperature is None:
            f.temperature = value
        elif role == "quantity" and f.quantity is None:
            f.quantity = value
        elif role == "mixture":
            f.mixture = (value, json.loads(r[7])["parts"] if r[7] else [])
    return frames


def _row(r) -> dict:
    return {"step_idx": r[1], "role": r[2], "value": r[3], "explicit": bool(r[4])}


@dataclass
class Question:
    family: str
    template: str
    recipe_id: str
    question: str
    answer: str
    step_idx: int | None
    provenance: dict
    verb: str | None = None

    @property
    def answerable(self) -> bool:
        return self.answer != NA


def _keyed(frames: list[Frame], key) -> dict:
    """key -> the frames it picks; only keys that pick exactly one frame are usable."""
    seen: dict = defaultdict(list)
    for f in frames:
        k = key(f)
        if k is not None:
            seen[k].append(f)
    return seen


def _prov(frames: list[Frame], roles: tuple[str, ...], why: str) -> dict:
    return {"why": why, "roles": [r for f in frames for r in f.rows if r["role"] in roles]}


def recipe_questions(rid: str, frames: list[Frame], text: str, other_mixtures: list[str],
                     other_objects: list[str], seed: int) -> list[Question]:
    """All questions of one recipe (text: its steps' lower-cased body text: a question only names
    entities it names, an unanswerable one only entities it does not)."""
    qs: list[Question] = []
    rng = random.Random(int.from_bytes(hashlib.sha256(f"competence:{seed}:{rid}".encode()).digest()[:8], "big"))
    by_vo = _keyed(frames, lambda f: (f.event, f.obj) if f.obj else None)

    def q(family, template, question, answer, f: Frame | None, prov, verb: str | None = None):
        qs.append(Question(family, template, rid, question, answer, f.step_idx if f else None, prov,
                           verb or (f.event if f else None)))

    unans: list[tuple] = []
    for (verb, obj), fs in by_vo.items():
        if len(fs) != 1 or obj.lower() not in text:
            continue                      # ambiguous, or an object the recipe's text never names
        f = fs[0]
        if f.time:
            q("modifier", "time", f"For how long should you {verb} the {obj}?", f.time, f,
              _prov(fs, ("event", "participant", "time"), "the event's time modifier"))
        else:
            unans.append(("time", f"For how long should you {verb} the {obj}?", f,
                          "the event has no time modifier", verb))
        if f.quantity:
            q("cardinality", "quantity", f"How many {obj} should you {verb}?", f.quantity, f,
              _prov(fs, ("event", "participant", "quantity"), "the count of the event's participant"))
        if f.temperature:
            q("modifier", "temperature", f"At what temperature should you {verb} the {obj}?", f.temperature, f,
              _prov(fs, ("event", "participant", "temperature"), "the event's temperature modifier"))
        elif f.event in ("bake", "roast", "fry", "boil", "grill", "heat", "cook", "toast"):
            unans.append(("temperature", f"At what temperature should you {verb} the {obj}?", f,
                          "the event has no temperature modifier", verb))
        if f.tool and not f.tool[1]:
            q("implicit", "tool", f"How do you {verb} the {obj}?", f"by using a {f.tool[0]}", f,
              _prov(fs, ("event", "participant", "tool"), "hidden tool of the event"))
        if f.habitat and not f.habitat[1]:
            q("implicit", "habitat", f"Where should the {obj} be when you {verb} {_it(obj)}?", at(f.habitat[0]), f,
              _prov(fs, ("event", "participant", "habitat"), "hidden habitat of the event"))
    # elision: the object is left out of the text
    def adjunct(f: Frame) -> str:
        if f.time:
            return f" for {f.time}"
        if f.temperature:
            return f" at {f.temperature}"
        if f.tool and f.tool[1]:
            return f" with the {f.tool[0]}"
        if f.habitat and f.habitat[1]:
            return f" in the {f.habitat[0]}"
        return ""
    by_ev = _keyed(frames, lambda f: (f.event, adjunct(f)))
    for (verb, adj), fs in by_ev.items():
        f = fs[0]
        if len(fs) == 1 and f.object_hidden and all(n.lower() in text for n, _ in f.participants):
            q("elision", "object", f"What should be {participle(verb)}{adj}?", join([n for n, _ in f.participants]),
              f, _prov(fs, ("event", "participant", "time", "temperature", "tool", "habitat"),
                       "the event's object is not in the text (hidden participant)"))
    # lifespan and the ingredient count: a mixture whose making step lists its parts explicitly
    made: dict[str, Frame] = {}
    for f in frames:
        if f.mixture and f.mixture[0] not in made and len(f.participants) >= 2 and \
                all(e for _, e in f.participants) and {n for n, _ in f.participants} == set(f.mixture[1]):
            made[f.mixture[0]] = f
    for name, f in made.items():
        if name.lower() not in text:
            continue                      # the recipe never names the mixture: no reader could answer
        parts = [n for n, _ in f.participants]
        prov = _prov([f], ("event", "participant", "mixture"), "the step that makes the mixture lists its parts")
        q("lifespan", "contents", f"What's in the {name}?", join(parts), f, prov)
        q("cardinality", "ingredients", f"How many ingredients go into the {name}?", str(len(parts)), f, prov)
    # cardinality over explicit habitats
    uses: dict[str, list[Frame]] = defaultdict(list)
    for f in frames:
        if f.habitat and f.habitat[1]:
            if not any(g.step_idx == f.step_idx for g in uses[f.habitat[0]]):
                uses[f.habitat[0]].append(f)
    for h, fs in sorted(uses.items()):
        q("cardinality", "habitat_steps", f"How many steps use the {h}?", str(len(fs)), None,
          _prov(fs, ("event", "habitat"), "steps that name the habitat"))
    # unanswerable: a role the recipe does not have, or an entity it does not have
    for m in other_mixtures:
        if m.lower() not in text and m not in made:
            unans.append(("entity_contents", f"What's in the {m}?", None, f"no {m} in this recipe", None))
            break
    ev = [f for f in frames if f.time] or [f for f in frames if f.obj]
    absent = [o for o in other_objects if o.lower() not in text]
    if ev and absent:
        f = ev[rng.randrange(len(ev))]
        o = absent[rng.randrange(len(absent))]
        unans.append(("entity_time", f"For how long should you {f.event} the {o}?", None, f"no {o} in this recipe",
                      f.event))
    # at most MAX_UNANSWERABLE "N/A" candidates per recipe; `generate` pairs them with answerable ones
    rng.shuffle(unans)
    asked = {x.question for x in qs}
    n = 0
    for kind, question, f, why, verb in unans:
        if n >= MAX_UNANSWERABLE:
            break
        if question in asked:
            continue
        asked.add(question)
        q("unanswerable", kind, question, NA, f,
          {"why": why, "verb": verb,
           "roles": [r for r in (f.rows if f else []) if r["role"] in ("event", "participant")]}, verb)
        n += 1
    return qs


# the answerable (family, template) that an unanswerable kind is paired with
# ("How do you pour the batter?" when pouring takes no tool is not asked: hidden tools follow from
# the verb, so its answerable mates would give the answer away without the recipe)
PAIR = {"time": ("modifier", "time"), "temperature": ("modifier", "temperature"),
        "entity_contents": ("lifespan", "contents"), "entity_time": ("modifier", "time")}


def balance_unanswerable(questions: list[Question], seed: int) -> list[Question]:
    """The unanswerable family: per (kind, verb), "N/A" questions with ANSWERABLE_PER_NA answerable
    questions each, of the paired template with the same verb, drawn from all recipes
    (deterministically by a seeded hash of the question); an answerable one is used once. So
    neither the template nor the verb tells whether a question can be answered: only the recipe
    does."""
    def order(x: Question) -> str:
        return hashlib.sha256(f"{seed}:{x.recipe_id}:{x.question}".encode()).hexdigest()

    na: dict[tuple, list[Question]] = defaultdict(list)
    for x in questions:
        if x.family == "unanswerable":
            na[(x.template, x.verb)].append(x)
    answerable: dict[tuple, list[Question]] = defaultdict(list)
    for x in questions:
        for kind, ft in PAIR.items():
            if (x.family, x.template) == ft:
                answerable[(kind, x.verb if kind != "entity_contents" else None)].append(x)
    used: set[tuple] = set()
    out: list[Question] = []
    for key in sorted(na, key=lambda k: (k[0], k[1] or "")):
        mates = [m for m in sorted(answerable.get(key, []), key=order) if (m.recipe_id, m.question) not in used]
        picks = sorted(na[key], key=order)[:len(mates) // ANSWERABLE_PER_NA]
        for k, x in enumerate(picks):
            out.append(x)
            for m in mates[k * ANSWERABLE_PER_NA:(k + 1) * ANSWERABLE_PER_NA]:
                used.add((m.recipe_id, m.question))
                out.append(Question("unanswerable", x.template, m.recipe_id, m.question, m.answer, m.step_idx,
                                    {**m.provenance, "answerable_mate_of": x.question}, m.verb))
    return out


def cap_prior(rows: list[dict], cap: float) -> tuple[list[dict], int]:
    """Drop questions (deterministically, by qid) so that no answer holds more than `cap` of its
    template's questions: every answer keeps at most L questions, L the largest level with
    L <= cap * sum(min(count, L)); a template with too few distinct answers for the cap keeps them
    all at the smallest answer's count (an even split). Returns (kept, number dropped)."""
    by_t: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_t[r["template"]].append(r)
    drop: set[str] = set()
    for rs in by_t.values():
        counts = Counter(r["answer"] for r in rs)
        level = max((lv for lv in range(1, max(counts.values()) + 1)
                     if lv <= cap * sum(min(c, lv) for c in counts.values())), default=min(counts.values()))
        for ans, c in counts.items():
            if c > level:
                extra = sorted((r for r in rs if r["answer"] == ans), key=lambda r: r["qid"])[level:]
                drop |= {r["qid"] for r in extra}
    return [r for r in rows if r["qid"] not in drop], len(drop)


def generate(con: duckdb.DuckDBPyConnection, source: str | None = None, seed: int = 0) -> dict[str, list[dict]]:
    """family -> question rows (dicts for competence_questions), for every ok recipe with roles."""
    if source is None:
        have = {r[0] for r in con.execute("SELECT DISTINCT source FROM step_roles").fetchall()}
        if not have:
            raise ValueError("the warehouse has no cooking roles yet: run `mrqa roles extract` (any recipes) "
                             "or `mrqa roles truth --ground-truth DIR/ground_truth.jsonl` (sample kitchen)")
        source = "truth" if "truth" in have else "rules"
    frames = load_frames(con, source)
    if not frames:
        raise ValueError(f"no step_roles rows of source {source!r}: run `mrqa roles "
                         f"{'truth' if source == 'truth' else 'extract'}` first")
    meta = dict(con.execute("SELECT recipe_id, split FROM recipes WHERE status = 'ok'").fetchall())
    texts = dict(con.execute("SELECT recipe_id, lower(string_agg(coalesce(body, ''), ' ' ORDER BY step_idx)) "
                             "FROM steps GROUP BY recipe_id").fetchall())
    mixtures = sorted({f.mixture[0] for fs in frames.values() for f in fs if f.mixture})
    objects = sorted({n for fs in frames.values() for f in fs for n, e in f.participants if e})
    out: dict[str, list[dict]] = {fam: [] for fam in FAMILIES}
    skips: dict[str, int] = {}
    allq: list[Question] = []
    for rid in sorted(frames):
        if rid not in meta or meta[rid] is None:
            continue
        allq += recipe_questions(rid, frames[rid], texts.get(rid, ""), mixtures, objects, seed)
    for x in [x for x in allq if x.family != "unanswerable"] + balance_unanswerable(allq, seed):
        qid = hashlib.sha256(f"{x.recipe_id}:{x.family}:{x.template}:{x.question}".encode()).hexdigest()[:16]
        out[x.family].append({"qid": qid, "family": x.family, "template": x.template, "recipe_id": x.recipe_id,
                              "split": meta[x.recipe_id], "question": x.question, "answer": x.answer,
                              "answerable": x.answerable, "step_idx": x.step_idx,
                              "provenance": json.dumps({**x.provenance, "source": source}, sort_keys=True)})
    for fam in FAMILIES:
        if fam != "unanswerable":
            out[fam], skips[fam] = cap_prior(out[fam], PRIOR_CAP)
    return {"source": source, "families": out, "prior_cap": PRIOR_CAP, "dropped_by_prior_cap": skips}
