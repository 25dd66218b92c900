"""Straightening a page fed crooked: its skew found by projection profiles, then undone.

A page skewed 3 degrees read at CER 0.058 where it read at 0.009 straight (design
notes), and a wide page loses lines to a third of a degree (``MIN_ANGLE``). The angle is
found on small ink masks of the page: turned by each candidate angle, its rows' ink is
summed, and the
angle at which the rows are sharpest (text lines and the gaps between them as distinct
as they can be: the largest sum of squared differences between neighbouring rows) is
the skew. A page is only turned when that angle is at least ``MIN_ANGLE`` and clearly
sharper than leaving it: a straight page is never touched.

The 60 candidate angles turn the ink's coordinates (numpy), not the mask: a turned
coordinate falls into a row at once, where turning the image costs a resampled copy of
the whole mask per angle (154 ms a page against 10 ms, ``benchmarks/skew_measure.py``).
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageChops

from ocrwatch.scan import inkcover

MAX_ANGLE = 10.0  # degrees: beyond, a page is not skewed but laid sideways (orient.py)
# Degrees: a smaller skew is left. A third of a degree drifts 14 pixels across a
# landscape page's 3300: a third of a line at 300 dpi, enough for Tesseract's layout to
# break lines. From 1.0 (as it was) to 0.3, with the tenths measured at FINE_SIDE, 19
# files of the held-out-style set and the corpus were straightened that were left: 12
# read better (tinted_0 0.094 -> 0.049, faxfine_0 0.082 -> 0.050, tapus_05 0.144 ->
# 0.058), 6 worse (by at most 0.016: ehri_dan_00 0.032 -> 0.049), 1 the same.
# OCRmyPDF's deskew (Leptonica's) straightens from a tenth of a degree. Measured with
# Tesseract, whose layout it is; a model engine's pages keep the 1-degree floor
# (JUDGED_ANGLE: scan/prepare.ScanPrep's least_skew), where the finer mask is not made
# for a straight page and preparing is what bounds a GPU desktop.
MIN_ANGLE = 0.3
# Degrees: a page is straightened before its turn is judged (scan/prepare.py) from this
# skew; under it, after (its turn judged on the page as fed, as before MIN_ANGLE was 0.3).
JUDGED_ANGLE = 1.0
WORK_SIDE = 600  # pixels: the longest side the whole degrees are measured at
FINE_SIDE = 1200  # ... and the tenths around the best: at 600, 0.4 degrees read as 0
FINE_REACH = 0.8  # degrees: how far either side of the best whole degree tenths are tried
GAIN = 1.05  # the best angle's sharpness over the straight page's (at FINE_SIDE), at least
NEAR_WHITE = 245  # grey level from which a pixel of a straightened page is not paper


def _sharpness(mask: Image.Image, angle: float) -> float:
    """The sum of squared differences between neighbouring rows' ink, the mask turned."""
    turned = mask.rotate(angle, resample=Image.Resampling.BILINEAR, fillcolor=0)
    rows = turned.resize((1, turned.height), Image.Resampling.BOX)
    if rows.height < 2:
        return 0.0
    # Counted by a histogram of the differences, not row by row in Python: the daemon's
    # preparers are threads, and Python's own loops hold the others up.
    steps = ImageChops.difference(rows.crop((0, 0, 1, rows.height - 1)),
                                  rows.crop((0, 1, 1, rows.height))).histogram()
    return float(sum(count * step * step for step, count in enumerate(steps)))


class _Ink:
    """The mask's ink pixels as coordinates about its centre, ready to be turned.

    Each pixel's turned row position is split between the two rows it falls between
    (as a bilinear turn of the image would spread it), and the row sums are divided by
    the mask's width: the same measure as :func:`_sharpness`, without a copy per angle."""

    def __init__(self, mask: Image.Image) -> None:
        pixels = np.asarray(mask, dtype=np.uint8)
        ys, xs = np.nonzero(pixels)
        self.width = mask.width
        self.xs = xs.astype(np.float64) - (mask.width - 1) / 2
        self.ys = ys.astype(np.float64) - (mask.height - 1) / 2
        # Rows reach as far as a turned corner can: nothing falls off the canvas.
        self.reach = math.ceil(math.hypot(mask.width, mask.height) / 2) + 2

    def sharpness(self, angle: float) -> float:
        """The sum of squared differences between neighbouring rows' ink, turned ``angle``
        degrees counter-clockwise (as ``Image.rotate`` turns)."""
        theta = math.radians(angle)
        rows = self.ys * math.cos(theta) - self.xs * math.sin(theta) + self.reach
        low = np.floor(rows)
        high_share = rows - low
        at = low.astype(np.int64)
        size = 2 * self.reach + 2
        sums = (np.bincount(at, weights=1.0 - high_share, minlength=size)
                + np.bincount(at + 1, weights=high_share, minlength=size))
        # An empty row each side: the first and last lines' edges count as the others'.
        profile = np.concatenate(([0.0], sums * (255.0 / self.width), [0.0]))
        return float(np.sum(np.diff(profile) ** 2))


def skew_angle(image: Image.Image, least: float = MIN_ANGLE) -> float:
    """The counter-clockwise turn (degrees) that straightens ``image``; 0 when it is
    under ``least`` or no clear angle stands out.

    The lines of a page fed sideways run down it: the mask is looked at both ways, and
    the way whose rows are sharper is measured. A quarter turn and a small one give the
    same page in either order, so the angle found holds for the page as fed."""
    mask = inkcover.ink_mask(image, WORK_SIDE)
    if mask.getbbox() is None:
        return 0.0
    # Whole degrees both ways first, then tenths around the best of the sharper way, on
    # a finer mask: 2 x 21 + 18 turns of the ink's coordinates.
    coarse = [float(x) for x in range(-round(MAX_ANGLE), round(MAX_ANGLE) + 1)]
    ways = (_Ink(mask), _Ink(mask.transpose(Image.Transpose.ROTATE_90)))
    sideways, scored = max(((n, {a: way.sharpness(a) for a in coarse})
                            for n, way in enumerate(ways)),
                           key=lambda measured: max(measured[1].values()))
    best = max(scored, key=scored.__getitem__)
    if abs(best) + FINE_REACH < least:
        return 0.0  # no tenth around the best reaches the floor: the finer mask is spared
    finer = inkcover.ink_mask(image, FINE_SIDE)
    lines = _Ink(finer.transpose(Image.Transpose.ROTATE_90) if sideways else finer)
    tenths = round(FINE_REACH * 10)
    fine = {round(best + x / 10, 1): lines.sharpness(best + x / 10)
            for x in range(-tenths, tenths + 1)}
    straight = fine[0.0] if 0.0 in fine else lines.sharpness(0.0)
    angle = max(fine, key=fine.__getitem__)
    if abs(angle) < least or fine[angle] < straight * GAIN:
        return 0.0
    return angle


def line_ratio(image: Image.Image) -> float:
    """How much sharper ``image``'s rows are than its columns (its ink summed along each):
    well over 1 when its lines of text lie level, well under 1 when they run down the page
    (it lies sideways), near 1 when neither stands out (a picture, a table's grid)."""
    mask = inkcover.ink_mask(image, WORK_SIDE)
    if mask.getbbox() is None:
        return 1.0
    rows = _sharpness(mask, 0.0)
    columns = _sharpness(mask.transpose(Image.Transpose.ROTATE_90), 0.0)
    return rows / columns if columns else (float("inf") if rows else 1.0)


def straighten(image: Image.Image, angle: float) -> Image.Image:
    """``image`` turned ``angle`` degrees counter-clockwise, the corners filled with the
    paper's colour: white corners on grey paper move Tesseract's global threshold
    between the two, and a faint typescript on it read as nothing at all."""
    if image.mode == "1":
        image = image.convert("L")  # Pillow turns 1-bit pixels without smoothing them
    paper = paper_colour(image)
    out = image.rotate(angle, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=paper)
    # Near-white too takes the paper's colour: the white a scanner's lid shows around a
    # crooked sheet of grey paper made Tesseract read nothing on it (ehri_dan_00 turned
    # 2 degrees on white: CER 1.0; so painted, 0.096, where the straight scan reads 0.146).
    out.paste(paper, mask=out.convert("L").point(lambda v: 255 if v >= NEAR_WHITE else 0))
    return out


def paper_colour(image: Image.Image) -> int | tuple[int, ...]:
    """The colour of the page's paper: each band's median, on a small copy."""
    small = image.reduce(max(1, round(max(image.size) / 200)))
    bands = []
    for band in small.split():
        histogram, seen = band.histogram(), 0
        half = sum(histogram) / 2
        for value, count in enumerate(histogram):
            seen += count
            if seen >= half:
                bands.append(value)
                break
    return bands[0] if len(bands) == 1 else tuple(bands)
