"""The engine seam: what every OCR engine takes and gives back."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ocrwatch.core.domain import Page, PageText

if TYPE_CHECKING:
    from ocrwatch.config import Config


@dataclass(frozen=True)
class ReadPolicy:
    """How the daemon feeds one engine. Every engine takes one page per ``recognize`` call
    and does its own admission (vLLM groups pages inside its worker).

    ``concurrency`` is how many ``recognize`` calls may run at the same time (CPU engines:
    one per core; vLLM and remote: the pages they keep in flight); ``preparers`` how many
    files the daemon opens (decodes, scales) at the same time.
    """

    concurrency: int = 1
    # A GPU reads A4 pages about as fast as one core prepares them; CPU engines keep every
    # core for reading.
    preparers: int = 1


def gpu_preparers(turning: bool = False) -> int:
    """Preparer threads for an engine that reads on a GPU: one per core up to 4, and half
    the cores up to 8 on larger machines (the engine's own processes need the rest); with
    pages turned upright (``turning``: ``rotate_pages``), all cores but 4, up to 16.

    Decoding and scaling run in Pillow's and pdfium's C code outside the GIL, so threads
    prepare in parallel. With the page-at-a-time encoder the engine read the 64-page drop
    at 7.6 pages/s, while 4 preparers gave 11 pages/s on the GPU machine's 16 cores
    (benchmarks/results/gpu_daemon.txt): pages arrived too slowly to fill the engine's
    first 33 places at once. Turning pages upright makes preparing five times dearer (1.5
    CPU s a page against 0.3 at 1540 pixels: OSD is unsure of one page in five, which is
    then read four ways), and there 8 threads prepared 4.3 pages/s, 12 threads 5.7 and 16
    threads 6.1, for an engine that reads about 6 (benchmarks/results/prep_threads.txt);
    with 12 the daemon read 4.1-4.4 pages/s against 3.8-3.9 with 8
    (benchmarks/results/gpu_scan.txt).
    """
    cores = os.cpu_count() or 1
    if turning:
        return min(16, max(min(4, cores), cores - 4))
    return min(8, max(min(4, cores), cores // 2))


@runtime_checkable
class Engine(Protocol):
    """An OCR engine. Implementations own their resources and are safe to close twice."""

    name: str

    @property
    def max_side(self) -> int | None:
        """Longest page side the engine wants, in pixels; ``None`` keeps the source size."""
        ...

    @property
    def policy(self) -> ReadPolicy:
        """How many pages the daemon may have in ``recognize`` at once, and opened ahead."""
        ...

    def recognize(self, pages: Sequence[Page]) -> list[PageText]:
        """Read the pages given (the daemon gives one); one result per page, in order."""
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


# What ``ocrwatch doctor`` checks for an engine (doctor/ holds the checks themselves).
class Doctor:
    GPU = "GPU"  # the card, vLLM and its pins, the model's files
    TESSERACT = "Tesseract"  # tesserocr and the configured languages
    SERVERS = "OCR servers"  # each remote server answers and serves the model


@dataclass(frozen=True)
class Registration:
    """One engine, as the rest of ocrwatch sees it before it is built."""

    name: str  # the value of ``engine`` in the config
    build: Callable[[Config], Engine]  # imports what the engine needs only when called
    section: str | None = None  # its own table in the config file ([vllm], [remote])
    doctor: tuple[str, ...] = ()  # :class:`Doctor` checks it needs
    # The status note for this engine's configuration, or None (Tesseract: the desktop's
    # language left out for want of its data).
    note: Callable[[Config], str | None] | None = None
    # Its reading depends on ``languages``: a language change makes earlier pages stale.
    languages: bool = False
    scans: bool = True  # pages go through blank, orientation and skew checks first
    public: bool = True  # offered to users (config, command line); False: tests only
