"""Upright or upside down, from the shape of a page's text lines, without OSD.

A line of Latin print has more ink above its x-height band (capitals, b d f h k l t,
the dots of i and j) than below it (g j p q y): turned upside down, the other way
round. So a page whose lines lie level (:func:`ocrwatch.scan.deskew.line_ratio`) is
cut into ``STRIPS`` upright strips (a line's stretch in a strip is level enough even
where the page is a degree off, and each column of a page is a strip's own), the ink of
each strip summed along its rows, and each line found in it: its x-height band is the
run of rows of at least ``BAND_LEVEL`` of the line's densest row, and the ink over and
under that band, up to the quietest row between it and the next line, is weighed. A
line votes "upright" when the ink above outweighs the ink below by ``LEAN`` of the two
together, "upside down" the other way, and nothing otherwise.

The page is decided only when ``MIN_LINES`` lines vote and ``MAJORITY`` of them one way,
or by one of ``RULES``' other pairs (more lines at a lower share, fewer at a higher one);
anything else (too few lines, a mixed vote, a picture, a table, two lines run together)
goes to OSD as before. Lines standing on end are never measured as they stand
(:mod:`ocrwatch.scan.orient` asks for pages whose ink profiles show level lines, and
turns a page whose profiles show lines running down it a quarter first): standing on
end they voted up to 83% one way on corpus and held-out pages, 74% on one whose ink
profiles took them for level lines (a tinted page fed sideways). The margin is
kept wide: an upright table of ditto marks over figures voted up to 69% the wrong way,
and no Latin page seen more (benchmarks/results/orientation-cheap.txt). Four strips and
a lean of 0.35 decided a fifth more pages than eight and 0.25, no page wrong either way.

The measure was made for Latin print, and is asked only when every configured language
is written in Latin (:func:`latin`). A model reads any script whatever ``languages``
says, so other scripts do reach it: Cyrillic and Greek letters drawn in six fonts, Hebrew
and Arabic in DejaVu's, voted as Latin does (capitals and tall letters over the band) or
not clearly; none the wrong way (tests/test_orient_lines.py checks three of them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from PIL import Image

from ocrwatch.config import scripts
from ocrwatch.scan import inkcover

WORK_SIDE = 2000  # pixels: the longest side the lines are measured at (reduced only)
STRIPS = 4  # upright strips the page is cut into
BAND_LEVEL = 0.5  # share of a line's densest row from which a row is in its x-height band
MIN_BAND = 4  # pixels at WORK_SIDE: a thinner band is a rule or a speck, not a line
LEAN = 0.35  # (above - below) / (above + below) from which a line votes
MIN_LINES = 12  # votes from which a page may be decided
MAJORITY = 0.85  # share of the votes that must agree
# (votes at least, share that must agree): the rule above, and two more measured on the
# orientation set's 644 pages and the held-out-style set's 156 with the lines measured on
# the text's box (orient.SHEET_LINES) and sideways: a wrong way's share reached 0.79 of 12
# to 19 votes, 0.75 of 8 to 11, but 0.66 of 20 or more; a card's 23 lines voted 0.83.
RULES = ((MIN_LINES, MAJORITY), (20, 0.80), (8, 0.95))


@dataclass(frozen=True)
class Lines:
    """What a page's lines said: votes each way and the sign of its edges."""

    upright: int  # lines with more ink above their band than below
    upside_down: int

    @property
    def turn(self) -> int | None:
        """0 or 180 when the votes and the edges agree, else None."""
        votes = self.upright + self.upside_down
        for least, share in RULES:
            if votes < least:
                continue
            if self.upright >= share * votes:
                return 0
            if self.upside_down >= share * votes:
                return 180
        return None


def latin(languages: Sequence[str]) -> bool:
    """Whether every one of ``languages`` is written in Latin letters."""
    return bool(languages) and all(scripts.reads(lang, scripts.LATIN) for lang in languages)


def _profile(mask: Image.Image, box: tuple[int, int, int, int]) -> list[float]:
    """The ink of each row of ``box`` in ``mask`` (0-255: the share of the row)."""
    strip = mask.crop(box)
    rows = strip.resize((1, strip.height), Image.Resampling.BOX)
    return [float(v) for v in rows.tobytes()]  # mode L: a byte a row


def _votes(rows: list[float]) -> tuple[int, int]:
    """Lines of one strip voting upright and upside down."""
    if not rows or max(rows) <= 0:
        return 0, 0
    # The text's rows: the strip's inkiest tenth sets how dense a line's band is.
    dense = sorted(rows)[int(len(rows) * 0.9)]
    if dense <= 0:
        return 0, 0
    level = dense * BAND_LEVEL
    bands: list[tuple[int, int]] = []
    start = None
    for y, value in enumerate(rows):
        if value >= level and start is None:
            start = y
        elif value < level and start is not None:
            bands.append((start, y))
            start = None
    if start is not None:
        bands.append((start, len(rows)))
    bands = [(a, b) for a, b in bands if b - a >= MIN_BAND]
    if len(bands) < 2:
        return 0, 0
    heights = sorted(b - a for a, b in bands)
    usual = heights[len(heights) // 2]
    up = down = 0
    for index, (top, bottom) in enumerate(bands):
        height = bottom - top
        if not 0.6 * usual <= height <= 1.6 * usual:
            continue  # a heading, a picture, two lines run together
        # Up to the quietest row between this band and the next, at most a band's height.
        above_limit = max(top - height, _quietest(rows, bands[index - 1][1], top)
                          if index else 0)
        below_limit = min(bottom + height, _quietest(rows, bottom, bands[index + 1][0])
                          if index + 1 < len(bands) else len(rows))
        # Rows as dense as a band there are a rule or another line's band, not a
        # letter's stem: a table's rules under its rows voted "upside down".
        above = sum(v for v in rows[above_limit:top] if v < level)
        below = sum(v for v in rows[bottom:below_limit] if v < level)
        band = sum(rows[top:bottom])
        if above + below < 0.05 * band:
            continue  # no ink either side: capitals, figures
        lean = (above - below) / (above + below)
        if lean >= LEAN:
            up += 1
        elif lean <= -LEAN:
            down += 1
    return up, down


def _quietest(rows: list[float], start: int, end: int) -> int:
    """The middle of the quietest rows between ``start`` and ``end``."""
    if end <= start:
        return start
    low = min(rows[start:end])
    quiet = [y for y in range(start, end) if rows[y] <= low]
    return quiet[len(quiet) // 2]


def measure(image: Image.Image) -> Lines:
    """The votes of ``image``'s lines and the sign of its edges (lines lying level)."""
    mask = inkcover.ink_mask(image, WORK_SIDE)
    if mask.getbbox() is None:
        return Lines(0, 0)
    up = down = 0
    for index in range(STRIPS):
        left = mask.width * index // STRIPS
        right = mask.width * (index + 1) // STRIPS
        u, d = _votes(_profile(mask, (left, 0, right, mask.height)))
        up, down = up + u, down + d
    return Lines(up, down)


def turn(image: Image.Image) -> int | None:
    """0 when ``image`` (its lines lying level) is clearly upright print, 180 when it is
    clearly upside down, None when its lines cannot tell (OSD decides)."""
    return measure(image).turn
