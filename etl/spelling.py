"""Conservative spelling correction of out-of-vocabulary words (symspellpy, its bundled English
frequency dictionary), reported apart from the repair rules so that a correction never hides a
tokenization bug.

A word type is corrected only when all of these hold:
- it is lower-case, alphabetic, at least `min_len` letters, and not in the dictionary (etl.repair);
- it is not a known domain term: not among `keep` (e.g. the corpus' own frequent word types, which
  are real words of the domain such as 'silpat', however rare in general English);
- symspell finds exactly one candidate at edit distance 1 (no candidate at distance 0), and that
  candidate is a frequent English word (wordfreq Zipf >= `min_zipf`).
Capitalised words (names, brands) are never touched.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

from etl.repair import Repairer


@lru_cache(maxsize=1)
def _symspell():
    from importlib.resources import files

    from symspellpy import SymSpell
    sym = SymSpell(max_dictionary_edit_distance=1, prefix_length=7)
    path = files("symspellpy") / "frequency_dictionary_en_82_765.txt"
    sym.load_dictionary(str(path), term_index=0, count_index=1)
    return sym


@dataclass
class Speller:
    repairer: Repairer = field(default_factory=Repairer)
    keep: frozenset = frozenset()
    min_len: int = 5
    min_zipf: float = 3.5

    def correct(self, word: str) -> str | None:
        """The correction of one word type, or None when it is not safe to correct."""
        if (len(word) < self.min_len or not word.isalpha() or not word.isascii() or not word.islower()
                or word in self.keep or self.repairer.in_dictionary(word)):
            return None
        from symspellpy import Verbosity
        hits = _symspell().lookup(word, Verbosity.ALL, max_edit_distance=1)
        if len(hits) != 1 or hits[0].distance != 1:
            return None
        cand = hits[0].term
        return cand if self.repairer.zipf(cand) >= self.min_zipf else None


def spelling_report(counts: Counter, speller: Speller, top: int = 20) -> dict:
    """What the speller would correct among the word types of `counts` (token -> occurrences)."""
    fixes = {}
    for tok, n in counts.items():
        low = tok.lower() if tok.islower() else tok
        c = speller.correct(low)
        if c:
            fixes[tok] = (c, n)
    ranked = sorted(fixes.items(), key=lambda kv: (-kv[1][1], kv[0]))
    return {"types_corrected": len(fixes), "tokens_corrected": sum(n for _, n in fixes.values()),
            "examples": [[w, c, n] for w, (c, n) in ranked[:top]]}
