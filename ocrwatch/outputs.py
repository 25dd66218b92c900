"""The searchable PDF of a finished file: word positions, then the PDF beside the sidecars.

Word positions come from the engine when it has them (Tesseract). Otherwise (the model
engines, or a result taken from an identical file read before) the pages are drawn again
and Tesseract finds the words' boxes, on which :mod:`ocrwatch.align` places the text.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from ocrwatch import pdfout
from ocrwatch.align import place_text
from ocrwatch.config import Config
from ocrwatch.domain import PageText
from ocrwatch.errors import EngineUnavailable, InputError
from ocrwatch.layout import PageLayout
from ocrwatch.pages import iter_pages, sniff
from ocrwatch.sidecar import new_temp

log = logging.getLogger(__name__)


class PdfMaker:
    """Makes ``NAME.ocr.pdf``; owns the Tesseract reader used for word boxes only."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._boxes: Any = None  # a TesseractEngine, made when first needed
        self._lock = threading.Lock()
        self._closed = False

    def _box_reader(self) -> Any:
        with self._lock:
            if self._closed:
                raise InputError("ocrwatch is stopping: the PDF is made at the next start")
            if self._boxes is None:
                from ocrwatch.engines.tesseract import TesseractEngine

                self._boxes = TesseractEngine(self.config)
            return self._boxes

    def pdfa(self) -> bool:
        if self.config.pdfa == "never":
            return False
        return self.config.pdfa == "always" or pdfout.ghostscript() is not None

    def make(self, source: Path, pages: list[PageText], dest: Path
             ) -> tuple[list[PageText], Path]:
        """Pages with word positions (and any warnings), and the PDF in a temporary file
        beside ``dest``, for the caller to rename into place with the other sidecars."""
        layouts: list[PageLayout | None] = [p.layout for p in pages]
        missing = {i for i, layout in enumerate(layouts) if layout is None}
        if missing:
            try:
                reader = self._box_reader()
            except EngineUnavailable as exc:
                raise InputError(f"the PDF needs Tesseract for word positions: {exc}") from exc
            for page in iter_pages(source, self.config, None):
                if page.index not in missing:
                    continue
                boxes = reader.layout(page)
                layout, warnings = place_text(pages[page.index].text, boxes)
                layouts[page.index] = layout
                pages[page.index] = replace(pages[page.index], layout=layout,
                                            warnings=[*pages[page.index].warnings, *warnings])
        tmp = new_temp(dest)
        try:
            notes = pdfout.write(source, layouts, tmp, is_pdf=sniff(source) == "pdf",
                                 pdfa=self.pdfa(),
                                 render=lambda: iter_pages(source, self.config, None))
            # Never readable by more people than the original.
            with contextlib.suppress(OSError):
                os.chmod(tmp, 0o644 & (os.stat(source).st_mode | 0o600))
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        for note in notes:
            log.info("%s: %s", source.name, note)
        return pages, tmp

    def close(self) -> None:
        with self._lock:
            self._closed = True
            boxes, self._boxes = self._boxes, None
        if boxes is not None:
            boxes.close()
