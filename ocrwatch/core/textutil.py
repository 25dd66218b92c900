"""Text helpers shared by the model engines: Markdown to plain text, loop detection."""

from __future__ import annotations

import html
import re

from markdown_it import MarkdownIt
from markdown_it.token import Token

# Math is kept exactly as written: emphasis markers inside it are part of the formula.
_MATH = re.compile(r"(\$\$.+?\$\$|\\\[.+?\\\]|\\\(.+?\\\)|(?<![\\$])\$(?!\s)[^$\n]+?(?<!\s)\$)",
                   re.DOTALL)
_TABLE = re.compile(r"<table\b.*?</table>", re.IGNORECASE | re.DOTALL)
_ROW = re.compile(r"<tr\b.*?>(.*?)</tr>", re.IGNORECASE | re.DOTALL)
_CELL = re.compile(r"<t([dh])\b.*?>(.*?)</t\1>", re.IGNORECASE | re.DOTALL)
_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)
_TAG = re.compile(r"</?[A-Za-z][^<>]*>")
# Markdown is parsed by markdown-it-py (CommonMark, with GFM tables and strikethrough, and
# the model's HTML); the text is its tokens without the markup. What stays hand-written:
# finding the math above (set aside so the parser never sees it) and the HTML tables'
# rows and cells (the model writes them as HTML blocks, which Markdown leaves opaque).
_MD = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
_INLINE_DROP = frozenset({"strong_open", "strong_close", "em_open", "em_close", "s_open",
                          "s_close", "link_open", "link_close"})


def _cell_text(cell: str) -> str:
    cell = _BR.sub(" ", cell)
    cell = _TAG.sub("", cell)
    return " ".join(html.unescape(cell).split())


def _table_to_rows(match: re.Match[str]) -> str:
    rows = []
    for row in _ROW.findall(match.group(0)):
        rows.append("\t".join(_cell_text(c) for _, c in _CELL.findall(row)))
    return "\n" + "\n".join(rows) + "\n"


def _html_text(fragment: str) -> str:
    """An HTML fragment's text: tables as tab-separated rows, <br> as a line break."""
    fragment = _TABLE.sub(_table_to_rows, fragment)
    fragment = _BR.sub("\n", fragment)
    return html.unescape(_TAG.sub("", fragment))


def _inline(tokens: list[Token]) -> str:
    out = []
    for tok in tokens:
        if tok.type in ("text", "code_inline"):
            out.append(tok.content)
        elif tok.type in ("softbreak", "hardbreak"):
            out.append("\n")
        elif tok.type == "image":
            out.append(tok.content)  # its alt text
        elif tok.type == "html_inline":
            out.append("\n" if _BR.fullmatch(tok.content.strip()) else "")
        elif tok.type not in _INLINE_DROP:
            out.append(tok.content)
    return "".join(out)


def _plain(segment: str) -> str:
    """The text of a stretch of Markdown (no math in it): markup dropped, lines kept."""
    out: list[str] = []
    lists: list[int] = []  # depth of the lists the next item is in
    cell = 0
    for tok in _MD.parse(segment):
        kind = tok.type
        if kind == "inline":
            out.append(_inline(tok.children or []))
        elif kind in ("paragraph_close", "heading_close"):
            out.append("\n" if tok.hidden else "\n\n")  # hidden: a tight list's item
        elif kind in ("bullet_list_open", "ordered_list_open"):
            lists.append(len(lists))
        elif kind in ("bullet_list_close", "ordered_list_close"):
            lists.pop()
            out.append("\n")
        elif kind == "list_item_open":
            # The item's own marker, as written: "-", "*", "3." (the model's numbering).
            marker = f"{tok.info}{tok.markup}" if tok.info else tok.markup
            out.append("  " * (len(lists) - 1) + marker + " ")
        elif kind in ("code_block", "fence"):
            out.append(tok.content + "\n")
        elif kind == "html_block":
            out.append(_html_text(tok.content) + "\n")
        elif kind == "tr_open":
            cell = 0
        elif kind in ("th_open", "td_open"):
            out.append("\t" if cell else "")
            cell += 1
        elif kind in ("tr_close", "table_close", "hr", "blockquote_close"):
            out.append("\n")
    return "".join(out)


def markdown_to_text(md: str) -> str:
    """Plain text for the ``.txt`` sidecar and the index.

    Headers and emphasis lose their markers, HTML tables become tab-separated rows,
    LaTeX math stays exactly as written.
    """
    # Each formula is set aside behind a placeholder the parser reads as a plain word, and
    # put back as written: "*" and "_" in it are part of the formula, not emphasis.
    formulas: list[str] = []

    def aside(match: re.Match[str]) -> str:
        formulas.append(match.group(0))
        return f"\ue000{len(formulas) - 1}\ue001"

    text = _plain(_MATH.sub(aside, md.replace("\ue000", "").replace("\ue001", "")))
    text = re.sub("\ue000(\\d+)\ue001", lambda m: formulas[int(m.group(1))], text)
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
