"""The text outputs' content: ``NAME.md`` and ``NAME.txt`` from the pages read."""

from __future__ import annotations

from ocrwatch.core.domain import PageText


def render_markdown(pages: list[PageText]) -> str:
    """The Markdown of all pages; multi-page files get a marked break before each page."""
    if len(pages) == 1:
        return pages[0].markdown.strip() + "\n"
    parts = [f"<!-- page {i} -->\n\n{p.markdown.strip()}" for i, p in enumerate(pages, 1)]
    return "\n\n---\n\n".join(parts) + "\n"


def render_text(pages: list[PageText]) -> str:
    """Plain text; pages separated by a form feed, as pdftotext does."""
    return "\f".join(p.text.strip() + "\n" for p in pages)
