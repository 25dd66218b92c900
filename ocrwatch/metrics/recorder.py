"""Counters and histograms fed by the daemon's events (``listen``), on a registry of their own
(never the process-wide one: two daemons in one process, as tests run, must not mix).

Always made, cheap (a counter's increment is about a microsecond): only the server is
turned on and off by ``metrics_address``, so counts run from the daemon's start.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram

from ocrwatch.core import events as ev
from ocrwatch.core.domain import Job, PageText, doubt_of
from ocrwatch.metrics.kinds import failure_kind

# A page waits seconds on a quiet desktop and hours behind a 2000-page PDF.
LATENCY_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600)
# Tesseract takes 1-10 s a page on one core; a GPU a fraction of a second.
ENGINE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)


class Recorder:
    """What happened, counted as it happens. Thread-safe (prometheus_client's own locks)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.pages_read = Counter("ocrwatch_pages_read", "Pages the engine read.",
                                  ["engine"], registry=r)
        self.page_errors = Counter("ocrwatch_page_errors", "Pages the engine could not read.",
                                   ["engine"], registry=r)
        self.files_done = Counter("ocrwatch_files_done", "Files read and indexed.",
                                  ["engine"], registry=r)
        self.files_doubted = Counter(
            "ocrwatch_files_doubted", "Files indexed with a page that may not have been read "
            "whole (their originals are kept).", ["engine"], registry=r)
        self.files_failed = Counter("ocrwatch_files_failed", "Files given up on, by kind.",
                                    ["kind"], registry=r)
        self.files_retried = Counter(
            "ocrwatch_files_retried", "Files put back for a later try after a passing "
            "trouble, by kind.", ["kind"], registry=r)
        self.page_latency = Histogram(
            "ocrwatch_page_latency_seconds", "Seconds from a file's queueing to each of its "
            "pages being indexed.", buckets=LATENCY_BUCKETS, registry=r)
        self.engine_seconds = Histogram(
            "ocrwatch_page_engine_seconds", "Seconds the engine took for one page.",
            ["engine"], buckets=ENGINE_BUCKETS, registry=r)
        for kind in ("input", "engine", "timeout", "disk", "crash", "other"):
            # Present at 0 from the start: rate() and alerts see the first failure.
            self.files_failed.labels(kind)
            self.files_retried.labels(kind)

    def listen(self, events: ev.Events) -> None:
        """Count what a daemon's event stream tells: pages read, files done, failed and
        put back."""
        events.subscribe(ev.PageRead, lambda e: self.page_read(e.engine, e.seconds, e.results))
        events.subscribe(ev.FileDone, lambda e: self.file_done(e.job, e.pages, e.engine))
        events.subscribe(ev.FileFailed, lambda e: self.file_failed(e.reason))
        events.subscribe(ev.FileDeferred, lambda e: (
            self.file_retried if e.again else self.file_failed)(e.reason))

    def page_read(self, engine: str, seconds: float | None, results: Sequence[PageText]) -> None:
        """A reader's page came back (``seconds``: None when no engine was asked)."""
        ok = sum(1 for r in results if not r.error)
        if ok:
            self.pages_read.labels(engine).inc(ok)
        if len(results) > ok:
            self.page_errors.labels(engine).inc(len(results) - ok)
        if seconds is not None:
            self.engine_seconds.labels(engine).observe(seconds)

    def file_done(self, job: Job, pages: Sequence[PageText], engine: str) -> None:
        """A file's pages are indexed and its job is done."""
        self.files_done.labels(engine).inc()
        if any(doubt_of(p) for p in pages):
            self.files_doubted.labels(engine).inc()
        if job.queued_at is not None:
            waited = max(0.0, time.time() - job.queued_at)
            for _ in pages:
                self.page_latency.observe(waited)

    def file_failed(self, reason: str) -> None:
        self.files_failed.labels(failure_kind(reason)).inc()

    def file_retried(self, reason: str) -> None:
        self.files_retried.labels(failure_kind(reason)).inc()
