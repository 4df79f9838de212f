"""Rule-based cooking-role extraction from step text, over NLTK tokens and tags.

`extract_step(text)` returns the step's roles as `Role` rows:

- event        an action the step instructs (lexicon verb in an instruction position: sentence start,
               after a conjunction, an adverb, "to" or a subject pronoun), value = lemma
- participant  the objects of an event: noun phrases after the verb up to a preposition, split at
               commas and "and"; quantities, units and determiners dropped ("2 cups of flour" -> flour)
- tool         an instrument phrase (longest match in `lexicon.TOOLS`)
- habitat      a vessel, appliance or place (`lexicon.HABITATS`)
- time         a duration, normalised "<n> minutes|hours|seconds" (or "overnight")
- temperature  "<n> degrees F|C" (or "<n> degrees" without a unit)
- quantity     a count of a participant ("Chop 3 carrots" -> 3), a number right before the noun

Explicit roles carry their character span in the text. An event whose step names no tool (habitat)
gets the action's commonsense default as a *hidden* role (explicit = False, no span), as in R2VQ's
annotation of implicit tools and habitats. NLTK does the work that needs no downloaded data:
`NLTKWordTokenizer.span_tokenize` for tokens with offsets, a `RegexpTagger` for the tag set below and
a `RegexpParser` chunk grammar for the noun phrases (`pos_tag` needs data that cannot be installed
offline, and recipe steps are mostly imperative, so lexicons carry most of the weight).

NLTK 3.10 runs every regular expression under a timeout (`nltk.redos`), which made the tokens and tags
most of the extractor's time. So a printable-ASCII sentence is tokenized by `etl.fast_nltk`'s twin of
the same tokenizer, and the tagger's answer for a word is kept once asked: the same roles, byte for
byte (`stock=True` runs NLTK as shipped; tests/etl/test_roles.py compares the two; `mrqa bench roles`
times them).
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from functools import lru_cache

from nltk import RegexpParser
from nltk.tag import RegexpTagger
from nltk.tokenize import NLTKWordTokenizer
from nltk.tree import Tree

from etl.fast_nltk import fast_span_tokenize, is_fast_line
from etl.roles import lexicon as L

ROLE_KINDS = ("event", "participant", "tool", "habitat", "time", "temperature", "quantity")


@dataclass(frozen=True)
class Role:
    role: str                  # one of ROLE_KINDS
    value: str                 # normalised value (lemma, phrase, "20 minutes", "350 degrees F")
    explicit: bool
    start: int | None = None   # character span in the step text (explicit roles)
    end: int | None = None
    event: int | None = None   # index of the event (in this step's events) the role belongs to

    def to_dict(self) -> dict:
        return asdict(self)


_WORD = NLTKWordTokenizer()
_SENT = re.compile(r"[^.!?;\n]+[.!?;]?")
_NUM = r"(?:\d+(?:[.,/]\d+)?|an?|one|two|three|four|five|six|ten|fifteen|twenty|thirty|forty|half an?)"
_TIME = re.compile(rf"\b({_NUM}(?:\s*(?:-|to|or)\s*{_NUM})?)\s*(minutes?|mins?|hours?|hrs?|seconds?|secs?)\b"
                   r"|\b(overnight)\b", re.I)
_TEMP = re.compile(r"\b(\d{2,3})\s*(?:°|º|degrees?|deg\.?)\s*(f|c|fahrenheit|celsius)?\b|\b(\d{2,3})\s?(f|c)\b", re.I)
_QTY_BEFORE = re.compile(r"(?:\d|½|¼|¾)\s*$")
_UNIT_NAME = {"min": "minutes", "mins": "minutes", "minute": "minutes", "hr": "hours", "hrs": "hours",
              "hour": "hours", "sec": "seconds", "secs": "seconds", "second": "seconds"}

_DET = {"a", "an", "the", "some", "your", "my", "this", "these", "those", "that", "all", "each", "any",
        "another", "both", "more", "remaining", "rest", "our", "their", "its", "every", "half", "few"}
_PREP = {"with", "in", "into", "on", "onto", "over", "for", "at", "to", "until", "from", "under", "by",
         "using", "through", "inside", "out", "off", "around", "across", "about", "without", "per", "like",
         "before", "after", "while", "till", "up", "down", "together", "if", "when", "so", "as", "then"}
_PRON = {"it", "them", "everything", "this", "they", "mixture", "everything."}
_ADJ = {"large", "small", "medium", "fresh", "hot", "cold", "warm", "thin", "thick", "fine", "sharp", "whole",
        "big", "little", "dry", "wet", "clean", "other", "same", "new", "soft", "hard", "good", "nice", "extra",
        "finely", "roughly", "prepared", "greased", "floured", "lightly", "desired", "favorite", "favourite"}
_STOP_VERBS = {"right", "away", "aside", "warm", "well",
               "is", "are", "be", "let", "make", "sure", "should", "will", "can", "have", "has", "get", "it's",
               "until", "keep", "don't", "do", "want", "need", "use", "take", "leave", "was", "were", "set"}

TAGGER = RegexpTagger([
    (r"^(?:\d+(?:[./,]\d+)?|½|¼|¾|one|two|three|four|five|six|seven|eight|nine|ten|twelve|a couple)$", "CD"),
    (r"^[,]$", ","),
    (r"^(?:and|or|&)$", "CC"),
    (r"^of$", "OF"),
    (r"^[^\w]+$", "."),
    (r".*", "NN"),
])
CHUNKER = RegexpParser(r"""
    NP: {<DT>?<CD>*<UNIT>?<OF>?<DT>?<JJ>*<NN>+}
""")


@lru_cache(maxsize=1 << 16)
def _regexp_tag(low: str) -> str:
    return TAGGER.tag([low])[0][1]


def _tag(tok: str, low: str, stock: bool = False) -> str:
    if tok in ("__TOOL__", "__HAB__"):
        return tok.strip("_")
    if low in ("and", "or", "&"):
        return "CC"
    if low in L.VERB_FORMS:
        return "VB"
    if low in _DET:
        return "DT"
    if low in _PREP:
        return "IN"
    if low in _PRON:
        return "PRP"
    if low in L.UNITS:
        return "UNIT"
    if low in _ADJ:
        return "JJ"
    if low in _STOP_VERBS or low in L.ADVERBS:
        return "RB"
    return TAGGER.tag([low])[0][1] if stock else _regexp_tag(low)


@lru_cache(maxsize=2)        # one pattern per kind: a cache of 1 built both again on every step
def _phrase_re(kind: str) -> re.Pattern:
    words = sorted(set(L.TOOLS if kind == "tool" else L.HABITATS), key=len, reverse=True)
    alts = "|".join(re.escape(w).replace(r"\ ", r"\s+") + "(?:e?s)?" for w in words)
    return re.compile(rf"(?<![\w-])(?:{alts})(?![\w-])", re.I)


_PHRASES = {"tool": frozenset(L.TOOLS), "habitat": frozenset(L.HABITATS)}


def _norm_phrase(s: str, kind: str) -> str:
    s = re.sub(r"\s+", " ", s.lower())
    vocab = _PHRASES[kind]
    if s in vocab:
        return s
    for cut in ("es", "s"):
        if s.endswith(cut) and s[:-len(cut)] in vocab:
            return s[:-len(cut)]
    return s


def _number(s: str) -> str:
    return re.sub(r"\s*(?:-|to)\s*", "-", s.strip().lower()).replace("half an", "0.5").replace("half a", "0.5")


def extract_step(text: str | None, stock: bool = False) -> list[Role]:
    """All roles of one step's text (see the module docstring); deterministic. `stock`: tokens and tags
    by NLTK as shipped (slower, the same roles)."""
    text = text or ""
    out: list[Role] = []
    for m in _TIME.finditer(text):
        if m.group(3):
            out.append(Role("time", "overnight", True, m.start(), m.end()))
        else:
            unit = m.group(2).lower()
            unit = _UNIT_NAME.get(unit, unit if unit.endswith("s") else unit + "s")
            out.append(Role("time", f"{_number(m.group(1))} {unit}", True, m.start(), m.end()))
    for m in _TEMP.finditer(text):
        num, unit = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        if m.group(3) and not re.match(r"\d{3}", num):          # "20 c" is not a temperature
            continue
        u = (unit or "")[:1].upper()
        out.append(Role("temperature", f"{num} degrees {u}".strip(), True, m.start(), m.end()))
    spans: list[tuple[int, int, str]] = []          # phrase spans, tools first: "blender" as a tool beats habitat
    for kind in ("tool", "habitat"):
        for m in _phrase_re(kind).finditer(text):
            if _QTY_BEFORE.search(text[max(0, m.start() - 12):m.start()]):
                continue                                # "2 cups", "1/2 cup": a measure, not a vessel
            if not any(a < m.end() and m.start() < b for a, b, _ in spans):
                spans.append((m.start(), m.end(), kind))
    spans.sort()
    events: list[tuple[int, int, str]] = []
    parts: list[tuple[int, int, str, int]] = []
    counts: list[tuple[int, int, str, int]] = []
    for sm in _SENT.finditer(text):
        _sentence(text, sm.start(), sm.end(), spans, events, parts, counts, stock)
    # a phrase that is also an event ("whisk the eggs") is the event, not a tool
    spans = [s for s in spans if not any(e[0] <= s[0] < e[1] for e in events)]
    for a, b, kind in spans:
        out.append(Role(kind, _norm_phrase(text[a:b], kind), True, a, b))
    for k, (a, b, lemma) in enumerate(events):
        out.append(Role("event", lemma, True, a, b, k))
    for a, b, name, k in parts:
        out.append(Role("participant", name, True, a, b, k))
    for a, b, n, k in counts:
        out.append(Role("quantity", n, True, a, b, k))
    has = {r.role for r in out}
    for k, (_a, _b, lemma) in enumerate(events):
        if "tool" not in has and lemma in L.DEFAULT_TOOL and L.DEFAULT_TOOL[lemma] != "hands":
            out.append(Role("tool", L.DEFAULT_TOOL[lemma], False, event=k))
        if "habitat" not in has and lemma in L.DEFAULT_HABITAT:
            out.append(Role("habitat", L.DEFAULT_HABITAT[lemma], False, event=k))
    out.sort(key=lambda r: (r.start if r.start is not None else 10**9, ROLE_KINDS.index(r.role), r.value))
    return out


def _sentence(text: str, lo: int, hi: int, spans, events: list, parts: list, counts: list,
              stock: bool = False) -> None:
    toks: list[tuple[str, str, int, int]] = []      # (token, tag, start, end)
    sub = text[lo:hi]
    fast = not stock and is_fast_line(sub)
    offs = [(lo + a, lo + b) for a, b in (fast_span_tokenize(sub) if fast else _WORD.span_tokenize(sub))]
    k = 0
    while k < len(offs):
        a, b = offs[k]
        ph = next((s for s in spans if s[0] <= a < s[1]), None)
        if ph and text[ph[0]:ph[1]].lower() in L.VERB_FORMS and _instruction(toks):
            spans.remove(ph)                            # "Whisk the eggs": the verb, not the tool
            ph = None
        if ph:
            while k + 1 < len(offs) and offs[k + 1][0] < ph[1]:
                k += 1
            toks.append(("__TOOL__" if ph[2] == "tool" else "__HAB__", "", ph[0], ph[1]))
        else:
            tok = text[a:b]
            toks.append((tok, "", a, b))
        k += 1
    tagged = [(t, _tag(t, t.lower(), stock), a, b) for t, _, a, b in toks]
    # inside a list ("mix the beef, brown sugar and salt") a verb form right before a noun is a modifier
    for i, (t, tag, a, b) in enumerate(tagged):
        if tag == "VB" and 0 < i < len(tagged) - 1 and tagged[i - 1][1] in ("CC", ",") \
                and tagged[i + 1][1] in ("NN", "JJ") and any(x[1] == "VB" for x in tagged[:i - 1]):
            tagged[i] = (t, "NN", a, b)
    # events: a verb form in an instruction position
    for i, (t, tag, a, b) in enumerate(tagged):
        low = t.lower()
        if tag != "VB":
            continue
        prev = tagged[i - 1] if i else None
        lemma = L.VERB_FORMS[low]
        base = low == lemma or low in ("sautéed",)
        instr = _instruction(tagged[:i])
        past = prev is not None and prev[0].lower() in L.SUBJECTS and not low.endswith("ing")
        if not ((base and instr) or past):
            continue
        if lemma == "saute" or lemma == "sauté":
            lemma = "saute"
        events.append((a, b, lemma))
        _objects(tagged, i + 1, len(events) - 1, parts, counts)


def _instruction(before: list) -> bool:
    """Whether a verb after these tokens opens an instruction (sentence start, after a conjunction,
    a comma, an adverb, "to" or a subject pronoun)."""
    if not before:
        return True
    t = before[-1][0]
    low = t.lower()
    return low in ("and", "or", "&", ",", ";", ":", "-") or not any(c.isalnum() for c in t) or low in L.ADVERBS


def _objects(tagged, j: int, event: int, parts: list, counts: list) -> None:
    """Noun phrases after the verb at j-1 up to a preposition or the next verb, split at , / and."""
    stop = j
    while stop < len(tagged) and tagged[stop][1] not in ("IN", "VB", ".", "TOOL", "HAB", "RB", "PRP"):
        stop += 1
    seg = tagged[j:stop]
    if not seg:
        return
    tree = CHUNKER.parse([(t.lower(), tag) for t, tag, _a, _b in seg])
    pos = 0
    for node in tree:
        if isinstance(node, Tree):
            n = len(node.leaves())
            words = seg[pos:pos + n]
            keep = [w for w in words if w[1] == "NN"]
            if keep:
                # the head noun phrase: the trailing run of nouns
                run = []
                for w in reversed(words):
                    if w[1] != "NN":
                        break
                    run.append(w)
                run.reverse()
                name = " ".join(w[0].lower() for w in run)
                parts.append((run[0][2], run[-1][3], name, event))
                before = words[:len(words) - len(run)]
                if before and before[-1][1] == "CD" and before[-1][0].isdigit():
                    counts.append((before[-1][2], before[-1][3], before[-1][0], event))
            pos += n
        else:
            pos += 1


def roles_by_kind(roles: list[Role]) -> dict[str, list[Role]]:
    out: dict[str, list[Role]] = {k: [] for k in ROLE_KINDS}
    for r in roles:
        out[r.role].append(r)
    return out
