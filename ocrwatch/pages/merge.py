"""Text a page already holds, merged with what the engine read on its picture.

A PDF page whose text layer is taken may still hold words the layer lacks: a map, a
logo, a signature, a scan pasted on it, text drawn as outlines. Such a page is drawn
with its text hidden and read by the engine; the layer's lines (and form values, notes)
come as ``Page.known`` blocks, each with its place on the page. The engine's lines go
in among them by place: a run of the engine's lines goes before the first known block
that starts below it (the known blocks keep their own order, so a layer's columns stay
as they were). Without word boxes (an engine that gives none), the engine's text
follows the known text. Known text is never dropped or replaced.
"""

from __future__ import annotations

from dataclasses import replace

from ocrwatch.core.domain import PageText
from ocrwatch.core.textutil import text_to_markdown

Blocks = tuple[tuple[float, str], ...]


def merged(result: PageText, known: Blocks) -> PageText:
    """``result`` (the engine's reading, or a blank page's) with ``known`` merged in."""
    known = tuple((top, text.strip()) for top, text in known if text.strip())
    if not known:
        return result
    plain = "\n".join(text for _top, text in known)
    if result.blank or not result.text.strip() or result.nonwords:
        # Nothing read (or noise, which is not indexed): the known text is the page's.
        warnings = list(result.warnings)
        if result.nonwords and result.text.strip():
            warnings.append("the reading of the page's pictures is mostly not words: "
                            "only its own text is kept")
        return replace(result, text=plain + "\n", markdown=text_to_markdown(plain),
                       blank=False, nonwords=False, warnings=warnings)
    lines = _engine_lines(result)
    if lines is None:
        text = plain + "\n\n" + result.text.strip()
        markdown = text_to_markdown(plain) + "\n\n" + result.markdown.strip()
        return replace(result, text=text + "\n", markdown=markdown.strip() + "\n")
    text = "\n".join(_interleave(known, lines))
    return replace(result, text=text + "\n", markdown=text_to_markdown(text))


def _engine_lines(result: PageText) -> list[tuple[float, str]] | None:
    """The engine's lines with their tops (shares of the page's height), or None when it
    gave no word boxes."""
    layout = result.layout
    if layout is None or not layout.words or layout.height <= 0:
        return None
    lines = []
    for words in layout.lines().values():
        top = min(layout.to_page(w.box[0], w.box[1])[1] for w in words)
        text = " ".join(w.text for w in words).strip()
        if text:
            lines.append((top / layout.height, text))
    return lines or None


def _interleave(known: Blocks, lines: list[tuple[float, str]]) -> list[str]:
    out: list[str] = []
    pending = list(lines)
    for top, text in known:
        while pending and pending[0][0] < top:
            out.append(pending.pop(0)[1])
        out.append(text)
    out += [text for _top, text in pending]
    return out
