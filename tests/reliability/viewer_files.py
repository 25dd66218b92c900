"""PDFs whose words a viewer shows outside their pages' text layer (tests/reliability/
test_viewer.py): filled forms, notes, XFA forms, attached files, pictures of words beside
a text layer, a card scanned at high resolution, a heading too short to be a page."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pikepdf
from fpdf import FPDF
from PIL import Image, ImageDraw, ImageFont

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
A4 = (595, 842)
BODY = ("The office keeps a register of every permit it grants, with the name of the "
        "holder, the place and the dates for which it holds. ") * 3


def words_image(text: str, size: tuple[int, int], font_px: int) -> Image.Image:
    """Black ``text`` on white, grey, ``font_px`` pixels high, a third down."""
    image = Image.new("L", size, 255)
    draw = ImageDraw.Draw(image)
    draw.text((size[0] // 20, size[1] // 3), text, fill=0,
              font=ImageFont.truetype(FONT, font_px))
    return image


def _png(image: Image.Image) -> io.BytesIO:
    buf = io.BytesIO()
    image.save(buf, "PNG")
    buf.seek(0)
    return buf


def text_page(lines: list[str], size: tuple[float, float] = A4) -> FPDF:
    """A born-digital page: ``lines`` in real Helvetica, then a paragraph."""
    pdf = FPDF(unit="pt", format=size)
    pdf.set_margin(36)
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    for line in lines:
        pdf.cell(0, 16, line, new_x="LMARGIN", new_y="NEXT")
    pdf.multi_cell(0, 14, BODY)
    return pdf


def scanned_page(lines: list[str]) -> FPDF:
    """A page that is only a scan (300 dpi) of ``lines``: no text layer."""
    image = Image.new("L", (2480, 3508), 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype(FONT, 50)
    for i, line in enumerate(lines):
        draw.text((150, 150 + i * 80), line, fill=0, font=font)
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.image(_png(image), x=0, y=0, w=A4[0], h=A4[1])
    return pdf


def _save(pdf: FPDF, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(path))
    return path


def _appearance(doc: pikepdf.Pdf, font: Any, text: str, width: float,
                height: float) -> pikepdf.Stream:
    stream = pikepdf.Stream(doc, f"BT /Helv 12 Tf 2 6 Td ({text}) Tj ET".encode())
    stream.Type = pikepdf.Name.XObject
    stream.Subtype = pikepdf.Name.Form
    stream.BBox = [0, 0, width, height]
    stream.Resources = pikepdf.Dictionary(Font=pikepdf.Dictionary(Helv=font))
    return stream


def filled_form(path: Path, value: str, note: str, comment: str, *,
                scanned: bool = False, stamp: str | None = None) -> Path:
    """A form with a text field filled with ``value`` (its appearance drawn, as every
    viewer saves it), a "Fill & Sign" FreeText ``note`` and a sticky-note ``comment``;
    the form itself born-digital, or a scan when ``scanned``; with a small scan of
    ``stamp`` pasted on it."""
    labels = ["Application for a parking permit", "Name and address of the applicant:"]
    pdf = scanned_page(labels) if scanned else text_page(labels)
    if stamp is not None:
        pdf.image(_png(words_image(stamp, (1000, 260), 90)), x=300, y=650, w=200, h=52)
    buf = io.BytesIO(bytes(pdf.output()))
    with pikepdf.open(buf) as doc:
        page = doc.pages[0]
        font = doc.make_indirect(pikepdf.Dictionary(
            Type=pikepdf.Name.Font, Subtype=pikepdf.Name.Type1,
            BaseFont=pikepdf.Name.Helvetica))
        field = doc.make_indirect(pikepdf.Dictionary(
            Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.Widget, FT=pikepdf.Name.Tx,
            T=pikepdf.String("applicant"), V=pikepdf.String(value), Rect=[60, 560, 460, 582],
            DA=pikepdf.String("/Helv 12 Tf 0 g"), F=4, P=page.obj,
            AP=pikepdf.Dictionary(N=_appearance(doc, font, value, 400, 22))))
        free = doc.make_indirect(pikepdf.Dictionary(
            Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.FreeText,
            Contents=pikepdf.String(note), Rect=[60, 500, 460, 522],
            DA=pikepdf.String("/Helv 12 Tf 0 g"), F=4,
            AP=pikepdf.Dictionary(N=_appearance(doc, font, note, 400, 22))))
        sticky = doc.make_indirect(pikepdf.Dictionary(
            Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.Text,
            Contents=pikepdf.String(comment), Rect=[500, 700, 520, 720], F=4))
        page.obj.Annots = doc.make_indirect(pikepdf.Array([field, free, sticky]))
        doc.Root.AcroForm = pikepdf.Dictionary(
            Fields=[field], DA=pikepdf.String("/Helv 12 Tf 0 g"),
            DR=pikepdf.Dictionary(Font=pikepdf.Dictionary(Helv=font)))
        path.parent.mkdir(parents=True, exist_ok=True)
        doc.save(path)
    return path


def xfa_form(path: Path, data: dict[str, str], *, needs_rendering: bool = True) -> Path:
    """A dynamic XFA form as Adobe LiveCycle saves it: its one page says only "Please
    wait...", the form and the values filled in are XFA packets."""
    pdf = text_page(["Please wait...", "If this message is not eventually replaced by the "
                     "proper contents of the document, your PDF viewer may not be able to "
                     "display this type of document."])
    buf = io.BytesIO(bytes(pdf.output()))
    values = "".join(f"<{k}>{v}</{k}>" for k, v in data.items())
    datasets = (b'<xfa:datasets xmlns:xfa="http://www.xfa.org/schema/xfa-data/1.0/">'
                b"<xfa:data><form1>" + values.encode() + b"</form1></xfa:data></xfa:datasets>")
    template = (b'<template xmlns="http://www.xfa.org/schema/xfa-template/3.3/">'
                b'<subform name="form1"/></template>')
    with pikepdf.open(buf) as doc:
        doc.Root.AcroForm = pikepdf.Dictionary(Fields=[], XFA=pikepdf.Array([
            pikepdf.String("template"), pikepdf.Stream(doc, template),
            pikepdf.String("datasets"), pikepdf.Stream(doc, datasets)]))
        if needs_rendering:
            doc.Root.NeedsRendering = True
        path.parent.mkdir(parents=True, exist_ok=True)
        doc.save(path)
    return path


def with_attachments(path: Path, names: list[str], *, portfolio: bool = False,
                     on_page: bool = False) -> Path:
    """A cover page with files attached (``/EmbeddedFiles``); a PDF portfolio
    (``/Collection``) when ``portfolio``; attached to a note on the page (a paperclip,
    ``/FileAttachment``) when ``on_page``."""
    pdf = text_page(["Contract documents", "The signed contract and its annexes are attached."])
    buf = io.BytesIO(bytes(pdf.output()))
    with pikepdf.open(buf) as doc:
        for name in names:
            spec = pikepdf.AttachedFileSpec(
                doc, f"the annex {name}: payment due within 30 days".encode(), filename=name)
            if not on_page:
                doc.attachments[name] = spec
                continue
            doc.pages[0].obj.Annots = doc.make_indirect(pikepdf.Array([
                doc.make_indirect(pikepdf.Dictionary(
                    Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.FileAttachment,
                    Rect=[500, 700, 520, 720], FS=spec.obj, F=4))]))
        if portfolio:
            doc.Root.Collection = pikepdf.Dictionary(Type=pikepdf.Name.Collection,
                                                     View=pikepdf.Name.D)
        path.parent.mkdir(parents=True, exist_ok=True)
        doc.save(path)
    return path


def text_with_a_picture(path: Path, words: str) -> Path:
    """A born-digital letter with a small scan of ``words`` pasted on it (a reference
    stamp: 3% of the page, under the share for which the whole page is read with OCR)."""
    pdf = text_page(["Dear Madam,", "please find our reference below."])
    pdf.image(_png(words_image(words, (1000, 260), 90)), x=300, y=600, w=200, h=52)
    return _save(pdf, path)


def text_with_a_stamp(path: Path, words: str) -> Path:
    """A born-digital letter with a stamp annotation (an image of ``words``, as a
    viewer's "Approved" or a custom stamp saves it): not in the page's content."""
    pdf = text_page(["Dear Madam,", "please find our reference below."])
    buf = io.BytesIO(bytes(pdf.output()))
    image = words_image(words, (1000, 260), 90)
    with pikepdf.open(buf) as doc:
        picture = pikepdf.Stream(doc, image.tobytes())
        picture.Type, picture.Subtype = pikepdf.Name.XObject, pikepdf.Name.Image
        picture.Width, picture.Height = image.size
        picture.ColorSpace, picture.BitsPerComponent = pikepdf.Name.DeviceGray, 8
        look = pikepdf.Stream(doc, b"q 200 0 0 52 0 0 cm /Im0 Do Q")
        look.Type, look.Subtype = pikepdf.Name.XObject, pikepdf.Name.Form
        look.BBox = [0, 0, 200, 52]
        look.Resources = pikepdf.Dictionary(XObject=pikepdf.Dictionary(Im0=picture))
        doc.pages[0].obj.Annots = doc.make_indirect(pikepdf.Array([
            doc.make_indirect(pikepdf.Dictionary(
                Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.Stamp, Rect=[300, 150, 500, 202],
                F=4, AP=pikepdf.Dictionary(N=look)))]))
        path.parent.mkdir(parents=True, exist_ok=True)
        doc.save(path)
    return path


def text_with_a_logo(path: Path) -> Path:
    """A born-digital letter with a small logo that holds no words (a filled disc)."""
    logo = Image.new("L", (400, 400), 255)
    ImageDraw.Draw(logo).ellipse((40, 40, 360, 360), fill=40)
    pdf = text_page(["Dear Madam,", "please find our reference below."])
    pdf.image(_png(logo), x=480, y=40, w=60, h=60)
    return _save(pdf, path)


def tiny_card(path: Path, words: str) -> Path:
    """A 1.7 x 1.2 inch page (a business card) holding a 4000-pixel scan of ``words``."""
    size = (1.7 * 72, 1.2 * 72)
    pdf = FPDF(unit="pt", format=size)
    pdf.add_page()
    pdf.image(_png(words_image(words, (4000, 2824), 60)), x=0, y=0, w=size[0], h=size[1])
    return _save(pdf, path)


def short_heading(path: Path, heading: str, *, scan_words: str | None = None) -> Path:
    """A page whose text layer is only ``heading`` (fewer than 16 characters, in
    DejaVu Sans, which has Arabic); with a scan of ``scan_words`` under it."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    if scan_words is not None:
        pdf.image(_png(words_image(scan_words, (2480, 1000), 60)), x=0, y=200, w=A4[0],
                  h=240)
    pdf.add_font("DejaVu", fname=FONT)
    pdf.set_font("DejaVu", size=28)
    # Drawn in visual order, right to left, as a shaping writer places the glyphs
    # (without HarfBuzz, fpdf2 would place them in reading order, left to right).
    pdf.cell(0, 40, heading[::-1] if any("\u0600" <= c <= "\u06ff" for c in heading)
             else heading)
    return _save(pdf, path)


def text_with_a_signature(path: Path) -> Path:
    """A born-digital letter signed with a scribble (nine loops on a stroke: Tesseract
    reads a few unsure letters in it)."""
    import math

    mark = Image.new("L", (800, 200), 255)
    draw = ImageDraw.Draw(mark)
    for k in range(9):
        draw.line([(20 + 85 * k + 30 * math.cos(t / 3) + 3 * t,
                    100 + 50 * math.sin(t / 2.2 + k)) for t in range(25)], fill=0, width=4)
    pdf = text_page(["Dear Madam,", "please find our reference below."])
    pdf.image(_png(mark), x=360, y=600, w=160, h=40)
    return _save(pdf, path)


def text_with_an_emblem(path: Path) -> Path:
    """A born-digital letter with a band of rings across its head (an emblem: Tesseract
    reads it as a run of O's and 0's, unsurely)."""
    band = Image.new("L", (800, 160), 255)
    draw = ImageDraw.Draw(band)
    for k in range(14):
        draw.ellipse((20 + 55 * k, 50, 60 + 55 * k, 100 + 10 * (k % 3)), outline=0, width=5)
    pdf = text_page(["Dear Madam,", "please find our reference below."])
    pdf.image(_png(band), x=360, y=600, w=160, h=32)
    return _save(pdf, path)


def text_with_a_blurred_picture(path: Path, words: str) -> Path:
    """A born-digital letter with a scan of ``words`` too coarse to read surely (its
    letters 4 pixels high, enlarged by the viewer)."""
    coarse = words_image(words, (1400, 300), 50).resize((126, 27), Image.Resampling.BILINEAR)
    pdf = text_page(["Dear Madam,", "please find our reference below."])
    pdf.image(_png(coarse), x=60, y=600, w=420, h=90)
    return _save(pdf, path)
