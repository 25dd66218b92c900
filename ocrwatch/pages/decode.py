"""Turn a file into pages: decode, check limits, EXIF-rotate, flatten, convert, scale.

The file's type is read from its first bytes, never trusted from its name, so a text
file called ``scan.png`` fails with a plain reason instead of a decoder traceback.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import struct
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from PIL import Image, ImageOps, UnidentifiedImageError

from ocrwatch.config import Config
from ocrwatch.core.domain import Page
from ocrwatch.core.errors import Doing, InputError, os_reason
from ocrwatch.pages import memory
from ocrwatch.pages.budget import Budget, unlimited
from ocrwatch.pages.image import READ_PIXELS as READ_PIXELS  # what a page may cost
from ocrwatch.pages.image import Limits as Limits
from ocrwatch.pages.image import blank as blank
from ocrwatch.pages.image import flattened, within_budget
from ocrwatch.pages.image import scale_to as scale_to
from ocrwatch.pages.image import to_rgb as to_rgb

log = logging.getLogger(__name__)

# Extensions the watcher picks up. The content decides how a file is decoded.
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".jpe", ".tif", ".tiff", ".bmp", ".webp",
                            ".gif", ".avif", ".heic", ".heif"})
# A picture that moves, or a burst of photos, is one page: its first (or primary) image.
# Pages come from PDFs and multi-page TIFFs; a GIF's frames are an animation.
SINGLE_IMAGE_KINDS = frozenset({"gif", "avif", "heic"})
PDF_SUFFIXES = frozenset({".pdf"})
SUFFIXES = IMAGE_SUFFIXES | PDF_SUFFIXES

_MAGIC: list[tuple[bytes, str]] = [
    (b"%PDF-", "pdf"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"\xff\xd8\xff", "jpeg"),
    (b"II*\x00", "tiff"),
    (b"MM\x00*", "tiff"),
    (b"II+\x00", "tiff"),  # BigTIFF
    (b"MM\x00+", "tiff"),
    (b"BM", "bmp"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
]
# ISO base media files (HEIF): the brands of the "ftyp" box say what they hold.
_AVIF_BRANDS = frozenset({b"avif", b"avis"})
_HEIC_BRANDS = frozenset({b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1",
                          b"msf1"})


def _bmff_kind(head: bytes) -> str | None:
    """avif or heic from an ISO base media file's brands, else None."""
    if head[4:8] != b"ftyp":
        return None
    size = int.from_bytes(head[:4], "big")
    brands = [head[8:12]] + [head[i:i + 4] for i in range(16, min(size, len(head)) - 3, 4)]
    if any(b in _AVIF_BRANDS for b in brands):
        return "avif"
    if any(b in _HEIC_BRANDS for b in brands):
        return "heic"
    return None


def sniff(path: Path, fh: BinaryIO | None = None) -> str:
    """The file's real type from its first bytes: pdf, png, jpeg, tiff, bmp, webp, gif,
    avif or heic.

    ``fh``: the file already opened (safely, by the daemon); else ``path`` is opened.
    """
    try:
        if fh is not None:
            fh.seek(0)
            head = fh.read(1024)
        else:
            with path.open("rb") as opened:
                head = opened.read(1024)
    except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
        raise os_reason(exc, Doing.READ) from None
    except OSError as exc:
        raise os_reason(exc, Doing.READ) from exc
    if not head:
        raise InputError("the file is empty (0 bytes)")
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    bmff = _bmff_kind(head)
    if bmff is not None:
        return bmff
    # Some PDF writers put junk before the header; readers accept it within 1 KiB.
    if b"%PDF-" in head:
        return "pdf"
    raise InputError(
        f"not an image or PDF: its content does not match its name {path.suffix!r} "
        "(ocrwatch reads PNG, JPEG, TIFF, BMP, WebP, GIF, AVIF, HEIC and PDF)"
    )


MIN_SIDE = 16  # pixels: a line of text is taller than this
MAX_ASPECT = 100  # a receipt roll is 30:1; a 100000x10 strip is not a page


def _check_shape(width: int, height: int, where: str) -> None:
    short, long = sorted((width, height))
    if short < MIN_SIDE:
        raise InputError(f"{where} is {width}x{height} pixels: too thin to hold a line of "
                         f"text (a page needs at least {MIN_SIDE} pixels each way)")
    if long > MAX_ASPECT * short:
        raise InputError(f"{where} is {width}x{height} pixels, {long // short} times longer "
                         f"than wide: not a page (at most {MAX_ASPECT} to 1)")


def _decode_smaller(frame: Image.Image, max_side: int | None) -> float:
    """Have a JPEG that is shrunk to ``max_side`` anyway decode at the smallest of its
    whole scales (1/2, 1/4, 1/8, libjpeg's scaled IDCT) that still holds ``max_side``.

    A 300 dpi A4 scan fitted to 1540 px took 54 ms this way against 165 ms decoded whole
    and then shrunk, the same pixels within a grey level or two. Returns the scale the frame
    will decode at (1.0: whole). Engines that read at the scan's own size (Tesseract,
    ``max_side`` None) are not affected.
    """
    if max_side is None or frame.format != "JPEG" or max(frame.size) < 2 * max_side:
        return 1.0
    width, height = frame.size
    ratio = max_side / max(width, height)
    frame.draft(frame.mode, (math.ceil(width * ratio), math.ceil(height * ratio)))
    return frame.width / width


# A fax in standard mode is 204x98 dpi, fine mode 204x196; a ratio beyond this is not a
# scanner's but a broken header's.
MAX_PIXEL_ASPECT = 4.0


def _resolution(image: Image.Image) -> tuple[int | None, tuple[float, float]]:
    """The image's dpi (the finer direction's) and how much to stretch it across and
    down for square pixels ((1, 1): square already, or no credible resolution).

    A standard-mode fax's pixels are twice as tall as wide: read as they are, its print
    is squashed to half its height (CER 0.76 where read at its true shape 0.15)."""
    dpi = image.info.get("dpi")
    try:
        across = float(dpi[0]) if dpi else 0.0
        down = float(dpi[1]) if dpi and len(dpi) > 1 else across
    except (TypeError, ValueError, IndexError):
        return None, (1.0, 1.0)
    if not 30 <= round(across) <= 2400:
        return None, (1.0, 1.0)
    if not 30 <= round(down) <= 2400 or round(down) == round(across) or max(
            across, down) > MAX_PIXEL_ASPECT * min(across, down):
        return round(across), (1.0, 1.0)
    finer = max(across, down)
    return round(finer), (finer / across, finer / down)


def _square(image: Image.Image, stretch: tuple[float, float],
            limits: Limits) -> Image.Image:
    """``image`` stretched by ``stretch`` (across, down) to square pixels, unless that
    would pass the pixel limit (then as it is: squashed print reads worse, not wrong)."""
    width = max(1, round(image.width * stretch[0]))
    height = max(1, round(image.height * stretch[1]))
    if (width, height) == image.size or width * height > limits.max_pixels:
        return image
    if image.mode == "1":
        image = image.convert("L")  # Pillow stretches 1-bit pixels by repeating them
    return image.resize((width, height), Image.Resampling.LANCZOS)


def _check_pixels(width: int, height: int, limits: Limits, where: str) -> None:
    if width <= 0 or height <= 0:
        raise InputError(f"{where} has no pixels ({width}x{height})")
    if width * height > limits.max_pixels:
        raise InputError(
            f"{where} is {width}x{height} pixels ({width * height / 1e6:.0f} megapixels), over "
            f"the limit of {limits.max_pixels / 1e6:.0f}; raise max_pixels in the config "
            "if this file is genuine"
        )


# What Pillow's decoders raise on damaged data (found by fuzzing: a TIFF with a broken
# second frame raises TypeError or SyntaxError while counting frames).
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, TypeError, KeyError, IndexError,
                  ZeroDivisionError, OverflowError, struct.error)


def _damaged(where: str, exc: BaseException) -> InputError:
    return InputError(
        f"{where} is damaged or incomplete ({exc}); if it is still being written, "
        "it will be read again once it changes"
    )


def _decoder_for(kind: str) -> None:
    """Make sure Pillow can decode ``kind``; else say what to install."""
    if kind == "heic":
        try:
            import pillow_heif
        except ImportError:
            raise InputError(
                "a HEIC photo, and pillow-heif (its decoder) is not installed: install it "
                "into ocrwatch's environment (`pipx inject ocrwatch pillow-heif`, or "
                "`pip install pillow-heif`) and run `ocrwatch retry` on the file, or save "
                "the photo as JPEG") from None
        pillow_heif.register_heif_opener()
    elif kind == "avif":
        from PIL import features

        if not features.check("avif"):
            raise InputError(
                "an AVIF image, and this Pillow was built without AVIF: upgrade Pillow "
                "(11.3 or later reads AVIF) and run `ocrwatch retry` on the file, or save "
                "the image as PNG or JPEG")


def _image_pages(path: Path, limits: Limits, max_side: int | None,
                 fh: BinaryIO | None = None, budget: Budget | None = None,
                 kind: str = "") -> Iterator[Page]:
    budget = budget or unlimited()
    _decoder_for(kind)
    try:
        with warnings.catch_warnings():
            # Our own pixel limit applies; Pillow's bomb warning would only duplicate it.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            saved = Image.MAX_IMAGE_PIXELS
            try:
                Image.MAX_IMAGE_PIXELS = None
                if fh is not None:
                    fh.seek(0)
                opened = Image.open(fh if fh is not None else path)
            finally:
                Image.MAX_IMAGE_PIXELS = saved
    except FileNotFoundError:
        raise InputError("the file was deleted before it could be read") from None
    except UnidentifiedImageError:
        raise InputError("the image is damaged: no decoder recognises its content") from None
    except OSError as exc:
        raise os_reason(exc, Doing.DECODE, verb="open") from exc
    except _DECODE_ERRORS as exc:  # e.g. a PNG header chunk cut short
        raise _damaged("the image", exc) from exc
    with opened:
        try:
            # A TIFF reads every frame's header.
            frames = 1 if kind in SINGLE_IMAGE_KINDS else getattr(opened, "n_frames", 1)
        except _DECODE_ERRORS as exc:
            raise _damaged("the image", exc) from exc
        if frames > limits.max_pages:
            raise InputError(
                f"the image has {frames} frames, over the limit of {limits.max_pages} pages; "
                "raise max_pages in the config if this file is genuine"
            )
        for index in range(frames):
            where = f"page {index + 1}" if frames > 1 else "the image"
            budget.page()
            try:
                opened.seek(index)
            except _DECODE_ERRORS as exc:
                raise _damaged(where, exc) from exc
            frame = opened
            _check_pixels(frame.width, frame.height, limits, where)
            _check_shape(frame.width, frame.height, where)
            # Decoded, then converted to RGB: both held at once for a moment.
            budget.allow(where, "its pixels",
                         frame.width * frame.height * (_bytes_per_pixel(frame.mode) + 3))
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                    shrunk = _decode_smaller(frame, max_side) if frames == 1 else 1.0
                    frame.load()
                    dpi, stretch = _resolution(frame)
                    if dpi and shrunk < 1.0:
                        dpi = round(dpi * shrunk)
                    if index == 0 and frame.getexif().get(0x0112, 1) in (5, 6, 7, 8):
                        stretch = stretch[::-1]  # turned a quarter by its EXIF orientation
                    image = ImageOps.exif_transpose(frame) if index == 0 else frame.copy()
                    shown = image.size  # as a viewer shows the page
                    if frames == 1:
                        # The decoded original is not needed any more: free its pixels
                        # (the base class's close leaves the caller's file open).
                        Image.Image.close(opened)
                    image, factor = within_budget(image)
                    if factor < 1.0:
                        dpi = round(dpi * factor) if dpi else None
                    # A model reads RGB; Tesseract reads a bilevel or grey page as it is,
                    # at a quarter or less of the memory (pages/image.py).
                    image = to_rgb(image) if max_side is not None else flattened(image)
                    if stretch != (1.0, 1.0):
                        image = _square(image, stretch, limits)
            except FileNotFoundError:
                raise InputError("the file was deleted while it was being read") from None
            except _DECODE_ERRORS as exc:
                raise _damaged(where, exc) from exc
            except MemoryError:
                # A damaged chunk can claim gigabytes (found by fuzzing a PNG); a modest
                # page that runs out of memory is damaged, not too large.
                if frame.width * frame.height * 8 < 1 << 30:
                    raise InputError(f"{where} is damaged: a part of it claims more data "
                                     "than the file holds") from None
                raise
            if max_side is not None and max(image.size) != max_side:
                dpi = round(dpi * max_side / max(image.size)) if dpi else None
                image = scale_to(image, max_side)
            if memory.big(image.size) or factor < 1.0:
                memory.give_back()
            budget.check(where, "decoding it")
            budget.pause()
            yield Page(source=path, index=index, image=image, dpi=dpi,
                       count=frames, text="" if blank(image) else None,
                       shown=shown if shown != image.size else None)
            budget.resume()


def _bytes_per_pixel(mode: str) -> int:
    try:
        depth = 4 if mode in ("I", "F") else 2 if "16" in mode else 1
        return max(1, Image.getmodebands(mode) * depth)
    except (KeyError, ValueError):
        return 4


# A progressive JPEG holds ten scans or so (libjpeg's default script has 10, mozjpeg's
# a dozen); each scan is decoded over the whole image, so a file of tiny scans repeated
# makes decoding take minutes (50,000 scans: 331 s). libjpeg-turbo's tools refuse such
# files with -maxscans; this limit is far above any real one.
MAX_JPEG_SCANS = 256


def check_scans(path: Path, fh: BinaryIO | None = None) -> None:
    """Refuse a JPEG with more scans than any real one, counted from its bytes before it
    is decoded: a start-of-scan marker (FF DA) can appear nowhere else, since inside
    compressed data an FF byte is always followed by 00 or a restart marker."""
    scans = 0
    tail = b""
    try:
        if fh is not None:
            fh.seek(0)
            source = fh
        else:
            source = path.open("rb")
        with contextlib.ExitStack() as stack:
            if fh is None:
                stack.enter_context(source)
            while chunk := source.read(1 << 20):
                scans += (tail + chunk).count(b"\xff\xda")
                tail = chunk[-1:]
                if scans > MAX_JPEG_SCANS:
                    raise InputError(
                        f"the JPEG holds over {MAX_JPEG_SCANS} scans (a real one has about "
                        "ten): decoding it would take minutes. It is refused as a scan "
                        "bomb; if it is genuine, save it again as a baseline JPEG")
    except OSError as exc:
        raise os_reason(exc, Doing.DECODE, verb="read") from exc


def count_pages(path: Path, config: Config) -> int:
    """Number of pages without decoding them (for progress and the page limit)."""
    kind = sniff(path)
    if kind == "pdf":
        from ocrwatch.pages.pdfium_lock import PDFIUM
        from ocrwatch.pages.pdfpages import page_tree_count, pdf_document  # loads pypdfium2

        doc = pdf_document(path)
        with PDFIUM:
            try:
                count = len(doc)  # type: ignore[arg-type]
            finally:
                doc.close()  # type: ignore[attr-defined]
        return max(count, page_tree_count(path) or 0)  # the larger: both are read
    try:
        with Image.open(path) as image:
            return int(getattr(image, "n_frames", 1))
    except (OSError, UnidentifiedImageError, ValueError):
        return 1


def check_size(size: int, limits: Limits) -> None:
    """Refuse a file over ``max_file_mb``: checked before it is hashed or decoded, so a
    60 GB file costs one ``stat``, not minutes of reading."""
    if size > limits.max_bytes:
        raise InputError(
            f"the file is {size / 1024 / 1024:.0f} MB, over the limit of "
            f"{limits.max_bytes / 1024 / 1024:.0f} MB; raise max_file_mb in the config"
        )


def iter_pages(path: Path, config: Config, max_side: int | None,
               fh: BinaryIO | None = None, *, text_layer: bool = False) -> Iterator[Page]:
    """Yield the file's pages one at a time (a 500-page PDF never sits in memory whole).

    With ``text_layer``, a PDF page whose own text is taken (``pdf_text``, see
    :mod:`ocrwatch.pages.pdftext`) comes with that text and no picture. A page that needs no
    reading (blank, or its text taken) has ``text`` set.

    Raises InputError with a plain reason for anything that cannot be read, and
    TransientError for conditions that may clear (disk or I/O errors). ``fh``: the file
    already opened (the daemon opens it without following links); every read then goes
    through it, and ``path`` only names the pages.
    """
    limits = Limits.from_config(config)
    budget = Budget(config.prepare_seconds, config.prepare_memory_mb)
    kind = sniff(path, fh)
    try:
        size = os.fstat(fh.fileno()).st_size if fh is not None else path.stat().st_size
    except FileNotFoundError:
        raise InputError("the file was deleted before it could be read") from None
    check_size(size, limits)
    if kind == "pdf":
        from ocrwatch.pages.pdfpages import pdf_pages

        yield from pdf_pages(path, limits, max_side, config.pdf_dpi, fh,
                             config.pdf_text if text_layer else "ocr", budget)
    else:
        if kind == "jpeg":
            check_scans(path, fh)
        yield from _image_pages(path, limits, max_side, fh, budget, kind)
