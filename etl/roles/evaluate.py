"""Precision and recall of the rule-based role extractor.

- `score_sample(ground_truth)`: against the sample kitchen's planned roles, on each step's clean
  text: events (the step's planned action among the extracted events), explicit participants,
  tools and habitats (explicit; and hidden ones, proposed from the action's default), times,
  temperatures, quantities.
- `score_real(labels, records)`: against hand labels of real RecipeQA steps (events, tools,
  habitats, times, temperatures, explicit only: a human labels what the text says).
- `bench_extract(bodies)`: the extractor's steps/s and chars/s, with its fast tokens and tags against
  NLTK as shipped, and whether both give the same roles (`mrqa bench roles`).

Values are compared after normalisation: lower case, tools and habitats by their head noun
("large mixing bowl" ~ "bowl", "chef's knife" ~ "knife"), times as "<n> <unit>" without the plural s,
temperatures as "<n> <f|c|degrees>". Counts are micro-averaged over (step, value) pairs.
"""
from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path

from etl.roles.extract import extract_step


def head(phrase: str) -> str:
    w = re.sub(r"[^a-z' ]", " ", phrase.lower()).split()
    if not w:
        return ""
    last = w[-1]
    if last.endswith("es") and last[:-2] in ("dish", "glass", "box"):
        return last[:-2]
    return last[:-1] if last.endswith("s") and not last.endswith("ss") and len(last) > 3 else last


def norm_time(v: str) -> str:
    v = v.lower().strip()
    if v == "overnight":
        return v
    m = re.match(r"([\d.\-/ ]+|\w+)\s*(minute|min|hour|hr|second|sec|day|week)", v)
    if not m:
        return v
    unit = {"min": "minute", "hr": "hour", "sec": "second"}.get(m.group(2), m.group(2))
    return f"{m.group(1).strip().replace(' ', '')} {unit}"


def norm_temp(v: str) -> str:
    m = re.match(r"(\d+)\s*(?:degrees?)?\s*([fc])?", v.lower())
    return f"{m.group(1)} {m.group(2) or 'degrees'}" if m else v.lower()


def _prf(c: Counter) -> dict:
    p = c["tp"] / (c["tp"] + c["fp"]) if c["tp"] + c["fp"] else None
    r = c["tp"] / (c["tp"] + c["fn"]) if c["tp"] + c["fn"] else None
    f = 2 * p * r / (p + r) if p and r else (0.0 if p is not None and r is not None else None)
    return {"tp": c["tp"], "fp": c["fp"], "fn": c["fn"], "precision": p, "recall": r, "f1": f}


def _count(c: Counter, gold: set, pred: set) -> None:
    c["tp"] += len(gold & pred)
    c["fp"] += len(pred - gold)
    c["fn"] += len(gold - pred)


def _pred_sets(text: str) -> dict[str, set]:
    roles = extract_step(text)
    out: dict[str, set] = {k: set() for k in ("event", "participant", "tool", "habitat", "tool_hidden",
                                              "habitat_hidden", "time", "temperature", "quantity")}
    for r in roles:
        if r.role in ("tool", "habitat"):
            out[r.role if r.explicit else f"{r.role}_hidden"].add(head(r.value))
        elif r.role == "time":
            out["time"].add(norm_time(r.value))
        elif r.role == "temperature":
            out["temperature"].add(norm_temp(r.value))
        elif r.role == "participant":
            out["participant"].add(r.value.lower())
        else:
            out[r.role].add(r.value)
    return out


def score_sample(ground_truth: Path, limit: int | None = None) -> dict:
    """Extractor against the sample kitchen's planned roles (ground_truth.jsonl of a build)."""
    counts: dict[str, Counter] = {}
    n_steps = 0
    with Path(ground_truth).open(encoding="utf-8") as fh:
        for k, line in enumerate(fh):
            if limit is not None and k >= limit:
                break
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{ground_truth}:{k + 1}: not JSON ({e.msg})") from None
            if not isinstance(rec, dict) or not isinstance(rec.get("steps", []), list):
                raise ValueError(f"{ground_truth}:{k + 1}: not a sample kitchen ground-truth record")
            if rec.get("kind") != "recipe" or rec.get("expected", {}).get("reason"):
                continue
            for st in rec["steps"]:
                roles = st.get("roles")
                if not roles:
                    continue
                n_steps += 1
                pred = _pred_sets(st["body_clean"])
                gold = {"event": {roles["event"]},
                        "participant": {n.lower() for n in roles["participants"]["names"]}
                        if roles["participants"]["explicit"] else set(),
                        "time": {norm_time(roles["time"])} if roles.get("time") else set(),
                        "temperature": {norm_temp(roles["temperature"])} if roles.get("temperature") else set(),
                        "quantity": {roles["quantity"]} if roles.get("quantity") else set()}
                for role in ("tool", "habitat"):
                    r = roles[role]
                    name = head(r["name"]) if r["name"] else None
                    gold[role] = {name} if name and r["explicit"] else set()
                    gold[f"{role}_hidden"] = {name} if name and not r["explicit"] else set()
                # the event is scored as "is the planned action among the extracted events" (recall) and
                # "are the extracted events the planned action" (precision: other verbs count as errors)
                for key, g in gold.items():
                    p = pred[key]
                    if key.endswith("_hidden"):
                        # a hidden role is only scored where the plan has one, or the extractor proposes one
                        # while the text names none of that kind
                        if not g and not p:
                            continue
                    _count(counts.setdefault(key, Counter()), g, p)
    return {"steps": n_steps, "roles": {k: _prf(c) for k, c in sorted(counts.items())}}


LABEL_KEYS = ("events", "tools", "habitats", "times", "temperatures")
LABELS_SHAPE = '{"recipes": [{"recipe_id", "steps": [{"id", "events", "tools", "habitats", "times", "temperatures"}]}]}'


def _read_json(path: Path):
    """The JSON of `path`; ValueError naming the file when it is not UTF-8 JSON."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None


def _is_int(v) -> bool:
    """A step id as the files write it: an integer, or a string of one."""
    if isinstance(v, bool):
        return False
    return isinstance(v, int) or isinstance(v, str) and v.strip().lstrip("-").isdigit()


def _labels_problem(lab) -> str | None:
    """What keeps `lab` from being a hand-label file as score_real reads it (None: nothing)."""
    if not isinstance(lab, dict) or not isinstance(lab.get("recipes"), list):
        return f"a JSON {type(lab).__name__} without a 'recipes' list"
    for r in lab["recipes"]:
        if not isinstance(r, dict) or not isinstance(r.get("recipe_id"), str) or not isinstance(r.get("steps"), list):
            return "a recipe is not an object with recipe_id and a steps list"
        for st in r["steps"]:
            if not isinstance(st, dict) or not _is_int(st.get("id")):
                return f"a step of {r['recipe_id']} is not an object with an id"
            bad = [k for k in LABEL_KEYS if not isinstance(st.get(k), list)
                   or not all(isinstance(v, str) for v in st[k])]
            if bad:
                return f"step {st['id']} of {r['recipe_id']}: {', '.join(bad)} not lists of strings"
    return None


def score_real(labels: Path, records: Path) -> dict:
    """Extractor against hand labels of real steps: labels JSON {"recipes": [{"recipe_id", "steps":
    [{"id", "events", "tools", "habitats", "times", "temperatures"}]}]}; records a RecipeQA JSON file
    ({"data": [...]}) holding those recipes' text."""
    lab = _read_json(labels)
    problem = _labels_problem(lab)
    if problem:
        raise ValueError(f"{labels}: not a hand-label file ({problem}); it is {LABELS_SHAPE}")
    data = _read_json(records)
    recs = data.get("data") if isinstance(data, dict) else None
    if not isinstance(recs, list) or not all(
            isinstance(r, dict) and isinstance(r.get("recipe_id"), str) and isinstance(r.get("context", []), list)
            and all(isinstance(st, dict) and _is_int(st.get("id")) for st in r.get("context", [])) for r in recs):
        raise ValueError(f"{records}: not a RecipeQA JSON file (an object with a 'data' list of recipes, each "
                         "with recipe_id and a context list of steps with an id)")
    text: dict[tuple[str, int], str] = {}
    for rec in recs:
        for st in rec.get("context", []):
            text.setdefault((rec["recipe_id"], int(st["id"])), st.get("body") or "")
    counts: dict[str, Counter] = {}
    n_steps = 0
    missing = []
    for r in lab["recipes"]:
        for st in r["steps"]:
            key = (r["recipe_id"], int(st["id"]))
            if key not in text:
                missing.append(key)
                continue
            n_steps += 1
            pred = _pred_sets(text[key])
            gold = {"event": set(st["events"]), "tool": {head(x) for x in st["tools"]},
                    "habitat": {head(x) for x in st["habitats"]}, "time": {norm_time(x) for x in st["times"]},
                    "temperature": {norm_temp(x) for x in st["temperatures"]}}
            for key_, g in gold.items():
                _count(counts.setdefault(key_, Counter()), g, pred[key_])
    if missing:
        raise ValueError(f"{len(missing)} labelled steps are not in {records} (e.g. {missing[0]})")
    micro = Counter()
    for c in counts.values():
        micro.update(c)
    return {"recipes": len(lab["recipes"]), "steps": n_steps,
            "roles": {**{k: _prf(c) for k, c in sorted(counts.items())}, "all": _prf(micro)}}


def bench_extract(bodies: list[str], repeats: int = 3) -> dict:
    """Time `extract_step` over `bodies`, the fast path against `stock=True`, alternating (`repeats`
    runs each, the best kept); the tagger's kept answers are cleared before every fast run, so each
    run starts cold as a new process would."""
    from etl.roles.extract import _regexp_tag
    chars = sum(len(b) for b in bodies)
    best = {"fast": float("inf"), "stock": float("inf")}
    out: dict[str, list] = {}
    for _ in range(repeats):
        for mode in ("fast", "stock"):
            _regexp_tag.cache_clear()
            t = time.perf_counter()
            out[mode] = [extract_step(b, stock=mode == "stock") for b in bodies]
            best[mode] = min(best[mode], time.perf_counter() - t)
    runs = {m: {"seconds": round(s, 3), "steps_per_s": round(len(bodies) / s, 1), "chars_per_s": round(chars / s)}
            for m, s in best.items()}
    return {"steps": len(bodies), "chars": chars, "repeats": repeats, **runs,
            "speedup": round(best["stock"] / best["fast"], 2), "same_roles": out["fast"] == out["stock"]}
