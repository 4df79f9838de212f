"""Text cleaning rules (datatrove style): each rule is a small callable `rule(text) -> (text, n)`
returning the new text and how many things it changed, so every rule has a counter.

`TEXT_RULES` run on step bodies and titles in this order; `TITLE_RULES` add the step-number rule.
`clean_text(text, rules, counts)` applies them and adds to `counts` (rule name -> changes).
Rules are idempotent: clean_text(clean_text(x)) == clean_text(x) (tested).

Speed: before running a regex, a rule checks that the text holds a substring every match must
contain (e.g. '<' for tags, '{' for CSS blocks); case-insensitive patterns are pre-checked on the
lower-cased text only when the text is ASCII (Unicode case folding has surprises such as 'ſ' = 's').
The pre-checks never change a result: tests compare against the plain regex pipeline.
"""
from __future__ import annotations

import html
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence

RuleFn = Callable[[str], tuple[str, int]]


# ----------------------------------------------------------------------------- markup remnants

_OFFICE_COND = re.compile(r"<!--\[if[^\]]*\]>.*?<!\[endif\]-->|<!\[if[^\]]*\]>|<!\[endif\]>", re.S | re.I)
_OFFICE_WORD_JUNK = re.compile(
    r"\bNormal\s+0\s+(?:\d+\s+)?(?:(?:false|true)\s+){1,6}(?:(?:EN-[A-Z]{2}|X-NONE|ZH-[A-Z]{2}|JA|AR-SA)\s*){0,4}"
    r"|\bMicrosoftInternetExplorer4\b"
    r"|/\*\s*Style Definitions\s*\*/"
    r"|\bst1\\?:\*\{[^}]*\}", re.I)
_OFFICE_CSS = re.compile(r"[\w.]*Mso\w*\s*\{[^{}]*\}")
_MSO_DECL = re.compile(r"\bmso-[a-z\-]+\s*:\s*(?:\"[^\"\n]*\"|[^;\"}\n])*;?", re.I)
_MSO_WORDS = re.compile(r"\b(?:Mso[A-Z][A-Za-z]*|o:p|w:[A-Za-z]+)\b")


def _lower_lacks(text: str, needles: tuple[str, ...]) -> bool:
    """True when an ASCII text contains none of the lower-case needles in any letter case (a
    non-ASCII text is never ruled out: the caller then runs its case-insensitive regex)."""
    if not text.isascii():
        return False
    low = text.lower()
    return not any(n in low for n in needles)


def strip_office(text: str) -> tuple[str, int]:
    """Microsoft Word paste remnants: conditional comments, 'Normal 0 false false ...', mso-* styles."""
    n = 0
    if "<!" in text:
        text, k = _OFFICE_COND.subn(" ", text)
        n += k
    if not _lower_lacks(text, ("normal", "microsoftinternetexplorer4", "/*", "st1")):
        text, k = _OFFICE_WORD_JUNK.subn(" ", text)
        n += k
    if "Mso" in text:
        text, k = _OFFICE_CSS.subn(" ", text)
        n += k
    if not _lower_lacks(text, ("mso-",)):
        text, k = _MSO_DECL.subn(" ", text)
        n += k
    return text, n


_HTML_BLOCK = re.compile(r"<(script|style)\b[^>]*>.*?</\1\s*>", re.S | re.I)
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
_HTML_BREAK = re.compile(r"<\s*(?:br|/p|/div|/li|/h[1-6]|/tr)\s*/?>", re.I)
_HTML_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9:\-]*(?:\s+[^<>]*?)?\s*/?>")
_HTML_ENTITY = re.compile(r"&(?:#\d{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,30});")


def strip_html(text: str) -> tuple[str, int]:
    """HTML tags, comments, script/style blocks out (line-level tags become newlines); entities decoded."""
    n = 0
    if "<" in text:
        text, k = _HTML_BLOCK.subn(" ", text)
        n += k
        text, k = _HTML_COMMENT.subn(" ", text)
        n += k
        text, k = _HTML_BREAK.subn("\n", text)
        n += k
        text, k = _HTML_TAG.subn(" ", text)
        n += k
    ents = _HTML_ENTITY.findall(text) if "&" in text else None
    if ents:
        text = _HTML_ENTITY.sub(lambda m: html.unescape(m.group(0)), text)
        n += len(ents)
    return text, n


_CSS_SELECTOR = (r"(?:@[a-z\-]+\s*|(?:\b(?:p|div|span|table|td|tr|th|body|html|h[1-6]|li|ul|ol|a|img|font)\b"
                 r"|[A-Za-z]*(?:[.#][\w\-]+)+)(?::[\w\-]+)?[\s,>+~*]*)")
_CSS_BLOCK = re.compile(_CSS_SELECTOR + r"{0,6}\{[^{}]*:[^{}]*\}")
_CSS_DECL = re.compile(
    r"\b(?:font(?:-[a-z]+)?|margin(?:-[a-z]+)?|padding(?:-[a-z]+)?|color|background(?:-[a-z]+)?|"
    r"line-height|text-(?:align|decoration|indent|transform)|border(?:-[a-z]+)?|display|width|height|"
    r"letter-spacing|vertical-align|white-space|page-break-[a-z]+|tab-stops)\s*:\s*[^;:\n]{1,80};",
    re.I)


def strip_css(text: str) -> tuple[str, int]:
    """CSS rule blocks (`p.MsoNormal { ... }`) and stray declarations (`font-size: 12pt;`)."""
    a = b = 0
    if "{" in text:
        text, a = _CSS_BLOCK.subn(" ", text)
    if ":" in text and ";" in text:
        text, b = _CSS_DECL.subn(" ", text)
    return text, a + b


_URL = re.compile(r"(?:\bhttps?://|\bwww\.)[^\s<>\"')\]]+", re.I)
_EMPTY_BRACKETS = re.compile(r"\(\s*\)|\[\s*\]")


def strip_urls(text: str) -> tuple[str, int]:
    """URLs (http(s)://..., www....) out, with the brackets they leave empty."""
    if "://" not in text and _lower_lacks(text, ("www.",)):
        return text, 0
    text, n = _URL.subn(" ", text)
    if n:
        text = _EMPTY_BRACKETS.sub(" ", text)
    return text, n


# ----------------------------------------------------------------------------- unicode

VULGAR = {"½": "1/2", "⅓": "1/3", "⅔": "2/3", "¼": "1/4", "¾": "3/4", "⅕": "1/5", "⅖": "2/5",
          "⅗": "3/5", "⅘": "4/5", "⅙": "1/6", "⅚": "5/6", "⅛": "1/8", "⅜": "3/8", "⅝": "5/8",
          "⅞": "7/8", "⅐": "1/7", "⅑": "1/9", "⅒": "1/10"}
_VULGAR_RX = re.compile(r"(\d?)([" + "".join(VULGAR) + r"])")
_DEGREE = re.compile(r"(?<=\d)\s*[°º˚]\s*(?=[CF]\b)|(?<=\d)\s*[°º˚]|\s*°")
_PUNCT_MAP = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'", "\u00b4": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"', "\u00ab": '"', "\u00bb": '"',
    "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2015": "-", "\u2212": "-",
    "\u00a0": " ", "\u2007": " ", "\u202f": " ", "\u2009": " ", "\u200a": " ", "\u3000": " ",
    "\u2044": "/", "\u2215": "/", "\u2022": "-", "\u00b7": "-", "\u2026": "...",
    "\u200b": None, "\u200c": None, "\u200d": None, "\u2060": None, "\ufeff": None, "\u00ad": None,
})
_MOJIBAKE = re.compile(r"[ÃÂ][\x80-\xbf\u0152-\u2122]|â€")
_NEEDS_WORK = re.compile(r"[^\x00-\x7f]")


def normalize_unicode(text: str) -> tuple[str, int]:
    """Mojibake repaired (ftfy), fractions '1½' -> '1 1/2', degrees '350°F' -> '350 degrees F',
    curly quotes, dashes, non-breaking and zero-width spaces, then NFKC."""
    if not _NEEDS_WORK.search(text):
        return text, 0
    n = 0
    if _MOJIBAKE.search(text):
        import ftfy
        fixed = ftfy.fix_text(text, normalization="NFC")
        n += fixed != text
        text = fixed
    text, k = _VULGAR_RX.subn(lambda m: (m.group(1) + " " if m.group(1) else "") + VULGAR[m.group(2)], text)
    n += k
    text, k = _DEGREE.subn(" degrees ", text)
    n += k
    mapped = text.translate(_PUNCT_MAP)
    nf = unicodedata.normalize("NFKC", mapped)
    nf = nf.translate(_PUNCT_MAP)   # NFKC can produce fraction slashes again ("¹⁄₂")
    n += sum(1 for a, b in zip(text, nf) if a != b) if len(nf) == len(text) else int(nf != text)
    return nf, n


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def strip_control_chars(text: str) -> tuple[str, int]:
    """C0/C1 control characters out (newline and tab kept; CR/CRLF become newlines). They are
    replaced by a space: in scraped text they usually stand where a separator was."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.subn(" ", text)


_SPACES = re.compile(r"[ \t\f\v]+")
_BLANK_LINES = re.compile(r"\n\s*\n+")
_SPACE_BEFORE_PUNCT = re.compile(r" +([,.;:!?])(?=\s|$)")


def normalize_whitespace(text: str) -> tuple[str, int]:
    """Runs of spaces/tabs -> one space, lines trimmed, blank lines dropped, ends trimmed.
    (Not noise removal: it does not count as a change.)"""
    if "  " in text or "\t" in text or "\f" in text or "\v" in text:   # ' ' -> ' ' changes nothing
        text = _SPACES.sub(" ", text)
    if "\n" in text:
        text = "\n".join(line.strip() for line in text.split("\n"))
        if "\n\n" in text:   # lines are stripped: a blank line is now exactly '\n\n'
            text = _BLANK_LINES.sub("\n", text)
    text = text.strip()
    if " ," in text or " ." in text or " ;" in text or " :" in text or " !" in text or " ?" in text:
        text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)   # space left before punctuation by removals
    return text, 0


# ----------------------------------------------------------------------------- titles

_NUMBER_WORDS = ("one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|"
                 "fifteen|sixteen|seventeen|eighteen|nineteen|twenty")
_STEP_NUMBER = re.compile(
    rf"^\s*(?:step|stap|paso|schritt|étape)\s*#?\s*(?:\d+|{_NUMBER_WORDS})\b\s*[:.)\-]*\s*"
    r"|^\s*#?\d{1,2}\s*[:.)\-]+\s+(?=\D)", re.I)


def strip_step_number(title: str) -> tuple[str, int]:
    """'Step 3: Mix' -> 'Mix'; 'STEP 3 - Mix' -> 'Mix'; '3. Mix' -> 'Mix'; 'Step 3' -> ''."""
    return _STEP_NUMBER.subn("", title, count=1)


# ----------------------------------------------------------------------------- pipeline

TEXT_RULES: tuple[RuleFn, ...] = (strip_office, strip_html, strip_css, strip_urls, normalize_unicode,
                                  strip_control_chars, normalize_whitespace)
TITLE_RULES: tuple[RuleFn, ...] = TEXT_RULES + (strip_step_number, normalize_whitespace)


def clean_text(text: str | None, rules: Sequence[RuleFn] = TEXT_RULES,
               counts: Counter | None = None) -> str | None:
    """Apply `rules` in order; add each rule's change count to `counts` (by rule name)."""
    if text is None:
        return None
    for rule in rules:
        text, n = rule(text)
        if n and counts is not None:
            counts[rule.__name__] += n
    return text


def clean_title(title: str | None, counts: Counter | None = None) -> str | None:
    return clean_text(title, TITLE_RULES, counts)
