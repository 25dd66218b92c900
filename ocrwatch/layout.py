"""Where the words of a page are: boxes in the pixels of the image that was read.

The searchable PDF puts each word of its invisible text layer on its box. The Tesseract
engine gives its own word boxes; text from the model is placed on Tesseract's boxes by
:mod:`ocrwatch.align`.
"""

from __future__ import annotations

from dataclasses import dataclass

Box = tuple[int, int, int, int]  # left, top, right, bottom; pixels, y down


@dataclass(frozen=True)
class Word:
    """One word (or, in a line-level layer, one whole line) and its box."""

    text: str
    box: Box
    line: int  # 0-based line number on the page, in reading order


@dataclass(frozen=True)
class PageLayout:
    """The words of one page, over an image of ``width`` x ``height`` pixels."""

    width: int
    height: int
    words: tuple[Word, ...] = ()
    by_line: bool = False  # each Word is a whole line: word positions were not found

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
