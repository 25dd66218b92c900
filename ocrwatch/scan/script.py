"""A page in a script the configured languages cannot read: a doubt that names the language.

Tesseract reads a page with the languages it is given, whatever the page holds: a
Cyrillic or Greek letter read with ``languages = ["eng"]`` comes out as Latin
look-alikes (``YBaxkaempii MBan IleTposuy4``) at a mean word confidence of 39-59%, most
over the 40% under which a reading is doubted. Tesseract's orientation detection (OSD), run
on every page that is turned upright, also names the script its characters look like
(:class:`ocrwatch.scan.osd.Found`); when that is one none of the languages reads
(:mod:`ocrwatch.config.scripts`), and the reading is unsure too, the page is a doubt: its
text is indexed as read, but its original is kept, and the reason names the language to
add.

OSD must be sure of both: its script confidence (how much more the characters look like
that script than the next one) at least ``SCRIPT_SURE``, and its turn confidence, which
is how much the page looks like print at all, at least ``TEXT_SURE``: on a page of a few
marks it named Devanagari at 2.2 and Cyrillic at 1.1, at turn confidences under 0.2. And
OSD alone is not enough: receipts drawn in DejaVu Sans Mono, English in capitals and
figures, looked Cyrillic to it (script confidences 1.9-3.1, turn 3.5-5.2, as sure as
for some Cyrillic letters), but Tesseract read them at a mean word confidence of 85-95%.
Cyrillic and Greek letters read with ``eng`` came out at 39-59%. So the doubt holds
only under ``READ_SURE`` (the engine's ``PageText.confidence``). Measured with
``benchmarks/script_doubts.py`` (``benchmarks/results/script_doubts.txt``): no doubt on
the corpus's pages fed four ways (92) nor on the held-out-style set's 45, and one on
each of 36 Cyrillic and Greek letters (six fonts, 10-12 pt, 150-300 dpi).

Engines that read with a model (vLLM, the remote engine) are not checked: a model reads
the page's own characters whatever ``languages`` says, and no look-alikes are made.
"""

from __future__ import annotations

from collections.abc import Sequence

from ocrwatch.config import scripts
from ocrwatch.scan.orient import Orientation

SCRIPT_SURE = 1.0  # OSD's script confidence from which a script is taken as the page's
TEXT_SURE = 2.0  # OSD's turn confidence from which the page is taken to hold print
READ_SURE = 70.0  # the mean word confidence (0-100) under which the reading confirms it
SUGGESTED = 3  # languages named in a message, the first as the one to add


def doubt(found: Orientation, languages: Sequence[str]) -> str | None:
    """Why a page OSD found to be in a script none of ``languages`` reads may not have
    been read, if its reading is unsure too (:func:`confirmed`); None when it is one of
    theirs, or OSD is not sure of it."""
    if (not found.script or found.script_confidence < SCRIPT_SURE
            or found.confidence < TEXT_SURE or not scripts.unread(found.script, languages)):
        return None
    return message(found.script, languages)


def confirmed(confidence: float | None) -> bool:
    """Whether a reading at this mean word confidence confirms a script's doubt: one in
    the page's own script reads surely; look-alikes do not. None (an engine that does not
    say): not confirmed."""
    return confidence is not None and confidence < READ_SURE


def message(script: str, languages: Sequence[str]) -> str:
    """``it looks Cyrillic, which languages = ["eng"] cannot read: add "rus" (or "ukr",
    "bul"...) to languages`` (said of a page: "page 2 may not have been read: it looks…")."""
    listed = ", ".join(f'"{lang}"' for lang in languages)
    first, *others = scripts.readers(script)
    add = f'"{first}"'
    if others:
        more = "..." if len(others) > SUGGESTED - 1 else ""
        add += " (or " + ", ".join(f'"{o}"' for o in others[:SUGGESTED - 1]) + more + ")"
    return (f"it looks {script.replace('_', ' ')}, which languages = [{listed}] "
            f"cannot read: add {add} to languages")
