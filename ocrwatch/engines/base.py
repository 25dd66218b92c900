"""The engine seam: what every OCR engine takes and gives back."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ocrwatch.core import cpus
from ocrwatch.core.domain import Page, PageText

if TYPE_CHECKING:
    from ocrwatch.config import Config

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReadPolicy:
    """How the daemon feeds one engine. Every engine takes one page per ``recognize`` call
    and does its own admission (vLLM groups pages inside its worker).

    ``concurrency`` is how many ``recognize`` calls may run at the same time (CPU engines:
    one per core; vLLM and remote: the pages they keep in flight); ``preparers`` how many
    files the daemon opens (decodes, scales) at the same time; ``prepare_nice`` how many
    steps lower than the daemon's the preparers' CPU priority is (GPU engines: the
    processes that feed the card, and the user's programs, go first).
    """

    concurrency: int = 1
    # A GPU reads A4 pages about as fast as one core prepares them; CPU engines keep every
    # core for reading.
    preparers: int = 1
    prepare_nice: int = 0
    # Pages prepared in processes of their own (ocrwatch/scan/pool.py), one per preparer:
    # a GPU reads faster than threads sharing the interpreter's lock prepare.
    prepare_processes: bool = False


# Cores the GPU engine's own side needs beside the preparers: the worker's front end
# (vLLM's Python, the image processor) and vLLM's engine process, which keeps the card fed.
ENGINE_CORES = 2
# How much lower the preparers' CPU priority is than the rest (nice 10: about a tenth of a
# contended core's time against a program at the default priority).
PREPARE_NICE = 10


def gpu_preparers(turning: bool = False, cores: int | None = None,
                  busy: float = 0.0) -> int:
    """Preparer threads for an engine that reads on a GPU, from the cores really free:
    ``cores`` this process may use (default :func:`~ocrwatch.core.cpus.usable_cores`:
    its CPU affinity, a cgroup's quota) less ``busy``, the cores other programs keep busy.

    Decoding alone: one per free core up to 4, and half of them up to 8 on larger machines.
    Turning pages upright (``turning``: ``rotate_pages``) makes preparing five times
    dearer (1.5 CPU s a page against 0.3 at 1540 pixels, benchmarks/results/prep_threads.txt):
    all free cores but the engine's own two, up to 16, and at least 4 where there are 4.
    The preparers run at a lower priority (``PREPARE_NICE``), so where they and the
    engine's processes (or the user's) want the same core, the others go first.
    Decoding and scaling run in Pillow's and pdfium's C code, OSD in Tesseract's, outside
    the GIL, so threads prepare in parallel.
    """
    if cores is None:
        cores = cpus.usable_cores()
    free = max(1, cores - round(busy))
    if turning:
        return min(16, max(min(4, free), free - ENGINE_CORES))
    return min(8, max(min(4, free), free // 2))


def gpu_read_policy(concurrency: int, turning: bool, processes: bool = False) -> ReadPolicy:
    """The read policy of an engine that reads on a GPU: its callers, and preparers sized
    from the cores free now, at a lower priority (in processes of their own when
    ``processes``)."""
    busy = cpus.busy_elsewhere()
    preparers = gpu_preparers(turning, busy=busy)
    log.info("%d page preparers (%d cores usable, %.1f busy with other programs)",
             preparers, cpus.usable_cores(), busy)
    return ReadPolicy(concurrency=concurrency, preparers=preparers, prepare_nice=PREPARE_NICE,
                      prepare_processes=processes)


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
