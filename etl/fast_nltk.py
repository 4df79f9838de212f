"""NLTK's word tokenizer and Punkt, fast on printable-ASCII text, with identical output.

NLTK 3.10 routes every regular expression through `nltk.redos`: the third-party `regex` engine run
under a wall-clock timeout, 3-10x slower per call than the standard `re`. Our text is cleaned
first and is nearly all printable ASCII, where `re` and `regex` (version 0, NLTK's mode) agree
exactly: `\\s` is only ' ', `\\w` is [A-Za-z0-9_], case folding is ASCII. So for such lines we run the
SAME NLTK algorithms with the SAME pattern sources, compiled by `re`:

- `fast_word_tokenize(s)`: NLTKWordTokenizer.tokenize's sequence of substitutions (patterns and
  replacements read from the NLTK class at import), skipping a substitution when a test that
  every match passes (substrings it must contain) fails on the current text, and doing the two
  end-anchored final-period substitutions with string operations;
- `fast_span_tokenize(s)`: NLTKWordTokenizer.span_tokenize's character spans, from
  `fast_word_tokenize` with NLTK's own quote restoring and `align_tokens`;
- `fast_punkt(punkt)`: a twin of a PunktSentenceTokenizer sharing its trained parameters, whose
  language variables and token class use `re`-compiled copies of NLTK's patterns.

Lines holding anything else (accents, tabs, control characters) must use stock NLTK: callers
check `is_fast_line` (etl.tokenize and etl.roles.extract do). tests/etl/test_tokenize.py asserts
fast == stock, and tests/etl/test_roles.py that the role extractor's roles are the same.
"""
from __future__ import annotations

import re

import regex
from nltk.tokenize import NLTKWordTokenizer
from nltk.tokenize.punkt import PunktLanguageVars, PunktSentenceTokenizer, PunktToken
from nltk.tokenize.util import align_tokens

_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]*\Z")
_FLAGS = (("IGNORECASE", "IGNORECASE"), ("MULTILINE", "MULTILINE"), ("DOTALL", "DOTALL"),
          ("VERBOSE", "VERBOSE"))


def is_fast_line(text: str) -> bool:
    """Only printable ASCII (no tab, newline or control character)?"""
    return text.isascii() and _PRINTABLE_ASCII.match(text) is not None


def has_sentence_end(text: str) -> bool:
    return "." in text or "?" in text or "!" in text


def to_re(pattern) -> re.Pattern:
    """A `re` pattern with the source and flags of an NLTK (redos/regex or re) pattern."""
    rx = getattr(pattern, "_rx", pattern)
    if isinstance(rx, re.Pattern):
        return rx
    flags = 0
    for rname, xname in _FLAGS:
        if rx.flags & getattr(regex, xname):
            flags |= getattr(re, rname)
    return re.compile(rx.pattern, flags)


# ----------------------------------------------------------------------------- word tokenizer

def _any(*needles: str):
    return lambda text: any(n in text for n in needles)


def _any_lower(*needles: str):
    return lambda text: any(n in text.lower() for n in needles)


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _opening_quote(text: str) -> bool:
    r"""Some "'" not preceded by a word character and followed by one (the (?<!\w)'(?=\w) test)."""
    i = text.find("'")
    while i >= 0:
        if (i == 0 or not _is_word_char(text[i - 1])) and i + 1 < len(text) and _is_word_char(text[i + 1]):
            return True
        i = text.find("'", i + 1)
    return False


# For each NLTK pattern source: a test on the current (printable ASCII) text that is True whenever
# the pattern can match -- substrings every match contains, or an anchored shape. A pattern
# missing here is always run; one needing only non-ASCII characters never runs.
_NEEDS = {
    "([«“‘„]|[`]+)": _any("`"),
    r"^\"": lambda t: t.startswith('"'),
    r"(``)": _any("``"),
    r"([ \(\[{<])(\"|\'{2})": _any('"', "''"),
    r"(?i)(?<!\w)(\')(?!(?:re|ve|ll|m|t|s|d|n)\b)(?=\w)": _opening_quote,
    r'([^\.])(\.)([\]\)}>"\'' "»”’ " r"]*+)\s*$": _any("."),
    r"([:,])([^\d])": _any(":", ","),
    r"([:,])$": lambda t: t.endswith((":", ",")),
    r"\.{2,}": _any(".."),
    r"[;@#$%&]": _any(";", "@", "#", "$", "%", "&"),
    r"[\u2012-\u2015]": _any("\u2012", "\u2013", "\u2014", "\u2015"),
    r'([^\.])(\.)([\]\)}>"\']*)\s*$': _any("."),
    r"[?!]": _any("?", "!"),
    r"([^'])' ": _any("' "),
    r"[*]": _any("*"),
    "([»”’])": _any("»", "”", "’"),
    r"''": _any("''"),
    r'"': _any('"'),
    r"\s+": _any("  "),   # on printable ASCII \s is ' ': only runs of 2+ change anything
    r"([^' ])('[sS]|'[mM]|'[dD]|') ": _any("' ", "'s ", "'S ", "'m ", "'M ", "'d ", "'D "),
    r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) ": _any("'ll ", "'LL ", "'re ", "'RE ", "'ve ", "'VE ",
                                                       "n't ", "N'T "),
    r"[\]\[\(\)\{\}\<\>]": _any(*"[](){}<>"),
    r"--": _any("--"),
    r"(?i)\b(can)(?#X)(not)\b": _any_lower("cannot"),
    r"(?i)\b(d)(?#X)('ye)\b": _any_lower("d'ye"),
    r"(?i)\b(gim)(?#X)(me)\b": _any_lower("gimme"),
    r"(?i)\b(gon)(?#X)(na)\b": _any_lower("gonna"),
    r"(?i)\b(got)(?#X)(ta)\b": _any_lower("gotta"),
    r"(?i)\b(lem)(?#X)(me)\b": _any_lower("lemme"),
    r"(?i)\b(more)(?#X)('n)\b": _any_lower("more'n"),
    r"(?i)\b(wan)(?#X)(na)(?=\s)": _any_lower("wanna"),
    r"(?i) ('t)(?#X)(is)\b": _any_lower(" 'tis"),
    r"(?i) ('t)(?#X)(was)\b": _any_lower(" 'twas"),
}


def _final_period_possessive(text: str) -> str:
    """`([^\\.])(\\.)([\\]\\)}>"\'»”’ ]*+)\\s*$` -> r"\1 \2 \3 " on printable ASCII: the only possible
    match is a '.' (not after another '.') followed by closers/spaces up to the end."""
    t = text.rstrip(" ])}>\"'")
    if len(t) >= 2 and t[-1] == "." and t[-2] != ".":
        return t[:-1] + " . " + text[len(t):] + " "
    return text


def _final_period(text: str) -> str:
    """`([^\\.])(\\.)([\\]\\)}>"\']*)\\s*$` -> r"\1 \2\3 " on printable ASCII: a '.' (not after another
    '.') followed by closers, then spaces, up to the end; the spaces are replaced by one."""
    u = text.rstrip(" ")
    v = u.rstrip("])}>\"'")
    if len(v) >= 2 and v[-1] == "." and v[-2] != ".":
        return v[:-1] + " ." + u[len(v):] + " "
    return text


_SPECIAL = {
    r'([^\.])(\.)([\]\)}>"\'' "»”’ " r"]*+)\s*$": (r"\1 \2 \3 ", _final_period_possessive),
    r'([^\.])(\.)([\]\)}>"\']*)\s*$': (r"\1 \2\3 ", _final_period),
}


def _step(pattern, repl):
    """(function text -> text, precondition or None) for one NLTK substitution."""
    src = getattr(pattern, "pattern", None)
    special = _SPECIAL.get(src)
    if special is not None and special[0] == repl:
        return special[1], None
    rx = to_re(pattern)
    return (lambda text: rx.sub(repl, text)), _NEEDS.get(src)


_W = NLTKWordTokenizer
_BEFORE_PAD = [_step(p, r) for p, r in _W.STARTING_QUOTES + _W.PUNCTUATION] \
    + [_step(*_W.PARENS_BRACKETS), _step(*_W.DOUBLE_DASHES)]
_AFTER_PAD = [_step(p, r) for p, r in _W.ENDING_QUOTES] \
    + [_step(p, r" \1 \2 ") for p in _W.CONTRACTIONS2 + _W.CONTRACTIONS3]


def fast_word_tokenize(sentence: str) -> list[str]:
    """NLTKWordTokenizer().tokenize(sentence) for a printable-ASCII sentence."""
    text = sentence
    for fn, pre in _BEFORE_PAD:
        if pre is None or pre(text):
            text = fn(text)
    text = " " + text + " "
    for fn, pre in _AFTER_PAD:
        if pre is None or pre(text):
            text = fn(text)
    return text.split()


_QUOTES = re.compile(r"``|'{2}|\"")


def fast_span_tokenize(sentence: str) -> list[tuple[int, int]]:
    """list(NLTKWordTokenizer().span_tokenize(sentence)) for a printable-ASCII sentence: the tokens'
    quotes turned back into the text's own (NLTK writes '"' as `` or ''), then aligned."""
    tokens = fast_word_tokenize(sentence)
    if '"' in sentence or "''" in sentence:
        found = iter([m.group() for m in _QUOTES.finditer(sentence)])
        tokens = [next(found) if tok in ('"', "``", "''") else tok for tok in tokens]
    return align_tokens(tokens, sentence)


# ----------------------------------------------------------------------------- Punkt

class FastPunktLanguageVars(PunktLanguageVars):
    """PunktLanguageVars whose regexes are `re`-compiled copies of NLTK's."""

    re_boundary_realignment = to_re(PunktLanguageVars.re_boundary_realignment)

    def _word_tokenizer_re(self):
        try:
            return self._fast_word_re
        except AttributeError:
            self._fast_word_re = to_re(super()._word_tokenizer_re())
            return self._fast_word_re

    def period_context_re(self):
        try:
            return self._fast_period_re
        except AttributeError:
            self._fast_period_re = to_re(super().period_context_re())
            return self._fast_period_re


_NON_PUNCT = re.compile(r"[^\W\d]")


class FastPunktToken(PunktToken):
    __slots__ = ()
    _RE_ELLIPSIS = to_re(PunktToken._RE_ELLIPSIS)
    _RE_NUMERIC = to_re(PunktToken._RE_NUMERIC)
    _RE_INITIAL = to_re(PunktToken._RE_INITIAL)
    _RE_ALPHA = to_re(PunktToken._RE_ALPHA)

    @property
    def is_non_punct(self):
        return _NON_PUNCT.search(self.type)


def fast_punkt(punkt: PunktSentenceTokenizer) -> PunktSentenceTokenizer:
    """The `re` twin of `punkt` (same parameters object), made once per tokenizer."""
    twin = getattr(punkt, "_mrqa_fast_twin", None)
    if twin is None:
        twin = PunktSentenceTokenizer(lang_vars=FastPunktLanguageVars(), token_cls=FastPunktToken)
        twin._params = punkt._params
        punkt._mrqa_fast_twin = twin
    return twin
