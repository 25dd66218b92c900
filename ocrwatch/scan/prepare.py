"""Pages as scanners deliver them, made ready before any engine reads them.

In order, each page (image, TIFF frame or PDF page) is:

1. recorded blank, and not read, when it holds next to no ink (:mod:`ocrwatch.scan.inkcover`;
   ``skip_blank``), unless what it holds is faint print rather than the other side
   showing through (:mod:`ocrwatch.scan.faint`);
2. straightened when it is skewed by 0.3 degrees or more (a model engine's pages: a
   degree; :mod:`ocrwatch.scan.deskew`; ``deskew``); from a degree its turn is then judged
   on the straightened page, under it on the page as fed (a quarter turn and a small one
   give the same pixels in either order);
3. turned upright when it lies sideways or upside down (:mod:`ocrwatch.scan.orient`;
   ``rotate_pages``). For an engine that says how sure its reading is (Tesseract), a page
   whose lines do not tell its turn is left as it lies (``Page.turn_unchecked``) and read:
   a reading of upright text settles it without OSD, any other has the page turned then
   (:meth:`ScanPrep.turn_after_reading`) and read again if that turns it;
4. for an engine that reads with ``languages`` (Tesseract), a doubt when OSD finds it in
   a script none of them reads and the reading is unsure too (:mod:`ocrwatch.scan.script`;
   ``Page.script_doubt``). OSD is not run for this alone: a page whose lines told its turn
   (or that is not turned, ``rotate_pages`` off) is marked ``Page.script_unchecked``, and
   the pipeline asks OSD for its script (:meth:`ScanPrep.script_doubt`) only when the
   reading is unsure, the only case in which the doubt holds (0.3-0.6 CPU-s saved on each
   page read surely).

What was done is carried on the page (``Page.blank``, ``turned``, ``skew``) into its
result and index row. The searchable PDF keeps the original image: a turned page gets
the turn as its /Rotate, so it is displayed upright with its text layer on it, and a
straightened page's words are put back at the angle they are printed at.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Generator, Iterable
from dataclasses import dataclass, replace

from PIL import Image

from ocrwatch.config import Config
from ocrwatch.core.domain import Page, PageText
from ocrwatch.core.layout import PageLayout
from ocrwatch.core.wordlike import mostly_nonwords
from ocrwatch.pages import memory
from ocrwatch.scan import deskew, faint, inkcover, orient, script

log = logging.getLogger(__name__)

BLANK_NOTE = "*(blank page: not read)*"
UNREAD_MARKS = ("faint marks (pencil, grey ink or the other side showing through) were "
                "recorded blank without being read; check the page")

LEFT = orient.Orientation(0, -1.0)  # not looked for (rotate_pages = false)


@dataclass(frozen=True)
class Upright:
    """A page straightened, then turned upright: what :meth:`ScanPrep.upright` made."""

    image: Image.Image
    stretched: Image.Image | None  # its stretched copy (faint print), made the same
    skew: float  # degrees counter-clockwise it was straightened by; 0: not
    orientation: orient.Orientation  # the turn found, and how


class ScanPrep:
    """Blank, orientation and skew for the pages of one configuration."""

    def __init__(self, config: Config, *, enabled: bool = True, scripts: bool = False,
                 least_skew: float = deskew.MIN_ANGLE, read_first: bool = False) -> None:
        self.skip_blank = enabled and config.skip_blank
        self.rotate_pages = enabled and config.rotate_pages
        self.deskew = enabled and config.deskew
        self.least_skew = least_skew  # degrees: a smaller skew is left (deskew.skew_angle)
        # The engine reads with ``languages``: a page in a script none of them reads is a
        # doubt (a model reads any script: no check for it).
        self.scripts = enabled and scripts
        # The engine says how sure its reading is (Tesseract): a page whose lines do not
        # tell its turn is read first, as it lies (orient.READ_FIRST).
        self.read_first = self.rotate_pages and read_first and orient.READ_FIRST
        self._detector: orient.Detector | None = None
        self._config = config
        self._lock = threading.Lock()
        self._warned = False

    def _orientation(self) -> orient.Detector:
        with self._lock:
            if self._detector is None:
                self._detector = orient.Detector(self._config.tessdata,
                                                 list(self._config.languages))
            detector = self._detector
            if detector.missing and self.rotate_pages and not self._warned:
                self._warned = True
                log.warning("%s", detector.missing)
        return detector

    def prepare_all(self, pages: Iterable[Page]) -> Generator[Page, None, None]:
        """Each of a file's pages prepared (:meth:`prepare`), in order: here one at a
        time; in processes (scan/pool.PooledScanPrep) a few of one file at once."""
        for page in pages:
            yield self.prepare(page)

    def prepare(self, page: Page) -> Page:
        """The page ready to read: blank recorded, straightened, turned upright."""
        if page.text is not None:
            return page  # blank already, or its own text taken from the PDF
        (ink, densest), marks = inkcover.measure_depths(
            page.image, (inkcover.INK_DEPTH, faint.FAINT_DEPTH))
        if self.skip_blank and inkcover.looks_blank(ink, densest):
            if not faint.is_faint_print(page.image, self._orientation(), marks):
                # Marks fainter than ink that could not be told apart from the other side
                # showing through (a pencil note too short for the check) are not read:
                # recorded blank, but as a doubt, so the original is never parted with.
                doubt = None if inkcover.looks_blank(*marks) else UNREAD_MARKS
                return replace(page, text="", blank=True, doubt=page.doubt or doubt)
            log.info("%s, page %d: too little ink to read, but faint print, not the "
                     "other side showing through: read", page.source.name, page.index + 1)
            faint_print = True
        else:
            faint_print = faint.mostly_faint(marks[0], ink)
        # Faint print is judged by its marks stretched to full contrast: on the page as it
        # is, OSD and the skew measure see too little of it (a faint page fed sideways was
        # left sideways, and read as noise).
        made = self.upright(page.image, faint.stretched(page.image, None) if faint_print
                            else None)
        if made.stretched is not None:
            page = replace(page, stretched=made.stretched)
        unread = (script.doubt(made.orientation, self._config.languages) if self.scripts
                  else None)
        if unread is not None:
            page = replace(page, script_doubt=unread)  # the reading confirms it, or not
        elif self.scripts and (made.orientation.lines or made.orientation.deferred
                               or not self.rotate_pages):
            page = replace(page, script_unchecked=True)  # OSD asked after an unsure reading
        if made.orientation.deferred:
            page = replace(page, turn_unchecked=True)  # its reading tells (turn_after_reading)
        turned, angle = made.orientation.turn, made.skew
        if not turned and not angle:
            return page
        width, height = page.image.size
        upright = (height, width) if turned in (90, 270) else (width, height)
        return replace(page, image=made.image, turned=turned, skew=angle, upright=upright)

    def upright(self, image: Image.Image, stretched: Image.Image | None = None) -> Upright:
        """``image`` straightened, then turned upright (each as configured), with its
        stretched copy (faint print) made the same, on which both are judged."""
        judged = image if stretched is None else stretched
        # Straightened before its turn is looked for: OSD and the reading check misjudge
        # lines at an angle, and the white a scanner's lid shows around a crooked sheet of
        # tinted paper moves Tesseract's threshold off its print (corpus pages skewed
        # 3 degrees and fed upside down or sideways were left as fed: OSD undecided).
        angle = deskew.skew_angle(judged, self.least_skew) if self.deskew else 0.0
        before = abs(angle) >= deskew.JUDGED_ANGLE
        if before:
            image = deskew.straighten(image, angle)
            stretched = None if stretched is None else deskew.straighten(stretched, angle)
            judged = image if stretched is None else stretched
        # A page's lines decide before OSD; the script, when the engine needs it, is
        # asked after the reading (script_doubt) where no OSD ran.
        if not self.rotate_pages:
            found = LEFT
        elif self.read_first and stretched is None:
            found = self._orientation().lines_first(judged)
        else:
            found = self._orientation().detect(judged)
        if found.turn:
            image = orient.turn(image, found.turn)
            stretched = None if stretched is None else orient.turn(stretched, found.turn)
        if angle and not before:
            # A skew under a degree misleads neither OSD nor the reading check: the turn
            # is judged on the page as fed (as before pages this little crooked were
            # straightened: two noisy pages fed sideways, judged straightened 0.5
            # degrees, were turned the wrong way), then the page is straightened. A
            # quarter turn and a small one give the same pixels in either order.
            image = deskew.straighten(image, angle)
            stretched = None if stretched is None else deskew.straighten(stretched, angle)
        return Upright(image, stretched, angle, found)

    @property
    def missing(self) -> str | None:
        """Why pages are not turned (osd.traineddata missing), when that is so."""
        return self._orientation().missing if self.rotate_pages else None

    def turn_after_reading(self, page: Page) -> Page:
        """A page whose turn was left to its reading (``Page.turn_unchecked``), that reading
        not of upright text: turned as :meth:`upright` would have turned it (OSD, then the
        reading check where OSD is unsure), with OSD's script doubt where it ran. Runs on
        the reading thread, whose instances are closed again at once, as for
        :meth:`script_doubt`."""
        judged = page.image
        if page.skew and abs(page.skew) < deskew.JUDGED_ANGLE:
            # Judged as fed, as upright() judges a page this little crooked.
            judged = deskew.straighten(judged, -page.skew)
        detector = self._orientation()
        try:
            found = detector.detect(judged)
        finally:
            detector.release()
        page = replace(page, turn_unchecked=False)
        if self.scripts and not found.lines:  # OSD looked at it: its script is known now
            page = replace(page, script_unchecked=False,
                           script_doubt=script.doubt(found, self._config.languages))
        if not found.turn:
            return page
        width, height = page.upright or page.image.size
        upright = (height, width) if found.turn in (90, 270) else (width, height)
        return replace(page, image=orient.turn(page.image, found.turn), turned=found.turn,
                       upright=upright)

    def script_doubt(self, page: Page) -> str | None:
        """The script's doubt of a page marked ``script_unchecked``, asked of OSD once its
        reading was unsure (:func:`ocrwatch.scan.script.confirmed`). Runs on the reading
        thread, whose OSD instance is closed again at once: unsure readings are few, and
        a reader holds no 37 MB for them between pages."""
        detector = self._orientation()
        try:
            found = detector.script(page.image)
        finally:
            detector.release()
        return script.doubt(found, self._config.languages)

    def warm(self) -> None:
        """A file is arriving: start what preparing its pages needs (nothing here; the
        processes of scan/pool.PooledScanPrep)."""

    def idle(self) -> None:
        """This preparer has no page to prepare: its OSD instances closed and their
        memory given back (see orient.Detector.release)."""
        with self._lock:
            detector = self._detector
        if detector is not None and detector.release():
            memory.give_back()

    def close(self) -> None:
        with self._lock:
            detector, self._detector = self._detector, None
        if detector is not None:
            detector.close()


def again(page: Page, turned: int, skew: float) -> Page:
    """A page drawn again from the original, turned and straightened as it was when read
    (for finding word boxes under a model's text)."""
    image = orient.turn(page.image, turned)
    upright = image.size
    if skew:
        image = deskew.straighten(image, skew)
    return replace(page, image=image, turned=turned, skew=skew, upright=upright)


def on_page(layout: PageLayout | None, page: Page) -> PageLayout | None:
    """A layout read on a straightened page, told how to lie on the upright page, and on
    a page read at another size, the size the file shows it at."""
    if layout is None:
        return None
    if page.skew and page.upright is not None:
        layout = replace(layout, width=page.upright[0], height=page.upright[1],
                         angle=page.skew, read_size=(layout.width, layout.height))
    if page.shown is not None:
        layout = replace(layout, shown=page.shown)
    return layout


def finish(result: PageText, page: Page) -> PageText:
    """The engine's result with what preparing the page did, and the non-word check."""
    nonwords = result.nonwords or (bool(result.text.strip()) and mostly_nonwords(result.text))
    warnings = list(result.warnings)
    if nonwords:
        warnings.append("the reading is mostly not words (paper texture, noise or a "
                        "picture?): it is kept in the sidecars but not indexed")
    return replace(result, layout=on_page(result.layout, page), turned=page.turned,
                   skew=page.skew, nonwords=nonwords, warnings=warnings)


def blank_result() -> PageText:
    return PageText(markdown=BLANK_NOTE, text="", blank=True)
