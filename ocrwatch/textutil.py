"""Text helpers shared by the model engines: Markdown to plain text, loop detection."""

from __future__ import annotations

import html
import re

# Math is kept exactly as written: emphasis markers inside it are part of the formula.
_MATH = re.compile(r"(\$\$.+?\$\$|\\\[.+?\\\]|\\\(.+?\\\)|(?<![\\$])\$(?!\s)[^$\n]+?(?<!\s)\$)",
                   re.DOTALL)
_TABLE = re.compile(r"<table\b.*?</table>", re.IGNORECASE | re.DOTALL)
_ROW = re.compile(r"<tr\b.*?>(.*?)</tr>", re.IGNORECASE | re.DOTALL)
_CELL = re.compile(r"<t([dh])\b.*?>(.*?)</t\1>", re.IGNORECASE | re.DOTALL)
_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)
_TAG = re.compile(r"</?[A-Za-z][^<>]*>")
_HEADER = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+(.*?)[ \t]*#*[ \t]*$", re.MULTILINE)
_RULE = re.compile(r"^[ \t]{0,3}([-*_])([ \t]*\1){2,}[ \t]*$\n?", re.MULTILINE)
_QUOTE = re.compile(r"^[ \t]{0,3}>[ \t]?", re.MULTILINE)
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_STRONG = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1", re.DOTALL)
_EMPH_STAR = re.compile(r"(?<![*\w])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![*\w])")
_EMPH_UNDER = re.compile(r"(?<![_\w])_(?=\S)([^_\n]+?)(?<=\S)_(?![_\w])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_CODE = re.compile(r"`([^`\n]+)`")
_FENCE = re.compile(r"^[ \t]*(```|~~~).*$\n?", re.MULTILINE)
_PIPE_RULE = re.compile(r"^[ \t]*\|?[ \t]*:?-{3,}:?[ \t]*(\|[ \t]*:?-{3,}:?[ \t]*)*\|?[ \t]*$\n?",
                        re.MULTILINE)


def _cell_text(cell: str) -> str:
    cell = _BR.sub(" ", cell)
    cell = _TAG.sub("", cell)
    return " ".join(html.unescape(cell).split())


def _table_to_rows(match: re.Match[str]) -> str:
    rows = []
    for row in _ROW.findall(match.group(0)):
        rows.append("\t".join(_cell_text(c) for _, c in _CELL.findall(row)))
    return "\n" + "\n".join(rows) + "\n"


def _pipe_row(line: str) -> str:
    """A Markdown pipe-table row as tab-separated cells; other lines unchanged."""
    stripped = line.strip()
    if stripped.startswith("|") and stripped.endswith("|") and stripped.count("|") >= 2:
        return "\t".join(c.strip() for c in stripped[1:-1].split("|"))
    return line


def _plain(segment: str) -> str:
    segment = _TABLE.sub(_table_to_rows, segment)
    segment = _BR.sub("\n", segment)
    segment = _TAG.sub("", segment)
    segment = _FENCE.sub("", segment)
    segment = _PIPE_RULE.sub("", segment)
    segment = "\n".join(_pipe_row(line) for line in segment.split("\n"))
    segment = _HEADER.sub(r"\1", segment)
    segment = _RULE.sub("", segment)
    segment = _QUOTE.sub("", segment)
    segment = _IMAGE.sub(r"\1", segment)
    segment = _LINK.sub(r"\1", segment)
    segment = _CODE.sub(r"\1", segment)
    for _ in range(2):  # nested emphasis such as ***word***
        segment = _STRONG.sub(r"\2", segment)
        segment = _EMPH_STAR.sub(r"\1", segment)
        segment = _EMPH_UNDER.sub(r"\1", segment)
    segment = _STRIKE.sub(r"\1", segment)
    return html.unescape(segment)


def markdown_to_text(md: str) -> str:
    """Plain text for the ``.txt`` sidecar and the index.

    Headers and emphasis lose their markers, HTML tables become tab-separated rows,
    LaTeX math stays exactly as written.
    """
    parts = _MATH.split(md)
    out = [part if i % 2 else _plain(part) for i, part in enumerate(parts)]
    text = "".join(out)
    lines = [line.rstrip() for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + ("\n" if text.strip() else "")


def repeats_itself(text: str, *, min_chars: int = 200, min_repeats: int = 5) -> bool:
    """True when the end of ``text`` is one chunk written over and over.

    This is how the model fails: it keeps writing the same line or word until it runs
    out of tokens. A chunk (1 to 400 characters) repeated at least ``min_repeats`` times
    and covering at least ``min_chars`` at the very end counts; honest repetition such as
    a table of empty cells is shorter than that or varies.
    """
    tail = text.rstrip()[-4000:]
    n = len(tail)
    if n < min_chars:
        return False
    for period in range(1, min(400, n // min_repeats) + 1):
        chunk = tail[n - period:]
        if not chunk.strip():
            continue
        count = 1
        pos = n - period
        while pos - period >= 0 and tail[pos - period:pos] == chunk:
            count += 1
            pos -= period
        if count >= min_repeats and count * period >= min_chars:
            return True
    return False


def text_to_markdown(text: str) -> str:
    """Tesseract's text as Markdown: paragraphs kept, characters Markdown would eat escaped."""
    lines = []
    for line in text.strip().splitlines():
        stripped = line.rstrip()
        # A line starting with #, >, - or "1." would turn into a heading, quote or list.
        if stripped[:1] and stripped[:1] in "#>+-*|":
            stripped = "\\" + stripped
        elif stripped[:1].isdigit():
            stripped = re.sub(r"^(\d+)([.)]) ", r"\1\\\2 ", stripped)
        lines.append(stripped + ("  " if stripped else ""))
    return "\n".join(lines).replace("  \n\n", "\n\n").rstrip() + "\n"


# C0 and C1 control characters but tab and newline, and DEL; \r is folded into \n and the
# Unicode line and paragraph separators become newlines (str.splitlines would split on
# each of them, and a form feed would make a page read back from a sidecar two).
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_NEWLINES = re.compile(r"\r\n?|[\u2028\u2029]")


def strip_controls(text: str) -> str:
    """``text`` without control characters (tab and newline kept, CR as newline)."""
    return _CONTROLS.sub("", _NEWLINES.sub("\n", text))
