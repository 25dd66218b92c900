"""How much of a page is ink: a scanned blank back is recorded blank, never read.

A blank sheet through a scanner is not one colour: paper grain, sensor noise, dust
and the faint mirrored print of the other side's text all show. Vision-language
models invent whole pages for such images, so they are not sent to any engine.

Ink here is what is much darker than the paper around it: the page is shrunk by a box
filter (grain and sensor noise average out), specks are removed by a median filter, and
a pixel counts as ink when it is at least ``INK_DEPTH`` darker than the paper's own
brightness where it lies (show-through through 80 g/m² paper is 5-20% darker, print
60-90%). The paper's brightness is taken place by place (the median of ``CELLS`` cells
across the page and their neighbours), not once for the page: light falls off across a
photographed sheet, and a shadow's edge crosses it. What is dark from the edge of the
picture inwards (the table a photographed sheet lies on, a scanner's open lid) is not
on the page and is not ink.
A page is blank when the ink covers less than ``BLANK_COVERAGE`` of it, away from
the edges where scanners leave a shadow, and no small square of it (``TILE`` pixels a
side at the measuring size) is more than ``TILE_INK`` ink. One short line of text
covers under 0.1% of a page but a quarter or more of the squares it crosses; a 7 pt
word alone on an A4 page still fills 10% of one, while grain, dust and show-through
left after the filters stay under 2% of every square of the scan-like blank backs.
The levels were measured (docs/outputs.md): the corpus's 23 pages have 0.17% ink and
more (the letter-spaced title page of tapus_multipage_3p), and a square of 25% or more;
scan-like blank backs made from them (benchmarks/cases.py: grain, sensor noise, dust,
the front showing through mirrored at 10-20% of its darkness) 0.000-0.032%, at most
2.7% of any square, and so at 150 and 100 dpi; photographed (a tilted sheet on a table,
light falling off to 60% across it, a hard shadow's edge), 19 or 20 of 23 are blank.

A filed sheet's back also carries what filing leaves: punch holes, which a scanner's dark
backing shows as dark discs, and a staple's crown or legs. Each is a large mark near an
edge, so the page would be read, and a model invents text for it. When nothing lies in the
page's middle, the marks in the margin band are looked at one by one, and a filled disc of
a punch hole's size (ISO 838: 6 mm; 1/4 to 5/16 inch in the US) or a straight bar of a
staple's (6 to 13 mm) is not counted. A word, a page number or a stamp in the margin still is.
"""

from __future__ import annotations

import math

from PIL import Image, ImageChops, ImageDraw, ImageFilter

WORK_SIDE = 1000  # pixels: the longest side the page is measured at
INK_DEPTH = 0.3  # share of the paper's brightness a pixel must be darker by
BLANK_COVERAGE = 0.001  # under 0.1% ink: blank (a line of 12 pt text is about 0.1%)
EDGE = 0.02  # share of each side left out: a scanner's shadow at the sheet's edge
TILE = 16  # pixels at WORK_SIDE: the square a mark is looked for in (1.6% of the side)
TILE_INK = 0.05  # a square with more ink than this holds a mark: a word, a stamp, a line
CELLS = 60  # the paper's brightness is measured in cells of 1/60 of the page's short side
CELL_MEDIAN = 5  # ... each the median of 5x5 cells: text, however dense, is not paper
OUTSIDE_DEPTH = 0.5  # darker than half the page's paper, and reaching the edge: no sheet
# Filing marks, as shares of the measured page's short side (A4: 210 mm, 1% is 2.1 mm).
BAND = 0.15  # the margin band where punch holes and staples lie (up to 31 mm on A4)
MARKS_AT_MOST = 0.01  # only a page with under 1% ink is looked at mark by mark
MARKS_LIMIT = 60  # ... and with at most this many marks in its band: more is text
HOLE = (0.015, 0.065)  # a punch hole's diameter: 3-14 mm on A4 (A5 and letter too)
HOLE_FILL = 0.6  # of the disc its box holds: a hole, darker show-through around it cutting
# into it; a ring or a letter O fills far less, a bold O 0.64
HOLE_ROUND = 1.5  # its box is no longer than this times its width
STAPLE = (0.02, 0.12)  # a staple's crown or a leg, end to end: 4-25 mm on A4
STAPLE_THIN = 0.008  # ... and at most this thick across (1.7 mm on A4; a word's letters
# stand taller than that)
GROUP = 9  # pixels (a square max filter): marks up to 8 apart, 2.3 mm on A4, are pieces of
# one: the median filter breaks a thin wire into dashes, and a staple's legs nearly meet


def ink_limit(histogram: list[int], depth: float = INK_DEPTH) -> float:
    """The grey level below which a pixel is ink: ``depth`` darker than the paper, the
    brightness that half the page is at least as bright as."""
    total, seen, paper = sum(histogram), 0, 255
    for value in range(255, -1, -1):
        seen += histogram[value]
        if seen * 2 >= total:
            paper = value
            break
    return paper * (1 - depth)


def coverage(image: Image.Image) -> float:
    """The share of the page (0-1) covered by ink, away from its edges."""
    return measure(image)[0]


def measure(image: Image.Image) -> tuple[float, float]:
    """The page's ink share and its densest square's ink share, away from its edges."""
    grey = image.convert("L")
    factor = max(1, round(max(grey.size) / WORK_SIDE))
    if factor > 1:
        grey = grey.reduce(factor)
    width, height = grey.size
    dx, dy = round(width * EDGE), round(height * EDGE)
    if width - 2 * dx >= 8 and height - 2 * dy >= 8:
        grey = grey.crop((dx, dy, width - dx, height - dy))
    grey = grey.filter(ImageFilter.MedianFilter(3))
    paper = grey.reduce(max(1, min(grey.size) // CELLS)).filter(
        ImageFilter.MedianFilter(CELL_MEDIAN)).resize(grey.size, Image.Resampling.BILINEAR)
    # Ink: the paper's level where it lies, less INK_DEPTH, above the pixel's own.
    limit = paper.point(lambda value: round(value * (1 - INK_DEPTH)))
    mask = ImageChops.subtract(limit, grey).point(lambda value: 255 if value else 0)
    # What is dark from the picture's edge inwards, through ink or through what is far
    # darker than the page's paper (a table the paper's level was measured on), is not
    # on the sheet: the sheet's own edge against it is a dark line, not ink.
    far = ink_limit(grey.histogram(), OUTSIDE_DEPTH)
    outside = ImageChops.lighter(mask, grey.point(lambda value: 255 if value < far else 0))
    _clear_from_edges(outside)
    mask = ImageChops.darker(mask, outside)
    share, densest = _ink(mask)
    if not looks_blank(share, densest) and share < MARKS_AT_MOST:
        cleared = _clear_filing_marks(mask)
        if cleared is not None:
            share, densest = _ink(cleared)
    return share, densest


def _ink(mask: Image.Image) -> tuple[float, float]:
    """The share of ``mask`` that is ink, and the ink share of its densest square."""
    ink = mask.histogram()[255]
    if not ink:
        return 0.0, 0.0
    squares = mask.reduce(TILE) if min(mask.size) >= TILE else mask
    _, darkest = squares.getextrema()
    densest = float(darkest) / 255  # type: ignore[arg-type]
    return ink / (mask.width * mask.height), densest


def _clear_filing_marks(mask: Image.Image) -> Image.Image | None:
    """``mask`` without its punch holes and staples, when the page's middle is blank and
    its margin band holds few marks; None when there is none to remove."""
    width, height = mask.size
    side = min(width, height)
    band = round(side * BAND)
    if width <= 2 * band or height <= 2 * band:
        return None
    middle = (band, band, width - band, height - band)
    if not looks_blank(*_ink(mask.crop(middle))):
        return None  # text in the middle: not a blank back, whatever the margin holds
    rest = mask.copy()
    rest.paste(0, middle)
    # Pieces a few pixels apart are one mark: the median filter breaks a staple's thin
    # wire into dashes.
    groups = rest.filter(ImageFilter.MaxFilter(GROUP))
    only = [0] * 256
    only[128] = 255
    marks: list[Image.Image] = []
    for _ in range(MARKS_LIMIT + 1):
        box = groups.getbbox()
        if box is None:
            break
        row = groups.crop((box[0], box[1], box[2], box[1] + 1)).tobytes()
        seed = (box[0] + next(i for i, value in enumerate(row) if value), box[1])
        ImageDraw.floodfill(groups, seed, 128)
        group = groups.point(only)
        ImageDraw.floodfill(groups, seed, 0)
        ink = ImageChops.darker(rest, group)
        found = ink.getbbox()
        if found is not None and _filing_mark(ink.crop(found), side):
            marks.append(ink)
    else:
        return None  # more marks than filing leaves: text in the margin; count them all
    if not marks:
        return None
    for ink in marks:
        mask = ImageChops.subtract(mask, ink)
    return mask


def _filing_mark(ink: Image.Image, side: int) -> bool:
    """Whether a mark (``ink``, cropped to it) is a punch hole, a filled disc, or a
    staple, a thin straight bar at any angle, on a page whose short side is ``side``."""
    width, height = ink.size
    long, short = max(width, height), min(width, height)
    if HOLE[0] * side <= long <= HOLE[1] * side and long <= HOLE_ROUND * short:
        # Closed first: grain and JPEG speckle leave pinholes in a disc of mid grey.
        closed = ink.filter(ImageFilter.MaxFilter(3)).filter(ImageFilter.MinFilter(3))
        disc = math.pi / 4 * width * height
        if closed.histogram()[255] >= HOLE_FILL * disc:
            return True
    points = [(i % width, i // width) for i, value in enumerate(ink.tobytes()) if value]
    if len(points) < 2:
        return False
    # The bar's direction: the principal axis of its pixels.
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    syy = sum((y - my) ** 2 for _, y in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    angle = 0.5 * math.atan2(2 * sxy, sxx - syy)
    cos, sin = math.cos(angle), math.sin(angle)
    along = [(x - mx) * cos + (y - my) * sin for x, y in points]
    across = [(y - my) * cos - (x - mx) * sin for x, y in points]
    length = max(along) - min(along) + 1
    thickness = max(across) - min(across) + 1
    return STAPLE[0] * side <= length <= STAPLE[1] * side and thickness <= STAPLE_THIN * side


def _clear_from_edges(mask: Image.Image) -> None:
    """Remove from ``mask`` the ink that reaches its edge: what surrounds the sheet."""
    width, height = mask.size
    pixels = mask.load()
    assert pixels is not None
    edge = [(x, y) for x in range(width) for y in (0, height - 1)]
    edge += [(x, y) for y in range(height) for x in (0, width - 1)]
    for x, y in edge:
        if pixels[x, y]:
            ImageDraw.floodfill(mask, (x, y), 0)


def is_blank(image: Image.Image) -> bool:
    """Whether the page holds (next to) no ink: a blank sheet as a scanner gives it."""
    return looks_blank(*measure(image))


def looks_blank(share: float, densest: float) -> bool:
    """Whether a page of :func:`measure`'s ``share`` and ``densest`` square is blank."""
    return share < BLANK_COVERAGE and densest <= TILE_INK
