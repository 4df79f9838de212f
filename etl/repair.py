"""Out-of-vocabulary repair of word tokens: number/unit separation and fused-word segmentation.

Dictionary: wordfreq's English 'large' list (maintained, offline, 321k words with frequencies).
A token is repaired only when it is NOT in the dictionary and the split is clearly better than
keeping it under a unigram frequency model (costs in Zipf units: a word of Zipf z costs 9 - z):

- number + unit: '350degrees' -> '350 degrees', '2tbsp' -> '2 tbsp' (unit from a unit list or a
  frequent dictionary word; ordinals such as '1st' and model numbers such as '4x4' are kept);
- camelCase fusions: 'cutterOne' -> 'cutter One', 'toothpicksA' -> 'toothpicks A' (every part a
  dictionary word);
- lower-case fusions: 'preheatoven' -> 'preheat oven' (Viterbi over frequent words, at most
  `max_parts` parts, each part of Zipf >= `min_part_zipf`, total cost <= `max_cost`).

Before those, tokenization failures of real text are split by small named rules (`SPLIT_RULES`, in
this order; `Repairer.rule_of[token]` names the rule that split a token type, `rule_counts` counts them):

- `dangling_hyphen`: 'carots-' -> 'carots', '-you' -> 'you' (a hyphen with a letter on one side only);
- `leading_symbol`: '~1c' -> '~ 1c', '★200g' -> '★ 200g';
- `slash_compound`: 'and/or' -> 'and / or', 'sugar/butter/vanilla' -> 'sugar / butter / vanilla',
  'hand/' -> 'hand /'; fractions ('1/2', '3/4-inch') and URLs/paths/domains are kept;
- `colon_number`: 'ingredients:1' -> 'ingredients : 1', 'recipe:4c' -> 'recipe : 4c' (a letter before the
  colon; clock times such as '2:30' are kept);
- `sentence_period`: 'cakelets.you' -> 'cakelets . you' (a missing space after a sentence period; domains
  such as 'surlatable.com', file names and abbreviations such as 'e.g.' / 'approx.' are kept);
- `word_digits`: 'sugar1' -> 'sugar 1', 'stalks6-8' -> 'stalks 6-8', 'butter300g' -> 'butter 300g';
- `number_unit_word`: '120gmargarine' -> '120g margarine' (a number, a unit, then a word).
The parts are repaired again (so 'butter300g' ends as 'butter 300 g'). `repair_text` applies all of it
to running text, for the stored and exported step text.

Real rare words survive: dictionary words are never touched ('gnocchi', 'kitchenaid'), inflections of
dictionary words are kept ('maraschinos' = 'maraschino' + s), non-ASCII words are kept ('bärenjäger'),
and parts must be frequent words. Case is preserved: the original characters are split at the same
offsets. `Repairer.repair_token` caches per token type (each type is repaired once).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

UNITS = frozenset("""
tsp tsps tbsp tbsps tbs tbl tablespoon tablespoons teaspoon teaspoons cup cups c oz ounce ounces
lb lbs pound pounds g gr gram grams kg kilo kilos kilogram kilograms mg ml millilitre millilitres
milliliter milliliters l liter liters litre litres dl cl qt quart quarts pt pint pints gal gallon
gallons floz pinch pinches dash dashes clove cloves slice slices piece pieces pcs pc can cans
stick sticks inch inches in cm mm m ft foot feet degrees degree deg f c min mins minute minutes
sec secs second seconds hr hrs hour hours h day days week weeks x servings serving people eggs egg
""".split())
ORDINAL = re.compile(r"^\d*(?:1st|2nd|3rd|[04-9]th|1[1-3]th)$", re.I)
NUM_UNIT = re.compile(r"^(\d+(?:[.,]\d+)?(?:/\d+)?)([A-Za-z]+)$")
WORD_NUM = re.compile(r"^([A-Za-z][a-z]{2,})(\d+(?:[/.]\d+)?)$")
CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")
TLDS = frozenset("""com org net edu gov io co uk de fr ca au us info biz me tv ly nl it es ru jp in html htm
php jpg jpeg png gif pdf txt""".split())
ABBREVIATIONS = frozenset("""approx etc eg ie vs tbsp tsp tbs oz lb lbs min mins hr hrs no nos pkg pkgs qt pt
fl dr mr mrs ms st ft sq incl""".split())
URLISH = re.compile(r"://|^www\.|^/|\\|\.(?:" + "|".join(sorted(TLDS)) + r")(?:/|$)", re.I)
DANGLING_HYPHEN = re.compile(r"^-+(?=[A-Za-z]{2})|(?<=[A-Za-z])-+$")
LEADING_SYMBOL = re.compile(r"^([~*+#\u2022\u2605\u2606=>]+|-(?=\d+[A-Za-z]))(?=[A-Za-z0-9])")
SLASH_SPLIT = re.compile(r"(?<=[A-Za-z])/|/(?=[A-Za-z])")
COLON_SPLIT = re.compile(r"(?<=[A-Za-z]):(?=[A-Za-z0-9~])|(?<=[A-Za-z]):$")
SENTENCE_PERIOD = re.compile(r"^([A-Za-z0-9]*[A-Za-z][A-Za-z0-9]*|\d+)\.([A-Za-z][a-z]{2,})$")
WORD_DIGITS = re.compile(r"^([A-Za-z][a-z]{2,})(\d[\d/.\-]*[A-Za-z]{0,3})$")
NUMBER_UNIT_WORD = re.compile(r"^(\d+(?:[.,]\d+)?)(g|kg|ml|l|oz|lb|lbs|tsp|tbsp|c)([a-z]{3,})$", re.I)
SPLIT_RULES = ("dangling_hyphen", "leading_symbol", "slash_compound", "colon_number", "sentence_period",
               "word_digits", "number_unit_word")
WORD_RULES = ("number_unit", "glue_word", "camel_case", "fused_word")
RULES = SPLIT_RULES + WORD_RULES
CLITICS = frozenset({"n't", "'s", "'re", "'ll", "'ve", "'d", "'m", "s", "t"})
GLUE_WORDS = frozenset({"the", "and", "of"})   # a rare 'word' made of one of these plus words is glue
INFLECTIONS = ("s", "es", "ed", "d", "ing", "er", "ers", "ly", "y", "ies", "ness")


@lru_cache(maxsize=1)
def english_frequencies() -> dict[str, float]:
    """word -> frequency (wordfreq 'en' large list); loaded once per process."""
    import wordfreq
    return wordfreq.get_frequency_dict("en", wordlist="large")


def zipf_of(freq: float) -> float:
    import math
    return math.log10(freq * 1e9) if freq > 0 else 0.0


@dataclass
class RepairConfig:
    min_part_zipf: float = 2.5     # every part (4+ letters) of a lower-case split must be this frequent
    short_part_zipf: tuple = (0.0, 6.0, 5.5, 4.0)   # ... parts of 0/1/2/3 letters need more
    min_part_len: int = 1          # 'a' and 'i' only (short_part_zipf[1] keeps other letters out)
    max_parts: int = 3
    max_cost: float = 6.0          # mean cost per part (9 - zipf) a split may have
    min_unit_zipf: float = 3.5     # a dictionary word after a number counts as a unit at this frequency
    camel_min_zipf: float = 1.5    # camelCase parts need only be known words
    glue_max_zipf: float = 3.5     # dictionary entries rarer than this may be split at 'the'/'and'/'of'
    stem_min_zipf: float = 2.0     # an inflected form protects a token only if its stem is this frequent


@dataclass
class Repairer:
    """`rules`: the rule names applied (default: all of RULES, in that order)."""
    config: RepairConfig = field(default_factory=RepairConfig)
    rules: frozenset = frozenset(RULES)

    def __post_init__(self):
        unknown = set(self.rules) - set(RULES)
        if unknown:
            raise ValueError(f"unknown repair rule(s) {sorted(unknown)}; known: {', '.join(RULES)}")
        self.freq = english_frequencies()
        self._zipf: dict[str, float] = {}
        self._cache: dict[str, tuple[str, ...]] = {}
        self.rule_of: dict[str, str] = {}
        self._seg_words = None

    # -- dictionary
    def zipf(self, w: str) -> float:
        z = self._zipf.get(w)
        if z is None:
            z = self._zipf[w] = zipf_of(self.freq.get(w, 0.0))
        return z

    def in_dictionary(self, token: str) -> bool:
        """Is a word token in the dictionary (case-insensitive; clitics and hyphenated compounds of
        dictionary words count)."""
        low = token.lower()
        if low in self.freq or low in CLITICS:
            return True
        if "-" in low or "'" in low or "." in low:
            parts = [p for p in re.split(r"[-'.]", low) if p]
            return bool(parts) and all(p in self.freq or p.isdigit() for p in parts)
        return False

    # -- repair
    def repair_token(self, token: str) -> tuple[str, ...]:
        hit = self._cache.get(token)
        if hit is None:
            hit = self._cache[token] = self._repair(token)
        return hit

    def repair_tokens(self, tokens: list[str]) -> list[str]:
        out: list[str] = []
        for t in tokens:
            out.extend(self.repair_token(t))
        return out

    def _repair(self, tok: str) -> tuple[str, ...]:
        if not any(ch.isalpha() for ch in tok):
            return (tok,)
        for name in SPLIT_RULES:
            if name in self.rules:
                parts = getattr(self, "_" + name)(tok)
                if parts is not None and parts != (tok,):
                    self.rule_of.setdefault(tok, name)
                    return tuple(q for p in parts for q in (self.repair_token(p) if p != tok else (p,)) if q)
        return self._word_repair(tok)

    def _word_repair(self, tok: str) -> tuple[str, ...]:
        m = NUM_UNIT.match(tok)
        if m:
            return self._fired(tok, "number_unit", self._number_unit(tok, m.group(1), m.group(2)))
        m = WORD_NUM.match(tok)
        if m:   # an ingredient list run together: 'flour1/2', 'salt2'
            w = m.group(1).lower()
            if w in self.freq or self._is_inflection(w):
                return self._fired(tok, "number_unit", (m.group(1), m.group(2)))
            return (tok,)
        if not tok.isascii() or not tok.isalpha() or len(tok) < 4:
            return (tok,)
        low = tok.lower()
        if self.zipf(low) < self.config.glue_max_zipf:
            # web-junk entries of the dictionary such as 'intothe', 'andthe', 'theonion'
            cuts = self._segment(low)
            if cuts and any(p.lower() in GLUE_WORDS for p in _split_at(low, cuts)):
                return self._fired(tok, "glue_word", _split_at(tok, cuts))
        if self.in_dictionary(tok) or self._is_inflection(low):
            return (tok,)
        if CAMEL.search(tok):
            parts = self._camel(tok)
            if parts:
                return self._fired(tok, "camel_case", parts)
        if tok[0].isupper():
            return (tok,)   # a capitalised unknown word is most likely a name ('Dartssnake')
        cuts = self._segment(low)
        if cuts:
            return self._fired(tok, "fused_word", _split_at(tok, cuts))
        return (tok,)

    def _fired(self, tok: str, rule: str, parts: tuple[str, ...]) -> tuple[str, ...]:
        if rule not in self.rules:
            return (tok,)
        if len(parts) > 1:
            self.rule_of.setdefault(tok, rule)
        return parts

    # -- split rules (tokenization failures): each returns the parts, or None when it does not apply
    def _dangling_hyphen(self, tok: str) -> tuple[str, ...] | None:
        if "-" not in tok:
            return None
        out = DANGLING_HYPHEN.sub("", tok)
        return (out,) if out != tok and out else None

    def _leading_symbol(self, tok: str) -> tuple[str, ...] | None:
        m = LEADING_SYMBOL.match(tok)
        return (m.group(1), tok[m.end():]) if m else None

    def _slash_compound(self, tok: str) -> tuple[str, ...] | None:
        if "/" not in tok or URLISH.search(tok):
            return None
        return _rejoin(SLASH_SPLIT.split(tok), "/")

    def _colon_number(self, tok: str) -> tuple[str, ...] | None:
        if ":" not in tok or URLISH.search(tok):
            return None
        return _rejoin(COLON_SPLIT.split(tok), ":")

    def _sentence_period(self, tok: str) -> tuple[str, ...] | None:
        m = SENTENCE_PERIOD.match(tok) if "." in tok else None
        if not m:
            return None
        left, right = m.group(1), m.group(2)
        if len(left) < 2 or right.lower() in TLDS or left.lower() in ABBREVIATIONS:
            return None
        known = [self.in_dictionary(w) or self._is_inflection(w.lower()) for w in (left, right)]
        if not (known[1] or (known[0] and len(right) >= 4)):
            return None
        return (left, ".", right)

    def _word_digits(self, tok: str) -> tuple[str, ...] | None:
        m = WORD_DIGITS.match(tok)
        if not m:
            return None
        w = m.group(1)
        if WORD_NUM.match(tok) and (w.lower() in self.freq or self._is_inflection(w.lower())):
            return None     # 'flour1/2' stays the number_unit rule's
        if w.lower() in self.freq or self._is_inflection(w.lower()) or (len(w) >= 4 and w.islower()):
            return (w, m.group(2))
        return None

    def _number_unit_word(self, tok: str) -> tuple[str, ...] | None:
        m = NUMBER_UNIT_WORD.match(tok)
        whole = NUM_UNIT.match(tok)
        if whole and self._number_unit(tok, whole.group(1), whole.group(2)) != (tok,):
            return None     # '3cups' is a number and a unit, not '3c ups'
        if not m or not (self.in_dictionary(m.group(3)) or self._is_inflection(m.group(3).lower())):
            return None
        return (m.group(1) + m.group(2), m.group(3))

    def _number_unit(self, tok: str, num: str, unit: str) -> tuple[str, ...]:
        low = unit.lower()
        if ORDINAL.match(tok):
            return (tok,)
        if low in UNITS or (len(low) > 1 and self.zipf(low) >= self.config.min_unit_zipf):
            return (num, unit)
        return (tok,)

    def _is_inflection(self, low: str) -> bool:
        for suf in INFLECTIONS:
            if low.endswith(suf) and len(low) - len(suf) >= 3:
                stem = low[: -len(suf)]
                stems = [stem]
                if suf == "ies":
                    stems.append(stem + "y")
                if suf in ("ed", "ing", "er", "ers"):
                    stems.append(stem + "e")
                    if len(stem) > 3 and stem[-1] == stem[-2]:
                        stems.append(stem[:-1])
                if any(self.zipf(x) >= self.config.stem_min_zipf for x in stems):
                    return True
        return False

    def _camel(self, tok: str) -> tuple[str, ...] | None:
        parts = tuple(p for p in CAMEL.split(tok) if p)
        if len(parts) < 2 or len(parts) > self.config.max_parts:
            return None
        for p in parts:
            low = p.lower()
            if len(p) == 1:
                if low not in ("a", "i"):
                    return None
            elif self.zipf(low) < self.config.camel_min_zipf and not self._is_inflection(low):
                return None
        return parts

    def _segment(self, low: str) -> list[int] | None:
        """Best split of a lower-case token into frequent words (Viterbi), as cut offsets."""
        cfg = self.config
        n = len(low)
        # best[i] = (cost, n_parts, cuts) for low[:i]
        best: list[tuple[float, int, list[int]] | None] = [None] * (n + 1)
        best[0] = (0.0, 0, [])
        for i in range(1, n + 1):
            for j in range(max(0, i - 20), i):
                prev = best[j]
                if prev is None or prev[1] >= cfg.max_parts:
                    continue
                w = low[j:i]
                if len(w) < cfg.min_part_len or (len(w) == 1 and w not in ("a", "i")):
                    continue
                z = self.zipf(w)
                if z < (cfg.short_part_zipf[len(w)] if len(w) < 4 else cfg.min_part_zipf) \
                        and not (len(w) > 1 and w in UNITS and j == 0):   # 'tspsalt', 'tbspbutter'
                    continue
                cand = (prev[0] + 9.0 - z, prev[1] + 1, prev[2] + [i])
                if best[i] is None or cand[0] < best[i][0]:
                    best[i] = cand
        res = best[n]
        if res is None or res[1] < 2 or res[0] / res[1] > cfg.max_cost:
            return None
        return res[2][:-1]


def _rejoin(pieces: list[str], sep: str) -> tuple[str, ...] | None:
    """Pieces of a split at `sep` -> parts with `sep` kept as its own token (None: nothing to split)."""
    if len(pieces) < 2:
        return None
    out: list[str] = []
    for k, p in enumerate(pieces):
        if k:
            out.append(sep)
        if p:
            out.append(p)
    return tuple(out)


def rule_counts(repairer: Repairer, counts: dict[str, int]) -> dict[str, dict[str, int]]:
    """Per rule: the word types and token occurrences it changed, given token -> occurrences."""
    out = {r: {"types": 0, "tokens": 0} for r in RULES}
    for tok, n in counts.items():
        if repairer.repair_token(tok) != (tok,):
            rule = repairer.rule_of.get(tok)
            if rule:
                out[rule]["types"] += 1
                out[rule]["tokens"] += n
    return out


_ATTACH_LEFT = frozenset({".", ",", ":", ";", "!", "?"})


def join_parts(parts: tuple[str, ...]) -> str:
    """Repaired parts back into text: punctuation attaches to the word before ('ingredients: 1',
    'cakelets. you'); other parts are separated by one space ('and / or', '300 g')."""
    out = ""
    for p in parts:
        if out and p not in _ATTACH_LEFT:
            out += " "
        out += p
    return out


_CHUNK = re.compile(r"\S+")
_EDGE = re.compile(r"""^([(\["'{]*)(.*?)([)\]}"',;:!?]*|\.)$""", re.S)


def repair_text(text: str, repairer: Repairer) -> tuple[str, int]:
    """The token repairs applied to running text (the stored and exported step text): each
    whitespace-separated chunk, without its surrounding brackets, quotes and closing punctuation, is
    repaired as a token. Returns the text and the number of chunks changed."""
    if not text:
        return text, 0
    changed = 0

    def fix(m: re.Match) -> str:
        nonlocal changed
        e = _EDGE.match(m.group(0))
        if not e or not e.group(2):
            return m.group(0)
        core = e.group(2)
        parts = repairer.repair_token(core)
        if parts == (core,):
            return m.group(0)
        changed += 1
        return e.group(1) + join_parts(parts) + e.group(3)

    return _CHUNK.sub(fix, text), changed


def _split_at(tok: str, cuts: list[int]) -> tuple[str, ...]:
    out, start = [], 0
    for c in cuts + [len(tok)]:
        out.append(tok[start:c])
        start = c
    return tuple(out)
