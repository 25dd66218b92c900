"""Where the words of a page are: boxes in the pixels of the image that was read.

The searchable PDF puts each word of its invisible text layer on its box. The Tesseract
engine gives its own word boxes; text from the model is placed on Tesseract's boxes by
:mod:`ocrwatch.results.align`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

Box = tuple[int, int, int, int]  # left, top, right, bottom; pixels, y down


@dataclass(frozen=True)
class Word:
    """One word (or, in a line-level layer, one whole line) and its box."""

    text: str
    box: Box
    line: int  # 0-based line number on the page, in reading order


@dataclass(frozen=True)
class Block:
    """One layout block of a page (a model with grounding gives them): its label in the
    model's own words (``text``, ``header``, ``footer``, ``page_number``, ``table``...),
    its box in the same pixels as the words' boxes, and its Markdown."""

    label: str
    box: Box
    text: str = ""


@dataclass(frozen=True)
class PageLayout:
    """The words of one page, over an image of ``width`` x ``height`` pixels."""

    width: int
    height: int
    words: tuple[Word, ...] = ()
    by_line: bool = False  # each Word is a whole line: word positions were not found
    blocks: tuple[Block, ...] = ()  # layout blocks in reading order, when the engine has them
    # A page deskewed before reading: it was turned ``angle`` degrees counter-clockwise
    # about its centre (Pillow's ``rotate(angle, expand=True)``) into an image of
    # ``read_size``, in whose pixels the boxes are; ``width`` x ``height`` stay the page's.
    angle: float = 0.0
    read_size: tuple[int, int] | None = None
    # The page as the file shows it (an image after its EXIF turn, a PDF page drawn at
    # pdf_dpi), where it was read at another size (a model's 1540 pixels, a reduced or
    # square-pixelled scan): hOCR and ALTO scale their boxes to it.
    shown: tuple[int, int] | None = None
    # Words read on a page's pictures beside its own text layer (``Page.beside_layer``):
    # the searchable PDF adds them over the page's text, where it adds nothing to a page
    # with text of its own otherwise.
    beside_text: bool = False

    def to_page(self, x: float, y: float) -> tuple[float, float]:
        """A point of the boxes' image in the page's own pixels (y down)."""
        if not self.angle or self.read_size is None:
            return x, y
        # The inverse of a counter-clockwise turn by angle, in y-down pixels.
        a = math.radians(self.angle)
        dx, dy = x - self.read_size[0] / 2, y - self.read_size[1] / 2
        return (self.width / 2 + dx * math.cos(a) - dy * math.sin(a),
                self.height / 2 + dx * math.sin(a) + dy * math.cos(a))

    def lines(self) -> dict[int, list[Word]]:
        """Words grouped by line number, in order."""
        out: dict[int, list[Word]] = {}
        for word in self.words:
            out.setdefault(word.line, []).append(word)
        return out

    def line_boxes(self) -> dict[int, Box]:
        """Each line's box: the union of its words' boxes."""
        return {n: union([w.box for w in words]) for n, words in self.lines().items()}


def union(boxes: list[Box]) -> Box:
    return (min(b[0] for b in boxes), min(b[1] for b in boxes),
            max(b[2] for b in boxes), max(b[3] for b in boxes))


def dumps(layout: PageLayout) -> str:
    """``layout`` as compact JSON, as the index keeps it (``pages.layout``, migration 013):
    each word ``[text, left, top, right, bottom, line]``, each block ``[label, left, top,
    right, bottom, text]``; fields at their defaults are left out."""
    data: dict[str, object] = {"w": layout.width, "h": layout.height,
                               "words": [[w.text, *w.box, w.line] for w in layout.words]}
    if layout.by_line:
        data["by_line"] = 1
    if layout.blocks:
        data["blocks"] = [[b.label, *b.box, b.text] for b in layout.blocks]
    if layout.angle:
        data["angle"] = layout.angle
    if layout.read_size is not None:
        data["read"] = list(layout.read_size)
    if layout.shown is not None:
        data["shown"] = list(layout.shown)
    if layout.beside_text:
        data["beside"] = 1
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def loads(text: str) -> PageLayout:
    """The layout :func:`dumps` wrote."""
    data = json.loads(text)
    read, shown = data.get("read"), data.get("shown")
    return PageLayout(
        int(data["w"]), int(data["h"]),
        tuple(Word(str(t), (int(a), int(b), int(c), int(d)), int(n))
              for t, a, b, c, d, n in data.get("words", ())),
        by_line=bool(data.get("by_line")),
        blocks=tuple(Block(str(lb), (int(a), int(b), int(c), int(d)), str(t))
                     for lb, a, b, c, d, t in data.get("blocks", ())),
        angle=float(data.get("angle", 0.0)),
        read_size=(int(read[0]), int(read[1])) if read else None,
        shown=(int(shown[0]), int(shown[1])) if shown else None,
        beside_text=bool(data.get("beside")))
