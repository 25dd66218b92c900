"""The model's text on Tesseract's word boxes.

The model reads better than Tesseract but says nothing about where the words are;
Tesseract knows where every word is. The two readings of a page are aligned word by
word (a minimal edit script from RapidFuzz: difflib's matcher is heuristic and drops
frequent words such as "the" from long pages), and each of the model's words takes the
box of the Tesseract word it lines up with:

- equal words take their partner's box; a run of m differing model words between two
  agreeing ones is spread over the n Tesseract boxes there by character count;
- a word only the model read goes on the line of its nearest aligned neighbour on the
  same line of the model's text, just after (or before) that neighbour;
- when too few words agree for the placement to mean anything (another language,
  another reading order, a page Tesseract could not read), the page gets a line-level
  layer: each line of the model's text over one of Tesseract's lines, or spread down the
  page, with a warning;
- a model that gives layout blocks (LightOnOCR-3) has each block's text set in its own box
  instead (:func:`block_layer`) wherever Tesseract's words cannot place it.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, replace

from rapidfuzz.distance import Levenshtein

from ocrwatch.core.layout import Box, PageLayout, Word
from ocrwatch.core.textutil import markdown_to_text

# Below this share of the model's words found verbatim by Tesseract, positions are guesses.
MIN_AGREEMENT = 0.4


@dataclass
class _Token:
    text: str
    line: int  # line in the model's text
    box: Box | None = None
    tess_line: int = -1


def _norm(word: str) -> str:
    folded = unicodedata.normalize("NFKC", word).casefold()
    return re.sub(r"\W+", "", folded) or folded


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    for n, line in enumerate(text.splitlines()):
        out.extend(_Token(w, n) for w in line.split())
    return out


def place_text(text: str, boxes: PageLayout) -> tuple[PageLayout, list[str]]:
    """A layout with the words of ``text`` on the boxes of ``boxes``, and any warnings."""
    tokens = _tokens(text)
    if not tokens:
        return PageLayout(boxes.width, boxes.height), []
    tess = list(boxes.words)
    if not tess:
        return line_layer(text, boxes), [
            "the PDF text layer is placed by line: Tesseract found no words on this page"]
    ops = Levenshtein.opcodes([_norm(t.text) for t in tokens], [_norm(w.text) for w in tess])
    matched = 0
    # Runs of differences between two agreeing words are taken whole: "York based"
    # against "York-based" is a substitution and a deletion that share one box.
    run: list[int] | None = None  # [src_start, src_end, dest_start, dest_end]
    for op in [*ops, None]:
        if op is not None and op.tag != "equal":
            if run is None:
                run = [op.src_start, op.src_end, op.dest_start, op.dest_end]
            else:
                run[1], run[3] = op.src_end, op.dest_end
            continue
        if run is not None and run[1] > run[0] and run[3] > run[2]:
            _spread(tokens[run[0]:run[1]], tess[run[2]:run[3]])
        run = None
        if op is None:
            break
        for k in range(op.src_end - op.src_start):
            _assign(tokens[op.src_start + k], tess[op.dest_start + k].box,
                    tess[op.dest_start + k].line)
        matched += op.src_end - op.src_start
    agreement = matched / len(tokens)
    if agreement < MIN_AGREEMENT:
        return line_layer(text, boxes), [
            f"the PDF text layer is placed by line: the model's reading and Tesseract's "
            f"agree on only {agreement:.0%} of the words"]
    _place_orphans(tokens, boxes)
    words = tuple(Word(t.text, t.box, t.tess_line) for t in tokens if t.box is not None)
    return PageLayout(boxes.width, boxes.height, words), []


def _assign(token: _Token, box: Box, line: int) -> None:
    token.box = box
    token.tess_line = line


def _spread(tokens: list[_Token], words: list[Word]) -> None:
    """m model words over n Tesseract boxes, by character count."""
    tess_chars = [max(1, len(w.text)) for w in words]
    total_tess = sum(tess_chars)
    model_chars = [max(1, len(t.text)) for t in tokens]
    total_model = sum(model_chars)
    groups: dict[int, list[_Token]] = {}
    seen = 0
    for token, chars in zip(tokens, model_chars, strict=True):
        middle = (seen + chars / 2) / total_model * total_tess
        seen += chars
        acc, target = 0, len(words) - 1
        for j, c in enumerate(tess_chars):
            acc += c
            if middle <= acc:
                target = j
                break
        groups.setdefault(target, []).append(token)
    for j, group in groups.items():
        left, top, right, bottom = words[j].box
        lengths = [max(1, len(t.text)) for t in group]
        # One character's width between words sharing a box, so readers see two words.
        char = (right - left) / (sum(lengths) + len(group) - 1)
        x = float(left)
        for token, c in zip(group, lengths, strict=True):
            _assign(token, (round(x), top, round(x + char * c), bottom), words[j].line)
            x += char * (c + 1)


def _place_orphans(tokens: list[_Token], boxes: PageLayout) -> None:
    """Words only the model read: beside their aligned neighbour on the same model line."""
    line_boxes = boxes.line_boxes()
    char_width = _char_widths(boxes)
    # Forward: after the previous word of the same model line; then backward: before the next.
    for order in (range(len(tokens)), range(len(tokens) - 1, -1, -1)):
        forward = order.step == 1
        anchor: _Token | None = None
        for i in order:
            token = tokens[i]
            if token.box is not None:
                anchor = token
                continue
            if anchor is None or anchor.line != token.line or anchor.box is None:
                continue
            cw = char_width.get(anchor.tess_line, 10.0)
            width = round(cw * max(1, len(token.text)))
            top, bottom = line_boxes.get(anchor.tess_line, anchor.box)[1::2]
            if forward:
                left = anchor.box[2] + round(cw)
                box = (left, top, min(boxes.width, left + width), bottom)
            else:
                right = anchor.box[0] - round(cw)
                box = (max(0, right - width), top, right, bottom)
            _assign(token, box, anchor.tess_line)
            anchor = token
    # A model line with no aligned word at all: its words go after the nearest placed word.
    last: _Token | None = None
    for token in tokens:
        if token.box is None and last is not None and last.box is not None:
            cw = char_width.get(last.tess_line, 10.0)
            left = min(boxes.width - 1, last.box[2] + round(cw))
            right = min(boxes.width, left + round(cw * max(1, len(token.text))))
            _assign(token, (left, last.box[1], max(left + 1, right), last.box[3]),
                    last.tess_line)
        if token.box is not None:
            last = token


def _char_widths(boxes: PageLayout) -> dict[int, float]:
    out = {}
    for n, words in boxes.lines().items():
        chars = sum(len(w.text) for w in words)
        out[n] = sum(w.box[2] - w.box[0] for w in words) / max(1, chars)
    return out


def line_layer(text: str, boxes: PageLayout) -> PageLayout:
    """Each line of ``text`` over one of Tesseract's lines, or spread down the page.

    A line's words share its box by character count, a character's width apart, so a
    reader still finds the words (one stretched run of text reads as scattered letters).
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return PageLayout(boxes.width, boxes.height, by_line=True)
    tess_lines = [box for _, box in sorted(boxes.line_boxes().items())]
    placed: list[tuple[str, Box]] = []
    if tess_lines:
        slots: dict[int, list[str]] = {}
        for i, line in enumerate(lines):
            slots.setdefault(i * len(tess_lines) // len(lines), []).append(line)
        for slot, texts in slots.items():
            left, top, right, bottom = tess_lines[slot]
            step = (bottom - top) / len(texts)
            for k, line in enumerate(texts):
                placed.append((line, (left, round(top + k * step), right,
                                      round(top + (k + 1) * step))))
    else:
        margin_x, margin_y = boxes.width // 12, boxes.height // 12
        pitch = (boxes.height - 2 * margin_y) / len(lines)
        height = min(pitch, boxes.height / 40)
        for k, line in enumerate(lines):
            y = margin_y + k * pitch
            # As wide as the text is at that height (glyphs half an em), within the margins.
            width = min(boxes.width - 2 * margin_x, len(line) * height * 0.6)
            placed.append((line, (margin_x, round(y), round(margin_x + width),
                                  round(y + height))))
    words = [w for n, (line, box) in enumerate(placed) for w in _words_across(line, box, n)]
    return PageLayout(boxes.width, boxes.height, tuple(words), by_line=True)


def _words_across(line: str, box: Box, line_no: int) -> list[Word]:
    """A line's words across ``box`` by character count, a character's width apart."""
    left, top, right, bottom = box
    tokens = line.split()
    char = (right - left) / max(1, sum(len(t) for t in tokens) + len(tokens) - 1)
    words, x = [], float(left)
    for token in tokens:
        end = max(round(x) + 1, round(x + char * len(token)))
        words.append(Word(token, (round(x), top, end, bottom), line_no))
        x += char * (len(token) + 1)
    return words


def block_layer(layout: PageLayout) -> PageLayout:
    """Each layout block's text set in its own box: its lines spread down the box, each
    line's words across it by character count, a character's width apart.

    For pages whose model gave layout blocks but where Tesseract's word boxes cannot be
    had (no Tesseract data, no words found, too little agreement): each block's text
    still lies where the block is on the page, in reading order. The blocks' own text is
    used, running headers and footers included: they are on the page.
    """
    words: list[Word] = []
    line_no = 0
    for block in layout.blocks:
        lines = [line.strip() for line in markdown_to_text(block.text).splitlines()
                 if line.strip()]
        if not lines:
            continue
        left, top, right, bottom = block.box
        pitch = max(1.0, (bottom - top) / len(lines))
        for k, line in enumerate(lines):
            y0 = round(top + k * pitch)
            y1 = max(y0 + 1, round(top + (k + 1) * pitch))
            words.extend(_words_across(line, (left, y0, right, y1), line_no))
            line_no += 1
    return replace(layout, words=tuple(words), by_line=True)
