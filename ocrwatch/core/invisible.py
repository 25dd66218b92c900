"""Invisible format characters taken out of page text before it is written anywhere.

A model, a server or a PDF's text layer can hand over characters that show nothing but
change what is shown or found: a right-to-left override (U+202E) makes ``gpj.exe`` look
like ``exe.jpg`` in a listing, a zero-width space splits a word so that search misses it,
a byte-order mark or a tag character hides text in plain sight. None of them is print a
scanner saw, so none reaches the sidecars or the index.

What stays, because real text needs it:

- the implicit bidirectional marks LRM, RLM and ALM (U+200E, U+200F, U+061C): Arabic and
  Hebrew text uses them to place punctuation and numbers; they reorder nothing beyond the
  neutral character next to them. Legitimate right-to-left text needs no override at
  all: the Unicode bidirectional algorithm orders it from the letters themselves, so the
  embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069) go;
- ZWJ and ZWNJ (U+200D, U+200C) between two letters or marks: Persian, Arabic and the
  Indic scripts choose a letter's joined or separate form by them, and an emoji sequence
  is joined by ZWJ between two symbols. Anywhere else (alone, at a word's edge, in
  Latin text) they only hide a break, and go;
- the Arabic and Syriac signs that are format characters yet printed (U+0600-U+0605,
  U+06DD, U+070F, U+08E2, U+110BD, U+110CD): they carry a number on the page.

Every other format character (Unicode category Cf: zero-width space, word joiner,
byte-order mark, soft hyphen, invisible operators, tags, interlinear annotation) goes.
"""

from __future__ import annotations

import unicodedata

KEPT = frozenset("\u200e\u200f\u061c\u0600\u0601\u0602\u0603\u0604\u0605\u06dd\u070f"
                 "\u08e2\U000110bd\U000110cd")
JOINERS = frozenset("\u200c\u200d")


def _joins(before: str, after: str) -> bool:
    """Whether a ZWJ/ZWNJ between ``before`` and ``after`` does a script's work."""
    kinds = unicodedata.category(before)[0], unicodedata.category(after)[0]
    return all(k in "LM" for k in kinds) or kinds == ("S", "S")


def strip_invisible(text: str) -> tuple[str, int]:
    """``text`` without invisible format characters (see the module's notes), and how many
    were taken out."""
    if text.isascii():
        return text, 0  # the common case, and none of them is ASCII
    out: list[str] = []
    removed = 0
    for i, ch in enumerate(text):
        kept = unicodedata.category(ch) != "Cf" or ch in KEPT or (
            ch in JOINERS and bool(out) and i + 1 < len(text) and _joins(out[-1], text[i + 1]))
        if kept:
            out.append(ch)
        else:
            removed += 1
    return ("".join(out), removed) if removed else (text, 0)
