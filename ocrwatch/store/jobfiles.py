"""What the queue's file bookkeeping hands back (a file forgotten, moved, seen), a job
built from its row, and the key arithmetic on paths.

The bookkeeping itself, :class:`ocrwatch.store.jobs.JobFiles`, lives with the queue in
:mod:`ocrwatch.store.jobs`, the one module that writes the ``jobs`` table.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from ocrwatch.core.domain import Job, State
from ocrwatch.store.db import decode_path, encode_path


@dataclass(frozen=True)
class Forgotten:
    """A job dropped from the index: what is needed to clean up after it."""

    id: int
    path: Path
    sha256: str | None
    outputs: dict[str, Path]  # its recorded outputs by name ("md", "pdf", "hocr"...)
    pages: list[tuple[str, str]]  # (markdown, text) of each page, to recognise our sidecars
    finished: float | None = None  # when its result was stored


@dataclass(frozen=True)
class Moved:
    """A job whose file was moved: its row now names ``path``."""

    id: int
    old: Path
    path: Path
    # Where its outputs are recorded now, by name (moved along with a folder or not).
    outputs: dict[str, Path]


class Seen(StrEnum):
    NEW = "new"  # first time: queued
    CHANGED = "changed"  # content changed: queued again
    UNCHANGED = "unchanged"  # nothing to do


def job_from_row(row: object) -> Job:
    r = row  # sqlite3.Row
    return Job(
        id=r["id"],  # type: ignore[index]
        path=decode_path(r["path"]),  # type: ignore[index]
        sha256=r["sha256"],  # type: ignore[index]
        size=r["size"] or 0,  # type: ignore[index]
        mtime_ns=r["mtime_ns"] or 0,  # type: ignore[index]
        state=State(r["state"]),  # type: ignore[index]
        attempts=r["attempts"],  # type: ignore[index]
        reason=r["reason"],  # type: ignore[index]
        retire=r["retire"],  # type: ignore[index]
        retire_reason=r["retire_reason"],  # type: ignore[index]
        crashes=r["crashes"],  # type: ignore[index]
        asked=_column(r, "asked"),
        original_gone=bool(_column(r, "original_gone")),
    )


def _column(row: object, name: str) -> Any:
    """A column a database made before its migration may lack (read-only status)."""
    keys = row.keys()  # type: ignore[attr-defined]
    return row[name] if name in keys else None  # type: ignore[index]


def tree_range(folder: Path) -> tuple[bytes, bytes]:
    """Bounds of the keys of every path under ``folder``: ``folder/`` < key < ``folder0``
    ('0' follows '/' in ASCII), which the path index answers directly."""
    key = encode_path(folder).rstrip(b"/")
    return key + b"/", key + b"0"


def rebase(raw: bytes | None, old: bytes, new: bytes) -> bytes | None:
    if raw is not None and raw.startswith(old + b"/"):
        return new + raw[len(old):]
    return raw


def opt_path(raw: bytes | None) -> Path | None:
    return decode_path(raw) if raw is not None else None
