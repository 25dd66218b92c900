"""Gauges read at scrape time from what the daemon already knows (its status: the job
counts, the pages left, the engine's own facts) and from the NVIDIA driver: nothing is
kept up to date between scrapes, so an unscraped daemon pays nothing for them."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ocrwatch.core.status import Status
from ocrwatch.engines import gpu

log = logging.getLogger(__name__)

ENGINE_STATES = ("stopped", "starting", "ready", "asleep", "other")
MIB = 1024 * 1024


def engine_state(state: str) -> str:
    """The engine's own word for its state, one of :data:`ENGINE_STATES` (the remote
    engine's "remote" counts as ready; "closed" as stopped; an error as other)."""
    if state in ENGINE_STATES:
        return state
    return {"remote": "ready", "closed": "stopped", "sleeping": "asleep"}.get(state, "other")


class DaemonCollector(Collector):
    """``status`` is the daemon's :meth:`~ocrwatch.daemon.Daemon.status` (any callable
    giving a :class:`Status`); ``card`` the free card memory in MiB or None (tests)."""

    def __init__(self, status: Callable[[], Status],
                 card: Callable[[], int | None] | None = None) -> None:
        self._status = status
        self._card = card or _free_mib
        self._lock = threading.Lock()
        self._last_state: str | None = None
        self._starts = 0

    def describe(self) -> list[Metric]:
        return []  # collected at scrape time only: no status is read at registration

    def _count_start(self, state: str) -> int:
        """Engine starts as scrapes see them: each move into ``starting``, or out of
        ``stopped`` straight to working (a start quicker than the scrape interval)."""
        with self._lock:
            last, self._last_state = self._last_state, state
            if state != last and (state == "starting" or (
                    state in ("ready", "asleep") and last in (None, "stopped"))):
                self._starts += 1
            return self._starts

    def collect(self) -> Iterator[Metric]:
        try:
            status = self._status()
        except Exception:  # a scrape must answer even while the daemon cannot
            log.debug("the status for the metrics failed", exc_info=True)
            return
        retrying = sum(w.files for w in status.progress.waiting if w.what == "retrying later")
        queue = GaugeMetricFamily("ocrwatch_queue_files", "Files in the queue, by state: "
                                  "queued (to be read now), running, retrying (held back "
                                  "after a passing trouble, for a later try).",
                                  labels=["state"])
        queue.add_metric(["queued"], max(0, status.queued - retrying))
        queue.add_metric(["running"], status.running)
        queue.add_metric(["retrying"], retrying)
        yield queue
        yield GaugeMetricFamily("ocrwatch_pages_left", "Pages left in the files being read "
                                "and queued (estimated for files not opened yet).",
                                value=status.progress.pages_left)
        files = GaugeMetricFamily("ocrwatch_files", "Files the index holds, by state.",
                                  labels=["state"])
        files.add_metric(["done"], status.done)
        files.add_metric(["failed"], status.failed)
        files.add_metric(["doubted"], status.doubted)
        yield files
        yield GaugeMetricFamily("ocrwatch_paused", "1 while reading is paused.",
                                value=int(status.paused))
        engine = status.engine.name
        now = engine_state(status.engine.state)
        states = GaugeMetricFamily("ocrwatch_engine_state", "1 for the engine's state now.",
                                   labels=["engine", "state"])
        for state in ENGINE_STATES:
            states.add_metric([engine, state], int(state == now))
        yield states
        starts = CounterMetricFamily("ocrwatch_engine_starts", "Engine starts seen by "
                                     "the scrapes.", labels=["engine"])
        starts.add_metric([engine], self._count_start(now))
        yield starts
        if status.engine.gpu_memory_mb is not None:
            yield GaugeMetricFamily("ocrwatch_gpu_memory_held_bytes", "GPU memory held by "
                                    "the engine's processes.",
                                    value=status.engine.gpu_memory_mb * MIB)
        free = self._card()
        if free is not None:  # no NVIDIA GPU: no such series, and no error
            yield GaugeMetricFamily("ocrwatch_gpu_memory_free_bytes", "Free memory of the "
                                    "GPU the engine uses (NVML).", value=free * MIB)


def _free_mib() -> int | None:
    found = gpu.gpus()
    return None if isinstance(found, str) else found[0].free_mb
