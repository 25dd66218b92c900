"""Drawing a PDF page within its time budget.

PDFium's plain call draws a page in one go: a page of ten million glyphs took 23 s, and
nothing could stop it. Its progressive renderer asks, every few objects, whether to
pause; ocrwatch pauses when the page's budget (:mod:`ocrwatch.pages.budget`) is spent, then
abandons the drawing and fails the file. Callers hold the PDFium lock.
"""

from __future__ import annotations

import math
from typing import Any

from PIL import Image

from ocrwatch.pages.budget import Budget


def draw(page: Any, scale: float, budget: Budget, where: str, *, grayscale: bool = False,
         annotations: bool = True) -> Image.Image:
    """``page`` (a pypdfium2 PdfPage) drawn at ``scale`` on white: L when ``grayscale``,
    else RGB. Raises OverBudget when drawing it takes longer than the budget."""
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
    image: Image.Image = bitmap.to_pil()
    return image
