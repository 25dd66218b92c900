"""Files that cost everything, each read with ``ocrwatch add`` and the real Tesseract
engine in a child process whose memory is measured (test_page_budget.read_once): a
page-count bomb, 10,000 annotations, an animated WebP of 200 frames, a PNG whose text
chunk inflates to 50 MB. Each ends with a reason or is read, within bounds."""

from __future__ import annotations

import time
from pathlib import Path

import pikepdf
from PIL import Image, PngImagePlugin

from .helpers import Home
from .test_page_budget import no_traceback, read_once


def count_bomb(path: Path, pages: int = 100_000) -> Path:
    """A page tree naming one page object ``pages`` times (600 KB)."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [" + b"3 0 R " * pages + b"] /Count %d >>" % pages,
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>"]
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 4\n0000000000 65535 f \n"
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size 4 /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % xref
    path.write_bytes(bytes(out))
    return path


def annotated(path: Path, count: int = 10_000) -> Path:
    """One page carrying ``count`` square annotations, each with its own appearance."""
    pdf = pikepdf.new()
    pdf.add_blank_page(page_size=(612, 792))
    look = pdf.make_stream(b"0 0 1 rg 0 0 10 10 re f")
    look["/Type"], look["/Subtype"] = pikepdf.Name.XObject, pikepdf.Name.Form
    look["/BBox"] = [0, 0, 10, 10]
    annots = pikepdf.Array()
    for i in range(count):
        x, y = (i % 60) * 10, (i // 60) % 79 * 10
        annots.append(pdf.make_indirect(pikepdf.Dictionary(
            Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.Square,
            Rect=[x, y, x + 10, y + 10], AP=pikepdf.Dictionary(N=look))))
    pdf.pages[0].obj["/Annots"] = annots
    pdf.save(path)
    return path


def test_a_page_count_bomb_fails_at_once(home: Home) -> None:
    result = read_once(home, count_bomb(home.inbox / "pages.pdf"))
    no_traceback(result)
    assert result["state"] == "failed"
    assert "100000 pages, over the limit" in result["reason"]
    assert result["peak_mb"] < 700


def test_a_page_of_10000_annotations_is_read_within_bounds(home: Home) -> None:
    began = time.monotonic()
    result = read_once(home, annotated(home.inbox / "annotated.pdf"))
    no_traceback(result)
    assert result["state"] == "done", result["reason"]
    assert result["peak_mb"] < 700 and time.monotonic() - began < 120


def test_an_animated_webp_of_200_frames_is_one_page(home: Home) -> None:
    path = home.inbox / "moving.webp"
    frames = [Image.new("RGB", (1000, 1000), (i, 0, 0)) for i in range(200)]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=10)
    result = read_once(home, path)
    no_traceback(result)
    assert result["state"] == "done", result["reason"]
    assert result["peak_mb"] < 700


def test_a_png_text_chunk_bomb_fails_with_a_reason(home: Home) -> None:
    path = home.inbox / "chatty.png"
    info = PngImagePlugin.PngInfo()
    info.add_text("comment", "x" * 50_000_000, zip=True)  # 50 KB on disk
    Image.new("L", (800, 600), 255).save(path, pnginfo=info)
    result = read_once(home, path)
    no_traceback(result)
    assert result["state"] == "failed"
    assert "MAX_TEXT_CHUNK" in result["reason"]
    assert result["peak_mb"] < 700
