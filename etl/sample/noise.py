"""Planted text noise with ground truth: each instance is a replacement of a clean span by a raw span.

A noise record is {"kind", "field": "title" | "body", "raw", "fixed"}: replacing each `raw` (in
order, left to right) by its `fixed` turns the raw text back into the clean text, up to runs of
whitespace (`repair` does exactly that and the tests check it on every step).
Kinds: fused_word, number_unit, html, office, css, url, unicode, step_number, control_char.
Rare real words (vocab.RARE_WORDS) are never fused, so a cleaner's precision can be measured on them.
"""
from __future__ import annotations

import random
import re

from etl.sample import vocab as V
from etl.sample.recipes import RecipePlan, StepPlan

LEVELS = {"low": 0.03, "medium": 0.12, "heavy": 0.35}
_RARE = {w.lower() for r in V.RARE_WORDS for w in r.split()}
_NUM_UNIT = re.compile(r"\b(\d+) (degrees|minutes|seconds|cups?|tbsp|tsp|g|ml|oz|inch|inches|hours|slices)\b")
_WORD_PAIR = re.compile(r"\b([a-z]{3,}) ([a-z]{3,})\b")
_SENT_GAP = re.compile(r"(?<=[.!?]) (?=[A-Z])")


def _spans_unicode(s: str, rng: random.Random) -> list[tuple[int, int, str]]:
    cands = []
    for m in re.finditer(r"'", s):
        cands.append((m.start(), m.end(), "\u2019"))
    for m in re.finditer(r'"', s):
        cands.append((m.start(), m.end(), rng.choice(["\u201c", "\u201d"])))
    for m in re.finditer(r"\b1/2\b", s):
        cands.append((m.start(), m.end(), "\u00bd"))
    for m in re.finditer(r" degrees F\b", s):
        cands.append((m.start(), m.end(), "\u00b0F"))
    for m in re.finditer(r"\.\.\.", s):
        cands.append((m.start(), m.end(), "\u2026"))
    for m in re.finditer(r" ", s):
        if rng.random() < 0.05:
            cands.append((m.start(), m.end(), "\u00a0"))
    for m in re.finditer(r"[a-z]{5,}", s):
        if rng.random() < 0.05:
            p = m.start() + 2
            cands.append((p, p, "\u200b"))
    return cands


def _candidates(kind: str, s: str, rng: random.Random, slug: str) -> list[tuple[int, int, str]]:
    """Possible (start, end, raw) replacements of clean span s[start:end] for one noise kind."""
    if kind == "number_unit":
        return [(m.start(), m.end(), m.group(1) + m.group(2)) for m in _NUM_UNIT.finditer(s)]
    if kind == "fused_word":
        return [(m.start(), m.end(), m.group(1) + m.group(2)) for m in _WORD_PAIR.finditer(s)
                if m.group(1) not in _RARE and m.group(2) not in _RARE]
    if kind in ("html", "control_char"):
        gaps = [m.start() for m in _SENT_GAP.finditer(s)] or [m.start() for m in re.finditer(" ", s)]
        junk = rng.choice(V.HTML_JUNK)[0] if kind == "html" else rng.choice(V.CONTROL_CHARS)
        return [(g, g + 1, junk) for g in gaps]
    if kind == "unicode":
        return _spans_unicode(s, rng)
    if kind == "url":
        url = rng.choice(V.URL_JUNK).format(slug=slug.lower(), n=rng.randint(100, 999))
        return [(len(s), len(s), " " + url)]
    if kind == "office":
        return [(0, 0, rng.choice(V.OFFICE_JUNK) + " ")]
    if kind == "css":
        junk = rng.choice(V.CSS_JUNK)
        return [(0, 0, junk + " "), (len(s), len(s), " " + junk)]
    raise ValueError(kind)


def _apply(s: str, chosen: list[tuple[int, int, str, str]]) -> tuple[str, list[dict]]:
    """Splice non-overlapping (start, end, raw, kind) into s; noise records in left-to-right order."""
    out, notes, pos = [], [], 0
    for start, end, raw, kind in sorted(chosen, key=lambda c: (c[0], c[1])):
        out.append(s[pos:start])
        out.append(raw)
        notes.append({"kind": kind, "field": "body", "raw": raw, "fixed": s[start:end]})
        pos = end
    out.append(s[pos:])
    return "".join(out), notes


def noisy_paragraph(s: str, p: float, rng: random.Random, slug: str, first: bool) -> tuple[str, list[dict]]:
    rates = {"fused_word": p, "number_unit": p * 1.5, "html": p, "unicode": p * 1.5, "control_char": p / 4,
             "url": p / 3, "office": p / 3 if first else 0.0, "css": p / 4}
    chosen: list[tuple[int, int, str, str]] = []
    for kind, r in rates.items():
        if rng.random() >= r:
            continue
        cands = _candidates(kind, s, rng, slug)
        rng.shuffle(cands)
        for start, end, raw in cands:
            if all(end < a or start > b for a, b, _, _ in chosen):
                chosen.append((start, end, raw, kind))
                break
    return _apply(s, chosen)


def _fuse_list(lines: list[str]) -> tuple[str, list[dict]]:
    """Ingredient list items run together, as in RecipeQA ("apple cutterOne lemon squeezer")."""
    out, notes = lines[0], []
    for nxt in lines[1:]:
        last, first = out.split(" ")[-1], nxt.split(" ")[0]
        notes.append({"kind": "fused_word", "field": "body", "raw": last + first, "fixed": last + " " + first})
        out = out + nxt
    return out, notes


def _title_noise(step: StepPlan, rng: random.Random, p: float) -> None:
    step.title_raw = step.title
    if step.step_idx > 0 and rng.random() < p * 1.5:
        k = step.step_idx
        prefix = rng.choice([f"Step {k}: ", f"Step {k} - ", f"{k}. ", f"STEP {k}: ", f"{k}) "])
        step.title_raw = prefix + step.title
        step.noise.append({"kind": "step_number", "field": "title", "raw": prefix, "fixed": ""})


def apply_noise(plan: RecipePlan, seed: int) -> None:
    """Fill title_raw / paragraphs_raw / noise of every step (in place, deterministic)."""
    from etl.sample.recipes import derive_seed
    rng = random.Random(derive_seed("noise", seed, plan.index))
    level = rng.choices(list(LEVELS), weights=[60, 30, 10])[0]
    p = LEVELS[level]
    plan.kitchen_style = dict(plan.kitchen_style, noise_level=level)
    for step in plan.steps:
        step.noise = []
        _title_noise(step, rng, p)
        if step.labels.get("action") == "gather" and len(step.paragraphs) > 1 and rng.random() < 0.2 + p:
            raw, notes = _fuse_list(step.paragraphs)
            step.paragraphs_raw, step.noise = [raw], step.noise + notes
            continue
        step.paragraphs_raw = []
        for j, para in enumerate(step.paragraphs):
            raw, notes = noisy_paragraph(para, p, rng, plan.slug or "recipe", first=(j == 0))
            step.paragraphs_raw.append(raw)
            step.noise.extend(notes)


def normalise_ws(s: str) -> str:
    return " ".join(s.split())


def repair(raw: str, noise: list[dict]) -> str:
    """Undo noise records in order (the perfect cleaner), returning the text with whitespace normalised."""
    out, pos = [], 0
    for n in noise:
        k = raw.find(n["raw"], pos)
        if k < 0:
            raise ValueError(f"noise {n!r} not found after position {pos}")
        out.append(raw[pos:k])
        out.append(n["fixed"])
        pos = k + len(n["raw"])
    out.append(raw[pos:])
    return normalise_ws("".join(out))
