"""The remote engine's requests by server, served as ``ocrwatch_remote_*`` (docs/metrics.md).

The engine counts each server's requests as they end (:class:`ServerFigures`); this
collector reads them at each scrape. A server's label is its URL from the config (a
bounded set the user chose), never anything a file could name.
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from ocrwatch.engines.remote import REQUEST_BUCKETS, ServerFigures
from ocrwatch.metrics.scrape import FromSource

PREFIX = "ocrwatch_remote_"


def families(servers: list[ServerFigures]) -> list[Metric]:
    requests = CounterMetricFamily(
        PREFIX + "requests", "Page requests to each OCR server, by how they ended: "
        "answered, or failed (refused, busy, lost, HTTP 5xx).", labels=["server", "outcome"])
    retries = CounterMetricFamily(
        PREFIX + "retries", "Failed requests whose page was sent again (to this server or "
        "another).", labels=["server"])
    seconds = HistogramMetricFamily(
        PREFIX + "request_seconds", "Seconds from sending a page to each server to its "
        "answer (answered requests).", labels=["server"])
    for server in servers:
        requests.add_metric([server.url, "answered"], server.answered)
        requests.add_metric([server.url, "failed"], server.failed)
        retries.add_metric([server.url], server.retried)
        buckets = [(repr(bound), count) for bound, count in zip(REQUEST_BUCKETS,
                                                                server.buckets, strict=True)]
        buckets.append(("+Inf", server.answered))
        seconds.add_metric([server.url], buckets, server.seconds)
    return [requests, retries, seconds]


class RemoteCollector(FromSource[list[ServerFigures]]):
    """``source`` gives each server's figures (the remote engine's ``server_figures``)."""

    what = "the remote engine's figures"

    def families(self, figures: list[ServerFigures]) -> list[Metric]:
        return families(figures)
