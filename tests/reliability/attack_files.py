"""Files built to be slow or large to prepare: PDFs of raw bytes with walls of text,
progressive JPEGs of thousands of scans. Used by the tests and benchmarks/hostile_files.py."""

from __future__ import annotations

import io
import zlib

from PIL import Image, ImageDraw


def raw_pdf(content: bytes, size: tuple[int, int] = (612, 792)) -> bytes:
    """A one-page PDF whose page draws ``content`` (deflated) with Helvetica as /F1."""
    stream = zlib.compress(content, 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] "
        b"/Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>" % size,
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream
        + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, xref)
    return bytes(out)


LINE = b"the quick brown fox jumps over the lazy dog " * 2


def text_wall(nbytes: int, *, on_page: bool = False) -> bytes:
    """``nbytes`` of words in 6 pt lines, one show-text operator a line: most of them run
    off the bottom of the page, or, ``on_page``, all of them drawn over each other on it
    (ten million glyphs to draw)."""
    parts = [b"BT /F1 6 Tf 72 780 Td %s TL" % (b"0.0068" if on_page else b"7")]
    parts += [b"(" + LINE + b") '"] * (nbytes // len(LINE) + 1)
    parts.append(b"ET")
    return raw_pdf(b"\n".join(parts))


def text_objects(count: int) -> bytes:
    """``count`` text objects of one word each, in a grid over the page (repeated over
    itself past 1100 words)."""
    words = LINE.split()
    parts = [b"BT /F1 6 Tf %d %d Td (%s) Tj ET"
             % (20 + (i % 10) * 55, 20 + (i // 10) % 110 * 7, words[i % len(words)])
             for i in range(count)]
    return raw_pdf(b"\n".join(parts))


def dense_page(lines: int = 262) -> bytes:
    """A page filled with visible 2.5 pt text: 480 characters a line, 125,760 in all
    with the default 262 lines. A real (if extreme) layer, taken from its text."""
    line = (LINE * 6)[:480]
    parts = [b"BT /F1 2.5 Tf 2 788 Td 3 TL"]
    parts += [b"(" + line + b") '"] * lines
    parts.append(b"ET")
    return raw_pdf(b"\n".join(parts))


def progressive_jpeg(size: tuple[int, int] = (2000, 2000)) -> bytes:
    """A real progressive JPEG (Pillow's libjpeg: ten scans) of a page of text lines."""
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    for y in range(0, size[1], 40):
        draw.text((20, y), f"scan bomb line {y}", fill="black")
    buf = io.BytesIO()
    image.save(buf, "JPEG", progressive=True, quality=90)
    return buf.getvalue()


def scan_bomb(scans: int, size: tuple[int, int] = (2000, 2000)) -> bytes:
    """A progressive JPEG with ``scans`` more scans before its end, each 18 bytes: a
    first AC scan of the luma whose data is four end-of-band runs of 16384 blocks
    (all-zero bits: the one Huffman code "0", EOB14, and 14 zero bits). libjpeg only
    warns of a bogus progression and decodes each one over the whole image."""
    data = progressive_jpeg(size)
    end = data.rindex(b"\xff\xd9")
    # AC table 1 with a single code of length 1 for the symbol 0xE0 (EOB14).
    dht = b"\xff\xc4\x00\x14\x11\x01" + b"\x00" * 15 + b"\xe0"
    # One component (Y: table DC 0, AC 1), spectral band 1-63, no approximation.
    sos = b"\xff\xda\x00\x08\x01\x01\x01\x01\x3f\x00"
    return data[:end] + dht + (sos + b"\x00" * 8) * scans + data[end:]


def _form(pdf: object, content: bytes, inner: dict[str, object]) -> object:
    import pikepdf

    assert isinstance(pdf, pikepdf.Pdf)
    form = pdf.make_stream(content)
    form["/Type"] = pikepdf.Name.XObject
    form["/Subtype"] = pikepdf.Name.Form
    form["/BBox"] = [0, 0, 612, 792]
    if inner:
        form["/Resources"] = pikepdf.Dictionary(XObject=pikepdf.Dictionary(inner))
    return form


def _form_page(pdf: object, top: object) -> bytes:
    import pikepdf

    assert isinstance(pdf, pikepdf.Pdf)
    page = pdf.add_blank_page(page_size=(612, 792))
    page.obj["/Resources"] = pikepdf.Dictionary(XObject=pikepdf.Dictionary(F=top))
    page.obj["/Contents"] = pdf.make_stream(b"/F Do")
    out = io.BytesIO()
    pdf.save(out, compress_streams=True)
    return out.getvalue()


def self_drawing_form() -> bytes:
    """A PDF of about 800 bytes whose one page draws a form that draws itself twice:
    PDFium's load of the page doubles at every level until memory runs out."""
    import pikepdf

    pdf = pikepdf.new()
    form = _form(pdf, b"q 0.5 0 0 0.5 0 0 cm /F Do Q q 0.5 0 0 0.5 100 100 cm /F Do Q "
                 b"0 0 m 10 10 l S", {})
    assert isinstance(form, pikepdf.Stream)
    form["/Resources"] = pikepdf.Dictionary(XObject=pikepdf.Dictionary(F=form))
    return _form_page(pdf, form)


def form_fan(depth: int = 30) -> bytes:
    """Forms nested ``depth`` deep, each drawing the one below twice: no cycle, and
    2**depth uses of the innermost line."""
    import pikepdf

    pdf = pikepdf.new()
    form = _form(pdf, b"0 0 m 10 10 l S", {})
    for _ in range(depth):
        form = _form(pdf, b"/F Do /F Do", {"/F": form})
    return _form_page(pdf, form)
