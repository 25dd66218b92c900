"""Which Tesseract languages read which script, by the names Tesseract's OSD gives scripts.

A language reads the script its letters are written in: ``eng`` reads Latin, and reads a
Cyrillic letter as Latin look-alikes (``YBaxkaempii`` for ``Уважаемый``). Tesseract's
script models (``script/Cyrillic``) read their script too. Every language not listed
below reads Latin; OSD's "Fraktur" is Latin in broken letters, read by ``deu``, ``frk``
and the other Latin languages' models well enough not to be a mismatch.
"""

from __future__ import annotations

from collections.abc import Iterable

LATIN = "Latin"

# OSD's script name: the languages that read it, the most used first (the first is the
# one a message suggests). Japanese pages are named "Japanese", "Han", "Hiragana" or
# "Katakana" by OSD, Korean ones "Korean" or "Hangul".
_CJK = ("chi_sim", "chi_tra", "jpn", "chi_sim_vert", "chi_tra_vert", "jpn_vert")
SCRIPTS: dict[str, tuple[str, ...]] = {
    "Cyrillic": ("rus", "ukr", "bul", "srp", "bel", "mkd", "kaz", "kir", "mon", "tat",
                 "tgk", "uzb_cyrl", "aze_cyrl"),
    "Greek": ("ell", "grc"),
    "Arabic": ("ara", "fas", "urd", "pus", "snd", "uig", "ckb"),
    "Hebrew": ("heb", "yid"),
    "Han": _CJK,
    "Japanese": ("jpn", "jpn_vert"),
    "Hiragana": ("jpn", "jpn_vert"),
    "Katakana": ("jpn", "jpn_vert"),
    "Korean": ("kor", "kor_vert"),
    "Hangul": ("kor", "kor_vert"),
    "Devanagari": ("hin", "mar", "nep", "san"),
    "Bengali": ("ben", "asm"),
    "Gurmukhi": ("pan",),
    "Gujarati": ("guj",),
    "Oriya": ("ori",),
    "Tamil": ("tam",),
    "Telugu": ("tel",),
    "Kannada": ("kan",),
    "Malayalam": ("mal",),
    "Sinhala": ("sin",),
    "Thai": ("tha",),
    "Lao": ("lao",),
    "Khmer": ("khm",),
    "Myanmar": ("mya",),
    "Tibetan": ("bod", "dzo"),
    "Georgian": ("kat", "kat_old"),
    "Armenian": ("hye",),
    "Ethiopic": ("amh", "tir"),
    "Syriac": ("syr",),
    "Thaana": ("div",),
    "Cherokee": ("chr",),
    "Canadian_Aboriginal": ("iku",),
}
# Script models (``script/Han``) of a script under another name.
_SCRIPT_MODELS = {"Han": ("HanS", "HanT", "Japanese"), "Hiragana": ("Japanese",),
                  "Katakana": ("Japanese",), "Korean": ("Hangul",), "Hangul": ("Hangul",),
                  "Japanese": ("Japanese",)}
_NOT_LATIN = frozenset(lang for langs in SCRIPTS.values() for lang in langs)


def _script_model(language: str) -> str | None:
    """``Cyrillic`` for ``script/Cyrillic``; None for a language."""
    return language.split("/", 1)[1] if language.startswith("script/") else None


def reads(language: str, script: str) -> bool:
    """Whether Tesseract's ``language`` reads ``script`` (OSD's name for it)."""
    model = _script_model(language)
    if script in (LATIN, "Fraktur"):
        return (model in (LATIN, "Fraktur", "Vietnamese") if model is not None
                else language not in _NOT_LATIN)
    if model is not None:
        return model == script or model in _SCRIPT_MODELS.get(script, ())
    return language in SCRIPTS.get(script, ())


def known(script: str) -> bool:
    """Whether ``script`` is one this table knows (OSD also says "Common", or nothing)."""
    return script in (LATIN, "Fraktur") or script in SCRIPTS


def unread(script: str, languages: Iterable[str]) -> bool:
    """Whether none of ``languages`` reads ``script``: a script this table does not know
    is never said to be unread."""
    return known(script) and not any(reads(lang, script) for lang in languages)


def readers(script: str) -> tuple[str, ...]:
    """The languages to suggest for ``script``, the most used first."""
    return ("eng",) if script in (LATIN, "Fraktur") else SCRIPTS.get(script, ())
