"""Which languages Tesseract reads: what is installed, and the default.

The default is English plus the desktop's own language (from the locale: ``LC_ALL``,
``LC_MESSAGES``, ``LANG``) when Tesseract has data for it; when it has none, ``status``
and ``doctor`` say which package would add it.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from ocrwatch.core.errors import EngineUnavailable
from ocrwatch.fs import paths


@functools.cache
def tesseract_names() -> dict[str, str]:
    """Locale language (``de``, ``zh_TW``) to Tesseract's data name (``deu``, ``chi_tra``).

    Tesseract names its data after ISO 639-2/3 with its own exceptions (chi_sim,
    chi_tra), so a table of its names, shipped as data, is the reliable source.
    """
    text = resources.files("ocrwatch").joinpath("data", "tesseract-languages.txt").read_text(
        encoding="utf-8")
    pairs = (line.split() for line in text.splitlines() if line.strip()
             and not line.startswith("#"))
    return {locale: name for locale, name in pairs}


def tessdata_dirs(explicit: Path | None = None) -> list[Path]:
    """Folders that may hold ``*.traineddata``, most specific first."""
    found: list[Path] = []
    if explicit is not None:
        found.append(explicit)
    if os.environ.get("TESSDATA_PREFIX"):
        found.append(Path(os.environ["TESSDATA_PREFIX"]))
    found += [
        Path(sys.prefix) / "share" / "tessdata",  # the tessdata.fast-* wheels
        Path("/usr/share/tesseract-ocr/5/tessdata"),
        Path("/usr/share/tesseract-ocr/4.00/tessdata"),
        Path("/usr/share/tessdata"),
        Path("/usr/local/share/tessdata"),
        Path("/opt/homebrew/share/tessdata"),
    ]
    return [d for d in found if d.is_dir()]


def available_languages(explicit: Path | None = None) -> dict[str, Path]:
    """Every installed language and the file that holds it (first folder wins)."""
    langs: dict[str, Path] = {}
    for folder in tessdata_dirs(explicit):
        for f in sorted(folder.glob("*.traineddata")):
            langs.setdefault(f.name.removesuffix(".traineddata"), f)
    return langs


def desktop_locale(environ: Mapping[str, str] | None = None) -> str | None:
    """The locale the desktop speaks, e.g. ``de_DE``; None for C/POSIX or none set."""
    env = os.environ if environ is None else environ
    for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = env.get(var, "").split(".")[0].split("@")[0]
        if value:
            return None if value in ("C", "POSIX") else value
    return None


def locale_language(environ: Mapping[str, str] | None = None) -> str | None:
    """Tesseract's name for the desktop's language (``deu`` for ``de_DE.UTF-8``)."""
    loc = desktop_locale(environ)
    if loc is None:
        return None
    names = tesseract_names()
    return names.get(loc) or names.get(loc.split("_")[0])


def default_languages(environ: Mapping[str, str] | None = None,
                      have: Mapping[str, Path] | None = None) -> list[str]:
    """English, and the desktop's language when Tesseract has data for it."""
    lang = locale_language(environ)
    if lang is None or lang == "eng":
        return ["eng"]
    installed = available_languages() if have is None else have
    return ["eng", lang] if lang in installed else ["eng"]


def locale_note(languages: list[str], environ: Mapping[str, str] | None = None,
                have: Mapping[str, Path] | None = None) -> str | None:
    """What to say when the desktop's language is left out for want of data."""
    lang = locale_language(environ)
    if lang is None or lang in languages:
        return None
    installed = available_languages() if have is None else have
    if lang in installed:
        return None  # left out on purpose: `languages` was set without it
    package = "tesseract-ocr-" + lang.replace("_", "-").lower()
    return (f"the desktop's language ({desktop_locale(environ)}) is not read: Tesseract "
            f"has no data for {lang}; install it (Debian/Ubuntu: sudo apt install {package}; "
            "macOS: brew install tesseract-lang) to read it too")


def prepare_tessdata(languages: list[str], explicit: Path | None = None) -> Path:
    """One folder with every wanted language, linked from wherever each is installed.

    English may come from a pip wheel and French from the system's packages; Tesseract
    takes a single folder, so ocrwatch links them side by side in its cache. Here, below
    the engines, because the page checks' Tesseract (orientation) needs it too.
    """
    have = available_languages(explicit)
    missing = [lang for lang in languages if lang not in have]
    if missing:
        hint = " ".join(f"tesseract-ocr-{m.replace('_', '-').lower()}" for m in missing)
        raise EngineUnavailable(
            f"Tesseract has no data for {', '.join(missing)}. Install it (Debian/Ubuntu: "
            f"`sudo apt install {hint}`; macOS: `brew install tesseract-lang`), point "
            "`tessdata` in the config at a folder holding "
            f"{', '.join(m + '.traineddata' for m in missing)}, or change `languages`. "
            f"Installed: {', '.join(sorted(have)) or 'none'}."
        )
    folders = {have[lang].parent for lang in languages}
    if len(folders) == 1:
        return folders.pop()
    merged = paths.data_dir() / "tessdata"
    merged.mkdir(parents=True, exist_ok=True)
    for lang in [*languages, "osd"]:
        if lang not in have:
            continue
        link = merged / f"{lang}.traineddata"
        if link.is_symlink() or link.exists():
            if link.resolve() == have[lang].resolve():
                continue
            link.unlink()
        link.symlink_to(have[lang])
    return merged
