"""How page words are folded for the word index (``pages_fts``), at indexing and in queries.

SQLite's ``unicode61 remove_diacritics 2`` folds accents (``café`` is ``cafe``), but
letters that are not a base letter plus an accent stay themselves: ``Straße`` is not
``strasse``, ``Øresund`` not ``oresund``. :func:`fold` spells them as people type them
without the key. :mod:`ocrwatch.store.index` uses it for both the pages it indexes and
the queries it runs; it is a module of its own only so that migration 012 can fold the
pages stored before it (the migrations are imported by the database, below the index).

Each letter becomes letters, so a folded page has the same words in the same places as
its text: the index can hold the folded words while snippets are cut from the text.
"""

from __future__ import annotations

# Lower case: the tokenizer folds case anyway. Letters with an accent on top of these
# (ǿ, ǽ) are listed too: their accent is removed by the tokenizer only after this.
_LETTERS = {
    "ss": "ßẞ",
    "o": "øØǿǾ",
    "ae": "æÆǽǼǣǢ",
    "oe": "œŒ",
    "l": "łŁŀĿ",
    "d": "đĐðÐ",
    "th": "þÞ",
    "i": "ı",
    "h": "ħĦ",
    "t": "ŧŦ",
    "ij": "ĳĲ",
    "ng": "ŋŊ",
    # Ligatures, which some scans' text layers and some engines write.
    "ff": "ﬀ", "fi": "ﬁ", "fl": "ﬂ", "ffi": "ﬃ", "ffl": "ﬄ", "st": "ﬅﬆ",
}
_TABLE = str.maketrans({ch: spelled for spelled, chars in _LETTERS.items() for ch in chars})
# The folded letters as a GLOB class: the pages that need a folded copy.
FOLDED_GLOB = "*[" + "".join(ch for chars in _LETTERS.values() for ch in chars) + "]*"


def fold(text: str) -> str:
    """``text`` with the letters above spelled in plain letters (``Straße`` → ``Strasse``)."""
    return text.translate(_TABLE)
