"""Sentences and word tokens with NLTK, without downloaded NLTK data.

- Sentence model: Punkt trained on the corpus itself (`train_punkt`, `PunktTrainer`), persisted as
  JSON under MRQA_HOME/models/punkt.json (`save_punkt` / `load_punkt`; no pickle), retrained on demand.
- Sentences: every line of a step is a sentence boundary (ingredient lists have no full stops),
  Punkt splits within lines.
- Words: NLTK's `NLTKWordTokenizer` (Treebank + improvements), one sentence at a time.

`tokenize_text(text, punkt) -> list[list[str]]` is the entry point the clean stage uses (text already cleaned).

Speed (etl.fast_nltk): NLTK 3.10 runs every regex through `nltk.redos` (the `regex` engine under a
timeout), 3-10x slower than `re`. Lines made only of printable ASCII -- almost all cleaned text --
go through the same NLTK algorithms with the same patterns compiled by `re` (identical semantics on
ASCII) and skip substitutions whose required characters are absent; other lines use stock NLTK.
`reference_tokenize_text` is the stock path; tests assert both give identical tokens.
"""
from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from pathlib import Path

from nltk.tokenize import NLTKWordTokenizer
from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer, PunktTrainer

from etl.fast_nltk import fast_punkt, fast_word_tokenize, has_sentence_end, is_fast_line

_WORDS = NLTKWordTokenizer()
PUNKT_FILE = "punkt.json"
DEFAULT_TRAIN_CHARS = 2_000_000   # Punkt trains in ~3 s per million characters: cap the sample


def train_punkt(texts, max_chars: int = DEFAULT_TRAIN_CHARS) -> PunktSentenceTokenizer:
    """Train Punkt (abbreviations, collocations, sentence starters) on up to `max_chars` of `texts`."""
    buf, n = [], 0
    for t in texts:
        if not t:
            continue
        buf.append(t)
        n += len(t) + 1
        if n >= max_chars:
            break
    trainer = PunktTrainer()
    trainer.INCLUDE_ALL_COLLOCS = False
    trainer.train("\n".join(buf), finalize=True)
    return PunktSentenceTokenizer(trainer.get_params())


def punkt_to_json(tok: PunktSentenceTokenizer) -> dict:
    p = tok._params
    return {"abbrev_types": sorted(p.abbrev_types),
            "collocations": sorted([list(c) for c in p.collocations]),
            "sent_starters": sorted(p.sent_starters),
            "ortho_context": dict(sorted(p.ortho_context.items()))}


def punkt_from_json(d: dict) -> PunktSentenceTokenizer:
    p = PunktParameters()
    p.abbrev_types = set(d["abbrev_types"])
    p.collocations = {tuple(c) for c in d["collocations"]}
    p.sent_starters = set(d["sent_starters"])
    p.ortho_context = defaultdict(int, d["ortho_context"])
    return PunktSentenceTokenizer(p)


def save_punkt(tok: PunktSentenceTokenizer, models_dir: Path, meta: dict | None = None) -> Path:
    models_dir.mkdir(parents=True, exist_ok=True)
    body = punkt_to_json(tok)
    doc = {"model": body, "meta": meta or {},
           "sha256": hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()}
    path = models_dir / PUNKT_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, sort_keys=True))
    tmp.replace(path)
    return path


def load_punkt(models_dir: Path) -> PunktSentenceTokenizer | None:
    path = models_dir / PUNKT_FILE
    if not path.exists():
        return None
    return punkt_from_json(json.loads(path.read_text())["model"])


def untrained_punkt() -> PunktSentenceTokenizer:
    """Punkt with empty parameters (used when no corpus model exists yet, e.g. `mrqa tokenize`)."""
    return PunktSentenceTokenizer()


def sentences(text: str, punkt: PunktSentenceTokenizer) -> list[str]:
    """Sentences of `text`: every line is a boundary, Punkt splits within lines."""
    out = []
    for line in text.split("\n"):
        line = line.strip()
        if line:
            out.extend(line_sentences(line, punkt))
    return out


def tokenize_text(text: str | None, punkt: PunktSentenceTokenizer) -> list[list[str]]:
    """Cleaned text -> sentences -> NLTK word tokens (no repair)."""
    if not text:
        return []
    out = []
    for line in text.split("\n"):
        line = line.strip()
        if line:
            out.extend(tokenize_line(line, punkt))
    return out


def line_sentences(line: str, punkt: PunktSentenceTokenizer) -> list[str]:
    """Sentences of one stripped, non-empty line (fast path for printable ASCII)."""
    if not is_fast_line(line):
        return [s for s in punkt.tokenize(line) if s.strip()]
    if not has_sentence_end(line):
        return [line]   # Punkt only breaks after '.', '?' or '!'
    return [s for s in fast_punkt(punkt).tokenize(line) if s.strip()]


def tokenize_line(line: str, punkt: PunktSentenceTokenizer) -> list[list[str]]:
    """Word tokens per sentence of one stripped, non-empty line."""
    if not is_fast_line(line):
        return [toks for s in punkt.tokenize(line) if s.strip() and (toks := _WORDS.tokenize(s))]
    sents = [line] if not has_sentence_end(line) else fast_punkt(punkt).tokenize(line)
    return [toks for s in sents if s.strip() and (toks := fast_word_tokenize(s))]


def reference_tokenize_text(text: str | None, punkt: PunktSentenceTokenizer) -> list[list[str]]:
    """The same as `tokenize_text` with stock NLTK objects only (the reference for tests/benchmarks)."""
    if not text:
        return []
    out = []
    for line in text.split("\n"):
        line = line.strip()
        if line:
            out.extend(toks for s in punkt.tokenize(line) if s.strip() and (toks := _WORDS.tokenize(s)))
    return out
