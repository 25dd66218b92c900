"""Prometheus metrics (``metrics_address``, docs/metrics.md): what the daemon did and
what it is doing, served at ``/metrics`` in the Prometheus text format.

- :mod:`.kinds`: a failure's text -> one of a few kinds (a label never holds free text);
- :mod:`.recorder`: counters and histograms fed by the daemon's events (pages read,
  files done, failed, put back: ``Recorder.listen``);
- :mod:`.collector`: gauges read at scrape time from what the daemon already knows;
- :mod:`.server`: the HTTP server, bounded however many scrapers come.
"""

from ocrwatch.metrics.recorder import Recorder

__all__ = ["Recorder"]
