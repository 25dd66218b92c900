"""A page's words on the original page: boxes in the pixels of the page as the file holds
it, before it was turned upright or straightened, grouped into lines and blocks.

The stored layout (:class:`~ocrwatch.core.layout.PageLayout`) is in the pixels of the
upright page, or of the straightened image for a deskewed one; hOCR and ALTO describe the
page as scanned, so each box is taken back through the straightening
(:meth:`PageLayout.to_page`) and the turn (``PageText.turned``, degrees clockwise).
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass

from ocrwatch.core.domain import PageText
from ocrwatch.core.layout import Box, PageLayout, union


@dataclass(frozen=True)
class Line:
    box: Box
    words: tuple[tuple[str, Box], ...]


@dataclass(frozen=True)
class Region:
    """Lines that belong together (a paragraph, a column's run of lines)."""

    box: Box
    lines: tuple[Line, ...]


@dataclass(frozen=True)
class PageBoxes:
    width: int  # the page as the file holds it, in the layout's pixels
    height: int
    regions: tuple[Region, ...]
    # Degrees the text runs counter-clockwise on the page as scanned: the page's turn
    # upright (hOCR's textangle, ALTO's ROTATION).
    angle: int = 0

    def space(self, before: Box, after: Box) -> tuple[int, int, int]:
        """The gap between two words of a line along the line, as ALTO's ``SP`` gives
        it: where it starts (HPOS, VPOS) and its length (WIDTH)."""
        if self.angle == 90:  # the line runs up the page
            return before[0], after[3], max(0, before[1] - after[3])
        if self.angle == 180:
            return after[2], before[1], max(0, before[0] - after[2])
        if self.angle == 270:  # the line runs down the page
            return before[0], before[3], max(0, after[1] - before[3])
        return before[2], before[1], max(0, after[0] - before[2])

    def words(self) -> list[tuple[str, Box]]:
        return [w for r in self.regions for line in r.lines for w in line.words]


def unturn(x: float, y: float, turned: int, width: int, height: int) -> tuple[float, float]:
    """A point of the upright page (``width`` x ``height``) on the page before it was
    turned ``turned`` degrees clockwise."""
    turned %= 360
    if turned == 90:
        return y, width - x
    if turned == 180:
        return width - x, height - y
    if turned == 270:
        return height - y, x
    return x, y


def _on_original(box: Box, layout: PageLayout, turned: int) -> Box:
    corners = [layout.to_page(x, y) for x in (box[0], box[2]) for y in (box[1], box[3])]
    points = [unturn(x, y, turned, layout.width, layout.height) for x, y in corners]
    read = _read_size(layout, turned)
    size = _size(layout, turned)
    # A page read at another size than the file shows it: its pixels, not the reading's.
    fx, fy = size[0] / max(1, read[0]), size[1] / max(1, read[1])
    xs, ys = [p[0] * fx for p in points], [p[1] * fy for p in points]
    return (max(0, round(min(xs))), max(0, round(min(ys))),
            min(size[0], round(max(xs))), min(size[1], round(max(ys))))


def _read_size(layout: PageLayout, turned: int) -> tuple[int, int]:
    """The page as read, turned back as scanned, in the layout's pixels."""
    return ((layout.height, layout.width) if turned % 180 == 90
            else (layout.width, layout.height))


def _size(layout: PageLayout, turned: int) -> tuple[int, int]:
    """The page as the file shows it: where it was read at another size, that size."""
    return layout.shown if layout.shown is not None else _read_size(layout, turned)


def _split(text: str, box: Box) -> list[tuple[str, Box]]:
    """A whole line's text (a layout found by line) as words, each given its share of the
    line's width by its letters, so that no box holds a space."""
    words = text.split()
    total = sum(len(w) for w in words) + max(0, len(words) - 1)
    if not words or total == 0:
        return []
    left, top, right, bottom = box
    out, at = [], 0
    for word in words:
        x0 = left + (right - left) * at / total
        at += len(word)
        x1 = left + (right - left) * at / total
        out.append((word, (round(x0), top, max(round(x1), round(x0) + 1), bottom)))
        at += 1
    return out


def page_boxes(page: PageText) -> PageBoxes:
    """``page``'s words on the original page; an empty page when it has no layout."""
    layout = page.layout
    if layout is None:
        return PageBoxes(0, 0, ())
    lines: list[tuple[Box, list[tuple[str, Box]]]] = []  # upright pixels, for grouping
    for words in layout.lines().values():
        if layout.by_line:
            pieces = [p for w in words for p in _split(w.text, w.box)]
        else:
            pieces = [(w.text, w.box) for w in words if w.text.strip()]
        if pieces:
            lines.append((union([b for _, b in pieces]), pieces))
    width, height = _size(layout, page.turned)

    def line_of(box: Box, pieces: list[tuple[str, Box]]) -> Line:
        return Line(_on_original(box, layout, page.turned),
                    tuple((t, _on_original(b, layout, page.turned)) for t, b in pieces))

    regions = []
    for group in _regions(lines):
        made = [line_of(box, pieces) for box, pieces in group]
        regions.append(Region(union([ln.box for ln in made]), tuple(made)))
    return PageBoxes(width, height, tuple(regions), page.turned % 360)


def _regions(lines: list[tuple[Box, list[tuple[str, Box]]]]
             ) -> list[list[tuple[Box, list[tuple[str, Box]]]]]:
    """Lines in reading order, cut where a line starts more than a line and a half below
    the one before, or above it (a new column): Tesseract's own blocks are not kept."""
    if not lines:
        return []
    usual = statistics.median(b[3] - b[1] for b, _ in lines) or 1
    groups = [[lines[0]]]
    for before, line in itertools.pairwise(lines):
        gap = line[0][1] - before[0][3]
        if gap > 1.5 * usual or line[0][1] < before[0][1]:
            groups.append([line])
        else:
            groups[-1].append(line)
    return groups
