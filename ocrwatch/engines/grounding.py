"""LightOnOCR-3's grounding answers: labelled layout blocks on a 0-1000 grid.

Asked with the text ``grounding`` beside the image, the model writes each layout block
after a marker::

    ![title](113,608,263,623) ## 2.2 LightOnOCR-1
    ![text](112,640,882,698) The first version of LightOnOCR [13], established ...
    ![page_number](491,935,505,950) 3

The format and the rules here are LightOn's (``lightonai/LightOnOCR``:
``lightonocr/grounding.py``, and ``omit_margins`` in its benchmark provider):

- a block's text runs from its marker to the next one, so a table or a list spans lines;
- the box is left, top, right, bottom, each 0-1000 of the image's width or height;
- a ``+`` after the label (``text+``) continues the block before it (a paragraph flowing
  into the next column): its text joins that block's paragraph;
- the page's running margins (``MARGIN_LABELS``: headers, footers, page numbers, side
  notes) are left out of the page's text; footnotes are the document's and are kept;
- an answer with no marker at all is taken as plain Markdown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ocrwatch.core.layout import Block

GRID = 1000
MARKER = re.compile(
    r"!\[([A-Za-z_][\w-]*?)(\+?)\]\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)[ \t]*")
# LightOn's omit_margins set: page margins and side notes. Footnotes are kept.
MARGIN_LABELS = frozenset({"header", "footer", "page_number", "page_header", "page_footer",
                           "header_image", "footer_image", "aside_text"})
# A marker cut off by the end of the answer (max_tokens reached mid-marker).
_CUT_MARKER = re.compile(r"!\[[\w+-]*(?:\]\([\d\s,]*)?$")
# Something that opens like a marker but is not one (a box with three numbers...).
_BROKEN_MARKER = re.compile(r"!\[[A-Za-z_][\w-]*\+?\]\((?![^)]*\d+\s*,\s*\d+\s*,\s*\d+\s*,\s*"
                            r"\d+\s*\))[\d\s,]*\)")


@dataclass(frozen=True)
class GridBlock:
    """One block as the model wrote it."""

    label: str  # lower case, without the "+"
    continues: bool  # the label carried a trailing "+"
    box: tuple[int, int, int, int]  # 0-1000
    text: str

    @property
    def margin(self) -> bool:
        return self.label in MARGIN_LABELS


@dataclass(frozen=True)
class Reading:
    """A grounding answer read: its blocks, and what did not fit the format."""

    blocks: tuple[GridBlock, ...]
    lead: str = ""  # text before the first marker (dropped, as LightOn's client does)
    warnings: tuple[str, ...] = ()


def parse(raw: str) -> Reading:
    """Split a grounding answer into blocks; each marker owns the text up to the next."""
    warnings: list[str] = []
    cut = _CUT_MARKER.search(raw.rstrip())
    if cut is not None:
        raw = raw.rstrip()[:cut.start()]
        warnings.append("the model's grounding answer ends in a cut-off block marker "
                        "(it ran out of tokens): that marker was dropped")
    marks = list(MARKER.finditer(raw))
    blocks: list[GridBlock] = []
    broken = 0
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(raw)
        text, n = _BROKEN_MARKER.subn("", raw[mark.end():end])
        broken += n
        box = tuple(min(GRID, int(mark.group(k))) for k in range(3, 7))
        left, top = min(box[0], box[2]), min(box[1], box[3])
        right, bottom = max(box[0], box[2]), max(box[1], box[3])
        blocks.append(GridBlock(mark.group(1).lower(), mark.group(2) == "+",
                                (left, top, right, bottom), text.strip()))
    if broken:
        warnings.append(f"{broken} malformed block marker{'s' if broken != 1 else ''} "
                        "removed from the model's grounding answer")
    lead = raw[:marks[0].start()].strip() if marks else raw.strip()
    return Reading(tuple(blocks), lead, tuple(warnings))


def markdown(blocks: tuple[GridBlock, ...], *, keep_margins: bool = False) -> str:
    """The blocks' texts as one Markdown page, blank lines between them; margins left out
    unless ``keep_margins``; a continuing block joined to the paragraph it continues."""
    parts: list[str] = []
    prev_kept = False
    for block in blocks:
        if (block.margin and not keep_margins) or not block.text:
            prev_kept = False
            continue
        if block.continues and prev_kept:
            parts[-1] = f"{parts[-1]} {block.text}"
        else:
            parts.append(block.text)
        prev_kept = True
    return "\n\n".join(parts)


def to_pixels(box: tuple[int, int, int, int], width: int, height: int
              ) -> tuple[int, int, int, int]:
    """A 0-1000 box in the pixels of an image of ``width`` x ``height``."""
    left, top, right, bottom = box
    return (round(left * width / GRID), round(top * height / GRID),
            max(round(right * width / GRID), round(left * width / GRID) + 1),
            max(round(bottom * height / GRID), round(top * height / GRID) + 1))


def layout_blocks(blocks: tuple[GridBlock, ...], width: int, height: int
                  ) -> tuple[Block, ...]:
    """The page layout's blocks, in reading order, boxes in the read image's pixels; the
    label as the model wrote it (``text+`` keeps its ``+``)."""
    return tuple(Block(b.label + ("+" if b.continues else ""),
                       to_pixels(b.box, width, height), b.text) for b in blocks)


# Escaped math delimiters: LightOnOCR-3 sometimes writes \$x\$ for $x$. Only a pair whose
# body reads as math is repaired (LightOn's conservative rule): some mark of math (a letter,
# an operator, a brace), no two words side by side of which one is longer than a letter
# (prose: "\$total price\$"), not one bare word, and not a price (\$5 and \$7).
_PAIR = re.compile(r"(?<![\\$])(\\?\$)(?!\$)((?:\\(?!\$)[^\r\n]|[^$\\\r\n])+?)(\\?\$)(?!\$)")
_PROTECTED = re.compile(r"```.*?```|`[^`\n]*`|(?<!\\)\$\$.*?(?<!\\)\$\$|\\\[.*?\\\]|\\\(.*?\\\)",
                        re.S)
_EVIDENCE = re.compile(r"[A-Za-z_^=+*/()\[\]{}<>]|\\[A-Za-z]+")
_ATOM = re.compile(r"\\[A-Za-z]+|[^\W\d_]\w*|\d+(?:\.\d*)?|\S")


def _reads_as_math(body: str) -> bool:
    stripped = body.strip()
    if not _EVIDENCE.search(stripped) or re.fullmatch(r"[^\W\d_]{2,}", stripped):
        return False
    if re.match(r"\d", stripped) and not re.search(r"[A-Za-z=^_\\]", stripped):
        return False  # a number alone: a price
    previous: str | None = None
    for atom in _ATOM.findall(stripped):
        word = bool(re.fullmatch(r"[^\W\d_]\w*", atom))
        if word and previous and (len(atom) > 1 or len(previous) > 1):
            return False
        previous = atom if word else None
    return True


def _repair(part: str) -> str:
    def one(match: re.Match[str]) -> str:
        left, body, right = match.group(1), match.group(2), match.group(3)
        if "\\" not in left + right:
            return match.group(0)
        after = part[match.end():match.end() + 1]
        if after.isdigit() or not _reads_as_math(body):
            return match.group(0)
        return f"${body}$"
    return _PAIR.sub(one, part)


def fix_escaped_dollars(text: str) -> str:
    """``\\$x^2\\$`` becomes ``$x^2$``; prices, code and display math are left alone."""
    if "\\$" not in text:
        return text
    pieces: list[str] = []
    start = 0
    for match in _PROTECTED.finditer(text):
        pieces.extend((_repair(text[start:match.start()]), match.group(0)))
        start = match.end()
    pieces.append(_repair(text[start:]))
    return "".join(pieces)
