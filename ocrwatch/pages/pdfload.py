"""What loading a PDF page will cost, known before PDFium loads it.

PDFium parses a page's whole content when it loads the page, and it parses a form
(a Form XObject) again at every use, with the objects of each use kept apart: a page
that draws a form of one line 400,000 times took 560 MB, and a form that draws itself
twice (a file of 800 bytes) doubles at every level until the machine's memory is gone,
in one native call that nothing can interrupt. So the page's graph of forms is walked
first with qpdf (through pikepdf), each form measured once and counted once per use,
and a page whose load would cost more than the page's memory budget fails with a
reason instead of being loaded.

Measured with pypdfium2's PDFium (the RSS a page's load added): about 13 bytes of memory
per byte of paths or text, about 1.4 KB per use of a form.
"""

from __future__ import annotations

import io
import logging
import re
from pathlib import Path
from typing import Any, BinaryIO

from ocrwatch.core.errors import OverBudget
from ocrwatch.pages.budget import Budget
from ocrwatch.pages.pdftext import stream_pieces

log = logging.getLogger(__name__)

BYTES_PER_CONTENT_BYTE = 16  # PDFium's parsed objects per byte of content (13-14 measured)
BYTES_PER_FORM_USE = 2048  # each use of a form is parsed apart (1.4 KB measured)
MAX_DEPTH = 28  # PDFium's own limit on forms inside forms is deeper; no real page nests so
_DO = re.compile(rb"/([^\s/\[\]()<>{}%]+)\s*Do\b")


class _Cycle(OverBudget):
    """A form that draws itself, directly or through others (turned into the
    :class:`OverBudget` that names the page)."""


class LoadCost:
    """What loading each page of one PDF would cost PDFium, read with qpdf on a handle of
    its own. A file qpdf cannot read is not judged here (PDFium's own errors say more)."""

    def __init__(self, source: BinaryIO | Path) -> None:
        import pikepdf

        self._pdf: Any = None
        try:
            if isinstance(source, Path):
                self._pdf = pikepdf.open(source)
            elif isinstance(source, io.BytesIO):
                self._pdf = pikepdf.open(io.BytesIO(source.getvalue()))
            else:
                self._pdf = pikepdf.open(f"/proc/self/fd/{source.fileno()}")
        # PikepdfError: both qpdf's PdfError and its QpdfRuntimeError (a page tree it
        # cannot flatten), which is no PdfError (found by the page-loader fuzz).
        except (pikepdf.PikepdfError, OSError, ValueError, RecursionError) as exc:
            log.debug("the pages' load cost cannot be measured (%s)", exc)

    def check(self, index: int, budget: Budget, where: str) -> None:
        """Raise OverBudget when loading page ``index`` would take more memory than the
        budget, or its forms draw themselves."""
        import pikepdf

        if self._pdf is None:
            return
        try:
            if index >= len(self._pdf.pages):
                return
            page = self._pdf.pages[index]
            limit = int(min(budget.memory, 1 << 62))
            cost = _Walk(limit, budget, where).page(page)
        except _Cycle:
            raise OverBudget(
                f"{where} of the PDF draws a form inside itself, without end: PDFium "
                "would use all the machine's memory loading it. The file is damaged or "
                "made to stop readers; print it to a new PDF if it is genuine") from None
        except (pikepdf.PikepdfError, OSError, ValueError, RecursionError) as exc:
            log.debug("%s: its load cost cannot be measured (%s)", where, exc)
            return
        if cost > limit:
            raise OverBudget(
                f"{where} of the PDF would need more than {limit / 1024 / 1024:.0f} MB of "
                "memory to load (forms drawn inside forms, each use held apart), over the "
                "budget of prepare_memory_mb: the file is made to stop readers, or very "
                "unusual; raise prepare_memory_mb in the config if it is genuine")

    def close(self) -> None:
        if self._pdf is not None:
            self._pdf.close()
            self._pdf = None


class _Walk:
    """One page's forms, each measured once (memo) and counted per use; stops counting
    once past ``limit``."""

    def __init__(self, limit: int, budget: Budget, where: str) -> None:
        self.limit = limit
        self.budget = budget
        self.where = where
        self.memo: dict[tuple[int, int], int] = {}
        self.open: set[tuple[int, int]] = set()

    def page(self, page: Any) -> int:
        import pikepdf

        contents = page.obj.get("/Contents")
        streams = ([contents] if isinstance(contents, pikepdf.Stream)
                   else list(contents) if isinstance(contents, pikepdf.Array) else [])
        resources = page.obj.get("/Resources")
        total = 0
        for stream in streams:
            if isinstance(stream, pikepdf.Stream) and total <= self.limit:
                total += self.stream(stream, resources, 0)
        return total

    def stream(self, stream: Any, resources: Any, depth: int) -> int:
        import pikepdf

        key = stream.objgen
        if key != (0, 0):
            if key in self.open:
                raise _Cycle
            if key in self.memo:
                return self.memo[key]
        if depth > MAX_DEPTH:
            return self.limit + 1  # forms nested this deep: refused as too costly
        self.budget.check(self.where, "measuring its forms")
        self.open.add(key)
        try:
            uses: dict[bytes, int] = {}
            size, tail = 0, b""
            for piece in stream_pieces(stream, pikepdf):
                data = tail + piece
                for match in _DO.finditer(data):
                    if match.end() > len(tail):  # not counted with the piece before
                        uses[match[1]] = uses.get(match[1], 0) + 1
                tail = data[-64:]
                size += len(piece)
                if size * BYTES_PER_CONTENT_BYTE > self.limit:
                    break
            total = size * BYTES_PER_CONTENT_BYTE
            forms = resources.get("/XObject") if isinstance(resources, pikepdf.Dictionary) \
                else None
            if isinstance(forms, pikepdf.Dictionary):
                for name, count in uses.items():
                    if total > self.limit:
                        break
                    form = forms.get("/" + name.decode("latin-1"))
                    if (not isinstance(form, pikepdf.Stream)
                            or form.get("/Subtype") != pikepdf.Name.Form):
                        continue
                    inner = self.stream(form, form.get("/Resources", resources), depth + 1)
                    total += count * (BYTES_PER_FORM_USE + inner)
        finally:
            self.open.discard(key)
        self.memo[key] = total
        return total
