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
import itertools
import logging
import math
import os
import shutil
import statistics
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import replace
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any, BinaryIO

from ocrwatch.core.domain import Page
from ocrwatch.core.errors import InputError, TransientError
from ocrwatch.core.layout import PageLayout, Word
from ocrwatch.pages.pdfium_lock import PDFIUM

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


def _num(value: float, places: int = 2) -> str:
    text = f"{value:.{places}f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def text_layer(layout: PageLayout, font: str, box: tuple[float, float, float, float],
               rotate: int) -> bytes:
    """The content stream drawing ``layout``'s words, invisible, on a page.

    ``box`` is the visible page box (x0, y0, x1, y1) in user space and ``rotate`` its
    /Rotate: the layout's pixels are of the page as displayed, so the stream first maps
    the displayed page (points, y up) onto user space.

    As OCRmyPDF's hOCR renderer does, each line is one text object: its words on the
    line's common baseline, each stretched to its box, with a space between words
    stretched to fill the gap (a gap over :data:`WIDE_GAP` ems is narrowed by stretching
    the word before it). Readers that group glyphs into lines by geometry
    (``pdftotext``, pdf.js, copy and paste) then read each line whole and in order; words
    without spaces between them read as columns where a typescript spaces widely. A
    layout with an angle (read straightened, drawn on the page as scanned) has each line
    laid level through the middle of the line as printed; :func:`_build` shows such a
    page straightened instead, so that its lines are level.
    """
    x0, y0, x1, y1 = box
    w, h = x1 - x0, y1 - y0
    disp_w, disp_h = (h, w) if rotate in (90, 270) else (w, h)
    matrix = {0: (1, 0, 0, 1, x0, y0), 90: (0, 1, -1, 0, x0 + disp_h, y0),
              180: (-1, 0, 0, -1, x0 + w, y0 + h), 270: (0, -1, 1, 0, x0, y0 + h)}[rotate]
    sx, sy = disp_w / layout.width, disp_h / layout.height
    space = " ".encode("utf-16-be").hex().upper()
    out = [b"q", (" ".join(_num(v) for v in matrix) + " cm").encode()]
    lines = [(words, _baseline(words, layout.by_line)) for words in layout.lines().values()]
    # Each line's left and right end and baseline (pixels), to find its column's neighbours.
    spans = [(float(words[0].box[0]), float(words[-1].box[2]), baseline)
             for words, baseline in lines]
    # One font size for the lines of ordinary text: readers put lines whose sizes differ
    # by a few percent into different blocks and interleave them. The size is the whole
    # line's height, descenders included: readers also split a line where a gap is
    # wider than about an em, and typescripts space words widely (a letter skewed 2
    # degrees, sized from top to baseline, read as 58 blocks and CER 0.29 against its
    # .txt's 0.18). A line much larger or smaller (a heading, a footnote) keeps its own.
    full = [_height(words) for words, _ in lines]
    usual = statistics.median(full) if full else 1.0
    # Readers also keep two lines in one block only while their baselines are at most
    # 1.5 sizes apart: a double-spaced typescript's lines, sized to their ink, each became
    # a block, and two columns interleaved line by line (CER 0.70 against the .txt's 0.04).
    # Not a line with a gap of an em or more, which readers split there (a table's row,
    # cells apart): sized so, its cells joined the cells above and below, and the table
    # read column by column (tapus_table_00: CER 0.580 where its .txt, row by row, has
    # 0.289; sized to its ink, 0.503).
    common = max(usual, _pitch(spans, usual) / LINE_SPACING)
    room = _room_above(spans)
    for (words, baseline), height, above in zip(lines, full, room, strict=True):
        if 0.67 * usual <= height <= 1.5 * usual:
            height = usual if _widest_gap(words) >= common else common
        elif height > 1.5 * usual and above:
            # An outsized line (a few tall boxes: a mark in the margin, words typed over)
            # reaching above the line before it would be read before that line.
            height = max(usual, min(height, above))
        size = max(1.0, height * sy)
        em = GLYPH_WIDTH / 1000 * size  # every glyph's width at 100% stretch
        middle = (words[0].box[0] + words[-1].box[2]) / 2
        level = layout.to_page(middle, baseline)[1]  # the baseline's height, mid-line
        out += [b"BT", b"3 Tr", f"{font} {_num(size)} Tf".encode()]
        # Readers join words whose boxes touch ("avaient:" for "avaient :"), and read a
        # word drawn left of the one before (typed over, or a box that overlaps it) as
        # a line of its own: each word starts a little after the one before has ended.
        apart = WORD_GAP * size / sy
        start = float(words[0].box[0])
        for i, word in enumerate(words):
            left, _top, right, _bottom = word.box
            end = float(right)
            if i + 1 < len(words):
                # Readers split a line where a gap is wider than about an em and read the
                # pieces as columns (a table's row, cells apart, read column by column:
                # tapus_table_00 at CER 0.421 against its .txt's 0.289). The word before
                # a wider gap reaches on to WIDE_GAP ems short of the next one, so each
                # word still starts where it is printed.
                end = min(end, words[i + 1].box[0] - apart)
                if words[i + 1].box[0] - end > WIDE_GAP * size / sy:
                    end = words[i + 1].box[0] - WIDE_GAP * size / sy
            end = max(end, start + (right - left) / 2)
            px = layout.to_page(start, baseline)[0]
            stretch = 100 * max(0.5, (end - start) * sx) / max(len(word.text) * em, 0.01)
            encoded = word.text.encode("utf-16-be").hex().upper()
            out.append(f"1 0 0 1 {_num(px * sx)} {_num(disp_h - level * sy)} Tm "
                       f"{_num(stretch)} Tz <{encoded}> Tj".encode())
            if i + 1 < len(words):
                start = max(float(words[i + 1].box[0]), end + apart)
                gap = (start - end) * sx
                fill = 100 * gap / max(em, 0.01) if gap > 0 else 1.0
                out.append(f"{_num(max(fill, 1.0))} Tz <{space}> Tj".encode())
        out.append(b"ET")
    out.append(b"Q")
    return b"\n".join(out) + b"\n"


# A line's size is at least its column's baseline pitch over this: under pdftotext's
# (and pdf.js's) 1.5, so the lines of a paragraph stay one block, with room for a line
# set a little further down than the usual pitch (a heading over its column: at 1.4 it
# was 1.51 sizes above the column's first line, a block of its own read first).
LINE_SPACING = 1.3
# The least gap between two words of a line, in ems, for readers to see two words.
WORD_GAP = 0.1
# The widest gap left between two words of a line, in ems (pdftotext kept a table's
# row whole with 0.8, split it with 1.2).
WIDE_GAP = 0.6


def _pitch(spans: list[tuple[float, float, float]], usual: float) -> float:
    """The usual distance (pixels) from a line's baseline to the next one below it in
    the same column (the nearest below whose words overlap it across); gaps wider than
    three lines (between paragraphs, blocks) do not count. 0 when there is none."""
    steps = []
    for left, right, base in spans:
        below = [b - base for x0, x1, b in spans
                 if b > base + usual / 2 and x0 < right and x1 > left]
        if below and min(below) <= 3 * usual:
            steps.append(min(below))
    return float(statistics.median(steps)) if steps else 0.0


def _room_above(spans: list[tuple[float, float, float]]) -> list[float]:
    """Each line's distance (pixels) from its baseline up to the nearest baseline above
    it in the same column (words overlapping it across); 0 where there is none."""
    out = []
    for left, right, base in spans:
        above = [base - b for x0, x1, b in spans if b < base and x0 < right and x1 > left]
        out.append(min(above) if above else 0.0)
    return out


def _height(words: list[Word]) -> float:
    """A line's height in pixels, top to the lowest descender, over its ordinary words: a
    box much taller than the line's usual word (a mark in the margin, a word typed over
    another) does not size the line."""
    usual = statistics.median(w.box[3] - w.box[1] for w in words)
    ordinary = [w for w in words if w.box[3] - w.box[1] <= 1.6 * usual] or words
    return float(max(w.box[3] for w in ordinary) - min(w.box[1] for w in ordinary))


def _widest_gap(words: list[Word]) -> float:
    """The widest gap (pixels) between two words of a line; 0 for a line of one word."""
    return max((b.box[0] - a.box[2] for a, b in itertools.pairwise(words)), default=0.0)


def _baseline(words: list[Word], by_line: bool) -> float:
    """A line's baseline in pixels.

    The baseline is the median of the words' bottoms: most words have no descender. A
    line-level layer has no words to look at: its baseline is put a fifth above the bottom.
    """
    if by_line:
        top, bottom = min(w.box[1] for w in words), max(w.box[3] for w in words)
        return bottom - (bottom - top) / 5
    return float(statistics.median(w.box[3] for w in words))


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


# Content bytes of a page beyond which its text is not built to see whether it has some:
# PDFium's text of 10 MB of content takes 1.6 GB and seconds (ocrwatch.pages.pdftext).
TEXT_CHECK_BYTES = 4 << 20


def _pages_with_text(fh: BinaryIO) -> set[int]:
    """Pages of the PDF in ``fh`` that have text of their own (born digital, or OCRed).

    A page whose content is too large to look at counts as having text: no layer is
    added over what may already be there.
    """
    import pypdfium2 as pdfium

    from ocrwatch.pages.pdfpages import ContentSizes

    sizes = ContentSizes(fh, TEXT_CHECK_BYTES)
    found = set()
    with contextlib.closing(sizes), PDFIUM:
        doc = pdfium.PdfDocument(fh)
        try:
            for index in range(len(doc)):
                size = sizes(index)
                if size is None or size > TEXT_CHECK_BYTES:
                    found.add(index)
                    continue
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
          open_source: SourceOpener, turns: list[int] | None = None) -> list[str]:
    """Write the searchable PDF of ``source`` to ``out``; returns notes for the log.

    A page whose layout is None (or a PDF page that has text of its own) gets no layer,
    but for the words read on such a page's pictures (``PageLayout.beside_text``).
    ``turns``: degrees each page was turned clockwise to be read upright; the page is
    displayed so (its /Rotate), and its layout is of the page as displayed.
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
        _build(source, layouts, out, fh, has_text, notes, turns or [0] * len(layouts))
        return notes


def _build(source: Path, layouts: list[PageLayout | None], out: Path, fh: BinaryIO,
           has_text: set[int], notes: list[str], turns: list[int]) -> None:
    import pikepdf

    pdf = pikepdf.open(fh)
    with pdf:
        if len(pdf.pages) != len(layouts):
            raise InputError(f"the PDF of {source.name} has {len(pdf.pages)} pages where "
                             f"{len(layouts)} were read; the PDF output was not written")
        font = _font(pdf)
        for index, (page, layout) in enumerate(zip(pdf.pages, layouts, strict=True)):
            rotate = int(page.obj.get("/Rotate", 0)) % 360
            if rotate not in (0, 90, 180, 270):
                rotate = 0
            turn = turns[index] % 360 if index < len(turns) else 0
            if turn in (90, 180, 270) and index not in has_text:
                # Shown as it was read: upright. The image itself stays as scanned.
                rotate = (rotate + turn) % 360
                page.obj[pikepdf.Name.Rotate] = rotate
            if layout is None or not layout.words:
                continue
            beside = index in has_text and layout.beside_text
            if index in has_text and not beside:
                notes.append(f"page {index + 1} has text of its own: no layer added")
                continue
            name = page.add_resource(font, pikepdf.Name.Font, prefix="OcrwatchF")
            box = [float(Decimal(str(v))) for v in page.cropbox]
            # The page's own content is wrapped in q/Q so its state cannot leak into ours.
            page.contents_add(pdf.make_stream(b"q\n"), prepend=True)
            page.contents_add(pdf.make_stream(b"Q\n"))
            if beside:
                # Words of the page's pictures, read beside its own text: the page is shown
                # as it is (not turned, not straightened), and each word lies where its
                # picture shows it, sideways or at a slant as read.
                rotate = (rotate + turn) % 360
            elif layout.angle and layout.read_size is not None:
                box = _straighten(pdf, page, box, layout.angle)
                layout = replace(layout, width=layout.read_size[0],
                                 height=layout.read_size[1], angle=0.0, read_size=None)
            page.contents_add(pdf.make_stream(
                text_layer(layout, str(name), (box[0], box[1], box[2], box[3]), rotate)))
        pdf.docinfo[pikepdf.Name.Producer] = pikepdf.String("ocrwatch (pikepdf, img2pdf)")
        pdf.save(out)


def _straighten(pdf: Any, page: Any, box: list[float], angle: float) -> list[float]:
    """Show a page straightened as it was read: its own content turned ``angle`` degrees
    counter-clockwise about its middle, on a page box grown to hold it, as Pillow's
    ``rotate(expand=True)`` did for reading. The image's bytes stay as scanned; its layer
    then lies level on level lines, which is how readers read lines whole (text at a
    slant is taken apart glyph by glyph). Returns the new box."""
    x0, y0, x1, y1 = box
    w, h = x1 - x0, y1 - y0
    c, s = math.cos(math.radians(angle)), math.sin(math.radians(angle))
    nw, nh = w * abs(c) + h * abs(s), w * abs(s) + h * abs(c)
    cx, cy, ncx, ncy = x0 + w / 2, y0 + h / 2, x0 + nw / 2, y0 + nh / 2
    e, f = ncx - c * cx + s * cy, ncy - s * cx - c * cy
    matrix = " ".join(_num(v, 6) for v in (c, s, -s, c, e, f))
    page.contents_add(pdf.make_stream(f"q {matrix} cm\n".encode()), prepend=True)
    page.contents_add(pdf.make_stream(b"Q\n"))
    grown = [x0, y0, x0 + nw, y0 + nh]
    page.obj["/MediaBox"] = grown
    if "/CropBox" in page.obj:
        page.obj["/CropBox"] = grown
    return grown


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
          open_source: SourceOpener, turns: list[int] | None = None,
          reencode: bool = False) -> list[str]:
    """The searchable PDF at ``tmp`` (a temporary name, renamed into place by the caller).

    With ``pdfa``, PDF/A-2b that keeps the pages as they are; where that cannot be
    certified the plain PDF is kept (said in a note), or with ``reencode`` (``pdfa =
    "always"``) Ghostscript makes the PDF/A, re-encoding the page images."""
    # The plain PDF first, named like every temporary file (cleaned at start).
    plain = tmp.with_name(tmp.name.removesuffix(".tmp") + "-plain.tmp") if pdfa else tmp
    try:
        notes = build(source, layouts, plain, is_pdf=is_pdf, render=render,
                      open_source=open_source, turns=turns)
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
