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
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ocrwatch.core.errors import OverBudget
from ocrwatch.pages.budget import Budget, unlimited
from ocrwatch.pages.pdfdraw import MAX_DEPTH, draw, text_hidden

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
# A dense broadsheet page holds about 100,000 characters: a layer beyond this is no page's
# text, and checking it would take longer than reading the page.
MAX_LAYER_CHARS = 300_000
# What PDFium keeps per character of a page's text (measured: 1.6 GB for 10.2 million
# characters); a page's content streams bound its characters, so this is the memory its
# text may need, known before PDFium builds it.
TEXTPAGE_BYTES_PER_CHAR = 170
# Images over this share of the page may be scans of text beside the layer's text: the
# page is read with OCR, so that their words are read too (a logo or a small photo,
# under it, leaves the layer in charge).
MAX_SCAN_SHARE = 0.2
# A picture that may hold words: at least this many points a side and this area (a
# signature mark, a logo, a stamp; not a bullet or a rule).
MIN_PICTURE_SIDE = 10.0
MIN_PICTURE_AREA = 300.0  # about a twentieth of a square inch
# Curves that may be text drawn as outlines: a word is tens of Bezier segments, a
# rounded box or a pie chart a handful.
MIN_OUTLINE_CURVES = 150

_BAD_CATEGORIES = frozenset({"Cc", "Co", "Cn", "Cs"})
_EDGE = string.punctuation + "«»„“”‘’‚‹›¡¿…–—·•§°"
_NUMBER = re.compile(r"[+-]?[\d.,:/%-]*\d[\d.,:/%-]*[a-zA-Z]{0,3}")
# Inside a word: hyphens, apostrophes, abbreviation dots; CJK text runs whole sentences
# together, so its punctuation joins too.
_JOINERS = re.compile(r"[-'’.·/。、，．・「」『』（）！？：；〜]")


@dataclass(frozen=True)
class Decision:
    """The page's text when its layer is taken, else None; and why, for the log.

    ``pictures``: why the page is also drawn without its text and read by the engine
    (pictures or outlines that may hold words, a layer too short to be the whole page),
    its layer's lines then given as ``lines`` (top as a share of the page's height,
    text) to merge with the engine's; None when the layer is the whole page.
    """

    text: str | None
    reason: str
    pictures: str | None = None
    lines: tuple[tuple[float, str], ...] = ()


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


def _hidden_share(page: Any, textpage: Any, budget: Budget, where: str) -> float:
    """The share of the layer's characters that change nothing on the drawn page.

    The page is drawn as it is and with every text object made invisible; a run of
    characters is seen when its box differs between the two. The text objects' render
    modes are put back as they were, so the page draws as before for OCR.

    One pass over the characters: each run (one text object on one line, as PDFium's own
    text rectangles) is looked at once. PDFium's per-rectangle look-ups scan every
    character of the page, which made this quadratic (10 MB of text: hours).
    """
    import ctypes

    import pypdfium2.raw as pdfium_c
    from PIL import ImageChops

    width, height = page.get_size()
    # At most SEEN_PIXELS drawn, however large the page (a poster's letters are large).
    scale = min(SEEN_SCALE, (SEEN_PIXELS / max(float(width) * float(height), 1.0)) ** 0.5)
    shown = draw(page, scale, budget, where, grayscale=True)
    with text_hidden(page, budget, where):
        bare = draw(page, scale, budget, where, grayscale=True)
    ink = ImageChops.difference(shown, bare).point(lambda v: 255 if v > SEEN_LEVEL else 0)
    page_height = float(height)
    tp = textpage.raw
    left, right, bottom, top = (ctypes.c_double() for _ in range(4))
    loose = pdfium_c.FS_RECTF()
    seen = hidden = 0

    def judge(run: list[Any]) -> None:
        nonlocal seen, hidden
        _obj, first, x0, y0, x1, y1, chars = run
        box = (max(int(x0 * scale) - 1, 0), max(int((page_height - y1) * scale) - 1, 0),
               min(int(x1 * scale) + 2, ink.width),
               min(int((page_height - y0) * scale) + 2, ink.height))
        # The font's line height (its loose box): a full stop's own box is tiny in any
        # size of print.
        size = (loose.top - loose.bottom
                if pdfium_c.FPDFText_GetLooseCharBox(tp, first, loose) else y1 - y0)
        if (size >= MIN_SIZE and box[2] > box[0] and box[3] > box[1]
                and ink.crop(box).getbbox() is not None):
            seen += chars
        else:
            hidden += chars  # nothing drawn there, or a speck of ink no one can read

    run: list[Any] | None = None  # text object, first index, x0, y0, x1, y1, characters
    for index in range(pdfium_c.FPDFText_CountChars(tp)):
        if index % 4096 == 0:
            budget.check(where, "checking its text layer")
        code = pdfium_c.FPDFText_GetUnicode(tp, index)
        if code == 0 or chr(code).isspace() or pdfium_c.FPDFText_IsGenerated(tp, index) == 1:
            continue
        obj = ctypes.cast(pdfium_c.FPDFText_GetTextObject(tp, index), ctypes.c_void_p).value
        pdfium_c.FPDFText_GetCharBox(tp, index, left, right, bottom, top)
        x0, x1, y0, y1 = left.value, right.value, bottom.value, top.value
        # The same object on the same line (the boxes overlap in height) extends the run.
        if run is not None and run[0] == obj and y0 < run[5] and y1 > run[3]:
            run[2], run[3] = min(run[2], x0), min(run[3], y0)
            run[4], run[5] = max(run[4], x1), max(run[5], y1)
            run[6] += 1
            continue
        if run is not None:
            judge(run)
        run = [obj, index, x0, y0, x1, y1, 1]
    if run is not None:
        judge(run)
    return hidden / (seen + hidden) if seen + hidden else 0.0


_DO = re.compile(rb"/([^\s/\[\]()<>{}%]+)\s*Do\b")
_CHUNK = 1 << 20


def content_size(page: Any, limit: int) -> int:
    """The bytes of a page's content streams, each form it draws counted once per use:
    an upper bound on the characters of its text (each needs a byte of a string), known
    without PDFium building the text. ``page`` is a pikepdf Page. Counting stops once
    past ``limit``; a deflate stream is measured in pieces, never held decoded whole.
    """
    import pikepdf

    memo: dict[tuple[int, int], int] = {}

    def stream_size(stream: Any, resources: Any, depth: int) -> int:
        key = stream.objgen
        if key != (0, 0) and key in memo:
            return memo[key]
        if depth > 12:
            return limit + 1  # forms nested this deep: no page of text
        memo[key] = limit + 1  # a form that draws itself counts as too much
        uses: dict[bytes, int] = {}
        total = 0
        tail = b""
        for piece in stream_pieces(stream, pikepdf):
            data = tail + piece
            for match in _DO.finditer(data):
                if match.end() > len(tail):  # not counted with the piece before
                    uses[match[1]] = uses.get(match[1], 0) + 1
            tail = data[-64:]
            total += len(piece)
            if total > limit:
                break
        forms = resources.get("/XObject") if resources is not None else None
        if forms is not None:
            for name, count in uses.items():
                form = forms.get("/" + name.decode("latin-1"))
                if (total > limit or not isinstance(form, pikepdf.Stream)
                        or form.get("/Subtype") != pikepdf.Name.Form):
                    continue
                total += count * stream_size(form, form.get("/Resources", resources),
                                             depth + 1)
        memo[key] = total
        return total

    contents = page.obj.get("/Contents")
    streams = ([contents] if isinstance(contents, pikepdf.Stream)
               else list(contents) if isinstance(contents, pikepdf.Array) else [])
    resources = page.obj.get("/Resources")
    total = 0
    for stream in streams:
        if isinstance(stream, pikepdf.Stream) and total <= limit:
            total += stream_size(stream, resources, 0)
    return total


def stream_pieces(stream: Any, pikepdf: Any) -> Iterator[bytes]:
    """A stream's decoded bytes in pieces of at most a megabyte, never held decoded whole
    when it is deflated (a Flate bomb stays a few megabytes)."""
    import zlib

    filters = stream.get("/Filter")
    if filters == pikepdf.Name.FlateDecode and stream.get("/DecodeParms") is None:
        inflate = zlib.decompressobj()
        data = stream.read_raw_bytes()
        while data:
            try:
                piece = inflate.decompress(data, _CHUNK)
            except zlib.error:
                return
            if not piece:
                return
            yield piece
            data = inflate.unconsumed_tail
        return
    try:
        whole = stream.read_bytes()
    except pikepdf.PikepdfError:
        return
    for start in range(0, len(whole), _CHUNK):
        yield whole[start:start + _CHUNK]


def _picture_share(page: Any) -> float:
    """The share of the page under images."""
    import pypdfium2.raw as pdfium_c

    images = [tuple(float(v) for v in obj.get_bounds())
              for obj in page.get_objects(max_depth=MAX_DEPTH)
              if pdfium_c.FPDFPageObj_GetType(obj.raw) == pdfium_c.FPDF_PAGEOBJ_IMAGE]
    width, height = page.get_size()
    page_box = (0.0, 0.0, float(width), float(height))
    return min(1.0, sum(_overlap((i[0], i[1], i[2], i[3]), page_box) for i in images)
               / max(_area(page_box), 1.0))


def pictures(page: Any, budget: Budget, where: str) -> str | None:
    """Why ``page`` may hold words that its text layer lacks: an image large enough to
    hold a word (at any depth of forms), or enough curves to be text drawn as outlines;
    None when it holds neither."""
    import pypdfium2.raw as pdfium_c

    width, height = page.get_size()
    page_box = (0.0, 0.0, float(width), float(height))
    curves = 0
    for n, obj in enumerate(page.get_objects(max_depth=MAX_DEPTH)):
        if n % 1024 == 0:
            budget.check(where, "looking for its pictures")
        kind = pdfium_c.FPDFPageObj_GetType(obj.raw)
        if kind == pdfium_c.FPDF_PAGEOBJ_IMAGE:
            x0, y0, x1, y1 = (float(v) for v in obj.get_bounds())
            box = (max(x0, 0.0), max(y0, 0.0), min(x1, page_box[2]), min(y1, page_box[3]))
            if (box[2] - box[0] >= MIN_PICTURE_SIDE and box[3] - box[1] >= MIN_PICTURE_SIDE
                    and _area(box) >= MIN_PICTURE_AREA):
                return (f"an image of {(box[2] - box[0]) / 72:.2g} x "
                        f"{(box[3] - box[1]) / 72:.2g} inches")
        elif kind == pdfium_c.FPDF_PAGEOBJ_PATH and curves < MIN_OUTLINE_CURVES:
            for index in range(pdfium_c.FPDFPath_CountSegments(obj.raw)):
                segment = pdfium_c.FPDFPath_GetPathSegment(obj.raw, index)
                if pdfium_c.FPDFPathSegment_GetType(segment) == pdfium_c.FPDF_SEGMENT_BEZIERTO:
                    curves += 1
                if index % 4096 == 4095:
                    budget.check(where, "looking for its pictures")
    if curves >= MIN_OUTLINE_CURVES:
        return f"shapes of {curves}+ curves (text drawn as outlines?)"
    return None


def image_dpi(page: Any, at_least: float = 0.1, budget: Budget | None = None,
              where: str = "the page") -> float | None:
    """The resolution of the sharpest image covering at least ``at_least`` of the page
    (its pixels over the inches it is drawn on), or None when none does: a page is
    drawn at its scan's resolution, as OCRmyPDF does, not below it."""
    import pypdfium2.raw as pdfium_c

    width, height = page.get_size()
    page_area = max(float(width) * float(height), 1.0)
    best: float | None = None
    budget = budget or unlimited()
    for n, obj in enumerate(page.get_objects(max_depth=MAX_DEPTH)):
        if n % 1024 == 0:
            budget.check(where, "looking for its scan")
        if pdfium_c.FPDFPageObj_GetType(obj.raw) != pdfium_c.FPDF_PAGEOBJ_IMAGE:
            continue
        x0, y0, x1, y1 = (float(v) for v in obj.get_bounds())
        if (x1 - x0) * (y1 - y0) < at_least * page_area or x1 <= x0 or y1 <= y0:
            continue
        pixels_w, pixels_h = _pixel_size(obj)
        if not pixels_w or not pixels_h:
            continue
        # The image may be turned: its longer side on the box's longer side.
        dpi = min(max(pixels_w, pixels_h) / (max(x1 - x0, y1 - y0) / 72),
                  min(pixels_w, pixels_h) / (min(x1 - x0, y1 - y0) / 72))
        best = dpi if best is None else max(best, dpi)
    return best


def _pixel_size(obj: Any) -> tuple[int, int]:
    """An image object's pixels (width, height), as its stream declares them."""
    import ctypes

    import pypdfium2.raw as pdfium_c

    w, h = ctypes.c_uint(), ctypes.c_uint()
    if not pdfium_c.FPDFImageObj_GetImagePixelSize(obj.raw, w, h):
        return 0, 0
    return int(w.value), int(h.value)


def layer_lines(textpage: Any, page_height: float, budget: Budget,
                where: str) -> tuple[tuple[float, str], ...]:
    """The layer's lines as PDFium orders them, each with its top (a share of the page's
    height, from the top): one pass over the characters."""
    import ctypes

    import pypdfium2.raw as pdfium_c

    tp = textpage.raw
    left, right, bottom, top = (ctypes.c_double() for _ in range(4))
    lines: list[tuple[float, str]] = []
    chars: list[str] = []
    highest: float | None = None

    def flush() -> None:
        nonlocal highest
        text = _tidy("".join(chars)).strip()
        if text:
            where_top = 1.0 if highest is None or page_height <= 0 else \
                min(1.0, max(0.0, 1.0 - highest / page_height))
            lines.append((where_top, text))
        chars.clear()
        highest = None

    for index in range(pdfium_c.FPDFText_CountChars(tp)):
        if index % 4096 == 0:
            budget.check(where, "checking its text layer")
        code = pdfium_c.FPDFText_GetUnicode(tp, index)
        if code in (10, 13):
            if code == 10:
                flush()
            continue
        chars.append(chr(code))
        if chr(code).isspace() or pdfium_c.FPDFText_IsGenerated(tp, index) == 1:
            continue
        if pdfium_c.FPDFText_GetCharBox(tp, index, left, right, bottom, top):
            highest = top.value if highest is None else max(highest, top.value)
    flush()
    return tuple(lines)


def decide(page: Any, mode: str = "auto", *, content: int | None = None,
           budget: Budget | None = None, where: str = "the page",
           marks: str | None = None) -> Decision:
    """Whether ``page`` (a pypdfium2 PdfPage) is taken from its text layer.

    ``content``: the bytes of the page's content streams (see :func:`content_size`), an
    upper bound on its characters. ``marks``: why its annotations may hold words (a
    stamp, ink), read with its pictures. Never raises for a bad layer: anything doubtful
    is read with OCR instead. Raises OverBudget when checking it takes too long.
    """
    if mode == "ocr":
        return Decision(None, "pdf_text = ocr")
    budget = budget or unlimited()
    if content is not None and content * TEXTPAGE_BYTES_PER_CHAR > budget.memory:
        # PDFium's text of such a page could take gigabytes: the layer is not looked at.
        return Decision(None, "its content cannot be measured" if content >= 1 << 62
                        else f"its content is {content / 1e6:.1f} MB, too much text to "
                             "check within prepare_memory_mb")
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
        if not solid:
            return Decision(None, "no text layer")
        if solid > MAX_LAYER_CHARS:
            return Decision(None, f"its layer holds {solid} characters, more than a page "
                                  f"shows (at most {MAX_LAYER_CHARS})")
        reason = garbage(text)  # the cheaper check first
        if reason is not None:
            return Decision(None, reason)
        try:
            hidden = _hidden_share(page, textpage, budget, where)
            covered = _picture_share(page) if solid >= MIN_CHARS else 0.0
        except OverBudget:
            raise
        except Exception as exc:
            return Decision(None, f"its objects cannot be listed ({exc})")
        if hidden > MAX_HIDDEN_SHARE:
            return Decision(None, f"{hidden:.0%} of its text does not show on the page "
                                  "(invisible, covered, clipped, off the page or under 2 pt: "
                                  "an earlier OCR layer, or text that says what the page "
                                  "does not)")
        if solid < MIN_CHARS:
            # A heading, a page number stamped on a scan: real text, but maybe not the
            # whole page. It is kept; the rest of the page is read with OCR beside it.
            return Decision(None, "almost no text in its layer: kept, and the rest of the "
                                  "page read with OCR",
                            pictures="a text layer too short to be the whole page",
                            lines=_lines(textpage, page, text, budget, where))
        if covered > MAX_PICTURE_SHARE and solid < PICTURE_CAPTION_CHARS:
            return Decision(None, "the page is mostly a picture")
        if covered > MAX_SCAN_SHARE:
            return Decision(None, f"an image covers {covered:.0%} of the page: its words "
                                  "are read with OCR, with the rest")
        try:
            why = pictures(page, budget, where) or marks
        except OverBudget:
            raise
        except Exception as exc:
            why = f"its objects cannot be listed ({exc})"
        if why is not None:
            # Words in a picture (a pasted scan, a stamp, a map) are not in the layer.
            return Decision(text, "its text layer", pictures=why,
                            lines=_lines(textpage, page, text, budget, where))
    finally:
        textpage.close()
    return Decision(text, "its text layer")


def _lines(textpage: Any, page: Any, text: str, budget: Budget,
           where: str) -> tuple[tuple[float, str], ...]:
    """The layer's lines with their places; when PDFium cannot give the places, the
    whole ``text`` as one block at the top (never lost)."""
    try:
        return layer_lines(textpage, float(page.get_height()), budget, where) \
            or ((0.0, text),)
    except OverBudget:
        raise
    except Exception as exc:
        log.debug("%s: its text layer's lines cannot be placed (%s)", where, exc)
        return ((0.0, text),)


def _tidy(raw: str) -> str:
    """PDFium's text as plain text: its CR LF line ends as LF, no NUL or trailing space."""
    text = raw.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    # PDFium reports a hyphen that ends a line as U+FFFE (U+0002 in older builds) and
    # joins the next line to it: the page shows a hyphen and a line break there.
    text = re.sub("[\ufffe\x02]\n?", "-\n", text)
    return "\n".join(line.rstrip() for line in text.split("\n")).strip() + "\n"
