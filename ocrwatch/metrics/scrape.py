"""A collector that builds its families at each scrape from an engine's latest figures."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)
T = TypeVar("T")


class FromSource(Collector, Generic[T]):
    """Families made from what ``source`` gives at each scrape; none while it gives None
    or fails (a scrape must answer even while the engine cannot)."""

    what = "the engine's figures"  # for the log line when ``source`` fails

    def __init__(self, source: Callable[[], T | None]) -> None:
        self._source = source

    def describe(self) -> list[Metric]:
        return []  # collected at scrape time only

    def collect(self) -> Iterator[Metric]:
        try:
            figures = self._source()
        except Exception:
            log.debug("%s for the metrics failed", self.what, exc_info=True)
            return
        if figures is not None:
            yield from self.families(figures)

    def families(self, figures: T) -> Iterable[Metric]:
        raise NotImplementedError
