"""The searchable PDF of a finished file: word positions, then the PDF beside the sidecars.

Word positions come from the engine when it has them (Tesseract). Otherwise (the model
engines, or a result taken from an identical file read before) the pages are drawn again
and Tesseract finds the words' boxes, on which :mod:`ocrwatch.results.align` places the text.
A page the model gave layout blocks (LightOnOCR-3) keeps Tesseract's word positions where
the readings agree, else has each block's text set in its block; the log says which.
A PDF that cannot be made costs the file its PDF only: the ``.md`` and ``.txt`` are
still written, and the reason is kept as a warning in the file's index row.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from ocrwatch.config import Config
from ocrwatch.core.domain import Page, PageText
from ocrwatch.core.errors import EngineUnavailable, TransientError
from ocrwatch.core.layout import PageLayout
from ocrwatch.core.textutil import markdown_to_text
from ocrwatch.fs.safeopen import open_file_beneath, source_root
from ocrwatch.pages.decode import iter_pages, sniff
from ocrwatch.results import pdfout
from ocrwatch.results.align import block_layer, place_text
from ocrwatch.results.sidecar import new_temp
from ocrwatch.scan import prepare as scanprep

log = logging.getLogger(__name__)


def _blocks_only(layout: PageLayout) -> bool:
    """A model's layout blocks without word positions: the words are still to be placed."""
    return bool(layout.blocks) and not layout.words


def _read_width(layout: PageLayout) -> int:
    """The width of the image a layout's boxes are in."""
    return layout.read_size[0] if layout.read_size is not None else layout.width


def _place_blocks(read: PageText, blocks: PageLayout, boxes: PageLayout, page: Page,
                  warnings: list[str]) -> tuple[PageText, str]:
    """A page the model gave layout blocks: its words on Tesseract's boxes where the two
    readings agree word by word, else each block's text in its block. Says which."""
    whole = "\n".join(block.text for block in blocks.blocks)  # margins too: on the page
    if boxes.words:
        layout, placed = place_text(markdown_to_text(whole), boxes)
        if not layout.by_line:
            on_page = scanprep.on_page(layout, page)
            assert on_page is not None
            scale = _read_width(on_page) / max(1, _read_width(blocks))
            kept = tuple(replace(b, box=(round(b.box[0] * scale), round(b.box[1] * scale),
                                         round(b.box[2] * scale), round(b.box[3] * scale)))
                         for b in blocks.blocks)
            return (replace(read, layout=replace(on_page, blocks=kept),
                            warnings=[*read.warnings, *warnings, *placed]),
                    "on Tesseract's word boxes")
    return (replace(read, layout=block_layer(blocks), warnings=[*read.warnings, *warnings]),
            "in the model's layout blocks")


class WordBoxes(Protocol):
    """What finds the words' boxes on a page read without them (the Tesseract engine)."""

    def layout(self, page: Page) -> PageLayout: ...

    def close(self) -> None: ...


class PdfMaker:
    """Makes ``NAME.ocr.pdf``; owns the reader used for word boxes only.

    ``boxes`` makes that reader when a page first needs it: the daemon hands in the
    Tesseract engine's (the results do not import the engines). Without it, a page read
    without word positions gets its text line by line, with a warning.
    """

    def __init__(self, config: Config,
                 boxes: Callable[[Config], WordBoxes] | None = None) -> None:
        self.config = config
        self._make_boxes = boxes
        self._boxes: WordBoxes | None = None  # made when first needed
        self._lock = threading.Lock()
        self._closed = False

    def _box_reader(self) -> WordBoxes:
        with self._lock:
            if self._closed:
                raise TransientError("ocrwatch is stopping: the PDF is made at the next start")
            if self._boxes is None:
                if self._make_boxes is None:
                    raise EngineUnavailable("no word-box reader was given")
                self._boxes = self._make_boxes(self.config)
            return self._boxes

    @contextlib.contextmanager
    def _open(self, source: Path) -> Iterator[BinaryIO]:
        """The original opened again as the daemon reads it: no link followed below its
        inbox. Between the read and the PDF a folder may have been swapped for a link to
        elsewhere; opening by path would put that other file in the inbox's PDF."""
        root = source_root(source, self.config.inbox, self.config.follow_symlinks)
        with open_file_beneath(root, source) as fh:
            yield fh

    def pdfa(self) -> bool:
        """PDF/A asked for: "auto" and "always" (made by pikepdf, pages kept as they are)."""
        return self.config.pdfa != "never"

    def place(self, source: Path, pages: list[PageText]) -> list[PageText]:
        """Pages with each word on its box (for hOCR and ALTO without a PDF)."""
        return self._place(source, pages)

    def _place(self, source: Path, pages: list[PageText]) -> list[PageText]:
        """Pages without word positions get them: Tesseract's boxes under their text.

        Without Tesseract (its language data missing...) the text is still put on the
        page, line by line, with a warning.
        """
        missing = {i for i, p in enumerate(pages) if p.layout is None or _blocks_only(p.layout)}
        if not missing:
            return pages
        try:
            reader: Any = self._box_reader()
            why = ""
        except EngineUnavailable as exc:
            reader, why = None, f"Tesseract cannot find word positions ({exc})"
        out = list(pages)
        with self._open(source) as fh:
            placed_pages = self._place_pages(source, fh, pages, missing, reader, why)
        for index, page_text in placed_pages.items():
            out[index] = page_text
        return out

    def _place_pages(self, source: Path, fh: BinaryIO, pages: list[PageText],
                     missing: set[int], reader: Any, why: str) -> dict[int, PageText]:
        out: dict[int, PageText] = {}
        placements: dict[str, int] = {}  # how the pages with layout blocks were placed
        for page in iter_pages(source, self.config, None, fh):
            if page.index not in missing:
                continue
            warnings: list[str] = []
            read = pages[page.index]
            # Turned and straightened as when it was read: the boxes fall under its text.
            page = scanprep.again(page, read.turned, read.skew)
            if reader is not None:
                boxes = reader.layout(page)
            else:
                boxes = PageLayout(page.image.width, page.image.height)
                warnings.append(why)
            if read.layout is not None and _blocks_only(read.layout):
                out[page.index], how = _place_blocks(read, read.layout, boxes, page,
                                                     warnings)
                placements[how] = placements.get(how, 0) + 1
                continue
            layout, placed = place_text(read.text, boxes)
            out[page.index] = replace(pages[page.index],
                                      layout=scanprep.on_page(layout, page),
                                      warnings=[*pages[page.index].warnings, *warnings,
                                                *placed])
        if placements:
            log.info("%s: PDF text layer of the pages with layout blocks: %s", source.name,
                     ", ".join(f"{n} {how}" for how, n in sorted(placements.items())))
        return out

    def make(self, source: Path, pages: list[PageText], dest: Path
             ) -> tuple[list[PageText], Path | None]:
        """Pages with word positions (and any warnings), and the PDF in a temporary file
        beside ``dest`` for the caller to rename into place with the other sidecars;
        None instead of the file when the PDF could not be made (said in a warning)."""
        pages = self._place(source, pages)
        tmp = new_temp(dest)
        try:
            with self._open(source) as fh:
                is_pdf = sniff(source, fh) == "pdf"
                mode = os.fstat(fh.fileno()).st_mode

                def render() -> Iterator[Any]:
                    with self._open(source) as again:
                        yield from iter_pages(source, self.config, None, again)

                notes = pdfout.write(source, [p.layout for p in pages], tmp, is_pdf=is_pdf,
                                     pdfa=self.pdfa(), render=render,
                                     open_source=lambda: self._open(source),
                                     reencode=self.config.pdfa == "always",
                                     turns=[p.turned for p in pages])
            # Never readable by more people than the original.
            with contextlib.suppress(OSError):
                os.chmod(tmp, 0o644 & (mode | 0o600))
        except TransientError:
            tmp.unlink(missing_ok=True)
            raise  # a full disk: the whole file is tried again later
        except Exception as exc:
            tmp.unlink(missing_ok=True)
            reason = str(exc) or exc.__class__.__name__
            log.warning("%s: no searchable PDF: %s", source.name, reason)
            first = pages[0]
            pages = [replace(first, warnings=[*first.warnings,
                                              f"no searchable PDF was written: {reason}"]),
                     *pages[1:]]
            return pages, None
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if notes:
            for note in notes:
                log.info("%s: PDF: %s", source.name, note)
            first = pages[0]
            pages = [replace(first, warnings=[*first.warnings, *(f"PDF: {n}" for n in notes)]),
                     *pages[1:]]
        return pages, tmp

    def close(self) -> None:
        with self._lock:
            self._closed = True
            boxes, self._boxes = self._boxes, None
        if boxes is not None:
            boxes.close()
