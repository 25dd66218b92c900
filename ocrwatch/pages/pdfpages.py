"""A PDF's pages: opened with PDFium, each page's own text taken or the page drawn.

Imported only when a PDF comes, so that pypdfium2 loads then. The checks shared with
images (limits, scaling, blank pages) are in :mod:`ocrwatch.pages.image`.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from PIL import Image

from ocrwatch.core.domain import Page
from ocrwatch.core.errors import Doing, InputError, os_reason
from ocrwatch.pages import memory
from ocrwatch.pages.budget import Budget, unlimited
from ocrwatch.pages.image import Limits, blank, flattened, scale_to, to_rgb
from ocrwatch.pages.pdfdraw import draw, draw_pictures
from ocrwatch.pages.pdfium_lock import PDFIUM
from ocrwatch.pages.pdfload import LoadCost

log = logging.getLogger(__name__)

# A PDF page is drawn, not resampled: at most this many pixels, whatever its size.
RENDER_PIXELS = 40_000_000
# A page holding a scan is drawn at the scan's resolution when that is sharper than the
# configured dpi (a 1.7-inch card scanned with 4000 pixels), as OCRmyPDF does, but with at
# most the pixels of a Letter page at the configured dpi (a 600 dpi A4 scan is still
# drawn at about 300 dpi).
FULL_PAGE_INCHES = 8.5 * 11.0
# A PDF page can be at most 200 inches a side (the format's own limit, 14400 units).
MAX_PDF_INCHES = 200.0
MIN_PDF_INCHES = 0.1
# A page whose text is taken from the PDF is drawn this large for its thumbnail only,
# in at most this long: a page slow to draw is left without a picture, never delayed.
SKETCH_SIDE = 320
SKETCH_SECONDS = 0.5


def pdf_document(path: Path, fh: BinaryIO | None = None) -> object:
    import pypdfium2 as pdfium

    try:
        if fh is not None:
            fh.seek(0)
        with PDFIUM:
            return pdfium.PdfDocument(fh if fh is not None else str(path))
    except FileNotFoundError:
        raise InputError("the file was deleted before it could be read") from None
    except pdfium.PdfiumError as exc:
        raise _pdf_open_error(path, exc, fh) from None
    except OSError as exc:
        raise os_reason(exc, Doing.DECODE, verb="open") from exc


def page_tree_count(path: Path, fh: BinaryIO | None = None) -> int | None:
    """The pages qpdf finds walking the page tree (through pikepdf), or None when it
    cannot open the file: a second reader beside PDFium, which believes the root's
    ``/Count`` (a page tree saying 1 page for 2 gives PDFium one page)."""
    import pikepdf

    try:
        if fh is not None:
            fh.seek(0)
            with pikepdf.open(fh) as pdf:
                return len(pdf.pages)
        with pikepdf.open(path) as pdf:
            return len(pdf.pages)
    except Exception:  # damaged, encrypted...: PDFium's error says what is wrong
        return None


def _rewritten(fh: BinaryIO | None, path: Path) -> BinaryIO | None:
    """The PDF rewritten by qpdf (its page tree counted again), in an anonymous
    temporary file, or None when qpdf cannot."""
    import tempfile

    import pikepdf

    out = tempfile.TemporaryFile()  # noqa: SIM115 - handed to the caller, who closes it
    try:
        if fh is not None:
            fh.seek(0)
        with pikepdf.open(fh if fh is not None else path) as pdf:
            pdf.save(out)
        out.seek(0)
        return out
    except Exception as exc:
        out.close()
        log.warning("%s: qpdf cannot rewrite it (%s)", path.name, exc)
        return None


def open_all_pages(path: Path, fh: BinaryIO | None = None
                   ) -> tuple[object, BinaryIO | None, int | None]:
    """The PDF opened with PDFium so that every page is there: when qpdf finds more
    pages in the page tree than PDFium (a ``/Count`` that lies), PDFium opens qpdf's
    rewrite instead. Returns the document, the rewrite to close after it (or None) and
    qpdf's count."""
    import pypdfium2 as pdfium

    doc = pdf_document(path, fh)
    assert isinstance(doc, pdfium.PdfDocument)
    with PDFIUM:
        count = len(doc)
    tree = page_tree_count(path, fh)
    if tree is None or tree <= count:
        return doc, None, tree
    log.warning("%s: its page tree says %d page%s, qpdf finds %d: reading qpdf's %d",
                path.name, count, "" if count == 1 else "s", tree, tree)
    rewrite = _rewritten(fh, path)
    if rewrite is None:
        return doc, None, tree
    try:
        again = pdf_document(path, rewrite)
    except Exception:
        rewrite.close()
        return doc, None, tree
    with PDFIUM:
        doc.close()
    return again, rewrite, tree


def _pdf_markers(path: Path, limit: int = 64 << 20,
                 fh: BinaryIO | None = None) -> tuple[bool, bool, bool]:
    """Whether the file mentions /Encrypt, an empty page tree, a non-empty one.

    PDFium leaves its last error unset on some failures, so the error it reports can be
    the previous file's; the file's own bytes decide what to tell the user.
    """
    import re

    try:
        if fh is not None:
            fh.seek(0)
            data = fh.read(limit)
        else:
            with path.open("rb") as opened:
                data = opened.read(limit)
    except OSError:
        return False, False, False
    return (b"/Encrypt" in data, re.search(rb"/Count\s+0\b", data) is not None,
            re.search(rb"/Count\s+[1-9]", data) is not None)


def _pdf_open_error(path: Path, exc: Exception, fh: BinaryIO | None = None) -> InputError:
    encrypted, empty_tree, pages = _pdf_markers(path, fh=fh)
    code = getattr(exc, "err_code", None)
    if encrypted and code in (4, 5):  # FPDF_ERR_PASSWORD, FPDF_ERR_SECURITY
        return InputError("the PDF is password-protected; save an unprotected copy into the inbox")
    if empty_tree and not pages:
        return InputError("the PDF has no pages")
    return InputError("the PDF is damaged and cannot be opened; if a program is still "
                      "writing it, it is read again once it changes")


class ContentSizes:
    """Each page's content bytes (:func:`ocrwatch.pages.pdftext.content_size`), measured when
    asked (so within that page's budget), with qpdf on a handle of its own (PDFium's
    place in an open file does not move). None for a page qpdf cannot read."""

    def __init__(self, source: BinaryIO | Path, limit: int) -> None:
        import pikepdf

        self.limit = limit
        self._pdf: pikepdf.Pdf | None = None
        try:
            if isinstance(source, Path):
                self._pdf = pikepdf.open(source)
            elif isinstance(source, io.BytesIO):
                self._pdf = pikepdf.open(io.BytesIO(source.getvalue()))
            else:
                self._pdf = pikepdf.open(f"/proc/self/fd/{source.fileno()}")
        except (pikepdf.PikepdfError, OSError, ValueError, RecursionError) as exc:
            log.debug("the pages' content cannot be measured (%s)", exc)

    def __call__(self, index: int) -> int | None:
        import pikepdf

        from ocrwatch.pages import pdftext

        if self._pdf is None:
            return None
        try:
            if index >= len(self._pdf.pages):
                return None
            return pdftext.content_size(self._pdf.pages[index], self.limit)
        except (pikepdf.PikepdfError, OSError, ValueError, RecursionError) as exc:
            log.debug("page %d's content cannot be measured (%s)", index + 1, exc)
            return None

    def close(self) -> None:
        if self._pdf is not None:
            self._pdf.close()
            self._pdf = None


def pdf_pages(path: Path, limits: Limits, max_side: int | None, dpi: int,
              fh: BinaryIO | None = None, pdf_text: str = "ocr",
              budget: Budget | None = None) -> Iterator[Page]:
    import pypdfium2 as pdfium

    from ocrwatch.pages import pdfdoc, pdftext

    budget = budget or unlimited()
    doc, rewrite, _tree = open_all_pages(path, fh)
    assert isinstance(doc, pdfium.PdfDocument)
    # What the file holds beside its pages (an XFA form, attached files): a doubt.
    extras = pdfdoc.extras(path, fh)
    if extras.doubt:
        log.warning("%s: %s", path.name, extras.doubt)
    _init_forms(doc, path)
    sizes: ContentSizes | None = None
    cost = LoadCost(fh if fh is not None else path)
    try:
        with PDFIUM:
            count = len(doc)
        if count == 0:
            raise InputError("the PDF has no pages")
        if count > limits.max_pages:
            raise InputError(
                f"the PDF has {count} pages, over the limit of {limits.max_pages}; raise "
                "max_pages in the config if this file is genuine"
            )
        if pdf_text != "ocr":
            limit = int(min(budget.memory, 1 << 62) // pdftext.TEXTPAGE_BYTES_PER_CHAR)
            sizes = ContentSizes(fh if fh is not None else path, limit)
        for index in range(count):
            where = f"page {index + 1}"
            own_text: str | None = None
            page_sketch: Image.Image | None = None
            known: tuple[tuple[float, str], ...] = ()
            beside = False  # drawn without its text layer, which is in ``known``
            budget.page()
            content = None
            if sizes is not None:
                # Unmeasured (qpdf cannot read it): assumed too large to check.
                measured = sizes(index)
                content = measured if measured is not None else 1 << 62
            cost.check(index, budget, where)  # before PDFium loads it: see pdfload
            try:
                with PDFIUM:  # released before the page is handed on (yield)
                    page = doc[index]
                    try:
                        width_pt, height_pt = page.get_size()
                        _check_pdf_size(width_pt, height_pt, where)
                        notes = _annotations(page, path, where)
                        decision = pdftext.decide(
                            page, pdf_text, content=content, budget=budget, where=where,
                            marks="a stamp or a drawing in ink" if notes.pictures else None)
                        own_text = decision.text
                        if decision.pictures is not None:
                            # The layer is the page's text; what else it shows (pictures,
                            # outlines, a scan) is drawn without it and read by the engine.
                            log.debug("%s %s: its text layer, and its pictures read with "
                                      "OCR: %s", path.name, where, decision.pictures)
                            own_text = None
                            beside = True
                            known = decision.lines + notes.layer_blocks
                            scale = render_scale(width_pt, height_pt, dpi, limits)
                            budget.check(where, "checking its text layer")
                            image = to_rgb(draw_pictures(page, scale, budget, where))
                        elif own_text is None:
                            log.debug("%s %s read with OCR: %s", path.name, where,
                                      decision.reason)
                            known = notes.ocr_blocks
                            scale = render_scale(width_pt, height_pt, dpi, limits,
                                                 pdftext.image_dpi(page))
                            budget.check(where, "checking its text layer")
                            # A copy: PDFium's buffer is BGR. Filled form fields drawn;
                            # for Tesseract a page without colour grey at once.
                            image = draw(page, scale, budget, where, forms=True,
                                         flatten=max_side is None)
                            image = image if image.mode == "L" else to_rgb(image)
                        else:
                            known = notes.layer_blocks
                            page_sketch = sketch(page, where)
                    finally:
                        page.close()
            except pdfium.PdfiumError as exc:
                raise InputError(f"{where} of the PDF cannot be drawn ({exc})") from None
            budget.check(where, "drawing it")
            doubt = extras.doubt if index == 0 else None
            if index == 0 and extras.text:
                known += ((1.0, extras.text),)
            if own_text is not None:
                log.debug("%s %s: %s", path.name, where, decision.reason)
                # Nothing to draw: the text is the page's own.
                budget.pause()
                yield Page(source=path, index=index, image=Image.new("RGB", (1, 1), "white"),
                           dpi=None, count=count, text=own_text, known=known, doubt=doubt,
                           sketch=page_sketch)
                budget.resume()
                continue
            if max_side is None:
                image = flattened(image)  # a grey scan in grey: a third of the memory
            render_dpi = round(scale * 72)
            shown = image.size  # the page drawn at its dpi, before a model's scaling
            if max_side is not None and max(image.size) != max_side:
                render_dpi = round(render_dpi * max_side / max(image.size))
                image = scale_to(image, max_side)
            if memory.big(image.size):
                memory.give_back()
            budget.pause()
            yield Page(source=path, index=index, image=image, dpi=render_dpi, count=count,
                       text="" if blank(image) else None, known=known, doubt=doubt,
                       shown=shown if shown != image.size else None, beside_layer=beside)
            budget.resume()
    finally:
        cost.close()
        if sizes is not None:
            sizes.close()
        with PDFIUM:
            doc.close()
        if rewrite is not None:
            rewrite.close()


def sketch(page: object, where: str) -> Image.Image | None:
    """``page`` drawn with its form fields at most SKETCH_SIDE pixels a side, for its
    thumbnail; None when that takes over SKETCH_SECONDS or PDFium cannot draw it."""
    import pypdfium2 as pdfium

    from ocrwatch.core.errors import OverBudget

    assert isinstance(page, pdfium.PdfPage)
    scale = SKETCH_SIDE / max(page.get_width(), page.get_height(), 1.0)
    try:
        return to_rgb(draw(page, scale, Budget(SKETCH_SECONDS, float("inf")), where,
                           forms=True))
    except (OverBudget, pdfium.PdfiumError) as exc:
        log.debug("%s: no thumbnail drawn (%s)", where, exc)
        return None


def _init_forms(doc: object, path: Path) -> None:
    """PDFium's form environment, so that filled fields are drawn and their values read
    (before any page is opened); a form it cannot set up is drawn as the plain renderer
    does."""
    import warnings

    import pypdfium2 as pdfium

    assert isinstance(doc, pdfium.PdfDocument)
    # An XFA form that this PDFium cannot build is told apart by pdfdoc, with what to do;
    # pypdfium2's own warning (how to rebuild PDFium) says nothing to the user.
    quiet = logging.getLogger("pypdfium2")
    level = quiet.level
    try:
        quiet.setLevel(logging.ERROR)
        with PDFIUM, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            doc.init_forms()
    except pdfium.PdfiumError as exc:
        log.warning("%s: its form fields cannot be set up (%s); drawn without them",
                    path.name, exc)
    finally:
        quiet.setLevel(level)


def _annotations(page: object, path: Path, where: str) -> Any:
    """The page's form values and notes (pdfannots), none when they cannot be read."""
    from ocrwatch.pages import pdfannots

    try:
        return pdfannots.read(page)
    except Exception as exc:  # a damaged annotation is no reason to fail the page
        log.warning("%s %s: its notes and form fields cannot be read (%s)", path.name,
                    where, exc)
        return pdfannots.Annotations()


def _check_pdf_size(width_pt: float, height_pt: float, where: str) -> None:
    short, long = sorted((width_pt / 72, height_pt / 72))
    if not (short >= MIN_PDF_INCHES and long <= MAX_PDF_INCHES):
        raise InputError(f"{where} of the PDF is {width_pt / 72:.4g} x {height_pt / 72:.4g} "
                         f"inches: not a page (a PDF page is {MIN_PDF_INCHES} to "
                         f"{MAX_PDF_INCHES:.0f} inches a side)")


def render_scale(width_pt: float, height_pt: float, dpi: int, limits: Limits,
                 image_dpi: float | None = None) -> float:
    """Points to pixels for drawing a page: ``dpi``, or the resolution of the scan it
    holds (``image_dpi``) when sharper, up to the pixels of a Letter page at ``dpi``;
    lowered for a page so large that it would exceed what reading a page may cost (a
    200-inch poster is drawn at about 30 dpi, not at max_pixels)."""
    scale = dpi / 72.0
    if image_dpi is not None and image_dpi > dpi:
        full_page = FULL_PAGE_INCHES * dpi * dpi
        page_inches = max(width_pt * height_pt / (72.0 * 72.0), 1e-6)
        sharper = min(image_dpi, (full_page / page_inches) ** 0.5)
        scale = max(scale, sharper / 72.0)
    pixels = width_pt * height_pt * scale * scale
    budget = min(RENDER_PIXELS, limits.max_pixels)
    if pixels > budget:
        scale *= (budget / pixels) ** 0.5
    return scale
