"""Text from the outside world (file names, page text, reasons) made safe for a terminal.

A file name may hold ESC, BEL, CSI or other control characters; printed raw, it can move
the cursor, retitle the window or rewrite what the user already sees. Every control
character (Unicode category Cc: C0, DEL and C1) is shown as a visible escape instead,
as ``ls`` and ``git`` do, and bidirectional overrides, which reorder what is shown, too.
(Two regular expressions; the terminal libraries, rich and prompt_toolkit among them,
render text rather than neutralise it.)
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls, and the bidi embedding/override/isolate characters.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_KEEP_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text: object) -> str:
    """``text`` on one line, every control character escaped (a name, a reason)."""
    return _UNSAFE.sub(_escape, str(text))


def safe_lines(text: str) -> str:
    """Like :func:`safe`, but newlines and tabs are kept (a report of several lines)."""
    return _UNSAFE_KEEP_LINES.sub(_escape, text)
