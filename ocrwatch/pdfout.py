"""The searchable PDF: the original pages, unchanged, under an invisible text layer.

Built with pikepdf (the PDF objects) and img2pdf (images wrapped without re-encoding:
a JPEG's bytes go into the PDF as they are). OCRmyPDF's own renderer is not used: it
comes with pydantic, fpdf2, uharfbuzz, pdfminer.six and rich for what is here a page
of code; its method is the same as Tesseract's, which this follows: each word drawn in
text render mode 3 (invisible) in a glyphless font (Tesseract's ``pdf.ttf``, 572 bytes,
Apache-2.0, every character one empty glyph half an em wide), sized to its box's height
and stretched (``Tz``) to its box's width, so viewers select and find it where it is
printed. PDF/A-2b is made by pikepdf (``pikepdf.pdfa``): an sRGB output intent and the
XMP declaration are added and the written file is validated, with every page's content
and image stream kept byte for byte; a file it cannot certify (a PDF whose fonts are
not embedded, say) stays a plain PDF, or with ``pdfa = "always"`` goes through
Ghostscript, which re-encodes the page images (a 3.1 MB JPEG became 29.6 MB).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import statistics
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any, BinaryIO

from ocrwatch.domain import Page
from ocrwatch.errors import InputError, TransientError
from ocrwatch.layout import PageLayout
from ocrwatch.pdfium_lock import PDFIUM

log = logging.getLogger(__name__)

FONT_NAME = "/OcrwatchGlyphLess"
GLYPH_WIDTH = 500  # thousandths of an em: every glyph of pdf.ttf
GS_TIMEOUT = 600


def ghostscript() -> str | None:
    """The Ghostscript command, when installed."""
    return shutil.which("gs") or shutil.which("gswin64c")


def _font(pdf: Any) -> Any:
    import pikepdf

    ttf = resources.files("ocrwatch").joinpath("data/pdf.ttf").read_bytes()
    font_file = pdf.make_stream(ttf)
    font_file.Length1 = len(ttf)
    # Every character code shows glyph 1, the one empty glyph of the font.
    cid_to_gid = pdf.make_stream(b"\x00\x01" * 65536)
    to_unicode = pdf.make_stream(
        b"/CIDInit /ProcSet findresource begin\n12 dict begin\nbegincmap\n"
        b"/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def\n"
        b"/CMapName /Adobe-Identity-UCS def\n/CMapType 2 def\n"
        b"1 begincodespacerange\n<0000> <FFFF>\nendcodespacerange\n"
        b"1 beginbfrange\n<0000> <FFFF> <0000>\nendbfrange\n"
        b"endcmap\nCMapName currentdict /CMap defineresource pop\nend\nend\n"
    )
    descriptor = pikepdf.Dictionary(
        Type=pikepdf.Name.FontDescriptor, FontName=pikepdf.Name(FONT_NAME), Flags=5,
        FontBBox=[0, 0, GLYPH_WIDTH, 1000], ItalicAngle=0, Ascent=1000, Descent=0,
        CapHeight=1000, StemV=80, FontFile2=font_file,
    )
    cid_font = pikepdf.Dictionary(
        Type=pikepdf.Name.Font, Subtype=pikepdf.Name.CIDFontType2,
        BaseFont=pikepdf.Name(FONT_NAME),
        CIDSystemInfo=pikepdf.Dictionary(Registry=pikepdf.String("Adobe"),
                                         Ordering=pikepdf.String("Identity"), Supplement=0),
        FontDescriptor=pdf.make_indirect(descriptor), DW=GLYPH_WIDTH,
        CIDToGIDMap=cid_to_gid,
    )
    return pdf.make_indirect(pikepdf.Dictionary(
        Type=pikepdf.Name.Font, Subtype=pikepdf.Name.Type0, BaseFont=pikepdf.Name(FONT_NAME),
        Encoding=pikepdf.Name("/Identity-H"), DescendantFonts=[pdf.make_indirect(cid_font)],
        ToUnicode=to_unicode,
    ))


def _num(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".") or "0"


def text_layer(layout: PageLayout, font: str, box: tuple[float, float, float, float],
               rotate: int) -> bytes:
    """The content stream drawing ``layout``'s words, invisible, on a page.

    ``box`` is the visible page box (x0, y0, x1, y1) in user space and ``rotate`` its
    /Rotate: the layout's pixels are of the page as displayed, so the stream first maps
    the displayed page (points, y up) onto user space.
    """
    x0, y0, x1, y1 = box
    w, h = x1 - x0, y1 - y0
    disp_w, disp_h = (h, w) if rotate in (90, 270) else (w, h)
    matrix = {0: (1, 0, 0, 1, x0, y0), 90: (0, 1, -1, 0, x0 + disp_h, y0),
              180: (-1, 0, 0, -1, x0 + w, y0 + h), 270: (0, -1, 1, 0, x0, y0 + h)}[rotate]
    sx, sy = disp_w / layout.width, disp_h / layout.height
    lines = _line_metrics(layout)
    out = [b"q", (" ".join(_num(v) for v in matrix) + " cm").encode(), b"BT", b"3 Tr"]
    for word in layout.words:
        left, _top, right, _bottom = word.box
        # Words of a line share its top and baseline, as in Tesseract's own PDF.
        top, baseline = lines[word.line]
        size = max(1.0, (baseline - top) * sy)
        natural = len(word.text) * GLYPH_WIDTH / 1000 * size
        stretch = 100 * max(0.5, (right - left) * sx) / max(natural, 0.01)
        encoded = word.text.encode("utf-16-be").hex().upper()
        out.append(f"{font} {_num(size)} Tf {_num(stretch)} Tz 1 0 0 1 {_num(left * sx)} "
                   f"{_num(disp_h - baseline * sy)} Tm <{encoded}> Tj".encode())
    out += [b"ET", b"Q"]
    return b"\n".join(out) + b"\n"


def _line_metrics(layout: PageLayout) -> dict[int, tuple[float, float]]:
    """Each line's top and baseline in pixels.

    The baseline is the median of the words' bottoms: most words have no descender. A
    line-level layer has no words to look at: its baseline is put a fifth above the bottom.
    """
    out: dict[int, tuple[float, float]] = {}
    for n, words in layout.lines().items():
        top = min(w.box[1] for w in words)
        if layout.by_line:
            bottom = max(w.box[3] for w in words)
            out[n] = (top, bottom - (bottom - top) / 5)
        else:
            out[n] = (top, float(statistics.median(w.box[3] for w in words)))
    return out


# Opens the original again, as the daemon reads it (no link followed below the inbox):
# nothing here opens it by path.
SourceOpener = Callable[[], AbstractContextManager[BinaryIO]]


def _exif_mirrored(data: bytes) -> bool:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.getexif().get(0x0112, 1) in (2, 4, 5, 7)
    except Exception:
        return False


def _image_pdf(open_source: SourceOpener, render: Callable[[], Iterable[Page]]
               ) -> tuple[bytes, str | None]:
    """The original image(s) as PDF pages: unchanged when img2pdf can take them as they
    are, else the RGB page ocrwatch read, losslessly (PNG); the second value says why."""
    import img2pdf

    with open_source() as fh:
        original = fh.read()
    if not _exif_mirrored(original):
        try:
            data: bytes = img2pdf.convert(original, rotation=img2pdf.Rotation.ifvalid)
            return data, None
        except Exception as exc:  # alpha channel, WebP, odd TIFF compressions...
            why = f"{exc}"
    else:
        why = "a mirrored EXIF orientation"
    pngs = []
    for page in render():
        buf = io.BytesIO()
        page.image.save(buf, "PNG", dpi=(page.dpi or 300,) * 2)
        pngs.append(buf.getvalue())
    return img2pdf.convert(pngs), why


def _pages_with_text(fh: BinaryIO) -> set[int]:
    """Pages of the PDF in ``fh`` that have text of their own (born digital, or OCRed)."""
    import pypdfium2 as pdfium

    found = set()
    with PDFIUM:
        doc = pdfium.PdfDocument(fh)
        try:
            for index in range(len(doc)):
                page = doc[index]
                textpage = page.get_textpage()
                try:
                    if textpage.count_chars() > 0 and textpage.get_text_range().strip():
                        found.add(index)
                finally:
                    textpage.close()
                    page.close()
        finally:
            doc.close()
    return found


def build(source: Path, layouts: list[PageLayout | None], out: Path, *,
          is_pdf: bool, render: Callable[[], Iterable[Page]],
          open_source: SourceOpener) -> list[str]:
    """Write the searchable PDF of ``source`` to ``out``; returns notes for the log.

    A page whose layout is None (or a PDF page that has text of its own) gets no layer.
    """
    with contextlib.ExitStack() as stack:
        notes: list[str] = []
        if is_pdf:
            fh = stack.enter_context(open_source())
            # pdfium and qpdf each on a handle of their own: neither moves the other's place.
            with open_source() as other:
                has_text = _pages_with_text(other)
        else:
            data, why = _image_pdf(open_source, render)
            if why:
                notes.append(f"the image was embedded as read, not as stored ({why})")
            fh, has_text = io.BytesIO(data), set()
        _build(source, layouts, out, fh, has_text, notes)
        return notes


def _build(source: Path, layouts: list[PageLayout | None], out: Path, fh: BinaryIO,
           has_text: set[int], notes: list[str]) -> None:
    import pikepdf

    pdf = pikepdf.open(fh)
    with pdf:
        if len(pdf.pages) != len(layouts):
            raise InputError(f"the PDF of {source.name} has {len(pdf.pages)} pages where "
                             f"{len(layouts)} were read; the PDF output was not written")
        font = _font(pdf)
        for index, (page, layout) in enumerate(zip(pdf.pages, layouts, strict=True)):
            if layout is None or not layout.words:
                continue
            if index in has_text:
                notes.append(f"page {index + 1} has text of its own: no layer added")
                continue
            name = page.add_resource(font, pikepdf.Name.Font, prefix="OcrwatchF")
            box = [float(Decimal(str(v))) for v in page.cropbox]
            rotate = int(page.obj.get("/Rotate", 0)) % 360
            if rotate not in (0, 90, 180, 270):
                rotate = 0
            # The page's own content is wrapped in q/Q so its state cannot leak into ours.
            page.contents_add(pdf.make_stream(b"q\n"), prepend=True)
            page.contents_add(pdf.make_stream(b"Q\n"))
            page.contents_add(pdf.make_stream(
                text_layer(layout, str(name), (box[0], box[1], box[2], box[3]), rotate)))
        pdf.docinfo[pikepdf.Name.Producer] = pikepdf.String("ocrwatch (pikepdf, img2pdf)")
        pdf.save(out)


_PDFA_DEF = """%!
/ICCProfile ({icc}) def
[/_objdef {{icc_PDFA}} /type /stream /OBJ pdfmark
[{{icc_PDFA}} <</N 3>> /PUT pdfmark
[{{icc_PDFA}} ICCProfile (r) file /PUT pdfmark
[/_objdef {{OutputIntent_PDFA}} /type /dict /OBJ pdfmark
[{{OutputIntent_PDFA}} <<
  /Type /OutputIntent /S /GTS_PDFA1 /DestOutputProfile {{icc_PDFA}}
  /OutputConditionIdentifier (sRGB) /Info (sRGB)
>> /PUT pdfmark
[{{Catalog}} <</OutputIntents [ {{OutputIntent_PDFA}} ]>> /PUT pdfmark
"""


def to_pdfa(src: Path, out: Path, gs: str) -> None:
    """PDF/A-2b through Ghostscript; images passed through or re-encoded losslessly."""
    from PIL import ImageCms

    with tempfile.TemporaryDirectory(prefix="ocrwatch-pdfa-") as tmp:
        icc = Path(tmp) / "srgb.icc"
        icc.write_bytes(ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes())
        definition = Path(tmp) / "pdfa_def.ps"
        definition.write_text(_PDFA_DEF.format(icc=str(icc).replace("\\", "/")))
        cmd = [
            gs, "-q", "-dBATCH", "-dNOPAUSE", "-dSAFER", f"--permit-file-read={tmp}/",
            "-sDEVICE=pdfwrite", "-dPDFA=2", "-dPDFACompatibilityPolicy=1",
            "-sColorConversionStrategy=RGB", "-dPassThroughJPEGImages=true",
            "-dPassThroughJPXImages=true",
            "-dAutoFilterColorImages=false", "-dColorImageFilter=/FlateEncode",
            "-dAutoFilterGrayImages=false", "-dGrayImageFilter=/FlateEncode",
            "-dDownsampleColorImages=false", "-dDownsampleGrayImages=false",
            "-dDownsampleMonoImages=false", "-dAutoRotatePages=/None",
            f"-sOutputFile={out}", str(definition), str(src),
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=GS_TIMEOUT,
                                  check=False)
        except subprocess.TimeoutExpired:
            raise TransientError(f"Ghostscript took over {GS_TIMEOUT} s to make the PDF/A; "
                                 "will retry") from None
        if done.returncode != 0 or not out.exists() or out.stat().st_size == 0:
            raise InputError(f"Ghostscript could not make a PDF/A (exit {done.returncode}: "
                             f"{(done.stderr or done.stdout).strip()[-300:]}); set pdfa = "
                             "\"never\" to write plain PDFs")


def keep_as_pdfa(src: Path, out: Path) -> None:
    """PDF/A-2b by pikepdf, every stream kept as it is; InputError with the validator's
    first reasons when the file cannot be certified that way."""
    import pikepdf
    from pikepdf import pdfa

    with pikepdf.open(src) as pdf:
        try:
            pdfa.save(pdf, out, "2b")
        except pdfa.PdfaError as exc:
            findings = getattr(getattr(exc, "report", None), "findings", None) or []
            said = "; ".join(str(getattr(f, "message", f)) for f in findings[:2])
            raise InputError(f"pikepdf's PDF/A-2b check did not pass ({said or exc})") from None


def write(source: Path, layouts: list[PageLayout | None], tmp: Path, *, is_pdf: bool,
          pdfa: bool, render: Callable[[], Iterable[Page]],
          open_source: SourceOpener, reencode: bool = False) -> list[str]:
    """The searchable PDF at ``tmp`` (a temporary name, renamed into place by the caller).

    With ``pdfa``, PDF/A-2b that keeps the pages as they are; where that cannot be
    certified the plain PDF is kept (said in a note), or with ``reencode`` (``pdfa =
    "always"``) Ghostscript makes the PDF/A, re-encoding the page images."""
    # The plain PDF first, named like every temporary file (cleaned at start).
    plain = tmp.with_name(tmp.name.removesuffix(".tmp") + "-plain.tmp") if pdfa else tmp
    try:
        notes = build(source, layouts, plain, is_pdf=is_pdf, render=render,
                      open_source=open_source)
        if pdfa:
            try:
                keep_as_pdfa(plain, tmp)
            except InputError as kept:
                gs = ghostscript() if reencode else None
                if reencode and gs is None:
                    raise InputError(f"pdfa = \"always\": {kept}, and Ghostscript, which would "
                                     "re-encode it, is not installed (Debian/Ubuntu: `sudo apt "
                                     "install ghostscript`); or set pdfa = \"auto\"") from None
                try:
                    if gs is None:
                        raise kept
                    to_pdfa(plain, tmp, gs)
                    notes.append(f"PDF/A made by Ghostscript, its page images re-encoded: {kept}")
                except InputError as exc:
                    # The plain PDF is still good: keep it rather than none.
                    notes.append(f"not PDF/A: {exc}")
                    os.replace(plain, tmp)
    except OSError as exc:
        raise TransientError(f"could not write the PDF of {source.name}: {exc}") from exc
    finally:
        if plain != tmp:
            with contextlib.suppress(OSError):
                os.unlink(plain)
    return notes
