"""The sidecars' names: ``STEM.md``, ``STEM.txt``, ``STEM.ocr.pdf``, ``STEM.hocr`` and
``STEM.alto.xml`` beside (or for)
each original, a stem nobody else holds, shortened where a file system's name limit needs
it. Used by the queue (which reserves the names) and by the writers of the sidecars."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

MD_SUFFIX = ".md"
TXT_SUFFIX = ".txt"
PDF_SUFFIX = ".ocr.pdf"
HOCR_SUFFIX = ".hocr"
ALTO_SUFFIX = ".alto.xml"
# Every output a file may get, as ``outputs`` spells them, and its file suffix: the one
# table of names (ocrwatch/results/formats.py registers how each is made). The config's
# check, the hook placeholders ({md}, {alto}...), the hook journal and the queue's
# reserved names follow it; it lives here, below them all, because the config and the
# store may not import the results.
SUFFIXES: dict[str, str] = {"md": MD_SUFFIX, "txt": TXT_SUFFIX, "pdf": PDF_SUFFIX,
                            "hocr": HOCR_SUFFIX, "alto": ALTO_SUFFIX}
OUTPUT_NAMES = tuple(SUFFIXES)
# Outputs named like the PDF: shortened on their own when the stem is long.
_LONG_SUFFIXES = tuple(s for s in SUFFIXES.values() if s not in (MD_SUFFIX, TXT_SUFFIX))
NAME_MAX = 255  # bytes in a file name on Linux's file systems (ext4, btrfs, xfs, tmpfs)
_HASH = 12  # hex digits of the whole name's SHA-256 kept in a shortened name


def _shorten(name: str, room: int) -> str:
    """``name``, or, past ``room`` bytes, its beginning, ``~`` and a hash of the whole:
    still recognisable, and as unique as the whole name."""
    raw = os.fsencode(name)
    if len(raw) <= room:
        return name
    digest = hashlib.sha256(raw).hexdigest()[:_HASH]
    keep = raw[:room - _HASH - 1]
    while keep and keep[-1] & 0xC0 == 0x80:  # never cut a UTF-8 character in two
        keep = keep[:-1]
    if keep and keep[-1] >= 0xC0:
        keep = keep[:-1]
    return os.fsdecode(keep) + "~" + digest


def fitting(stem: str) -> str:
    """``stem``, shortened (:func:`_shorten`) when ``STEM.txt`` would be longer than a
    file name may be."""
    return _shorten(stem, NAME_MAX - max(len(MD_SUFFIX), len(TXT_SUFFIX)))


def choose_stem(source: Path, folder: Path, others: set[Path], own: set[Path]) -> Path:
    """``folder/STEM`` for the sidecars, unless that name belongs to someone else.

    ``scan.jpg`` and ``scan.pdf`` side by side get ``scan.md`` and ``scan.pdf.md``: the
    first keeps the short name, the other falls back to its full name. A file ocrwatch
    did not write (the user's own ``scan.md``) is never overwritten either. A name too
    long for its sidecars' suffixes is shortened (:func:`fitting`, :func:`pdf_path`).
    """

    def free(stem: str) -> bool:
        mine = folder / (stem + MD_SUFFIX) in own  # then its PDF, hOCR, ALTO are ours too
        for suffix in (MD_SUFFIX, TXT_SUFFIX, *_LONG_SUFFIXES):
            path = (suffixed(folder / stem, suffix) if suffix in _LONG_SUFFIXES
                    else folder / (stem + suffix))
            ours = path in own or (suffix in _LONG_SUFFIXES and mine)
            if path in others or (not ours and os.path.lexists(path)):
                return False
        return True

    for stem in (fitting(source.stem), fitting(source.name)):
        if free(stem):
            return folder / stem
    n = 2
    while not free(fitting(f"{source.name}.{n}")):
        n += 1
    return folder / fitting(f"{source.name}.{n}")


def sidecar_paths(stem: Path) -> tuple[Path, Path]:
    """``STEM.md`` and ``STEM.txt``."""
    return stem.with_name(stem.name + MD_SUFFIX), stem.with_name(stem.name + TXT_SUFFIX)


def output_path(stem: Path, name: str) -> Path:
    """Where the output ``name`` (:data:`SUFFIXES`) of ``stem`` goes."""
    suffix = SUFFIXES[name]
    if suffix in _LONG_SUFFIXES:
        return suffixed(stem, suffix)
    return stem.with_name(stem.name + suffix)


def output_paths(stem: Path, names: Iterable[str]) -> dict[str, Path]:
    """Where each of ``names`` goes for ``stem`` (names not in :data:`SUFFIXES` left out)."""
    return {n: output_path(stem, n) for n in names if n in SUFFIXES}


def pdf_path(stem: Path) -> Path:
    """``STEM.ocr.pdf``; for a stem so long that this would pass 255 bytes (a 250-byte
    ``invoice.scan.png``: the whole file failed), the stem shortened (:func:`_shorten`)."""
    return suffixed(stem, PDF_SUFFIX)


def suffixed(stem: Path, suffix: str) -> Path:
    """``STEM`` + ``suffix``, the stem shortened as :func:`pdf_path` does when needed."""
    return stem.with_name(_shorten(stem.name, NAME_MAX - len(suffix)) + suffix)
