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
"""

from __future__ import annotations

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
    ink = mask.histogram()[255]
    if not ink:
        return 0.0, 0.0
    squares = mask.reduce(TILE) if min(mask.size) >= TILE else mask
    _, darkest = squares.getextrema()
    densest = float(darkest) / 255  # type: ignore[arg-type]
    return ink / (mask.width * mask.height), densest


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
