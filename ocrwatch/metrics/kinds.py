"""A failure's reason, free text meant for people, mapped to one of a few kinds: a
label value must come from a small fixed set (each value is a time series of its own),
and must never carry a file name."""

from __future__ import annotations

KINDS = ("input", "engine", "timeout", "disk", "crash", "other")

# First match wins, so the more telling words come first: "page 2 could not be read:
# timed out" is a timeout before it is an engine's failure.
_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("crash", ("crashed", "killed", "out-of-memory", "aborted")),
    ("timeout", ("timed out", "timeout", "took longer", "time limit", "deadline")),
    ("disk", ("disk is full", "no space left", "read-only file system", "quota",
              "could not be saved", "while saving")),
    ("engine", ("could not be read:", "engine", "server", "model", "tesseract", "vllm",
                "gpu")),
    ("input", ("the file", "the pdf", "the image", "pixels", "damaged", "password",
               "empty", "deleted", "not a file", "no pages", "too many", "too large",
               "decod", "folder", "permission", "cannot open", "unreadable", "page")),
)


def failure_kind(reason: str | None) -> str:
    """One of :data:`KINDS` for a failure's reason."""
    text = (reason or "").lower()
    for kind, words in _RULES:
        if any(word in text for word in words):
            return kind
    return "other"
