"""The CPU engine: Tesseract through tesserocr, one page per core.

Tesseract's own OpenMP threads make it several times slower on few cores, so each
page runs single-threaded (``OMP_THREAD_LIMIT=1``) and pages run side by side, one
Tesseract instance per daemon thread (tesserocr releases the GIL while it reads).
"""

from __future__ import annotations

import os

# Must be set before Tesseract's library is loaded to take effect.
os.environ.setdefault("OMP_THREAD_LIMIT", "1")

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from PIL import Image, ImageChops

from ocrwatch.config import Config
from ocrwatch.config.languages import (
    available_languages,
    prepare_tessdata,
    tessdata_dirs,
)
from ocrwatch.core.domain import Page, PageText
from ocrwatch.core.errors import EngineUnavailable
from ocrwatch.core.layout import Box, PageLayout, Word
from ocrwatch.core.textutil import text_to_markdown
from ocrwatch.core.wordlike import mostly_nonwords, nonword_chars, wordlike_share
from ocrwatch.engines.base import ReadPolicy
from ocrwatch.engines.tesseract_facts import LOW_CONFIDENCE
from ocrwatch.pages import memory

__all__ = ["TesseractEngine", "available_languages", "tessdata_dirs", "text_to_markdown"]

log = logging.getLogger(__name__)

DEFAULT_DPI = 300  # what a page without a believable resolution is read as
MAX_PAGE_INCHES = 17  # longest paper a scanner takes (A3, tabloid); beyond: not a real dpi
# Cameras and editors stamp these on anything; they say nothing about the page.
STAMPED_DPI = frozenset({72, 96})
# Text size, measured on Tesseract's own layout (median text-line height in pixels).
# 10-12 pt print scanned at 300 dpi measures 41-45 px; Tesseract's accuracy falls off
# below about 10 pt at 300 dpi, so lines under SMALL_LINE_PX are enlarged to LINE_PX
# first, as OCRmyPDF's --oversample does.
LINE_PX = 42
SMALL_LINE_PX = 30
MAX_UPSAMPLE = 4.0
ESTIMATE_FLOOR_DPI = 70  # Tesseract's own floor for a credible resolution
MAX_UPSAMPLED_PIXELS = 80_000_000
# Lines lower than this are not text: halftone dots, paper grain and speckle form rows
# that Tesseract's layout takes for lines of 3-5 px; text that small cannot be read at
# any enlargement (10 pt at 100 dpi measures 14 px). A halftone page measured 4 px and,
# enlarged 4x, read as 15 KB of garbage where the plain command read 448 characters.
MIN_LINE_PX = 8
# Tesseract thresholds a page with one global level (Otsu). On uneven, grey or yellowed
# paper that level drops faint strokes in one place and keeps grain in another, and a
# page fed a little crooked reads very differently for it. A page read with a mean
# confidence under SURE_CONF is read once more with local thresholding (Sauvola), and
# the reading with more words read surely (GOOD_WORD_CONF) is kept (when no less
# word-like, :func:`better`): on the corpus's
# single-image pages, upright and skewed 2 and 5 degrees (48 readings), the mean CER
# fell from 0.166 to 0.145 (a grey Danish letter 0.146 to 0.034), 27 of 48 read twice.
SURE_CONF = 90
GOOD_WORD_CONF = 70
LOCAL_THRESHOLD = "2"  # Tesseract's thresholding_method: 0 Otsu, 1 tiled Otsu, 2 Sauvola
# The second reading is made only where the local thresholds change at least this share
# of the page's ink (pixels differing / ink of the lesser). Under it (dot matrix, faxes,
# receipts, clean letters: 0.00-0.17 on 37 unsure pages of the held-out set and the
# corpus) the second reading lost 17 times in 20 and won 3 by 2-7 sure words; over it
# (uneven light, photos, yellowed paper: 0.24-205) it won 9 times in 17, by up to 222.
LOCAL_DIFFERS = 0.2
# A line read with a confidence under JUNK_LINE_CONF that is mostly not words is marks
# read as text: a stamp, a pencilled shelf mark, the back showing through, grain at an
# edge. It is left out of the text and the text layer.
JUNK_LINE_CONF = 45
# Rows read apart (torn_rows): a quarter or more of the lines are numbers alone, most of
# them level with a line of another block; the page is then read again as one block of
# rows, kept unless it reads clearly fewer words surely.
TORN_LINES = 3
TORN_NUMERIC = 0.25
TORN_BESIDE = 0.6
ROWS_KEEP = 0.9
SECOND_SLACK = 0.02  # better(): how much less clean a second reading may be and still win
# A line whose words leave a gap wider than BRIDGE_GAP times their height spans a gutter:
# two columns read as one (bridged_lines). A second reading bridging more lines than the
# first by BRIDGE_MORE (at least BRIDGE_MIN lines) has read the columns across, whatever
# its sure words say (a faint two-column typescript's stretched copy: 15 of 52 lines
# bridged against 2 of 64, 267 sure words against 228, CER 0.698 against 0.142).
BRIDGE_GAP = 3.0
BRIDGE_MORE = 0.05
BRIDGE_MIN = 3


def source_resolution(page: Page) -> int:
    """The dpi to give Tesseract for ``page``: the file's own when it is believable.

    Missing, 72 or 96 (what cameras and editors stamp), or a resolution that would make
    the page longer than any scanner's glass, is not believable: such a page is read as
    300 dpi and its text size is measured instead (see ``upsample_factor``).
    """
    return page.dpi if page.dpi is not None and believable(page) else DEFAULT_DPI


def believable(page: Page) -> bool:
    """Whether the page's resolution can be what it was scanned or drawn at."""
    dpi = page.dpi
    return not (dpi is None or dpi in STAMPED_DPI or max(page.size) > dpi * MAX_PAGE_INCHES)


def line_height(api: Any) -> float | None:
    """Median height in pixels of the text lines Tesseract's layout finds, if any.

    The layout stays in ``api``: a recognition that follows reuses it, so measuring
    costs nothing when the page is then read as it is.
    """
    from tesserocr import RIL

    it = api.AnalyseLayout()
    heights: list[int] = []
    while it is not None:
        box = it.BoundingBox(RIL.TEXTLINE)
        if box:
            x0, y0, x1, y1 = box
            # A line of text, not a rule, dot, picture or a row of grain.
            if x1 - x0 > 2 * (y1 - y0) > 0 and y1 - y0 >= MIN_LINE_PX:
                heights.append(y1 - y0)
        if not it.Next(RIL.TEXTLINE):
            break
    if len(heights) < 3:  # too little text to tell its size
        return None
    heights.sort()
    return float(heights[len(heights) // 2])


def upsample_factor(height: float | None, size: tuple[int, int]) -> float:
    """How much to enlarge a page whose text lines are ``height`` pixels high (1: not)."""
    if height is None or height >= SMALL_LINE_PX:
        return 1.0
    factor = min(MAX_UPSAMPLE, LINE_PX / max(height, 1.0))
    pixels = size[0] * size[1]
    factor = min(factor, (MAX_UPSAMPLED_PIXELS / max(pixels, 1)) ** 0.5)
    return factor if factor >= 1.2 else 1.0


class TesseractEngine:
    name = "tesseract"

    def __init__(self, config: Config) -> None:
        try:
            import tesserocr
        except ImportError as exc:  # pragma: no cover - tesserocr is a hard dependency
            raise EngineUnavailable(
                f"tesserocr cannot be loaded ({exc}); reinstall ocrwatch with pip"
            ) from exc
        self._tesserocr: Any = tesserocr
        self.languages = "+".join(config.languages)
        self.tessdata = prepare_tessdata(config.languages, config.tessdata)
        self.workers = config.workers or (os.cpu_count() or 1)
        self._local = threading.local()
        self._apis: list[Any] = []
        self._in_use: set[int] = set()  # ids of the APIs reading a page right now
        self._lock = threading.Lock()
        self._closed = False
        self._pages = 0
        self._busy = 0.0
        log.info("Tesseract %s, languages %s, %d pages at once",
                 tesserocr.tesseract_version().split()[1], self.languages, self.workers)

    @property
    def max_side(self) -> int | None:
        return None  # Tesseract wants about 300 dpi: never shrink the scan for it

    @property
    def policy(self) -> ReadPolicy:
        return ReadPolicy(concurrency=self.workers)

    def _api(self) -> Any:
        api = getattr(self._local, "api", None)
        if api is None:
            try:
                api = self._tesserocr.PyTessBaseAPI(path=str(self.tessdata) + os.sep,
                                                    lang=self.languages)
            except RuntimeError as exc:
                raise EngineUnavailable(
                    f"Tesseract could not start with languages {self.languages} from "
                    f"{self.tessdata}: {exc}"
                ) from exc
            self._local.api = api
            with self._lock:
                self._apis.append(api)
        return api

    def recognize(self, pages: Sequence[Page]) -> list[PageText]:
        api = self._api()
        with self._lock:
            self._in_use.add(id(api))
        try:
            return self._recognize(api, pages)
        finally:
            with self._lock:
                self._in_use.discard(id(api))

    def _recognize(self, api: Any, pages: Sequence[Page]) -> list[PageText]:
        out: list[PageText] = []
        for page in pages:
            start = time.monotonic()
            try:
                out.append(self._read(api, page))
            except RuntimeError as exc:
                # tesserocr's "Failed to recognize": a page Tesseract cannot take at all.
                out.append(PageText("", "", error=(
                    f"Tesseract cannot read page {page.index + 1} ({page.size[0]}x"
                    f"{page.size[1]} pixels): {exc}")))
            finally:
                api.Clear()
            # The size read, enlarged or not: a small page enlarged is a big one.
            if memory.big(getattr(self._local, "read_size", page.size)):
                memory.give_back()
            with self._lock:
                self._pages += 1
                self._busy += time.monotonic() - start
        return out

    def _read(self, api: Any, page: Page) -> PageText:
        dpi = source_resolution(page)
        self._local.read_size = page.size
        api.SetImage(page.image)
        # Without a resolution Tesseract assumes 70 dpi and reads worse.
        api.SetSourceResolution(dpi)
        lines = line_height(api)
        factor = upsample_factor(lines, page.size)
        image = page.image
        if factor <= 1.0 or lines is None:
            factor = 1.0
        else:
            if not believable(page):
                # The text's own size says what the page's resolution was.
                dpi = max(ESTIMATE_FLOOR_DPI, round(DEFAULT_DPI * lines / LINE_PX))
            width, height = page.size
            # Pillow enlarges a 1-bit page by repeating its pixels: in grey, smoothly.
            source = page.image.convert("L") if page.image.mode == "1" else page.image
            image = source.resize((round(width * factor), round(height * factor)),
                                Image.Resampling.LANCZOS)
            api.SetImage(image)
            api.SetSourceResolution(round(dpi * factor))
            self._local.read_size = image.size
        reading = self._reading(api)
        # A 1-bit page has no threshold to choose: a second reading would be the same.
        if reading.confidence < SURE_CONF and image.mode != "1":
            local = self._local_reading(api, image, round(dpi * factor))
            if local is not None and better(local, reading):
                reading = local
        if page.stretched is not None:
            # Faint print (scan/faint.py): its marks stretched to full contrast, where one
            # threshold for the whole page finds them.
            strong_image = page.stretched
            if strong_image.size != image.size:
                strong_image = strong_image.resize(image.size, Image.Resampling.LANCZOS)
            api.SetImage(strong_image)
            api.SetSourceResolution(round(dpi * factor))
            strong = self._reading(api)
            if better(strong, reading):
                reading = strong
        if reading.torn:
            # A receipt's or a table's rows read apart: descriptions, then quantities, then
            # prices as blocks of their own. Read as one block of rows, they stay on their
            # lines (drawn receipts: CER 0.66 -> 0.00; dot-matrix invoices 0.65 -> 0.10).
            api.SetPageSegMode(self._tesserocr.PSM.SINGLE_BLOCK)
            try:
                api.SetImage(image)
                api.SetSourceResolution(round(dpi * factor))
                rows = self._reading(api)
            finally:
                api.SetPageSegMode(self._tesserocr.PSM.AUTO)
            if rows.sure >= ROWS_KEEP * reading.sure:
                reading = rows
        del image
        if reading.marks:
            log.debug("page %d: %d lines of marks read as text left out: %s", page.index + 1,
                      len(reading.marks), reading.marks)
        words = reading.words
        if factor > 1.0:  # boxes in the pixels of the page as given, not the enlarged one
            words = tuple(Word(w.text, _shrink(w.box, factor), w.line) for w in words)
        layout = PageLayout(page.image.width, page.image.height, words)
        warnings = []
        text = reading.text
        if text.strip() and reading.confidence < 40:
            warnings.append(f"{LOW_CONFIDENCE}{reading.confidence}%): check the scan")
        # Judged on all that was read: grain whose worst lines were left out as marks is
        # still a page of grain.
        nonwords = bool(reading.marks) and mostly_nonwords("\n".join([text, *reading.marks]))
        return PageText(markdown=text_to_markdown(text), text=text.strip() + "\n",
                        warnings=warnings, layout=layout, nonwords=nonwords,
                        confidence=float(reading.confidence))

    def _local_reading(self, api: Any, image: Image.Image, dpi: int) -> _Reading | None:
        """``image``, just read with Tesseract's one global threshold, read again with local
        thresholds; None where they hardly change its ink (:func:`ink_differs`: the reading
        of nearly the same pixels is nearly the same text, at the cost of a reading)."""
        if not api.SetVariable("thresholding_method", LOCAL_THRESHOLD):
            return None
        try:
            first_ink = api.GetThresholdedImage()
            api.SetImage(image)
            api.SetSourceResolution(dpi)
            if not ink_differs(first_ink, api.GetThresholdedImage()):
                return None
            return self._reading(api)
        finally:
            api.SetVariable("thresholding_method", "0")

    def _reading(self, api: Any) -> _Reading:
        """Read the image set on ``api``: its text, confidence, words and sure words.

        A line that is marks read as text (:func:`junk_line`) is left out of the text and
        the words; the text is otherwise Tesseract's own, paragraph breaks included.
        """
        # A page Tesseract cannot take fails with its reason, as GetUTF8Text made it do:
        # read again with local thresholds, a 3x40000 strip aborted the whole process.
        if not api.Recognize():
            raise RuntimeError("Failed to recognize")
        kept: list[_Line] = []
        marks: list[str] = []
        for ln in self._lines(api):
            if not ln.text.strip():
                continue
            if junk_line(ln.text, ln.confidence):
                marks.append(ln.text)
            else:
                kept.append(ln)
        paragraphs: dict[int, list[str]] = {}
        for ln in kept:
            paragraphs.setdefault(ln.paragraph, []).append(ln.text)
        text = "".join("".join(t + "\n" for t in para) + "\n" for para in paragraphs.values())
        words = _words_of(kept)
        # Words read surely: a letter or digit in them and GOOD_WORD_CONF or more. Not
        # Tesseract's own list of word confidences: it counts words without text too, and
        # grain read with local thresholds made 94 "sure words" of 14 words of text (a
        # faint page, whose stretched reading, with 75, read right).
        sure = sum(1 for ln in kept for w, _, conf in ln.words
                   if conf >= GOOD_WORD_CONF and any(c.isalnum() for c in w))
        return _Reading(text, api.MeanTextConf(), words, sure, tuple(marks), torn_rows(kept),
                        len(kept), bridged_lines(kept))

    def _lines(self, api: Any) -> list[_Line]:
        """The lines of the page just read, in reading order, with their words' boxes."""
        level = self._tesserocr.RIL
        lines: list[_Line] = []
        iterator = api.GetIterator()
        if iterator is None:
            return lines
        paragraph = -1
        for item in self._tesserocr.iterate_level(iterator, level.WORD):
            if not lines or item.IsAtBeginningOf(level.TEXTLINE):
                if not lines or item.IsAtBeginningOf(level.PARA):
                    paragraph += 1
                try:
                    line_text = item.GetUTF8Text(level.TEXTLINE) or ""
                except RuntimeError:  # tesserocr's way of saying "no text here"
                    line_text = ""
                lines.append(_Line(line_text.rstrip("\n"), item.Confidence(level.TEXTLINE),
                                   paragraph, []))
            try:
                text = item.GetUTF8Text(level.WORD)
            except RuntimeError:
                continue
            box = item.BoundingBox(level.WORD)
            if text and text.strip() and box:
                lines[-1].words.append((text.strip(), tuple(box), item.Confidence(level.WORD)))
        return lines

    def layout(self, page: Page) -> PageLayout:
        """Only the word boxes of ``page`` (for placing another engine's text on them)."""
        api = self._api()
        api.SetImage(page.image)
        api.SetSourceResolution(source_resolution(page))
        try:
            # A page Tesseract cannot take has no boxes.
            lines = self._lines(api) if api.Recognize() else []
            return PageLayout(page.image.width, page.image.height, _words_of(lines))
        finally:
            api.Clear()

    def release(self) -> None:
        """Nothing on an accelerator to give back."""

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            # An API still reading (a page abandoned on stop) is left to the process's
            # end: freeing it under Tesseract's feet would crash.
            apis = [a for a in self._apis if id(a) not in self._in_use]
            self._apis = []
        for api in apis:
            api.End()

    def describe(self) -> dict[str, object]:
        with self._lock:
            rate = self._pages / self._busy * self.workers if self._busy else None
        return {"state": "closed" if self._closed else "ready", "languages": self.languages,
                "workers": self.workers, "tessdata": str(self.tessdata),
                "pages_per_second": round(rate, 2) if rate else None}


def _numeric(text: str) -> bool:
    """A line of quantities and prices: every token holds a digit or is a currency's
    sign, and none is a word of three letters or more."""
    tokens = text.split()
    return bool(tokens) and all(
        any(c.isdigit() for c in t) or len(t) <= 2 for t in tokens) and not any(
        sum(c.isalpha() for c in t) >= 3 for t in tokens)


def torn_rows(lines: list[_Line]) -> bool:
    """Whether Tesseract's layout read a page's rows apart: ``TORN_NUMERIC`` or more of its
    lines (and at least ``TORN_LINES``) are numbers alone, lying level with a line of another
    block to their left (a receipt's prices beside its descriptions). Two columns of prose
    are not: their lines are words."""
    boxes = []
    for ln in lines:
        if ln.words:
            xs0, ys0, xs1, ys1 = zip(*(w[1] for w in ln.words), strict=True)
            boxes.append((ln, min(xs0), min(ys0), max(xs1), max(ys1)))
    numeric = [b for b in boxes if _numeric(b[0].text)]
    if len(numeric) < TORN_LINES or len(numeric) < TORN_NUMERIC * len(boxes):
        return False
    beside = 0
    for ln, x0, y0, _x1, y1 in numeric:
        height = max(1, y1 - y0)
        if any(other.paragraph != ln.paragraph and ox1 <= x0
               and min(y1, oy1) - max(y0, oy0) >= 0.5 * height
               for other, _ox0, oy0, ox1, oy1 in boxes):
            beside += 1
    return beside >= TORN_BESIDE * len(numeric)


def bridged_lines(lines: list[_Line]) -> int:
    """How many lines have a gap between two of their words wider than ``BRIDGE_GAP``
    times the line's (median) word height: lines read across a gutter."""
    count = 0
    for ln in lines:
        boxes = sorted(box for _, box, _ in ln.words)
        if len(boxes) < 2:
            continue
        height = max(1, sorted(b[3] - b[1] for b in boxes)[len(boxes) // 2])
        if any(right[0] - left[2] > BRIDGE_GAP * height
               for left, right in pairwise(boxes)):
            count += 1
    return count


def better(second: _Reading, first: _Reading) -> bool:
    """Whether a second reading of a page replaces the first: more words read surely,
    and neither less word-like nor more characters of non-words, nor columns read across
    (:data:`BRIDGE_GAP`). On faint typing on
    tinted paper, Sauvola's reading turned the grain into letters and won on "sure
    words": 750 characters of symbols for 213 of text. A slack of ``SECOND_SLACK`` (of
    the text's length, of the word-like share) lets a reading that reads more of a page,
    and so a few more stray marks, win (a grey Danish letter: 25 such characters in 1068
    against 22 in 945, CER 0.146 -> 0.034)."""
    return (second.sure > first.sure
            and nonword_chars(second.text)
            <= nonword_chars(first.text) + SECOND_SLACK * len(second.text)
            and wordlike_share(second.text) >= wordlike_share(first.text) - SECOND_SLACK
            and second.bridged - first.bridged
            < max(BRIDGE_MIN, BRIDGE_MORE * second.lines))


def ink_differs(first: Image.Image | None, second: Image.Image | None) -> bool:
    """Whether two thresholdings of one page (Tesseract's: black ink on white) differ on
    at least ``LOCAL_DIFFERS`` of the ink of the lesser; True when either cannot be had.
    Counted by Pillow's histograms: one more image of the page's size, where arrays of
    it took three (an enlarged page is up to 80 million pixels)."""
    if first is None or second is None or first.size != second.size:
        return True
    a, b = (im if im.mode == "L" else im.convert("L") for im in (first, second))
    ink = min(sum(a.histogram()[:128]), sum(b.histogram()[:128]))
    differing = sum(ImageChops.difference(a, b).histogram()[128:])
    return differing >= LOCAL_DIFFERS * max(ink, 1)


def junk_line(text: str, confidence: float) -> bool:
    """Whether a line Tesseract read is marks read as text rather than a line of the page."""
    return confidence < JUNK_LINE_CONF and mostly_nonwords(text)


@dataclass(frozen=True)
class _Line:
    text: str
    confidence: float  # Tesseract's, 0-100
    paragraph: int  # its paragraph's number on the page
    words: list[tuple[str, Box, float]]  # each word's text, box and confidence


def _words_of(lines: list[_Line]) -> tuple[Word, ...]:
    """The words of ``lines``, each numbered by its line's place among them."""
    return tuple(Word(w, box, n) for n, ln in enumerate(lines) for w, box, _ in ln.words)


@dataclass(frozen=True)
class _Reading:
    text: str
    confidence: int  # Tesseract's mean word confidence, 0-100
    words: tuple[Word, ...]
    sure: int  # words read with a confidence of GOOD_WORD_CONF or more
    marks: tuple[str, ...] = ()  # lines left out as marks read as text (junk_line)
    torn: bool = False  # rows read apart into blocks (torn_rows)
    lines: int = 0  # lines of text kept
    bridged: int = 0  # of them, lines spanning a gutter (bridged_lines)


def _shrink(box: tuple[int, ...], factor: float) -> tuple[int, int, int, int]:
    left, top, right, bottom = (round(v / factor) for v in box)
    return left, top, right, bottom


# Status notes the desktop's language when Tesseract has no data for it.
