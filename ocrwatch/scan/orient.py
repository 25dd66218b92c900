"""Which way up a page is: Tesseract's orientation detection (OSD), and turning the page.

A sheet fed upside down or sideways reads as noise, whichever engine reads it, so
every page is turned upright before any engine sees it. Tesseract's OSD
(``osd.traineddata``; Debian's ``tesseract-ocr-osd``) says by how much, with a
confidence. OCRmyPDF's ``--rotate-pages`` trusts it above a threshold; on the corpus
(docs/outputs.md) OSD was right on every page it could decide, but its confidence
for a right answer went as low as 0.2, and wrong answers on reduced pages reached 1.2.
So a turn proposed with a confidence under ``SURE``, and a page OSD cannot decide (too
little text for it: a small or faint page), is checked by reading: the page, reduced to
at most ``CHECK_SIDE`` pixels, is read as it is and turned, and each reading scores its
confident level words (Tesseract's word confidence, summed over words of three or more
characters whose box is wider than tall: Tesseract reads the lines of a page lying
sideways too, at a good mean confidence, but as words standing on end). The page is
turned only when a turn scores ``CHECK_FACTOR`` times the page as it is; a page neither
OSD nor the reading can decide is left as it is.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from ocrwatch.config.languages import available_languages

log = logging.getLogger(__name__)

SURE = 2.0  # OSD confidence above which its turn is taken without a check
CHECK_FACTOR = 2.0  # how much more confident level text a turn must read
MIN_CHECK_WORDS = 3  # a turn reading fewer level words decides nothing
CHECK_SIDE = 2000  # pixels: the longest side of the page read for the check

MAX_SIDE = 3600  # pixels: the longest side OSD looks at (A4 at 300 dpi is 3508)


@dataclass(frozen=True)
class Orientation:
    """How far to turn a page clockwise (0, 90, 180, 270) to make it upright."""

    turn: int
    confidence: float  # OSD's own; -1 when it could not decide
    checked: bool = False  # OSD was unsure or undecided: the turn was checked by reading


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
        self.check_lang = "+".join(lang for lang in languages if lang in have) or (
            "eng" if "eng" in have else "")
        self.check_data: set[Path] = set()
        if self.check_lang:
            from ocrwatch.core.errors import EngineUnavailable
            from ocrwatch.engines.tesseract import prepare_tessdata

            # Without it, no check: a low-confidence turn is then not taken.
            with contextlib.suppress(EngineUnavailable, OSError):
                self.check_data = {prepare_tessdata(self.check_lang.split("+"), tessdata)}
        self._local = threading.local()
        self._apis: list[Any] = []
        self._lock = threading.Lock()

    def _api(self, kind: str) -> Any:
        import tesserocr

        api = getattr(self._local, kind, None)
        if api is None:
            if kind == "osd":
                assert self.osd is not None
                api = tesserocr.PyTessBaseAPI(path=str(self.osd.parent) + os.sep, lang="osd",
                                              psm=tesserocr.PSM.OSD_ONLY)
            else:
                folder = next(iter(self.check_data))
                api = tesserocr.PyTessBaseAPI(path=str(folder) + os.sep, lang=self.check_lang,
                                              psm=tesserocr.PSM.AUTO)
            setattr(self._local, kind, api)
            with self._lock:
                self._apis.append(api)
        return api

    def detect(self, image: Image.Image, dpi: int | None) -> Orientation:
        """The turn that makes ``image`` upright (0 when unsure or OSD is missing)."""
        if self.osd is None:
            return Orientation(0, -1.0)
        # A page larger than A4 at 300 dpi is looked at reduced to about that size: the
        # turn does not depend on the size, and OSD (which cannot be interrupted) on a
        # 7000-pixel page took over 10 s, all of it in the way of a stop.
        factor = -(-max(image.size) // MAX_SIDE)
        if factor > 1:
            image = image.reduce(factor)
            dpi = max(72, (dpi or 300) // factor)
        api = self._api("osd")
        try:
            api.SetImage(image)
            api.SetSourceResolution(dpi or 300)
            found = api.DetectOrientationScript()
        except RuntimeError:
            found = None
        finally:
            api.Clear()
        if not found:
            # Too little text for OSD: the reading decides among the four, if it can.
            best = self._best(image, (90, 180, 270), dpi)
            return Orientation(best, -1.0, checked=self.can_check)
        # OSD's orient_deg is the counter-clockwise turn that makes the page upright.
        clockwise = (360 - int(found["orient_deg"])) % 360
        confidence = float(found["orient_conf"])
        if clockwise == 0 or confidence >= SURE:
            return Orientation(clockwise, confidence)
        return Orientation(self._best(image, (clockwise,), dpi), confidence, checked=True)

    @property
    def can_check(self) -> bool:
        return bool(self.check_data)

    def _best(self, image: Image.Image, turns: tuple[int, ...], dpi: int | None) -> int:
        """The one of ``turns`` that reads clearly better than the page as it is, or 0."""
        if not self.check_data:
            return 0  # no folder with the reading languages: stay as it is
        factor = -(-max(image.size) // CHECK_SIDE)
        if factor > 1:
            image = image.reduce(factor)
            dpi = max(72, (dpi or 300) // factor)
        as_is, _ = self._level_words(image, dpi)
        best, best_score = 0, 0.0
        for clockwise in turns:
            score, count = self._level_words(turn(image, clockwise), dpi)
            if count >= MIN_CHECK_WORDS and score > best_score:
                best, best_score = clockwise, score
        return best if best_score >= CHECK_FACTOR * as_is and best_score > 0 else 0

    def _level_words(self, image: Image.Image, dpi: int | None) -> tuple[float, int]:
        """Confident level text in ``image`` read as it is: the sum of the word
        confidences (0-1) of its words of three or more characters lying level, and
        how many such words."""
        from tesserocr import RIL, iterate_level

        api = self._api("read")
        score, count = 0.0, 0
        try:
            api.SetImage(image)
            api.SetSourceResolution(dpi or 300)
            api.Recognize()
            iterator = api.GetIterator()
            for word in iterate_level(iterator, RIL.WORD) if iterator else ():
                try:
                    text = word.GetUTF8Text(RIL.WORD)
                    confidence = word.Confidence(RIL.WORD)
                    box = word.BoundingBox(RIL.WORD)
                except RuntimeError:  # tesserocr's way of saying "no text here"
                    continue
                if box and len(text.strip()) >= 3 and confidence > 0 and (
                        box[2] - box[0] > box[3] - box[1]):
                    score += confidence / 100
                    count += 1
        except RuntimeError:
            return 0.0, 0
        finally:
            api.Clear()
        return score, count

    def close(self) -> None:
        with self._lock:
            apis, self._apis = self._apis, []
        for api in apis:
            api.End()
