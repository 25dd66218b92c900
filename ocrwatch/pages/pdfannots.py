"""What a PDF page's annotations say: form field values, notes, comments.

A viewer shows a filled form field, a "Fill & Sign" note (FreeText) and a stamp on the
page, and a comment's text when it is opened; none of it is in the page's text layer.
Their exact text is taken here, with its place on the page, as ``Page.known`` blocks
(:mod:`ocrwatch.pages.merge`):

- on a page whose text layer is taken, the values of text and choice fields and the
  text of every note and comment (a stamp or a drawing is read as a picture instead,
  when the page's pictures are read);
- on a page read with OCR (drawn with its form fields, :mod:`ocrwatch.pages.pdfdraw`),
  only what the drawing does not show: comments, and values of fields or notes that
  have no appearance of their own.

Callers hold the PDFium lock.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any

# Annotations whose /Contents is no note of a person's: links, popups (the popup shows
# its parent's text), form widgets (their value is /V), and drawn marks whose text
# repeats what they show.
_NOT_NOTES = ("LINK", "POPUP", "WIDGET", "STAMP", "FILEATTACHMENT", "SOUND", "MOVIE",
              "SCREEN", "PRINTERMARK", "TRAPNET", "WATERMARK", "THREED", "RICHMEDIA", "XFAWIDGET",
              "REDACT")
# Marks drawn on the page that may hold words (an image stamp, handwriting in ink).
_PICTURES = ("STAMP", "INK")
MAX_ANNOTS = 5000  # a page's annotations looked at; more is no real page


@dataclass(frozen=True)
class Annotations:
    """A page's annotations: exact text with places, and what drawing them needs."""

    layer_blocks: tuple[tuple[float, str], ...] = ()  # for a page whose layer is taken
    ocr_blocks: tuple[tuple[float, str], ...] = ()  # for a page read with OCR
    pictures: bool = False  # stamps or ink drawings that may hold words
    attachments: int = 0  # files attached to the page


@cache
def _names() -> dict[int, str]:
    import pypdfium2.raw as pdfium_c

    # FPDF_ANNOT_TEXT = 1 ... FPDF_ANNOT_REDACT; flags and modes are other prefixes.
    return {getattr(pdfium_c, n): n[len("FPDF_ANNOT_"):] for n in dir(pdfium_c)
            if n.startswith("FPDF_ANNOT_") and not n.startswith(("FPDF_ANNOT_FLAG_",
                                                                  "FPDF_ANNOT_APPEARANCE"))
            and isinstance(getattr(pdfium_c, n), int)}


def _utf16(call: Any, *args: Any) -> str:
    """A string PDFium writes as UTF-16LE into a buffer whose size it says first."""
    size = call(*args, None, 0)
    if size <= 2:
        return ""
    buf = ctypes.create_string_buffer(size)
    call(*args, ctypes.cast(buf, ctypes.POINTER(ctypes.c_ushort)), size)
    return buf.raw[:size].decode("utf-16-le", errors="replace").rstrip("\x00")


def _has_appearance(annot: Any) -> bool:
    import pypdfium2.raw as pdfium_c

    return bool(pdfium_c.FPDFAnnot_GetAP(
        annot, pdfium_c.FPDF_ANNOT_APPEARANCEMODE_NORMAL, None, 0) > 2)


def _top(annot: Any, height: float) -> float:
    import pypdfium2.raw as pdfium_c

    rect = pdfium_c.FS_RECTF()
    if not pdfium_c.FPDFAnnot_GetRect(annot, rect) or height <= 0:
        return 1.0  # no place: after the rest
    return min(1.0, max(0.0, 1.0 - float(max(rect.top, rect.bottom)) / height))


@contextmanager
def _each(page: Any) -> Iterator[Iterator[tuple[int, Any, str]]]:
    import pypdfium2.raw as pdfium_c

    opened: list[Any] = []

    def walk() -> Iterator[tuple[int, Any, str]]:
        count = min(pdfium_c.FPDFPage_GetAnnotCount(page.raw), MAX_ANNOTS)
        for index in range(count):
            annot = pdfium_c.FPDFPage_GetAnnot(page.raw, index)
            if not annot:
                continue
            opened.append(annot)
            yield index, annot, _names().get(pdfium_c.FPDFAnnot_GetSubtype(annot), "UNKNOWN")

    try:
        yield walk()
    finally:
        for annot in opened:
            pdfium_c.FPDFPage_CloseAnnot(annot)


def _field_value(annot: Any, forms: Any) -> str:
    """A text or choice field's value; "" for buttons and check boxes."""
    import pypdfium2.raw as pdfium_c

    if forms is None:
        return _utf16(pdfium_c.FPDFAnnot_GetStringValue, annot, b"V")
    kind = pdfium_c.FPDFAnnot_GetFormFieldType(forms, annot)
    if kind not in (pdfium_c.FPDF_FORMFIELD_TEXTFIELD, pdfium_c.FPDF_FORMFIELD_COMBOBOX,
                    pdfium_c.FPDF_FORMFIELD_LISTBOX):
        return ""
    return _utf16(pdfium_c.FPDFAnnot_GetFormFieldValue, forms, annot)


def read(page: Any) -> Annotations:
    """``page``'s (a pypdfium2 PdfPage) annotations; a damaged one is passed over."""
    import pypdfium2.raw as pdfium_c

    forms = getattr(page, "formenv", None)
    forms_raw = forms.raw if forms is not None else None
    height = float(page.get_height())
    layer: list[tuple[float, str]] = []
    ocr: list[tuple[float, str]] = []
    pictures = False
    attachments = 0
    with _each(page) as annots:
        for _index, annot, kind in annots:
            if pdfium_c.FPDFAnnot_GetFlags(annot) & pdfium_c.FPDF_ANNOT_FLAG_HIDDEN:
                continue
            if kind == "FILEATTACHMENT":
                attachments += 1
            if kind in _PICTURES and _has_appearance(annot):
                pictures = True
            if kind == "WIDGET":
                text = _field_value(annot, forms_raw)
            elif kind in _NOT_NOTES:
                continue
            else:
                text = _utf16(pdfium_c.FPDFAnnot_GetStringValue, annot, b"Contents")
            text = " ".join(text.split())
            if not text:
                continue
            block = (_top(annot, height), text)
            layer.append(block)
            # What a drawing shows (a field's or FreeText's appearance) is read there.
            if kind not in ("WIDGET", "FREETEXT") or not _has_appearance(annot):
                ocr.append(block)
    return Annotations(tuple(layer), tuple(ocr), pictures, attachments)


@contextmanager
def hidden_text_annotations(page: Any) -> Iterator[None]:
    """FreeText notes hidden while the page is drawn (their text is taken exactly);
    their flags put back after."""
    import pypdfium2.raw as pdfium_c

    changed: list[tuple[int, int]] = []
    try:
        with _each(page) as annots:
            for index, annot, kind in annots:
                if kind == "FREETEXT":
                    flags = pdfium_c.FPDFAnnot_GetFlags(annot)
                    pdfium_c.FPDFAnnot_SetFlags(annot, flags | pdfium_c.FPDF_ANNOT_FLAG_HIDDEN)
                    changed.append((index, flags))
        yield
    finally:
        for index, flags in changed:
            annot = pdfium_c.FPDFPage_GetAnnot(page.raw, index)
            if annot:
                pdfium_c.FPDFAnnot_SetFlags(annot, flags)
                pdfium_c.FPDFPage_CloseAnnot(annot)
