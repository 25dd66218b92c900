"""What the stages of a file's way through share: the :class:`Context` every stage runs
in and the :class:`Verdict` on a file once its reading is over. Its own module, so that
:mod:`ocrwatch.pipeline` and :mod:`ocrwatch.outcome` both use them without importing
each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ocrwatch.config import Config
from ocrwatch.core.domain import PageText
from ocrwatch.core.events import Events
from ocrwatch.engines import registry
from ocrwatch.hooks.runner import AfterDone
from ocrwatch.intake.follow import Follower
from ocrwatch.metrics import Recorder
from ocrwatch.pages.thumbs import Thumbnails
from ocrwatch.results.lifecycle import Lifecycle
from ocrwatch.results.outputs import PdfMaker
from ocrwatch.scan import deskew
from ocrwatch.scan.prepare import ScanPrep
from ocrwatch.store.jobs import JobQueue


@dataclass(frozen=True)
class Context:
    """What every stage needs: the settings, the queue, the engine's name, and what
    happens around the sidecars (the searchable PDF, the original's fate), and the event
    stream that tells the rest (hooks, notices, metrics) what happened."""

    config: Config
    jobs: JobQueue
    engine_name: str
    read_with: str | None  # what a page is read with: a language change makes pages stale
    lifecycle: Lifecycle
    after: AfterDone
    follower: Follower  # files and folders moved or renamed keep their rows
    thumbs: Thumbnails  # page pictures for the search page
    pdf: PdfMaker | None = None
    # Originals moved or deleted on purpose after reading: their "gone" event must not
    # drop them from the index. (set.add and set.discard are atomic: no lock needed.)
    retired: set[Path] = field(default_factory=set)
    # Blank pages, orientation and skew (made from ``config`` when not given). An engine
    # registered without scans (the tests' fake engine reads no pixels) gets pages as decoded.
    scan: ScanPrep | None = None
    # Pages and files counted for the Prometheus metrics (metrics_address).
    metrics: Recorder = field(default_factory=Recorder)
    # What happens to each file (ocrwatch/core/events.py): the stages publish, the hooks,
    # the batch notice, the metrics and the tray listen.
    events: Events = field(default_factory=Events)

    def __post_init__(self) -> None:
        if self.scan is None:
            object.__setattr__(self, "scan", scan_for(self.config, self.engine_name))


def scan_for(config: Config, engine_name: str, processes: int = 0,
             nice: int = 0) -> ScanPrep:
    """The page preparation for this engine; in ``processes`` processes of its own
    (ocrwatch/scan/pool.py) at ``nice`` steps lower priority when above 0."""
    # The engine that reads by languages is Tesseract's: a skew of a third of a degree
    # breaks its lines (scan/deskew.MIN_ANGLE); a model's pages keep the floor of a degree.
    reads_languages = registry.reads_languages(engine_name)
    enabled = registry.scans(engine_name)
    least_skew = deskew.MIN_ANGLE if reads_languages else deskew.JUDGED_ANGLE
    if processes > 0 and enabled:
        from ocrwatch.scan.pool import PooledScanPrep  # the pool's imports: GPU engines only

        return PooledScanPrep(config, processes, nice=nice, scripts=reads_languages,
                              least_skew=least_skew)
    return ScanPrep(config, enabled=enabled, scripts=reads_languages, least_skew=least_skew,
                    read_first=reads_languages)


@dataclass(frozen=True)
class Verdict:
    """What to do with a file once its reading is over."""

    pages: list[PageText] | None = None  # publish these
    error: str | None = None  # fail with this reason
    transient: str | None = None  # try again later, for this reason
