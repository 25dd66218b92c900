"""The search page's request parameters, read strictly: whole numbers in range, days,
the query as typed, and snippets made safe for HTML.
"""

from __future__ import annotations

import datetime as _dt
import html
import re
from pathlib import Path

from ocrwatch.core.errors import SearchError
from ocrwatch.fs import paths
from ocrwatch.store.index import _CJK, HIGHLIGHT

MAX_ID = 2**63 - 1  # SQLite's largest integer: ids and pages past it name nothing
MAX_PAGE = 1_000_000  # pages of hits
# File types offered by the page's filter, and the name endings each stands for.
TYPES: dict[str, tuple[str, ...]] = {
    "pdf": (".pdf",), "jpeg": (".jpg", ".jpeg"), "png": (".png",), "tiff": (".tif", ".tiff"),
    "webp": (".webp",), "bmp": (".bmp",), "gif": (".gif",), "avif": (".avif",),
    "heic": (".heic", ".heif"),
}


def token_file() -> Path:
    return paths.runtime_dir() / "search-url"


def launch_folder() -> Path:
    """Where the 0600 pages that hand a browser its one-time code are written."""
    return paths.runtime_dir() / "search-open"


def whole(text: object, what: str, low: int = 0, high: int = MAX_ID) -> int:
    """``text`` as a whole number in [low, high]; SearchError with a plain message else."""
    try:
        value = int(str(text))  # not int(): 1.5 and true are no ids
    except (ValueError, TypeError):
        raise SearchError(f"{what} must be a whole number") from None
    if not low <= value <= high:
        raise SearchError(f"{what} must be between {low} and {high}")
    return value


def parse_day(text: str, *, end: bool = False) -> float | None:
    """``YYYY-MM-DD`` as local midnight (the next one with ``end``), or None."""
    if not text:
        return None
    try:
        day = _dt.date.fromisoformat(text)
    except ValueError:
        raise SearchError(f"{text!r} is not a date; use YYYY-MM-DD") from None
    if end:
        day += _dt.timedelta(days=1)
    return _dt.datetime.combine(day, _dt.time()).timestamp()


def as_typed(query: str) -> str:
    """The query with its last word taken as a prefix while it is being typed ("harb"
    finds "harbour"); from four letters on: shorter prefixes match so many words that
    ranking them all costs more than a keystroke's worth of time on a large index."""
    match = re.search(r"(?:^|\s)(\w{4,})$", query)
    if match is None or _CJK.search(match.group(1)) or match.group(1) in ("AND", "OR", "NOT"):
        return query
    return query + "*"


def snippet_html(snippet: str) -> str:
    """The snippet escaped for HTML, its matches in <mark>."""
    out = html.escape(" ".join(snippet.split()))
    return out.replace(HIGHLIGHT[0], "<mark>").replace(HIGHLIGHT[1], "</mark>")
