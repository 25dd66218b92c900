"""vLLM's own figures, served as ``ocrwatch_vllm_*`` (docs/metrics.md).

They live in the worker process that drives vLLM; the worker sends them to the daemon
while pages are in flight (:mod:`ocrwatch.engines.vllm.figures`), and this collector
serves the latest at each scrape. With no worker (another engine, or the worker stopped
on idle) there are no such series: a stopped engine has no KV cache to report.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from ocrwatch.engines.vllm.figures import WANTED
from ocrwatch.engines.vllm.messages import Figure, VllmFigures
from ocrwatch.metrics.scrape import FromSource

PREFIX = "ocrwatch_vllm_"


def families(figures: VllmFigures) -> list[Metric]:
    """The figures as prometheus_client's metric families, one per vLLM name."""
    grouped: dict[str, list[Figure]] = {}
    for figure in figures.figures:
        if figure.name in WANTED:
            grouped.setdefault(figure.name, []).append(figure)
    out: list[Metric] = []
    for name, series in grouped.items():
        short, doc = WANTED[name]
        kind = series[0].kind
        labels = sorted({k for f in series for k, _ in f.labels})
        family: GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily
        if kind == "gauge":
            family = GaugeMetricFamily(PREFIX + short, doc, labels=labels)
        elif kind == "counter":
            family = CounterMetricFamily(PREFIX + short, doc, labels=labels)
        elif kind == "histogram":
            family = HistogramMetricFamily(PREFIX + short, doc, labels=labels)
        else:
            continue
        for figure in series:
            if figure.kind != kind:
                continue
            values = dict(figure.labels)
            row = [values.get(k, "") for k in labels]
            if isinstance(family, HistogramMetricFamily):
                buckets = [("+Inf" if math.isinf(_bound(le)) else le, count)
                           for le, count in figure.buckets]
                family.add_metric(row, buckets, figure.sum)
            else:
                family.add_metric(row, figure.value)
        out.append(family)
    return out


def _bound(le: str) -> float:
    try:
        return float(le)
    except ValueError:
        return math.inf


class VllmCollector(FromSource[VllmFigures]):
    """``source`` gives the engine's latest :class:`VllmFigures`, or None."""

    what = "vLLM's figures"

    def families(self, figures: VllmFigures) -> Iterator[Metric]:
        yield from families(figures)
        yield GaugeMetricFamily(PREFIX + "figures_timestamp_seconds", "When the vLLM "
                                "worker took the figures above (Unix time).",
                                value=figures.taken)
