"""What looks like a word: the test that tells text read from marks that are not text.

Paper grain, speckle, halftone, stamps and pencil marks read as punctuation, runs of one
letter and one- or two-letter bits. A page's reading that is mostly such is kept out of
search (:func:`ocrwatch.scan.prepare.finish`); a line of it read with little confidence
is left out of the Tesseract engine's text (:mod:`ocrwatch.engines.tesseract`).
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["TRIM", "mostly_nonwords", "nonword_chars", "wordlike", "wordlike_share"]

# A reading is "mostly non-words" when under half its characters are in tokens that look
# like words.
NONWORD_SHARE = 0.5
MIN_TOKENS = 5
TRIM = "\"'“”‘’«»„()[]{}.,;:!?"  # trimmed off a token before it is judged
_RUN = re.compile(r"([^\W\d_])\1\1")
_VOWELS = frozenset("aeiouyæøœ")


def wordlike(token: str) -> bool:
    """Whether a token may be a word, a number, a code or a name ("report.pdf", "A4",
    "1540x2000"). Not: punctuation alone, one letter, a letter three times in a row
    ("eeeeae", "SSSSSS": what grain reads as), and in Latin script a run of letters
    without both vowels and consonants."""
    if len(token) < 2 or not any(c.isalnum() for c in token):
        return False
    folded = token.casefold()
    if _RUN.search(folded):
        return False
    if not folded.isalpha():
        return True  # digits or inner punctuation: numbers, codes, names of files
    if not all("LATIN" in unicodedata.name(c, "") for c in folded):
        return True  # other scripts: letters are enough
    plain = unicodedata.normalize("NFD", folded)
    vowels = sum(1 for c in plain if c in _VOWELS)
    return 0 < vowels < sum(1 for c in plain if c.isalpha())


def mostly_nonwords(text: str) -> bool:
    """Whether most of what was read is not words (grain, speckle or halftone read)."""
    tokens = [t.strip(TRIM) for t in text.split()]
    tokens = [t for t in tokens if t] or text.split()
    if len(tokens) < MIN_TOKENS:
        return bool(tokens) and not any(wordlike(t) for t in tokens)
    # Weighed by length: grain reads as long runs ("teeeeeaseeeee") among short bits
    # that pass for words ("be", "ty"); real text is mostly long words.
    words = sum(len(t) for t in tokens if wordlike(t))
    return words < NONWORD_SHARE * sum(len(t) for t in tokens)


def _tokens(text: str) -> list[str]:
    tokens = [t.strip(TRIM) for t in text.split()]
    return [t for t in tokens if t] or text.split()


def wordlike_share(text: str) -> float:
    """The share of a reading's characters (in tokens) that are in word-like tokens; 0
    for a reading of nothing."""
    tokens = _tokens(text)
    total = sum(len(t) for t in tokens)
    return sum(len(t) for t in tokens if wordlike(t)) / total if total else 0.0


def nonword_chars(text: str) -> int:
    """How many of a reading's characters are in tokens that are not word-like."""
    return sum(len(t) for t in _tokens(text) if not wordlike(t))
