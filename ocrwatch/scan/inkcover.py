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
photographed sheet, and a shadow's edge crosses it. Where the paper meets a far darker
ground, it is held to ``GROUND_STEP`` times the dimmest cell around, so the ground's own
edge is not ink. What is dark from the edge of the picture inwards (the table a
photographed sheet lies on, a scanner's lid or bed) is not on the page and is not ink:
far darker than the page's paper (what the brightest ``PAPER_SHARE`` of the picture is
at least as bright as: a small sheet is less than half of a scanner's bed), or than the
best-lit paper near it (a grey table beside the dim side of a sheet, in failing light).
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

A filed sheet's back also carries what filing leaves: punch holes, which a scanner's
backing shows as dark or grey discs or as the shadow of their rim, and a staple. Each is a
large mark near an edge, so the page would be read, and a model invents text for it. When
nothing lies in the page's middle, the marks in the margin band are looked at one by one:
holes of a punch's size in a row along an edge, as far apart as a punch puts them (ISO 838:
6 mm holes 80 mm apart; the US: 1/4 to 5/16 inch, 108 mm), and a thin straight bar of a
staple's length in a corner, are not counted. A word, a page number or a stamp in the
margin still is, and so is one round mark alone (a letter O, a bullet).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageChops, ImageFilter

WORK_SIDE = 1000  # pixels: the longest side the page is measured at
INK_DEPTH = 0.3  # share of the paper's brightness a pixel must be darker by
BLANK_COVERAGE = 0.001  # under 0.1% ink: blank (a line of 12 pt text is about 0.1%)
EDGE = 0.02  # share of each side left out: a scanner's shadow at the sheet's edge
TILE = 16  # pixels at WORK_SIDE: the square a mark is looked for in (1.6% of the side)
TILE_INK = 0.05  # a square with more ink than this holds a mark: a word, a stamp, a line
CELLS = 60  # the paper's brightness is measured in cells of 1/60 of the page's short side
CELL_MEDIAN = 5  # ... each the median of 5x5 cells: text, however dense, is not paper
PAPER_SHARE = 0.2  # at least this share of a picture is its sheet's paper
GROUND_STEP = 1.4  # under 1 / (1 - INK_DEPTH): a ground this much darker is not ink
OUTSIDE_DEPTH = 0.5  # darker than half the page's paper, and reaching the edge: no sheet
# Filing marks, as shares of the measured page's short side (A4: 210 mm, 1% is 2.1 mm).
BAND = 0.15  # the margin band where punch holes and staples lie (up to 31 mm on A4)
MARKS_AT_MOST = 0.01  # only a page with under 1% ink is looked at mark by mark
MARKS_LIMIT = 60  # ... and with at most this many marks in its band: more is text
HOLE = (0.015, 0.065)  # a punch hole's diameter: 3-14 mm on A4 (A5 and letter too)
HOLE_FILL = 0.6  # of the disc its box holds: a hole, darker show-through around it cutting
# into it; a ring or a letter O fills far less, a bold O 0.64
HOLE_ROUND = 1.5  # its box is no longer than this times its width
RIM_SPREAD = 0.25  # a hole's rim: 9 in 10 of its pixels this share of the radius from it
RIM_ARC = math.pi / 2  # ... over a quarter turn at least (a shadow on one side of it)
ROW_INSET = 0.03  # holes in a row: their distances from the edge this close (6 mm on A4)
ROW_SIZE = 0.35  # ... their sizes this close
ROW_APART = 0.3  # ... and each this far from the next (63 mm on A4; ISO 838: 80 mm,
# the US 108 mm)
RIM_BITS = 0.75  # a mark this many hole sizes from a punched hole's centre is of its rim
STAPLE = (0.02, 0.12)  # a staple's crown or a leg, end to end: 4-25 mm on A4
STAPLE_THIN = 0.008  # ... and at most this thick across (1.7 mm on A4; a word's letters
# stand taller than that)
GROUP = 9  # pixels (a square max filter): marks up to 8 apart, 2.8 mm on A4, are pieces of
# one: the median filter breaks a thin wire into dashes, and a staple's legs nearly meet
WIDE_GROUP = 11  # ... tried too when that leaves marks: a hole's thin shadow broken into
# arcs 10 apart is one rim only so (closer, dust specks by a small page's hole join it)
SHEET_SIDE = 600  # pixels: the longest side the text's box within the ground is found at
TEXT_MARGIN = 0.01  # of the longest side: kept around that box (a line's edges stay in)


def ink_limit(histogram: list[int], depth: float = INK_DEPTH, brighter: float = 0.5) -> float:
    """The grey level below which a pixel is ink: ``depth`` darker than the paper, the
    brightness that a ``brighter`` share of the page is at least as bright as."""
    total, seen, paper = sum(histogram), 0, 255
    for value in range(255, -1, -1):
        seen += histogram[value]
        if seen >= brighter * total:
            paper = value
            break
    return paper * (1 - depth)


def ink_mask(image: Image.Image, side: int) -> Image.Image:
    """Ink white on black, reduced (never enlarged) to about ``side`` pixels."""
    grey = image.convert("L")
    factor = max(1, round(max(grey.size) / side))
    if factor > 1:
        grey = grey.reduce(factor)
    limit = ink_limit(grey.histogram())
    return grey.point(lambda v: 255 if v < limit else 0)


def text_box(image: Image.Image, side: int = SHEET_SIDE) -> tuple[int, int, int, int] | None:
    """The box (in ``image``'s pixels) of the ink that does not reach the picture's edge,
    with a margin of ``TEXT_MARGIN`` of its side, when some ink does reach it (a card or a
    sheet photographed on a darker table, a scanner's dark bed or lid): the text on the
    sheet, without the ground around it. None when no ink reaches the edge (the page is
    its own box) or none is left inside."""
    mask = ink_mask(image, side)
    inside = mask.copy()
    _clear_from_edges(inside)
    if inside.histogram()[255] == mask.histogram()[255]:
        return None  # nothing reached the edge
    box = inside.getbbox()
    if box is None:
        return None
    scale_x, scale_y = image.width / mask.width, image.height / mask.height
    margin = round(TEXT_MARGIN * max(mask.size))
    left, top = max(0, box[0] - margin), max(0, box[1] - margin)
    right, bottom = min(mask.width, box[2] + margin), min(mask.height, box[3] + margin)
    return (round(left * scale_x), round(top * scale_y), min(image.width, round(right * scale_x)),
            min(image.height, round(bottom * scale_y)))


def coverage(image: Image.Image) -> float:
    """The share of the page (0-1) covered by ink, away from its edges."""
    return measure(image)[0]


def measure(image: Image.Image, depth: float = INK_DEPTH) -> tuple[float, float]:
    """The page's ink share and its densest square's ink share, away from its edges; ink
    being ``depth`` darker than the paper where it lies."""
    return measure_depths(image, (depth,))[0]


def measure_depths(image: Image.Image, depths: Sequence[float]) -> list[tuple[float, float]]:
    """:func:`measure` at each of ``depths``: the page's paper, found once, serves each
    (the daemon asks for ink, and for marks that may be faint print)."""
    grey = image.convert("L")
    factor = max(1, round(max(grey.size) / WORK_SIDE))
    if factor > 1:
        grey = grey.reduce(factor)
    width, height = grey.size
    dx, dy = round(width * EDGE), round(height * EDGE)
    if width - 2 * dx >= 8 and height - 2 * dy >= 8:
        grey = grey.crop((dx, dy, width - dx, height - dy))
    grey = grey.filter(ImageFilter.MedianFilter(3))
    cells = grey.reduce(max(1, min(grey.size) // CELLS)).filter(
        ImageFilter.MedianFilter(CELL_MEDIAN))
    paper = cells.resize(grey.size, Image.Resampling.BILINEAR)
    # ... at most GROUND_STEP times the dimmest cell around: where paper meets a far
    # darker ground (a mid-grey table or lid, a shadow), the level drawn between the two
    # made the ground's edge ink (a blank sheet on a lid at 128 was read); faint print
    # on its paper moves no cell that far.
    dimmest = cells.filter(ImageFilter.MinFilter(3)).resize(grey.size,
                                                            Image.Resampling.BILINEAR)
    paper = ImageChops.darker(paper, dimmest.point(lambda value: round(value * GROUND_STEP)))
    # What is far darker than the page's paper, the brightness the brightest fifth of the
    # picture reaches (a small card on a scanner's bed is less than half of the picture),
    # is not the sheet where it reaches the picture's edge ...
    level = ink_limit(grey.histogram(), OUTSIDE_DEPTH, PAPER_SHARE)
    far = grey.point(lambda value: 255 if value < level else 0)
    # ... nor is what is far darker than the best-lit paper near it: a grey table beside
    # the dim side of a photographed sheet, whose own cells make the paper level there low.
    near_lit = cells.filter(ImageFilter.MaxFilter(CELL_MEDIAN)).resize(
        grey.size, Image.Resampling.BILINEAR).point(
        lambda value: round(value * (1 - OUTSIDE_DEPTH)))
    unlit = ImageChops.subtract(near_lit, grey).point(lambda value: 255 if value else 0)
    return [_measured(grey, paper, ImageChops.lighter(far, unlit), depth) for depth in depths]


def _measured(grey: Image.Image, paper: Image.Image, ground: Image.Image,
              depth: float) -> tuple[float, float]:
    """The ink share and densest square of ``grey``, ink being ``depth`` darker than the
    ``paper`` level where it lies; ``ground``: what is no sheet where it reaches the edge."""
    # Ink: the paper's level where it lies, less ``depth``, above the pixel's own.
    limit = paper.point(lambda value: round(value * (1 - depth)))
    mask = ImageChops.subtract(limit, grey).point(lambda value: 255 if value else 0)
    # What is dark from the picture's edge inwards, through ink or through the ground,
    # is not on the sheet: the sheet's own edge against it is a dark line, not ink.
    outside = ImageChops.lighter(mask, ground)
    _clear_from_edges(outside)
    mask = ImageChops.darker(mask, outside)
    share, densest = _ink(mask)
    if not looks_blank(share, densest) and share < MARKS_AT_MOST:
        cleared = _clear_filing_marks(mask, GROUP)
        if cleared is not None:
            share, densest = _ink(cleared)
        if not looks_blank(share, densest):
            # A hole's thin rim shadow, broken into arcs, is one mark only grouped wider;
            # kept only when that leaves nothing (wider, dust joins a small page's hole).
            wider = _clear_filing_marks(mask, WIDE_GROUP)
            if wider is not None and looks_blank(*(found := _ink(wider))):
                share, densest = found
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


def _spread(mask: Image.Image, size: int) -> Image.Image:
    """``mask.filter(ImageFilter.MaxFilter(size))`` for a 0/255 mask, in a time that does
    not grow with ``size``: a window's ink counted from running sums. Pillow's rank filter
    sorts each pixel's window, and for the 9 and 11 pixel groups it took more of a blank
    back's preparation than the rest of it."""
    reach = size // 2
    ink = np.pad(np.asarray(mask) > 0, reach, mode="edge").astype(np.int32)
    sums = np.zeros((ink.shape[0] + 1, ink.shape[1] + 1), dtype=np.int32)
    np.cumsum(np.cumsum(ink, axis=0), axis=1, out=sums[1:, 1:])
    counts = (sums[size:, size:] - sums[:-size, size:] - sums[size:, :-size]
              + sums[:-size, :-size])
    return Image.fromarray(np.where(counts > 0, 255, 0).astype(np.uint8), "L")


def _clear_filing_marks(mask: Image.Image, spacing: int = GROUP) -> Image.Image | None:
    """``mask`` without its punch holes and staples, when the page's middle is blank and
    its margin band holds few marks (pieces ``spacing`` - 1 pixels apart taken as one); None
    when there is none to remove."""
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
    groups = _spread(rest, spacing)
    only = [0] * 256
    only[128] = 255
    staples: list[Image.Image] = []
    holes: list[_Mark] = []
    others: list[_Mark] = []
    corner = side * BAND
    for _ in range(MARKS_LIMIT + 1):
        box = groups.getbbox()
        if box is None:
            break
        row = groups.crop((box[0], box[1], box[2], box[1] + 1)).tobytes()
        seed = (box[0] + next(i for i, value in enumerate(row) if value), box[1])
        floodfill(groups, [seed], 128)
        group = groups.point(only)
        floodfill(groups, [seed], 0)
        ink = ImageChops.darker(rest, group)
        found = ink.getbbox()
        if found is None:
            continue
        left, top, right, bottom = found
        mark = ink.crop(found)
        points = [(i % mark.width, i // mark.width)
                  for i, value in enumerate(mark.tobytes()) if value]
        where = _Mark(ink, (left + right) / 2, (top + bottom) / 2,
                      max(right - left, bottom - top))
        in_corner = min(left, width - right) < corner and min(top, height - bottom) < corner
        if len(points) < 3:
            others.append(where)
        elif _disc(mark, side):
            holes.append(where)
        elif in_corner and _bar(points, side):
            staples.append(ink)  # before the rim: a short bar fits a wide circle too
        elif (circle := _rim(points, side)) is not None:
            # The hole is the rim's circle, not the arc's box: the bits the median filter
            # broke off the arc lie around its centre, and rows compare holes' sizes.
            cx, cy, radius = circle
            holes.append(_Mark(ink, left + cx, top + cy, round(2 * radius)))
        else:
            others.append(where)
    else:
        return None  # more marks than filing leaves: text in the margin; count them all
    punched = _punched(holes, width, height, side)
    # What lies on a punched hole's rim is part of it: its shadow, broken by the median
    # filter into bits where it is thin.
    bits = [m for m in others
            if any(math.hypot(m.x - h.x, m.y - h.y) <= RIM_BITS * h.size for h in punched)]
    marks = staples + [m.ink for m in punched + bits]
    if not marks:
        return None
    for ink in marks:
        mask = ImageChops.subtract(mask, ink)
    return mask


@dataclass(frozen=True)
class _Mark:
    """One mark in the margin band: its ink (on the whole page), centre and size."""

    ink: Image.Image
    x: float
    y: float
    size: int

    def inset(self, edge: int, width: int, height: int) -> float:
        """How far the mark lies from the page's edge ``edge`` (left, right, top, bottom)."""
        return (self.x, width - self.x, self.y, height - self.y)[edge]

    def along(self, edge: int) -> float:
        """Where the mark lies along that edge."""
        return self.y if edge < 2 else self.x


def _punched(holes: list[_Mark], width: int, height: int, side: int) -> list[_Mark]:
    """The marks among ``holes`` that a punch made: two or more of like size in a row along
    one edge, at like distances from it, each far from the next (ISO 838: 80 mm; US:
    108 mm). One round mark alone, or round marks at random places or close together,
    are a letter O, a 0 or a bullet."""
    punched: list[_Mark] = []
    for edge in range(4):
        near = sorted((h for h in holes if h.inset(edge, width, height) < side * BAND),
                      key=lambda h: h.inset(edge, width, height))
        for first in near:
            inset = first.inset(edge, width, height)
            alike = sorted((h for h in near
                            if abs(h.inset(edge, width, height) - inset) <= ROW_INSET * side
                            and abs(h.size - first.size) <= ROW_SIZE * first.size),
                           key=lambda h: h.along(edge))
            row = alike[:1]
            for h in alike[1:]:  # a punch's holes are far apart: what lies between is not one
                if h.along(edge) - row[-1].along(edge) >= ROW_APART * side:
                    row.append(h)
            if len(row) >= 2:
                punched += [h for h in row if all(h is not p for p in punched)]
                break
    return punched


def _disc(ink: Image.Image, side: int) -> bool:
    """A punch hole a dark backing shows through: a filled disc of a hole's size."""
    width, height = ink.size
    long, short = max(width, height), min(width, height)
    if not (HOLE[0] * side <= long <= HOLE[1] * side and long <= HOLE_ROUND * short):
        return False
    # Closed first: grain and JPEG speckle leave pinholes in a disc of mid grey.
    closed = ink.filter(ImageFilter.MaxFilter(3)).filter(ImageFilter.MinFilter(3))
    return closed.histogram()[255] >= HOLE_FILL * math.pi / 4 * width * height


def _rim(points: list[tuple[int, int]], side: int) -> tuple[float, float, float] | None:
    """A punch hole a light backing shows: its rim's shadow, a ring or an arc of a
    quarter turn or more, of a hole's size. Its circle (centre in the points' frame,
    radius), or None."""
    circle = _fit_circle(points)
    if circle is None:
        return None
    cx, cy, radius = circle
    if not HOLE[0] * side <= 2 * radius <= HOLE[1] * side:
        return None
    off = sorted(abs(math.hypot(x - cx, y - cy) - radius) for x, y in points)
    if off[int(0.9 * (len(off) - 1))] > RIM_SPREAD * radius + 1:
        return None
    turns = sorted(math.atan2(y - cy, x - cx) for x, y in points)
    gaps = [b - a for a, b in itertools.pairwise(turns)] + [turns[0] + 2 * math.pi - turns[-1]]
    return circle if 2 * math.pi - max(gaps) >= RIM_ARC else None


def _fit_circle(points: list[tuple[int, int]]) -> tuple[float, float, float] | None:
    """The circle nearest to ``points`` (an algebraic least-squares fit: x² + y² + Dx +
    Ey + F = 0, solved on coordinates centred on the points); None when they are on a
    line."""
    mx, my, rows = _centred(points)
    # Normal equations of [u v 1] . [D E F] = -(u² + v²).
    suu = sum(u * u for u, _ in rows)
    svv = sum(v * v for _, v in rows)
    suv = sum(u * v for u, v in rows)
    n = float(len(rows))
    bu = -sum(u * (u * u + v * v) for u, v in rows)
    bv = -sum(v * (u * u + v * v) for u, v in rows)
    bf = -sum(u * u + v * v for u, v in rows)
    # Sums of u and v are 0 (centred), so F = bf / n and D, E solve a 2x2 system.
    det = suu * svv - suv * suv
    if abs(det) < 1e-9:
        return None
    d = (bu * svv - bv * suv) / det
    e = (bv * suu - bu * suv) / det
    f = bf / n
    squared = d * d / 4 + e * e / 4 - f
    if squared <= 0:
        return None
    return mx - d / 2, my - e / 2, math.sqrt(squared)


def _centred(points: list[tuple[int, int]]) -> tuple[float, float, list[tuple[float, float]]]:
    """The points' mean, and the points less it."""
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    return mx, my, [(x - mx, y - my) for x, y in points]


def _bar(points: list[tuple[int, int]], side: int) -> bool:
    """A staple's crown or leg: a thin straight bar of a staple's length, at any angle."""
    _, _, rows = _centred(points)
    suu = sum(u * u for u, _ in rows)
    svv = sum(v * v for _, v in rows)
    suv = sum(u * v for u, v in rows)
    angle = 0.5 * math.atan2(2 * suv, suu - svv)  # the principal axis of its pixels
    cos, sin = math.cos(angle), math.sin(angle)
    along = [u * cos + v * sin for u, v in rows]
    across = [v * cos - u * sin for u, v in rows]
    length = max(along) - min(along) + 1
    thickness = max(across) - min(across) + 1
    return STAPLE[0] * side <= length <= STAPLE[1] * side and thickness <= STAPLE_THIN * side


def _clear_from_edges(mask: Image.Image) -> None:
    """Remove from ``mask`` the ink that reaches its edge: what surrounds the sheet."""
    width, height = mask.size
    edge = [(x, y) for x in range(width) for y in (0, height - 1)]
    edge += [(x, y) for y in range(height) for x in (0, width - 1)]
    floodfill(mask, edge, 0)


def floodfill(image: Image.Image, seeds: Iterable[tuple[int, int]], value: int) -> None:
    """What ``ImageDraw.floodfill(image, seed, value)`` does for each seed in turn, on a
    grey image: the seed's 4-connected region of its own grey made ``value``. Pillow's
    goes pixel by pixel in Python and holds the interpreter lock throughout (a page on a
    dark scanner bed: 120 ms, while the daemon's other preparers and the vLLM engine's
    feeder waited); this finds each row's run with ``bytes.find``."""
    width, height = image.size
    data = bytearray(image.tobytes())
    same = bytearray()  # 255 where data holds ``grey``, the region's grey; 0 elsewhere
    grey = -1
    changed = False
    for x, y in seeds:
        if data[y * width + x] == value:
            continue  # of the fill's grey already (or filled from an earlier seed)
        if data[y * width + x] != grey:
            grey = data[y * width + x]
            same = data.translate(bytes(255 if v == grey else 0 for v in range(256)))
        changed = True
        stack = [(x, y)]
        while stack:
            across, down = stack.pop()
            row = down * width
            if not same[row + across]:
                continue
            left = same.rfind(b"\x00", row, row + across) + 1 or row
            right = same.find(b"\x00", row + across, row + width)
            right = row + width if right < 0 else right
            same[left:right] = bytes(right - left)
            data[left:right] = bytes((value,)) * (right - left)
            for near in (down - 1, down + 1):
                if not 0 <= near < height:
                    continue
                start, end = near * width + left - row, near * width + right - row
                at = same.find(b"\xff", start, end)
                while at >= 0:
                    stack.append((at - near * width, near))
                    gap = same.find(b"\x00", at, end)
                    at = -1 if gap < 0 else same.find(b"\xff", gap, end)
    if changed:
        image.frombytes(bytes(data))


def is_blank(image: Image.Image) -> bool:
    """Whether the page holds (next to) no ink: a blank sheet as a scanner gives it."""
    return looks_blank(*measure(image))


def looks_blank(share: float, densest: float) -> bool:
    """Whether a page of :func:`measure`'s ``share`` and ``densest`` square is blank."""
    return share < BLANK_COVERAGE and densest <= TILE_INK
