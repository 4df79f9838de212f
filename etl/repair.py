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
    config: RepairConfig = field(default_factory=RepairConfig)

    def __post_init__(self):
        self.freq = english_frequencies()
        self._zipf: dict[str, float] = {}
        self._cache: dict[str, tuple[str, ...]] = {}
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
        m = NUM_UNIT.match(tok)
        if m:
            return self._number_unit(tok, m.group(1), m.group(2))
        m = WORD_NUM.match(tok)
        if m:   # an ingredient list run together: 'flour1/2', 'salt2'
            w = m.group(1).lower()
            if w in self.freq or self._is_inflection(w):
                return (m.group(1), m.group(2))
            return (tok,)
        if not tok.isascii() or not tok.isalpha() or len(tok) < 4:
            return (tok,)
        low = tok.lower()
        if self.zipf(low) < self.config.glue_max_zipf:
            # web-junk entries of the dictionary such as 'intothe', 'andthe', 'theonion'
            cuts = self._segment(low)
            if cuts and any(p.lower() in GLUE_WORDS for p in _split_at(low, cuts)):
                return _split_at(tok, cuts)
        if self.in_dictionary(tok) or self._is_inflection(low):
            return (tok,)
        if CAMEL.search(tok):
            parts = self._camel(tok)
            if parts:
                return parts
        if tok[0].isupper():
            return (tok,)   # a capitalised unknown word is most likely a name ('Dartssnake')
        cuts = self._segment(low)
        if cuts:
            return _split_at(tok, cuts)
        return (tok,)

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


def _split_at(tok: str, cuts: list[int]) -> tuple[str, ...]:
    out, start = [], 0
    for c in cuts + [len(tok)]:
        out.append(tok[start:c])
        start = c
    return tuple(out)
