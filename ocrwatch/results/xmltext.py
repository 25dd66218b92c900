"""Text and attribute values for the XML outputs (hOCR, ALTO): escaped, and without the
characters XML 1.0 forbids (a form feed or a NUL read off a page would make the whole
file unreadable to every parser)."""

from __future__ import annotations

import re
from xml.sax.saxutils import escape, quoteattr

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def text(value: str) -> str:
    return escape(_NOT_XML.sub("", value))


def attr(value: str) -> str:
    """A quoted attribute value; white space kept as written (``&#10;`` for new lines)."""
    return quoteattr(_NOT_XML.sub("", value), {"\n": "&#10;", "\r": "&#13;", "\t": "&#9;"})
