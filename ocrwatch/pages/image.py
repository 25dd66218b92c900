"""Image helpers shared by images and PDF pages: the reading limits, RGB on white (or
bilevel and grey pages kept as they are, for Tesseract), the scaling to the model's
side, the reduction to a pixel budget, the blank-page test."""

from __future__ import annotations

import math
from dataclasses import dataclass

from PIL import Image, ImageChops

from ocrwatch.config import Config

# What reading a page may cost, whatever the file claims. Real scans stay as they are
# (A3 at 600 dpi is 70 megapixels): every shrink of a scan was measured to cost
# Tesseract accuracy on some page. Only a larger image is reduced, by a whole factor
# (a box filter, as a scanner at a lower resolution would give), so a 14000x14000
# image costs what an A3 scan costs.
READ_PIXELS = 100_000_000


@dataclass(frozen=True)
class Limits:
    max_pages: int
    max_pixels: int
    max_bytes: int

    @classmethod
    def from_config(cls, config: Config) -> Limits:
        return cls(config.max_pages, config.max_pixels, int(config.max_file_mb * 1024 * 1024))


_WIDE_GREYS = ("I;16", "I;16B", "I;16L", "I")


def _grey8(image: Image.Image) -> Image.Image:
    """A 16- or 32-bit grey image in 8 bits: a plain convert would clip it to white."""
    hi = image.getextrema()[1]
    hi_value = hi if isinstance(hi, int | float) else 65535
    scale = 255.0 / max(1.0, float(hi_value))
    return image.point(lambda v: v * scale).convert("L")


def to_rgb(image: Image.Image) -> Image.Image:
    """RGB on white: transparency flattened, palettes, CMYK, 16-bit and 1-bit converted."""
    if image.mode in _WIDE_GREYS:
        image = _grey8(image)
    if image.mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    if image.mode != "RGB":
        return image.convert("RGB")
    return image


def flattened(image: Image.Image) -> Image.Image:
    """On white like :func:`to_rgb`, but a bilevel page stays 1-bit and a grey page (or an
    RGB page with no colour in it) grey.

    For Tesseract, which reads a page at its own size: a 600 dpi A4 page (35 megapixels)
    given as RGB is 139 MB in Tesseract's own copy (32 bits a pixel), 35 MB as grey and
    4.4 MB as 1-bit, and Tesseract reads the same from each (the grey of equal channels
    is that grey; a 1-bit page needs no threshold)."""
    if image.mode in ("1", "L"):
        return image
    if image.mode == "RGB":
        # A grey scan drawn from a PDF, or saved as RGB: grey (Pillow's grey of three
        # equal channels is that value exactly).
        return image.convert("L") if _grey(image) else image
    if image.mode in ("LA", "La"):
        grey = image.convert("LA")
        background = Image.new("L", grey.size, 255)
        background.paste(grey.getchannel("L"), mask=grey.getchannel("A"))
        return background
    if image.mode in _WIDE_GREYS:
        return _grey8(image)
    return to_rgb(image)


GREY_STRIP = 64  # rows compared at a time: a whole page split costs three copies of it


def _grey(image: Image.Image) -> bool:
    """Whether every pixel of an RGB image has three equal channels (a colour page is
    told at its first strip with colour in it)."""
    return all(equal_channels(image.crop((0, top, image.width,
                                          min(image.height, top + GREY_STRIP))))
               for top in range(0, image.height, GREY_STRIP))


def equal_channels(image: Image.Image) -> bool:
    """Whether every pixel of an RGB image (a strip of a page) has three equal channels."""
    red, green, blue = image.split()
    return (ImageChops.difference(red, green).getbbox() is None
            and ImageChops.difference(green, blue).getbbox() is None)


def scale_to(image: Image.Image, max_side: int | None) -> Image.Image:
    """Scale so the longest side is exactly ``max_side``, up or down (None: as it is).

    The vision model was made for pages whose longest side is ``MAX_SIDE``: a smaller
    page is enlarged to it (its text would otherwise be a few pixels high for the
    encoder), a larger one shrunk.
    """
    if max_side is None or max(image.size) == max_side:
        return image
    ratio = max_side / max(image.size)
    size = (max(1, round(image.width * ratio)), max(1, round(image.height * ratio)))
    method = Image.Resampling.LANCZOS if ratio < 1 else Image.Resampling.BICUBIC
    return image.resize(size, method)


def within_budget(image: Image.Image, budget: int | None = None) -> tuple[Image.Image, float]:
    """The image reduced by a whole factor to at most ``budget`` pixels, and the factor
    applied (1: as it is)."""
    budget = budget or READ_PIXELS
    pixels = image.width * image.height
    if pixels <= budget:
        return image, 1.0
    whole = math.ceil((pixels / budget) ** 0.5)
    if image.mode not in ("L", "RGB"):
        image = to_rgb(image) if image.mode != "1" else image.convert("L")  # strokes in grey
    return image.reduce(whole), 1.0 / whole


def blank(image: Image.Image) -> bool:
    """Whether every pixel of the page has (nearly) the same colour: nothing to read."""
    extrema = image.getextrema()
    bands = extrema if isinstance(extrema[0], tuple) else (extrema,)
    return all(float(hi) - float(lo) <= 2 for lo, hi in bands)  # type: ignore[misc, arg-type]
