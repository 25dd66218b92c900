"""The engine seam: what every OCR engine takes and gives back."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ocrwatch.core.domain import Page, PageText


@dataclass(frozen=True)
class BatchPolicy:
    """How the batcher may group pages for one engine.

    ``max_tokens`` bounds the estimated image tokens of all pages in one batch;
    ``size_matched`` keeps pages of similar size together; ``partner_wait`` is
    how long a lone page may wait for a partner before it runs alone;
    ``concurrency`` is how many ``recognize`` calls may run at the same time;
    ``preparers`` how many files the daemon opens (decodes, scales) at the same time.
    """

    max_pages: int = 1
    max_tokens: int | None = None
    size_matched: bool = False
    partner_wait: float = 0.0
    concurrency: int = 1  # batches the daemon may run at once (CPU engines: one per core)
    # A GPU reads A4 pages about as fast as one core prepares them; CPU engines keep every
    # core for reading.
    preparers: int = 1
    # What one page of (width, height) counts against ``max_tokens``: the engine's own
    # arithmetic, so that the daemon does none.
    cost: Callable[[int, int], int] = lambda width, height: 1


def gpu_preparers() -> int:
    """Preparer threads for an engine that reads on a GPU: up to 4, one per core.

    Decoding and scaling run in Pillow's and pdfium's C code outside the GIL, so threads
    prepare in parallel.
    """
    return max(1, min(4, os.cpu_count() or 1))


@runtime_checkable
class Engine(Protocol):
    """An OCR engine. Implementations own their resources and are safe to close twice."""

    name: str

    @property
    def max_side(self) -> int | None:
        """Longest page side the engine wants, in pixels; ``None`` keeps the source size."""
        ...

    @property
    def policy(self) -> BatchPolicy:
        """How pages may be grouped into one ``recognize`` call."""
        ...

    def recognize(self, pages: Sequence[Page]) -> list[PageText]:
        """Read one batch; returns one result per page, in order."""
        ...

    def release(self) -> None:
        """Give back accelerator memory while staying able to resume."""
        ...

    def close(self) -> None:
        """Free everything; safe to call twice."""
        ...

    def describe(self) -> dict[str, object]:
        """A few facts for ``ocrwatch status`` (state, memory held, pages/s...)."""
        ...
