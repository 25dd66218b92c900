"""The domain types every part shares: a page, what was read on it, and a file's job.

They live apart from the engines and the queue so that pages, sidecars and the index
do not depend on the engines folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from PIL import Image

from ocrwatch.core.layout import PageLayout


@dataclass(frozen=True)
class Page:
    """One prepared page: RGB, EXIF-rotated, scaled for the engine that will read it."""

    source: Path
    index: int  # 0-based page number within the source file
    image: Image.Image
    dpi: int | None = None  # resolution of ``image`` when known (Tesseract uses it)
    count: int | None = None  # pages in the source file, when known (for progress)
    # Set when the page needs no engine: "" for a blank page, a PDF's own text layer.
    text: str | None = None
    # What preparing the scan did (ocrwatch/scan/prepare.py): recorded in the page's row.
    blank: bool = False  # too little ink to hold text: recorded blank, not read
    # Faint print (scan/faint.py): its marks stretched to full contrast, in grey, at the
    # image's size; the Tesseract engine reads it besides the image. None on other pages.
    stretched: Image.Image | None = None
    turned: int = 0  # degrees turned clockwise to stand upright (0, 90, 180, 270)
    skew: float = 0.0  # degrees turned counter-clockwise to straighten it
    upright: tuple[int, int] | None = None  # its size once turned, before straightening
    # Its size as the file shows it (after an EXIF turn; a PDF page drawn at pdf_dpi) when
    # ``image`` was scaled from that to be read: hOCR and ALTO give boxes in these pixels.
    shown: tuple[int, int] | None = None
    # The image as the engine will send it, made by the engine's ``prepare_page`` in a
    # preparer thread so that no request waits on it (the remote engine's data URL).
    payload: str | None = None
    # Why this page's reading may not be whole, found while preparing it (a form value
    # not drawn, an XFA form, marks on a page recorded blank): the result keeps it as
    # ``PageText.keep_original``, so the original is never archived or deleted.
    doubt: str | None = None
    # A doubt that holds only if the engine's reading is unsure too (``PageText.confidence``):
    # the page looks written in a script none of the languages reads (ocrwatch/scan/script.py).
    script_doubt: str | None = None
    # OSD did not look at the page (its lines told its turn, or it was not turned): its
    # script is asked only when the reading is unsure (ScanPrep.script_doubt), which is
    # the only time a script's doubt can hold, at no OSD cost for pages read surely.
    script_unchecked: bool = False
    # Its turn was left to its reading (an engine that says how sure it is: Tesseract):
    # its lines did not tell it, and a page read as upright text needs no OSD. One read
    # otherwise is turned then, as its preparation would have (ScanPrep.turn_after_reading).
    turn_unchecked: bool = False
    # A small drawing of a page whose text was taken from the PDF (its ``image`` is then
    # a 1x1 stand-in): what its thumbnail is made from. None when not drawn.
    sketch: Image.Image | None = None
    # Text the page holds beside what the engine reads on ``image`` (a PDF's text layer
    # when its pictures are read, form values, notes): blocks of (top, as a share of the
    # page's height; text), merged with the engine's lines by place
    # (ocrwatch/pages/merge.py), never replaced by them.
    known: tuple[tuple[float, str], ...] = ()
    # Drawn without its text layer (which is in ``known``): ``image`` shows only what the
    # layer lacks (pictures, outlines, stamps), and the engine's reading of it is judged
    # as such (ocrwatch/pages/pictures.py): a logo's marks are no doubt, lost words are.
    beside_layer: bool = False

    @property
    def size(self) -> tuple[int, int]:
        return self.image.size


@dataclass
class PageText:
    """What an engine read on one page."""

    markdown: str
    text: str
    warnings: list[str] = field(default_factory=list)
    error: str | None = None  # set when this page could not be read; the file then fails
    layout: PageLayout | None = None  # word boxes, when the engine found them
    # From the page's preparation (Page.blank, turned, skew), kept in its index row.
    blank: bool = False
    turned: int = 0
    skew: float = 0.0
    nonwords: bool = False  # mostly not words: paper texture or noise read as text
    confidence: float | None = None  # the engine's mean word confidence (0-100), if it has one
    # Set when the text may not be the whole page (a model's empty answer): the file is
    # done, but its original must not be archived or deleted; the reason says why.
    keep_original: str | None = None


DOUBT_NOTE = "doubtful text: "  # the warning a keep_original is kept as in the index


def doubt_of(page: PageText) -> str | None:
    """Why ``page``'s original must be kept (its ``keep_original``), also for pages read
    back from the index, where that reason is one of its warnings."""
    if page.keep_original:
        return page.keep_original
    return next((w[len(DOUBT_NOTE):] for w in page.warnings if w.startswith(DOUBT_NOTE)),
                None)


class State(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class Job:
    id: int
    path: Path
    sha256: str | None
    size: int
    mtime_ns: int
    state: State
    attempts: int
    reason: str | None = None
    retire: str | None = None  # what on_success still owes a done file (migration 008)
    retire_reason: str | None = None
    crashes: int = 0  # fatal crashes of the daemon while it was read (migration 010)
    # What a command asked for the original ("keep", "archive", "delete"); None: its place
    # decides (results/retire.disposal). Migration 011, as original_gone: the original was
    # deleted after its reading, and ``path`` names its result.
    asked: str | None = None
    original_gone: bool = False
    queued_at: float | None = None  # when a claimed job was queued (the metrics' latency)

    @property
    def display(self) -> str:
        return display_path(self.path)


def display_path(path: Path) -> str:
    """A path as text for people and the index: its bytes read as UTF-8, others replaced."""
    return os.fsencode(path).decode("utf-8", errors="replace")
