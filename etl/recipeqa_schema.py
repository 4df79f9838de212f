"""The shape of a RecipeQA file, checked before anything is loaded.

`read_document` reads one file: a size limit, a nesting-depth scan of the raw bytes (so a file of
100,000 `[` is refused with a reason instead of exhausting Python's recursion), then `json.loads`.
`validate_record` checks one record against the pydantic models below: every key known, every
value of the right type (strict: no bool for an int, no number for a string) and within limits.
Both raise `RecipeQAFormatError` with a one-line message naming the file, the record index and
the field.

Ids become file names and URL parts elsewhere (exports, image folders), so recipe ids, qids and
image names are safe path components: 1-200 (images 255) characters of letters, digits, `.`, `_`,
`-`, starting with a letter or digit. That excludes `.`, `..`, `/`, `\\`, NUL and spaces, and
covers every id of the real RecipeQA files.

Per task (RecipeQA's own layout): textual cloze steps carry image lists and its question and
choices are step titles; the visual tasks' steps carry titles and their questions and choices
are image names (`@placeholder` marks the blank of a visual cloze question), visual ordering's
choices being lists of image names.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)

TASKS = ("textual_cloze", "visual_cloze", "visual_coherence", "visual_ordering")
SPLITS = ("train", "val", "test")

MAX_FILE_BYTES = 2 * 1024 ** 3     # the largest RecipeQA file (train.json) is a few hundred MB
MAX_JSON_DEPTH = 32                # a RecipeQA file is 6 levels deep
MAX_ID_CHARS = 200
MAX_IMAGE_NAME_CHARS = 255
MAX_STEP_ID = 10_000               # real recipes have tens of steps; ids key an INTEGER column
MAX_STEPS = 1_000
MAX_ITEMS = 100                    # question items, choices, images of a step, videos of a step
MAX_BODY_CHARS = 200_000
MAX_TEXT_CHARS = 5_000             # titles, question texts, video links
PLACEHOLDER = "@placeholder"

SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
IMAGE_NUMBERS = re.compile(r"_(\d+)_(\d+)\.jpg$")


class RecipeQAFormatError(ValueError):
    """A RecipeQA file that cannot be imported; the message names the file and record."""


# ----------------------------------------------------------------------------- reading a file

SCAN_CHUNK = 8 * 1024 * 1024


def max_nesting(data: bytes, chunk: int = SCAN_CHUNK) -> tuple[int, int]:
    """(deepest [ / { nesting, byte offset where it is first reached), brackets inside JSON
    strings ignored. Vectorised over chunks (bounded memory): about a quarter of the time
    json.loads takes on the same bytes."""
    best, best_at = 0, 0
    depth, in_str, run = 0, False, 0        # carried across chunks
    for start in range(0, len(data), chunk):
        buf = np.frombuffer(data, dtype=np.uint8, count=min(chunk, len(data) - start), offset=start)
        d, at, depth, in_str, run = _scan_chunk(buf, depth, in_str, run)
        if d > best:
            best, best_at = d, start + at
    return best, best_at


_SPECIAL = np.zeros(256, dtype=bool)
_SPECIAL[[ord(c) for c in '"\\[]{}']] = True


def _scan_chunk(buf: np.ndarray, depth: int, in_str: bool, run: int):
    """One chunk of max_nesting: returns (max depth, its offset, depth, in_str, backslash run)
    at the chunk's end. `run` is the length of the backslash run the previous chunk ended with.
    Works on the few bytes that matter (quotes, backslashes, brackets) only."""
    pos = np.flatnonzero(_SPECIAL[buf])
    if not len(pos):
        return depth, 0, depth, in_str, 0
    ch = buf[pos]
    bs = ch == ord("\\")
    adjacent = np.zeros(len(pos), dtype=bool)      # element i sits right after element i-1
    adjacent[1:] = pos[1:] == pos[:-1] + 1
    starts = bs & ~(adjacent & np.concatenate(([False], bs[:-1])))
    idx = np.arange(len(pos))
    run_start = np.maximum.accumulate(np.where(starts, idx, 0))
    length = np.where(bs, idx - run_start + 1, 0)   # backslash run length up to each backslash
    if run and bs[0] and pos[0] == 0:
        length[bs & (run_start == 0)] += run         # the run goes on from the previous chunk
    before = np.zeros(len(pos), dtype=np.int64)      # backslashes right before each element
    before[1:] = np.where(bs[:-1] & adjacent[1:], length[:-1], 0)
    if pos[0] == 0 and not bs[0]:
        before[0] = run
    quote = (ch == ord('"')) & (before % 2 == 0)
    parity = np.cumsum(quote, dtype=np.int64) + int(in_str)
    inside = (parity % 2 == 1) & ~quote
    step = np.where((ch == ord("[")) | (ch == ord("{")), 1, np.where((ch == ord("]")) | (ch == ord("}")), -1, 0))
    step[inside] = 0
    level = np.cumsum(step) + depth
    k = int(level.argmax())
    best, at = (int(level[k]), int(pos[k])) if level[k] > depth else (depth, 0)
    tail = int(length[-1]) if bs[-1] and pos[-1] == len(buf) - 1 else 0
    return best, at, int(level[-1]), bool(parity[-1] % 2), tail


def read_document(path: Path) -> dict:
    """The parsed `{"data": [...]}` of one file, or RecipeQAFormatError saying why not."""
    name = str(path)
    if not path.is_file():
        raise RecipeQAFormatError(f"{name}: no such file")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise RecipeQAFormatError(f"{name}: {size:,d} bytes is over the {MAX_FILE_BYTES:,d}-byte limit")
    data = path.read_bytes()
    depth, at = max_nesting(data)
    if depth > MAX_JSON_DEPTH:
        raise RecipeQAFormatError(f"{name}: JSON nested {depth} levels deep (at byte {at}); a RecipeQA "
                                  f"file needs 6, the limit is {MAX_JSON_DEPTH}")
    try:
        doc = json.loads(data)
    except RecursionError:   # not reachable after the depth scan; kept as a last guard
        raise RecipeQAFormatError(f"{name}: JSON nested too deeply to parse") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, over-long integer literals
        raise RecipeQAFormatError(f"{name}: malformed JSON ({_clip(str(e))})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise RecipeQAFormatError(f'{name}: expected an object {{"data": [record, ...]}}')
    return doc


# ----------------------------------------------------------------------------- field types

def _clip(s: str, n: int = 80) -> str:
    return s if len(s) <= n else s[:n] + f"... ({len(s):,d} chars)"


def _safe_name(value: str, what: str, limit: int) -> str:
    if not value or len(value) > limit or not SAFE_NAME.fullmatch(value):
        raise ValueError(f"{_clip(repr(value))} is not a safe {what}: 1-{limit} letters, digits, "
                         "'.', '_' or '-', starting with a letter or digit")
    return value


def _recipe_id(v: str) -> str:
    return _safe_name(v, "recipe id", MAX_ID_CHARS)


def _qid(v: str) -> str:
    return _safe_name(v, "qid", MAX_ID_CHARS)


def _image_name(v: str) -> str:
    _safe_name(v, "image name", MAX_IMAGE_NAME_CHARS)
    m = IMAGE_NUMBERS.search(v)
    if m and (int(m[1]) > MAX_STEP_ID or int(m[2]) > MAX_ITEMS):
        raise ValueError(f"image {_clip(repr(v))}: step or image number out of range "
                         f"(at most {MAX_STEP_ID} and {MAX_ITEMS})")
    return v


def _image_or_placeholder(v: str) -> str:
    return v if v == PLACEHOLDER else _image_name(v)


def _task(v: str) -> str:
    if v not in TASKS:
        raise ValueError(f"unknown task {_clip(repr(v))} (expected one of {TASKS})")
    return v


def _split(v: str) -> str:
    if v not in SPLITS:
        raise ValueError(f"unknown split {_clip(repr(v))} (expected one of {SPLITS})")
    return v


RecipeId = Annotated[str, AfterValidator(_recipe_id)]
Qid = Annotated[str, AfterValidator(_qid)]
ImageName = Annotated[str, AfterValidator(_image_name)]
ImageOrBlank = Annotated[str, AfterValidator(_image_or_placeholder)]
Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
Body = Annotated[str, Field(max_length=MAX_BODY_CHARS)]
StepId = Annotated[int, Field(ge=0, le=MAX_STEP_ID)]
Modalities = Annotated[list[Annotated[str, Field(max_length=100)]], Field(max_length=10)]


def _items(t):
    return Annotated[list[t], Field(min_length=1, max_length=MAX_ITEMS)]


STRICT = ConfigDict(extra="forbid", strict=True)


class TextualStep(BaseModel):
    model_config = STRICT
    id: StepId
    body: Body
    images: Annotated[list[ImageName], Field(max_length=MAX_ITEMS)]
    videos: Annotated[list[Text], Field(max_length=MAX_ITEMS)] = []


class VisualStep(BaseModel):
    model_config = STRICT
    id: StepId
    body: Body
    title: Text | None
    videos: Annotated[list[Text], Field(max_length=MAX_ITEMS)] = []


class _Record(BaseModel):
    model_config = STRICT
    recipe_id: RecipeId
    qid: Qid
    split: Annotated[str, AfterValidator(_split)]
    answer: Annotated[int, Field(ge=0)]
    question_text: Text | None = None
    context_modality: Modalities | None = None     # e.g. ["body", "title", "videos"]
    question_modality: Modalities | None = None

    @model_validator(mode="after")
    def _answer_and_step_ids(self):
        n = len(self.choice_list)
        if self.answer >= n:
            raise ValueError(f"answer {self.answer} does not index choice_list (length {n})")
        ids = [s.id for s in self.context]
        if len(set(ids)) != len(ids):
            raise ValueError(f"context step ids repeat: {sorted(i for i in set(ids) if ids.count(i) > 1)}")
        return self


class TextualCloze(_Record):
    task: Literal["textual_cloze"]
    context: Annotated[list[TextualStep], Field(min_length=1, max_length=MAX_STEPS)]
    question: _items(Text)
    choice_list: _items(Text)


class VisualCloze(_Record):
    task: Literal["visual_cloze"]
    context: Annotated[list[VisualStep], Field(min_length=1, max_length=MAX_STEPS)]
    question: _items(ImageOrBlank)
    choice_list: _items(ImageName)


class VisualCoherence(_Record):
    task: Literal["visual_coherence"]
    context: Annotated[list[VisualStep], Field(min_length=1, max_length=MAX_STEPS)]
    question: _items(ImageName)
    choice_list: _items(ImageName)


class VisualOrdering(_Record):
    task: Literal["visual_ordering"]
    context: Annotated[list[VisualStep], Field(min_length=1, max_length=MAX_STEPS)]
    question: _items(Text)
    choice_list: _items(_items(ImageName))


RECORD = TypeAdapter(Annotated[TextualCloze | VisualCloze | VisualCoherence | VisualOrdering,
                               Field(discriminator="task")])


# ----------------------------------------------------------------------------- one-line reasons

JSON_TYPES = {dict: "an object", list: "an array", str: "a string", int: "an integer",
              float: "a number", bool: "a boolean", type(None): "null"}


def where(file: str, index: int, rec: object) -> str:
    qid = rec.get("qid") if isinstance(rec, dict) else None
    return f"{file}: record {index} (qid {_clip(repr(qid), 60)})"


def _field(loc: tuple) -> str:
    """('context', 3, 'id') -> 'context step 3: id'; ('choice_list', 2, 0) -> 'choice_list[2][0]'."""
    out = ""
    parts = list(loc)
    if parts[:1] == ["context"] and len(parts) > 1 and isinstance(parts[1], int):
        out, parts = f"context step {parts[1]}", parts[2:]
        if parts:
            out += ": "
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out and not out.endswith(": ") else str(p))
    return out


def _reason(err: ValidationError, rec: object) -> str:
    errors = err.errors(include_url=False)
    first = errors[0]
    kind, loc = first["type"], tuple(first["loc"])
    if loc and loc[0] in TASKS:       # the discriminated union puts the tag first
        loc = loc[1:]
    if kind in ("model_attributes_type", "dict_type", "model_type") and not loc:
        return f"a record must be a JSON object, got {JSON_TYPES.get(type(rec), type(rec).__name__)}"
    if kind == "union_tag_not_found":
        return "missing key 'task'"
    if kind == "union_tag_invalid":
        task = rec.get("task") if isinstance(rec, dict) else None
        return f"unknown task {_clip(repr(task))} (expected one of {TASKS})"
    top_missing = [e["loc"][-1] for e in errors if e["type"] == "missing" and len(e["loc"]) == 2]
    if kind == "missing" and len(loc) == 1 and top_missing:
        return f"missing key(s) {top_missing}"
    if kind == "missing":
        return f"{_field(loc[:-1])}: missing key {loc[-1]!r}"
    if kind == "extra_forbidden":
        return f"{_field(loc[:-1]) or 'record'}: unknown key {_clip(repr(loc[-1]))}"
    msg = first["msg"].removeprefix("Value error, ")
    if kind.endswith("_type") or kind in ("int_from_float", "literal_error"):
        msg += f" (got {JSON_TYPES.get(type(first['input']), type(first['input']).__name__)})"
    return f"{_field(loc)}: {msg}" if loc else msg


def validate_record(rec: object, file: str, index: int) -> None:
    """Raise RecipeQAFormatError if `rec` is not a usable RecipeQA record."""
    try:
        RECORD.validate_python(rec)
    except ValidationError as e:
        raise RecipeQAFormatError(f"{where(file, index, rec)}: {_clip(_reason(e, rec), 400)}") from None
