"""Drawing a PDF page within its time budget.

PDFium's plain call draws a page in one go: a page of ten million glyphs took 23 s, and
nothing could stop it. Its progressive renderer asks, every few objects, whether to
pause; ocrwatch pauses when the page's budget (:mod:`ocrwatch.pages.budget`) is spent, then
abandons the drawing and fails the file. Callers hold the PDFium lock.

Form fields are drawn by PDFium's form environment (``init_forms``), after the page:
the plain renderer leaves a filled field's value out, even with annotations on.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from PIL import Image

from ocrwatch.pages.budget import Budget

# Forms inside forms walked to find a page's objects (a scan can be nested deep).
MAX_DEPTH = 16


def draw(page: Any, scale: float, budget: Budget, where: str, *, grayscale: bool = False,
         annotations: bool = True, forms: bool = False, flatten: bool = False) -> Image.Image:
    """``page`` (a pypdfium2 PdfPage) drawn at ``scale`` on white: L when ``grayscale``,
    else RGB; with ``forms``, its form fields too (when its document's form environment
    was made before the page was opened); with ``flatten``, L when it came out without
    colour (as ``image.flattened`` makes it). Raises OverBudget when drawing it takes
    longer than the budget."""
    import pypdfium2 as pdfium
    import pypdfium2.internal as pdfium_i
    import pypdfium2.raw as pdfium_c

    width = max(1, math.ceil(page.get_width() * scale))
    height = max(1, math.ceil(page.get_height() * scale))
    kind = pdfium_c.FPDFBitmap_Gray if grayscale else pdfium_c.FPDFBitmap_BGR
    bitmap = pdfium.PdfBitmap.new_native(width, height, format=kind)
    bitmap.fill_rect((255, 255, 255, 255), 0, 0, width, height)
    flags = ((pdfium_c.FPDF_GRAYSCALE if grayscale else 0)
             | (pdfium_c.FPDF_ANNOT if annotations else 0))
    pause = pdfium_c.IFSDK_PAUSE(version=1)
    pdfium_i.set_callback(pause, "NeedToPauseNow",
                          lambda _pause: budget.spent() > budget.seconds)
    status = pdfium_c.FPDF_RenderPageBitmap_Start(bitmap, page, 0, 0, width, height, 0,
                                                  flags, pause)
    try:
        while status == pdfium_c.FPDF_RENDER_TOBECONTINUED:
            budget.check(where, "drawing it")
            status = pdfium_c.FPDF_RenderPage_Continue(page, pause)
    finally:
        pdfium_c.FPDF_RenderPage_Close(page)
    if status == pdfium_c.FPDF_RENDER_FAILED:
        raise pdfium.PdfiumError("PDFium could not draw the page")
    formenv = getattr(page, "formenv", None) if forms else None
    if formenv:
        budget.check(where, "drawing it")
        pdfium_c.FPDF_FFLDraw(formenv, bitmap, page, 0, 0, width, height, 0, flags)
    if flatten and not grayscale:
        grey = _grey_of(bitmap, width, height)
        if grey is not None:
            return grey
    image: Image.Image = bitmap.to_pil()
    return image


def _grey_of(bitmap: Any, width: int, height: int) -> Image.Image | None:
    """A BGR bitmap whose three channels are equal as its grey (those values exactly),
    made a strip at a time; None at the first strip with colour. A grey scan drawn from a
    PDF then never exists as a whole RGB copy beside PDFium's bitmap (a 200 dpi A4 page:
    10 MB more at once in the preparer, while the readers hold theirs)."""
    from ocrwatch.pages.image import GREY_STRIP, equal_channels

    stride = bitmap.stride
    data = memoryview(bitmap.buffer).cast("B")
    grey = Image.new("L", (width, height))
    for top in range(0, height, GREY_STRIP):
        rows = min(GREY_STRIP, height - top)
        strip = Image.frombytes("RGB", (width, rows),
                                data[top * stride:(top + rows) * stride].tobytes(), "raw",
                                "BGR", stride, 1)
        if not equal_channels(strip):
            return None
        grey.paste(strip.getchannel(0), (0, top))
    return grey


@contextmanager
def text_hidden(page: Any, budget: Budget, where: str) -> Iterator[None]:
    """Every text object of ``page`` invisible while inside; their render modes put back
    as they were after, so the page draws as before."""
    import pypdfium2.raw as pdfium_c

    modes = []
    try:
        for n, obj in enumerate(page.get_objects(max_depth=MAX_DEPTH)):
            if n % 4096 == 0:
                budget.check(where, "listing its text objects")
            if pdfium_c.FPDFPageObj_GetType(obj.raw) == pdfium_c.FPDF_PAGEOBJ_TEXT:
                modes.append((obj, pdfium_c.FPDFTextObj_GetTextRenderMode(obj.raw)))
                pdfium_c.FPDFTextObj_SetTextRenderMode(
                    obj.raw, pdfium_c.FPDF_TEXTRENDERMODE_INVISIBLE)
        yield
    finally:
        for obj, mode in modes:
            pdfium_c.FPDFTextObj_SetTextRenderMode(obj.raw, mode)


def draw_pictures(page: Any, scale: float, budget: Budget, where: str) -> Image.Image:
    """``page`` drawn without its text (its text objects, its FreeText notes and its form
    fields, whose text is taken exactly): what is left is its pictures, shapes, stamps
    and drawings, for the engine to read the words they hold."""
    from ocrwatch.pages.pdfannots import hidden_text_annotations

    with text_hidden(page, budget, where), hidden_text_annotations(page):
        return draw(page, scale, budget, where, forms=False)
