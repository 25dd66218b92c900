"""PDF text layers: take a page's own text instead of reading its picture.

A born-digital page (a PDF made by a word processor, a browser's "print to PDF")
carries its exact text; OCR could only come close. Like OCRmyPDF's ``--skip-text``,
such a page is taken from its layer, but only after checking that the layer is real
text that a reader sees (``pdf_text = "auto"``). A layer is refused, and the page is
read with OCR, when:

- it holds almost nothing (a scan with a page number stamped on it);
- its characters are no text: control, private-use or replacement characters, what a
  font without a usable Unicode map gives (broken encoding);
- its words are no words: symbols inside words, random capitals (glyph soup);
- it cannot be seen: invisible text (an earlier OCR's layer) or text drawn over by
  an image, which may say something else;
- the page is mostly a picture, whose text the layer does not hold.

``pdf_text = "text"`` takes any layer that has text; ``"ocr"`` reads every page.
"""

from __future__ import annotations

import logging
import re
import string
import unicodedata
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

MIN_CHARS = 16  # non-space characters for a layer to count as the page's text
MAX_BAD_SHARE = 0.02  # control, private-use, unassigned or replacement characters
MIN_WORDLIKE_SHARE = 0.7  # share of tokens that look like words or numbers
MAX_HIDDEN_SHARE = 0.5  # text objects that are invisible or under an image
MAX_PICTURE_SHARE = 0.5  # page area covered by images, beyond which the picture rules
PICTURE_CAPTION_CHARS = 400  # ...unless the layer holds this much visible text
COVERED = 0.9  # an image covering this share of a text's box hides it

_BAD_CATEGORIES = frozenset({"Cc", "Co", "Cn", "Cs"})
_EDGE = string.punctuation + "«»„“”‘’‚‹›¡¿…–—·•§°"
_NUMBER = re.compile(r"[+-]?[\d.,:/%-]*\d[\d.,:/%-]*[a-zA-Z]{0,3}")
# Inside a word: hyphens, apostrophes, abbreviation dots; CJK text runs whole sentences
# together, so its punctuation joins too.
_JOINERS = re.compile(r"[-'’.·/。、，．・「」『』（）！？：；〜]")


@dataclass(frozen=True)
class Decision:
    """The page's text when its layer is taken, else None; and why, for the log."""

    text: str | None
    reason: str


def garbage(text: str) -> str | None:
    """Why ``text`` is not real text (broken encoding, glyph soup), or None if it is."""
    chars = [c for c in text if not c.isspace()]
    if not chars:
        return "no text"
    bad = sum(1 for c in chars if c == "\ufffd" or unicodedata.category(c) in _BAD_CATEGORIES)
    if bad / len(chars) > MAX_BAD_SHARE:
        return (f"broken encoding: {bad} of {len(chars)} characters are control, "
                "private-use or replacement characters")
    judged = [t for t in (tok.strip(_EDGE) for tok in text.split()) if t]
    if judged:
        wordlike = sum(1 for t in judged if _wordlike(t))
        if wordlike / len(judged) < MIN_WORDLIKE_SHARE:
            return f"glyph soup: {len(judged) - wordlike} of {len(judged)} words are no words"
    return None


def _wordlike(token: str) -> bool:
    if _NUMBER.fullmatch(token):
        return True
    parts = [p for p in _JOINERS.split(token) if p]
    if not parts or not all(p.isalpha() for p in parts):
        return False
    # Real words are lower case, Capitalised or UPPER CASE (scripts without case pass).
    return token == token.lower() or token == token.upper() or (
        token[0].isupper() and token[1:] == token[1:].lower())


def _area(box: tuple[float, float, float, float]) -> float:
    return max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    return _area((max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])))


def _visibility(page: Any) -> tuple[float, float]:
    """(share of text objects a reader cannot see, share of the page under images)."""
    import pypdfium2.raw as pdfium_c

    texts: list[tuple[tuple[float, float, float, float], bool]] = []  # box, hidden
    images: list[tuple[float, float, float, float]] = []
    for obj in page.get_objects(max_depth=4):
        kind = pdfium_c.FPDFPageObj_GetType(obj.raw)
        if kind not in (pdfium_c.FPDF_PAGEOBJ_TEXT, pdfium_c.FPDF_PAGEOBJ_IMAGE):
            continue
        box = tuple(float(v) for v in obj.get_bounds())
        assert len(box) == 4
        if kind == pdfium_c.FPDF_PAGEOBJ_TEXT:
            mode = pdfium_c.FPDFTextObj_GetTextRenderMode(obj.raw)
            invisible = mode in (pdfium_c.FPDF_TEXTRENDERMODE_INVISIBLE,
                                 pdfium_c.FPDF_TEXTRENDERMODE_CLIP)
            texts.append((box, invisible))
        else:
            images.append(box)
            # An image drawn after a text, over it, hides it (content order is z-order).
            texts = [(t, hidden or _overlap(t, box) >= COVERED * _area(t))
                     for t, hidden in texts]
    width, height = page.get_size()
    page_box = (0.0, 0.0, float(width), float(height))
    covered = min(1.0, sum(_overlap(i, page_box) for i in images) / max(_area(page_box), 1.0))
    hidden = sum(1 for _, h in texts if h) / len(texts) if texts else 0.0
    return hidden, covered


def decide(page: Any, mode: str = "auto") -> Decision:
    """Whether ``page`` (a pypdfium2 PdfPage) is taken from its text layer.

    Never raises for a bad layer: anything doubtful is read with OCR instead.
    """
    if mode == "ocr":
        return Decision(None, "pdf_text = ocr")
    try:
        textpage = page.get_textpage()
        try:
            raw = textpage.get_text_range()
        finally:
            textpage.close()
    except Exception as exc:  # a damaged layer is no reason to fail the page
        return Decision(None, f"its text layer cannot be read ({exc})")
    text = _tidy(raw)
    solid = sum(1 for c in text if not c.isspace())
    if mode == "text":
        return Decision(text, "pdf_text = text") if solid else Decision(None, "no text layer")
    if solid < MIN_CHARS:
        return Decision(None, "no text layer" if not solid else "almost no text in its layer")
    try:
        hidden, covered = _visibility(page)
    except Exception as exc:
        return Decision(None, f"its objects cannot be listed ({exc})")
    if hidden > MAX_HIDDEN_SHARE:
        return Decision(None, "its text is invisible or under an image (an earlier OCR "
                              "layer, or text that the page does not show)")
    if covered > MAX_PICTURE_SHARE and solid < PICTURE_CAPTION_CHARS:
        return Decision(None, "the page is mostly a picture")
    reason = garbage(text)
    if reason is not None:
        return Decision(None, reason)
    return Decision(text, "its text layer")


def _tidy(raw: str) -> str:
    """PDFium's text as plain text: its CR LF line ends as LF, no NUL or trailing space."""
    text = raw.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    # PDFium reports a hyphen that ends a line as U+FFFE (U+0002 in older builds) and
    # joins the next line to it: the page shows a hyphen and a line break there.
    text = re.sub("[\ufffe\x02]\n?", "-\n", text)
    return "\n".join(line.rstrip() for line in text.split("\n")).strip() + "\n"
