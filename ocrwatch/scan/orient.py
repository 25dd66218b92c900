"""Which way up a page is: Tesseract's orientation detection (OSD), and turning the page.

A sheet fed upside down or sideways reads as noise, whichever engine reads it, so
every page is turned upright before any engine sees it. Tesseract's OSD
(``osd.traineddata``; Debian's ``tesseract-ocr-osd``) says by how much, with a
confidence. OCRmyPDF's ``--rotate-pages`` trusts it above a threshold.

OSD judges characters, and drops those under 10 pixels high: on a page scanned at 100
or 150 dpi, or photographed from afar, it is often wrong, and confidently so (a page at
150 dpi upright: "turn 180", confidence 3.4). So the page is first sized to
``OSD_SIDE`` pixels on its longest side (an A4 page at 280 dpi), enlarged up to
``MAX_ENLARGE`` times or reduced, and always told 300 dpi: a phone's 72 dpi stamp made
OSD misjudge the size of the print. Of 460 corpus pages as scanned, at 150 and 100 dpi,
photographed and on noisy paper, each fed four ways (benchmarks/results/orientation.txt),
33 were turned wrong and 69 left turned before; none and 10 now. OSD sees the page
in grey: a third of the work of colour, for one page fewer turned of the 460.

A turn OSD gives with a confidence under ``SURE`` (``SURE_ENLARGED`` on a page it saw
enlarged ``CHECK_ENLARGED`` times or more), or a page it cannot decide, is checked by
reading: the page, sized to ``CHECK_SIDE`` pixels, is read as it is and
turned each of the three ways, and each reading scores its confident level words
(Tesseract's word confidence, summed over words of three or more characters whose box
is wider than tall: Tesseract reads the lines of a page lying sideways too, at a good
mean confidence, but as words standing on end). The page takes the best turn only when
that scores ``CHECK_FACTOR`` times the page as it is, and reads as no smaller a share of
word-like characters (:func:`ocrwatch.core.wordlike.wordlike_share`) than as it is,
within ``WORDLIKE_SLACK``; a page neither OSD nor the reading can decide is left as it
is. All three turns are read, not only OSD's: an unsure OSD is
as often wrong about the axis as about up and down. Except when OSD leans to "upright"
(or cannot decide) and the page as it is reads as upright text (``UPRIGHT_WORDS`` level
words at a mean confidence of ``UPRIGHT_MEAN``): a page upside down reads as level words
of low confidence, a page on its side as almost none; that one reading is then enough.
And a page that reads as no level word at all, as it is and turned 90 degrees, holds no
text on either axis (a picture, paper texture, noise): it is left as it is after those
two readings instead of four (orientation of a noise page: 2.8 s instead of 4.8).

Reading the whole page four ways cost about 4 CPU seconds a page, most of orientation's
cost where OSD is unsure. So the check reads a band first (``BAND_CHECK``): where the
page's ink profiles show the axis of its lines (:func:`ocrwatch.scan.deskew.line_ratio`,
the rows ``AXIS_RATIO`` times sharper than the columns or the reverse), the inkiest half
of the page across its lines is read as it is and turned the one or two ways left on that
axis (180 for level lines; 90 and 270 for lines running down the page), under the same
rules. The band decides when a turn passes, when it reads as upright text, or when its
level lines read clearly better as they are than upside down (both with
``BAND_UPRIGHT_WORDS`` level words or more); anything else (no clear axis: pictures,
noise, tables whose rules blur the profiles, small pages enlarged; a band that cannot
tell) goes to the whole page read four ways as before.
benchmarks/results/orientation-band.txt compares the two on the same pages.

For an engine that does not need OSD's script (a model reads any script; only
Tesseract's script doubt, :mod:`ocrwatch.scan.script`, asks for it), a page whose lines
lie level by its ink profiles (the rows ``AXIS_RATIO`` times sharper than the columns)
is first judged by its lines' shape (:mod:`ocrwatch.scan.ascenders`: more ink above the
x-height band than below, upright; ``LINES_CHECK``): about 0.02 s a page where OSD costs
0.3-0.5 s and more. Where the lines' vote is clear the page is turned (or left) without
OSD; anything else (no clear axis, too few lines, a mixed vote, languages not written
in Latin) goes to OSD and the checks above as before.
benchmarks/results/orientation-cheap.txt compares it with OSD on the same pages.

Three things made that check decide 346 of the orientation set's 644 pages where it
decided 123, none otherwise than before (``SHEET_LINES``, ``SIDEWAYS_LINES`` and
ascenders' ``RULES``; benchmarks/results/orientation-sheet.txt). A card or a sheet
photographed on a darker table, or scanned with a dark bed or lid around it, has that
ground in its ink mask: its frame blurs both profiles (a business card on a table: rows
1.6 times sharper than columns, and 4 votes each way), so every card went to OSD, and
one in five of them on to the reading check (0.6 CPU s a card). The lines are now
measured on the text's box, the ink that does not reach the picture's edge
(:func:`ocrwatch.scan.inkcover.text_box`). And a page whose profiles show lines running
down it (the columns ``SIDEWAYS_RATIO`` times sharper than the rows) is measured turned a
quarter: its lines then lie level, and upright or upside down says which quarter.

The Tesseract engine reads every page anyway and says how sure it is, so for it a page
whose lines do not tell its turn is not shown to OSD first (``READ_FIRST``;
:meth:`Detector.lines_first`): it is read as it lies, and a reading of upright text
(:func:`reads_upright`: ``READ_UPRIGHT_WORDS`` level words or more, ``READ_UPRIGHT_SHARE``
of all the words read, at a mean word confidence of ``READ_UPRIGHT_MEAN`` or more) settles
it. Any other reading has the page turned as above (:meth:`Detector.detect`, after the
reading: :meth:`ocrwatch.scan.prepare.ScanPrep.turn_after_reading`) and read again when
that turns it. A page lying sideways reads as words standing on end (none level); one
upside down reads as level words of low confidence (benchmarks/results/read_first.txt).
Most pages lie upright: each that reads so saves OSD's 0.3-0.5 CPU-s; a turned page pays
one reading before its turn.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from ocrwatch.config.languages import available_languages, prepare_tessdata
from ocrwatch.core.layout import PageLayout
from ocrwatch.core.wordlike import wordlike_share
from ocrwatch.scan import ascenders, deskew, inkcover
from ocrwatch.scan.osd import OsdApi

log = logging.getLogger(__name__)

# OSD confidence from which its turn is taken without a check. An upright receipt got
# "turn 180" at 3.40 and was read upside down; on the orientation benchmark's 644 pages
# OSD was wrong on 3 of 12 from 3 to 3.5, on none of 514 from 3.5 on, and on the
# held-out-style set's 156 (benchmarks/heldout_set.py, upright and fed three ways: receipts,
# dot matrix, forms at 100 dpi, faxes, tinted paper, photos, two columns) never above
# 2.05. So 5, on every page: a margin over the worst wrong turn seen.
SURE = 5.0
# On a page OSD saw enlarged this many times or more (a small scan) the same: print
# magnified from few pixels misleads OSD confidently (an upright table at 100 dpi: "turn
# 180", 3.29).
CHECK_ENLARGED = 2.0
SURE_ENLARGED = 5.0
CHECK_FACTOR = 2.0  # how much more confident level text a turn must read
WORDLIKE_SLACK = 0.1  # how much less word-like a turn's reading may be than as it is
MIN_CHECK_WORDS = 3  # a turn reading fewer level words decides nothing
CHECK_SIDE = 2000  # pixels: the longest side of the page read for the check
# A page OSD leans to leaving as it is (or cannot decide) whose reading as it is has this
# many level words at this mean confidence is upright, without reading it turned: read as
# they were, the upright pages OSD was unsure of had 76-315 level words at a mean of
# 0.60-0.90, the same pages upside down 0.30-0.41, sideways 0-4 level words.
UPRIGHT_WORDS = 20
UPRIGHT_MEAN = 0.55
# The check reads a band first: the inkiest half of the page across its lines, as it is
# and turned the way(s) of its lines' axis, when the ink profiles show the axis (the
# sharper way's rows AXIS_RATIO times the other's); the whole page four ways only when
# the band does not decide.
BAND_CHECK = True
BAND = 0.5
AXIS_RATIO = 1.8  # tables' rules blur it: two corpus tables at 1.9
BAND_UPRIGHT_WORDS = 10
# For an engine that needs no script from OSD, a page with level lines is judged by its
# lines' ascenders and descenders first, OSD only where they cannot tell.
LINES_CHECK = True
# ... measured on the text's box where the page lies on a darker ground (cards, photos)
SHEET_LINES = True
# ... and on a page whose lines run down it (its columns this many times sharper than its
# rows), turned a quarter first.
SIDEWAYS_LINES = True
SIDEWAYS_RATIO = AXIS_RATIO
# An engine that reads the page anyway and says how sure it is (Tesseract) reads first a
# page whose lines did not tell its turn, as it lies: a reading of this many level words
# (three letters or more, their box wider than tall), this share of all it read, at this
# mean word confidence (0-100) is of an upright page, and no OSD is run for it; any other
# is turned then as before (OSD, the reading check) and read again if turned. Read as
# they lie (benchmarks/results/read_first.txt), the upright pages of the held-out-style
# set and the orientation set's variants that their lines left undecided read mostly at
# 70-95 with over half their words level; upside down, pages read at up to 65 (a
# multilingual page; clean forms 54-58), level words up to all of them; sideways, a fifth
# of their words level at most. So 75: ten over the surest upside-down reading. 65 of the
# 88 upright pages pass (three at 70-72 go to OSD as before), none of the 288 turned.
READ_FIRST = True
READ_UPRIGHT_WORDS = 20
READ_UPRIGHT_SHARE = 0.5
READ_UPRIGHT_MEAN = 75.0

# Pixels: the longest side of the page OSD looks at. Larger pages are reduced to it (OSD,
# which cannot be interrupted, took over 10 s on a 7000-pixel page, all of it in the way
# of a stop); smaller ones enlarged, so that their print is of the size OSD judges well.
OSD_SIDE = 3300
MAX_ENLARGE = 4.0  # a label of a few words is not made a poster
OSD_DPI = 300  # what the sized page is said to be: about what it is for a letter or A4


@dataclass(frozen=True)
class Orientation:
    """How far to turn a page clockwise (0, 90, 180, 270) to make it upright."""

    turn: int
    confidence: float  # OSD's own; -1 when it could not decide
    checked: bool = False  # OSD was unsure or undecided: the turn was checked by reading
    proposed: int | None = None  # OSD's own turn, whether taken or not; None: undecided
    # The script OSD named ("Latin", "Cyrillic"...) and its confidence in it; "" when
    # OSD did not run or could not decide.
    script: str = ""
    script_confidence: float = 0.0
    lines: bool = False  # decided by its lines' shape (ascenders.py), OSD not asked
    deferred: bool = False  # left to the page's reading (READ_FIRST): not decided yet


def reads_upright(confidence: float | None, layout: PageLayout | None) -> bool:
    """Whether a reading (its mean word confidence, its word boxes) is of upright text:
    enough level words, most of what was read, read surely (``READ_UPRIGHT_*``)."""
    if confidence is None or layout is None or layout.by_line:
        return False
    return upright_counts(confidence, *level_words(layout))


def level_words(layout: PageLayout) -> tuple[int, int]:
    """The level words of a reading (three letters or more, their box wider than tall),
    and all its words."""
    words = [w for w in layout.words if w.text.strip()]
    return sum(1 for w in words if is_level(w.text, w.box)), len(words)


def is_level(text: str, box: tuple[int, int, int, int]) -> bool:
    """A word of three characters or more lying level (its box wider than tall): a page
    lying sideways reads as words standing on end."""
    return len(text.strip()) >= 3 and box[2] - box[0] > box[3] - box[1]


def upright_counts(confidence: float, level: int, words: int) -> bool:
    """:func:`reads_upright` from a reading's mean word confidence and its word counts."""
    return (confidence >= READ_UPRIGHT_MEAN and level >= READ_UPRIGHT_WORDS
            and level >= READ_UPRIGHT_SHARE * words)


def sized(image: Image.Image, side: int) -> Image.Image:
    """``image`` with its longest side ``side`` pixels: reduced, or enlarged at most
    ``MAX_ENLARGE`` times; within a tenth of it, as it is."""
    scale = min(MAX_ENLARGE, side / max(image.size))
    if 0.9 <= scale <= 1.1:
        return image
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    if scale < 1:
        return image.resize(size, Image.Resampling.BILINEAR, reducing_gap=2.0)
    return image.resize(size, Image.Resampling.BICUBIC)


def _mean(grey: Image.Image) -> float:
    """The mean grey level of ``grey``: lower, more ink."""
    histogram = grey.histogram()
    return sum(value * count for value, count in enumerate(histogram)) / max(1, sum(histogram))


def turn(image: Image.Image, clockwise: int) -> Image.Image:
    """``image`` turned ``clockwise`` degrees (a multiple of 90), losslessly."""
    method = {90: Image.Transpose.ROTATE_270, 180: Image.Transpose.ROTATE_180,
              270: Image.Transpose.ROTATE_90}.get(clockwise % 360)
    return image if method is None else image.transpose(method)


class Detector:
    """OSD on one Tesseract instance per thread (the preparers run side by side)."""

    def __init__(self, tessdata: Path | None, languages: list[str]) -> None:
        have = available_languages(tessdata)
        self.osd = have.get("osd")
        self.missing = None if self.osd else (
            "page orientation is not detected: Tesseract's osd.traineddata is not "
            "installed (Debian/Ubuntu: `sudo apt install tesseract-ocr-osd`; macOS: "
            "`brew install tesseract`), or set rotate_pages = false")
        # The band check reads with the user's languages where Tesseract has them, from
        # one folder (the engine's own, which links languages installed apart).
        # Lines' ascenders tell up from down in Latin print (ascenders.py).
        self.latin = ascenders.latin(languages)
        self.check_lang = "+".join(lang for lang in languages if lang in have) or (
            "eng" if "eng" in have else "")
        self.check_data: set[Path] = set()
        if self.check_lang:
            from ocrwatch.core.errors import EngineUnavailable

            # Without it, no check: a low-confidence turn is then not taken.
            with contextlib.suppress(EngineUnavailable, OSError):
                self.check_data = {prepare_tessdata(self.check_lang.split("+"), tessdata)}
        self._local = threading.local()
        self._closers: list[Callable[[], Any]] = []  # each thread's instances' own close
        self._lock = threading.Lock()

    def _api(self, kind: str) -> Any:
        import tesserocr

        api = getattr(self._local, kind, None)
        if api is None:
            if kind == "osd":
                assert self.osd is not None
                api = OsdApi(self.osd)
                close = api.close
            else:
                folder = next(iter(self.check_data))
                api = tesserocr.PyTessBaseAPI(path=str(folder) + os.sep, lang=self.check_lang,
                                              psm=tesserocr.PSM.AUTO)
                close = api.End
            setattr(self._local, kind, api)
            own = getattr(self._local, "closers", None)
            if own is None:
                own = self._local.closers = []
            own.append((kind, close))
            with self._lock:
                self._closers.append(close)
        return api

    def release(self) -> bool:
        """Close this thread's instances, so that an idle preparer does not hold OSD (37
        MB, more after a page) while the readers read; the next page loads it again
        (about 0.1 s). True when there were any."""
        own = getattr(self._local, "closers", None) or []
        self._local.closers = []
        for kind, close in own:
            delattr(self._local, kind)
            with self._lock:
                if close not in self._closers:
                    continue  # closed by close() meanwhile
                self._closers.remove(close)
            close()
        return bool(own)

    def detect(self, image: Image.Image) -> Orientation:
        """The turn that makes ``image`` upright (0 when unsure or OSD is missing).

        A page whose lines tell which way up it is (``LINES_CHECK``) is not shown to OSD
        (its script, where an engine needs it, is asked after the reading:
        ``ScanPrep.script_doubt``). The page's resolution is not asked for: the page is
        sized by its pixels (see the module's notes), which a wrong or missing resolution
        cannot mislead."""
        if self.osd is None:
            return Orientation(0, -1.0)
        if LINES_CHECK and self.latin:
            by_lines = self.by_lines(image)
            if by_lines is not None:
                return by_lines
        # Grey, and sized as grey: a third of the pixels to resize and to hand over, and
        # one channel for OSD to threshold (0.6 s instead of 0.9 on an A4 scan).
        found = self._api("osd").found([sized(image.convert("L"), OSD_SIDE)], OSD_DPI)
        if found is None:
            # Too little text for OSD: the reading decides among the four, if it can.
            return Orientation(self._best(image, None), -1.0, checked=self.can_check)
        # OSD gives the counter-clockwise turn that makes the page upright.
        confidence = found.confidence
        clockwise = (360 - found.degrees) % 360
        script = found.script, found.script_confidence
        enlarged = OSD_SIDE / max(image.size) >= CHECK_ENLARGED
        if confidence >= (SURE_ENLARGED if enlarged else SURE):
            return Orientation(clockwise, confidence, proposed=clockwise, script=script[0],
                               script_confidence=script[1])
        return Orientation(self._best(image, clockwise), confidence, checked=self.can_check,
                           proposed=clockwise, script=script[0], script_confidence=script[1])

    def lines_first(self, image: Image.Image) -> Orientation:
        """The turn where ``image``'s lines tell it, else left to the page's reading
        (``Orientation.deferred``; READ_FIRST): :meth:`detect` runs only if that reading
        is not of upright text. Where the languages are not all in Latin letters (the
        lines' shape and the reading's rule were measured on those), :meth:`detect` now."""
        if self.osd is None:
            return Orientation(0, -1.0)
        if not (LINES_CHECK and self.latin):
            return self.detect(image)
        by_lines = self.by_lines(image)
        return by_lines if by_lines is not None else Orientation(0, -1.0, deferred=True)

    @staticmethod
    def by_lines(image: Image.Image) -> Orientation | None:
        """The turn from the shape of ``image``'s lines when they lie level (0 or 180)
        or, with ``SIDEWAYS_LINES``, run down the page (90 or 270), and tell clearly
        (:mod:`ocrwatch.scan.ascenders`); None: OSD decides."""
        # Grey once: each measure below makes its mask of the grey, and a quarter turn
        # moves a third of the bytes.
        image = image.convert("L")
        if SHEET_LINES:
            # A card or sheet on a darker ground: the ground is ink to the mask, and its
            # frame blurs both profiles; the lines are measured on the text's box.
            box = inkcover.text_box(image)
            if box is not None:
                image = image.crop(box)
        ratio = deskew.line_ratio(image)
        if ratio >= AXIS_RATIO:
            decided = ascenders.turn(image)
            return None if decided is None else Orientation(decided, -1.0, lines=True)
        if SIDEWAYS_LINES and ratio <= 1 / SIDEWAYS_RATIO:
            # Lines running down the page: turned a quarter, they lie level; upright
            # then, the page wants that quarter; upside down, the other.
            decided = ascenders.turn(turn(image, 90))
            return None if decided is None else Orientation((90 + decided) % 360, -1.0,
                                                            lines=True)
        return None  # no clear axis

    def script(self, image: Image.Image) -> Orientation:
        """OSD's script for ``image``, for a page that is not turned (``rotate_pages``
        off): the turn is left at 0, OSD's own turn and confidence kept beside it."""
        if self.osd is None:
            return Orientation(0, -1.0)
        found = self._api("osd").found([sized(image.convert("L"), OSD_SIDE)], OSD_DPI)
        if found is None:
            return Orientation(0, -1.0)
        return Orientation(0, found.confidence, proposed=(360 - found.degrees) % 360,
                           script=found.script, script_confidence=found.script_confidence)

    def osd_only(self, image: Image.Image) -> tuple[int, float] | None:
        """OSD's own turn (clockwise) for ``image`` and its confidence in it, unchecked:
        how much the image looks like print to OSD. None when it cannot decide or OSD
        is missing."""
        if self.osd is None:
            return None
        found = self._api("osd").detect(sized(image.convert("L"), OSD_SIDE), OSD_DPI)
        return None if found is None else ((360 - found[0]) % 360, found[1])

    def level_text(self, image: Image.Image) -> tuple[float, int] | None:
        """Confident level text in ``image`` read as it is, sized for the check (see
        ``_level_words``); None without the languages to read with."""
        if not self.check_data:
            return None
        return self._level_words(sized(image, CHECK_SIDE))

    @property
    def can_check(self) -> bool:
        return bool(self.check_data)

    def _best(self, image: Image.Image, proposed: int | None) -> int:
        """The turn that reads clearly better than the page as it is, or 0."""
        if not self.check_data:
            return 0  # no folder with the reading languages: stay as it is
        image = sized(image, CHECK_SIDE)
        if BAND_CHECK:
            decided = self._band_best(image, proposed)
            if decided is not None:
                return decided
        return self._page_best(image, proposed)

    def _band_best(self, image: Image.Image, proposed: int | None) -> int | None:
        """``_page_best`` on a band of the page, the two turns of its lines' axis only;
        None when the band does not decide (the whole page is then read).

        The axis comes from the page's ink profiles (:func:`ocrwatch.scan.deskew.line_ratio`):
        level lines leave 0 or 180, lines running down the page 90 or 270. The band is the
        inkiest ``BAND`` of the page across its lines, whole lines kept."""
        ratio = deskew.line_ratio(image)
        turns: tuple[int, ...]
        if ratio >= AXIS_RATIO:
            turns, across = (180,), image.height
        elif ratio <= 1 / AXIS_RATIO:
            turns, across = (90, 270), image.width
        else:
            return None
        span = round(across * BAND)
        if span >= across:
            return None
        starts = [round(across * (1 - BAND) * step / 4) for step in range(5)]
        level = turns == (180,)
        boxes = [(0, start, image.width, start + span) if level else
                 (start, 0, start + span, image.height) for start in starts]
        grey = image.convert("L")
        band = image.crop(min(boxes, key=lambda box: _mean(grey.crop(box))))  # inkiest
        as_is, count, as_is_words = self._reading(band)
        if proposed in (None, 0) and count >= BAND_UPRIGHT_WORDS and (
                as_is >= UPRIGHT_MEAN * count):
            return 0
        best, best_score, best_words = 0, 0.0, 0.0
        for clockwise in turns:
            score, found, words = self._reading(turn(band, clockwise))
            if found >= MIN_CHECK_WORDS and score > best_score:
                best, best_score, best_words = clockwise, score, words
        if (best and best_score >= CHECK_FACTOR * as_is
                and best_words + WORDLIKE_SLACK >= as_is_words):
            return best
        if level and count >= BAND_UPRIGHT_WORDS and as_is >= CHECK_FACTOR * best_score:
            # Level lines that read clearly better as they are than upside down. Not on
            # the other axis: a page whose level lines the profiles took for lines
            # running down it (an upright page at 0.74) reads best as it is there too,
            # upside down or not.
            return 0
        return None

    def _page_best(self, image: Image.Image, proposed: int | None) -> int:
        """The four-way reading check on the whole page (``image`` sized for it)."""
        as_is, level, as_is_words = self._reading(image)
        if proposed in (None, 0) and level >= UPRIGHT_WORDS and as_is >= UPRIGHT_MEAN * level:
            return 0  # OSD leaning upright and the page reads as upright text: no more reading
        best, best_score, best_words = 0, 0.0, 0.0
        for clockwise in (90, 180, 270):
            score, count, words = self._reading(turn(image, clockwise))
            if clockwise == 90 and not count and not level:
                # No level word either way: no text on either axis (a picture, paper
                # texture, noise), as upside-down lines still read as level words.
                return 0
            if count >= MIN_CHECK_WORDS and score > best_score:
                best, best_score, best_words = clockwise, score, words
        # A turn whose reading is less word-like than the page as it is is not taken: a
        # dot-matrix receipt turned 90 degrees read as 2.5 KB of symbols, scored as level
        # "words", and was kept so. Within a slack: a page lying sideways reads as a few
        # scraps, word-like or not (tapus_08: 0.94 as it is, 0.92 turned upright).
        return best if (best_score >= CHECK_FACTOR * as_is and best_score > 0
                        and best_words + WORDLIKE_SLACK >= as_is_words) else 0

    def _reading(self, image: Image.Image) -> tuple[float, int, float]:
        """``_level_words`` of ``image``, and the share of its text's characters in
        word-like tokens (:func:`ocrwatch.core.wordlike.wordlike_share`)."""
        score, count = self._level_words(image)
        return score, count, getattr(self._local, "share", 0.0)

    def _level_words(self, image: Image.Image) -> tuple[float, int]:
        """Confident level text in ``image`` read as it is: the sum of the word
        confidences (0-1) of its words of three or more characters lying level, and
        how many such words."""
        from tesserocr import RIL, iterate_level

        api = self._api("read")
        score, count = 0.0, 0
        self._local.share = 0.0  # each preparer thread checks its own page
        try:
            api.SetImage(image)
            api.SetSourceResolution(OSD_DPI)
            if not api.Recognize():  # a page Tesseract cannot take reads as no words
                return 0.0, 0
            self._local.share = wordlike_share(api.GetUTF8Text() or "")
            iterator = api.GetIterator()
            for word in iterate_level(iterator, RIL.WORD) if iterator else ():
                try:
                    text = word.GetUTF8Text(RIL.WORD)
                    confidence = word.Confidence(RIL.WORD)
                    box = word.BoundingBox(RIL.WORD)
                except RuntimeError:  # tesserocr's way of saying "no text here"
                    continue
                if box and confidence > 0 and is_level(text, box):
                    score += confidence / 100
                    count += 1
        except RuntimeError:
            return 0.0, 0
        finally:
            api.Clear()
        return score, count

    def close(self) -> None:
        with self._lock:
            closers, self._closers = self._closers, []
        for close in closers:
            close()
