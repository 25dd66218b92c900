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
- it cannot be seen: more than a few of its characters change nothing on the drawn
  page. The page is drawn with and without its text; a character whose box is the
  same in both is hidden, whatever hides it: an invisible render mode (an earlier OCR's
  layer), white on white, an image or a filled shape drawn over it, a clip, a place
  off the page or a size too small to read. Such text may say anything;
- the page is mostly a picture, whose text the layer does not hold;
- a picture covers a large share of it (``MAX_SCAN_SHARE``): a scan pasted beside real
  text holds words the layer does not, and OCR reads the whole page, both.

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
MAX_HIDDEN_SHARE = 0.02  # characters that change nothing on the drawn page
SEEN_SCALE = 0.5  # the page drawn at 36 dpi to see which characters show
SEEN_PIXELS = 2_000_000  # ...or less, for a page larger than an A0 sheet
SEEN_LEVEL = 16  # a grey level difference that counts as ink (of 255)
MIN_SIZE = 2.0  # points: a font's line height below which no one reads it
MAX_PICTURE_SHARE = 0.5  # page area covered by images, beyond which the picture rules
PICTURE_CAPTION_CHARS = 400  # ...unless the layer holds this much visible text
# Images over this share of the page may be scans of text beside the layer's text: the
# page is read with OCR, so that their words are read too (a logo or a small photo,
# under it, leaves the layer in charge).
MAX_SCAN_SHARE = 0.2

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


def _hidden_share(page: Any, textpage: Any) -> float:
    """The share of the layer's characters that change nothing on the drawn page.

    The page is drawn as it is and with every text object made invisible; a run of
    characters is seen when its box differs between the two. The text objects' render modes are
    put back as they were, so the page draws as before for OCR.
    """
    import pypdfium2.raw as pdfium_c
    from PIL import ImageChops

    width, height = page.get_size()
    # At most SEEN_PIXELS drawn, however large the page (a poster's letters are large).
    scale = min(SEEN_SCALE, (SEEN_PIXELS / max(float(width) * float(height), 1.0)) ** 0.5)
    shown = page.render(scale=scale, grayscale=True).to_pil()
    modes = []
    try:
        for obj in page.get_objects(max_depth=4):
            if pdfium_c.FPDFPageObj_GetType(obj.raw) == pdfium_c.FPDF_PAGEOBJ_TEXT:
                modes.append((obj, pdfium_c.FPDFTextObj_GetTextRenderMode(obj.raw)))
                pdfium_c.FPDFTextObj_SetTextRenderMode(
                    obj.raw, pdfium_c.FPDF_TEXTRENDERMODE_INVISIBLE)
        bare = page.render(scale=scale, grayscale=True).to_pil()
    finally:
        for obj, mode in modes:
            pdfium_c.FPDFTextObj_SetTextRenderMode(obj.raw, mode)
    ink = ImageChops.difference(shown, bare).point(lambda v: 255 if v > SEEN_LEVEL else 0)
    height = float(height)
    seen = hidden = 0
    # PDFium's text rectangles: one per run of characters of one text object on one line,
    # so text hidden any way is a rectangle of its own; each counts for its characters.
    for index in range(textpage.count_rects()):
        left, bottom, right, top = textpage.get_rect(index)
        chars = sum(1 for c in textpage.get_text_bounded(left, bottom, right, top)
                    if not c.isspace())
        box = (max(int(left * scale) - 1, 0), max(int((height - top) * scale) - 1, 0),
               min(int(right * scale) + 2, ink.width),
               min(int((height - bottom) * scale) + 2, ink.height))
        if (_line_height(textpage, left, bottom, right, top) >= MIN_SIZE
                and box[2] > box[0] and box[3] > box[1] and ink.crop(box).getbbox() is not None):
            seen += chars
        else:
            hidden += chars  # nothing drawn there, or a speck of ink no one can read
    return hidden / (seen + hidden) if seen + hidden else 0.0


def _line_height(textpage: Any, left: float, bottom: float, right: float, top: float) -> float:
    """The font's line height (its loose box) at a rectangle of text, in points: a full
    stop's own box is tiny in any size of print."""
    index = textpage.get_index((left + right) / 2, (bottom + top) / 2,
                               (right - left) / 2 + 1, (top - bottom) / 2 + 1)
    if index is None or index < 0:
        return float(top - bottom)
    loose = textpage.get_charbox(index, loose=True)
    return float(loose[3] - loose[1])


def _picture_share(page: Any) -> float:
    """The share of the page under images."""
    import pypdfium2.raw as pdfium_c

    images = [tuple(float(v) for v in obj.get_bounds())
              for obj in page.get_objects(max_depth=4)
              if pdfium_c.FPDFPageObj_GetType(obj.raw) == pdfium_c.FPDF_PAGEOBJ_IMAGE]
    width, height = page.get_size()
    page_box = (0.0, 0.0, float(width), float(height))
    return min(1.0, sum(_overlap((i[0], i[1], i[2], i[3]), page_box) for i in images)
               / max(_area(page_box), 1.0))


def decide(page: Any, mode: str = "auto") -> Decision:
    """Whether ``page`` (a pypdfium2 PdfPage) is taken from its text layer.

    Never raises for a bad layer: anything doubtful is read with OCR instead.
    """
    if mode == "ocr":
        return Decision(None, "pdf_text = ocr")
    try:
        textpage = page.get_textpage()
    except Exception as exc:  # a damaged layer is no reason to fail the page
        return Decision(None, f"its text layer cannot be read ({exc})")
    try:
        try:
            raw = textpage.get_text_range()
        except Exception as exc:
            return Decision(None, f"its text layer cannot be read ({exc})")
        text = _tidy(raw)
        solid = sum(1 for c in text if not c.isspace())
        if mode == "text":
            return (Decision(text, "pdf_text = text") if solid
                    else Decision(None, "no text layer"))
        if solid < MIN_CHARS:
            return Decision(None, "no text layer" if not solid
                            else "almost no text in its layer")
        try:
            hidden = _hidden_share(page, textpage)
            covered = _picture_share(page)
        except Exception as exc:
            return Decision(None, f"its objects cannot be listed ({exc})")
    finally:
        textpage.close()
    if hidden > MAX_HIDDEN_SHARE:
        return Decision(None, f"{hidden:.0%} of its text does not show on the page "
                              "(invisible, covered, clipped, off the page or under 2 pt: an "
                              "earlier OCR layer, or text that says what the page does not)")
    if covered > MAX_PICTURE_SHARE and solid < PICTURE_CAPTION_CHARS:
        return Decision(None, "the page is mostly a picture")
    if covered > MAX_SCAN_SHARE:
        return Decision(None, f"an image covers {covered:.0%} of the page: its words are "
                              "read with OCR, with the rest")
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
