"""vLLM's own figures, taken in the worker process and sent to the daemon.

vLLM keeps its figures (KV cache in use, requests running and waiting, tokens, time to
first token) in the Prometheus registry of the process that drives its engine: the
worker's, not the daemon's. ``LLMEngine.get_metrics()`` (vLLM 0.26,
``vllm/v1/metrics/reader.py``) reads that registry into dataclasses (``Gauge``,
``Counter`` and ``Histogram`` with ``name``, ``labels`` and ``value``, or ``count``,
``sum`` and ``buckets``; ``Vector``, for speculative decoding only, is left out). This
module keeps the few series ocrwatch serves (:data:`WANTED`) as plain
:class:`~.messages.Figure` values that cross the pipe; the daemon serves them as
``ocrwatch_vllm_*`` (:mod:`ocrwatch.metrics.vllm`). Standard library only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable

from ocrwatch.engines.vllm.messages import Figure, VllmFigures

# vLLM's name -> what it is, as served (ocrwatch_vllm_<name>) and documented.
WANTED: dict[str, tuple[str, str]] = {
    "vllm:num_requests_running": (
        "requests_running", "Pages vLLM is decoding now (its scheduler's running requests)."),
    "vllm:num_requests_waiting": (
        "requests_waiting", "Pages handed to vLLM and waiting for a place in its batch."),
    "vllm:kv_cache_usage_perc": (
        "kv_cache_usage_ratio", "Share of vLLM's KV cache in use (1 is full)."),
    "vllm:num_preemptions": (
        "preemptions", "Pages vLLM paused for KV cache room, to recompute later."),
    "vllm:prompt_tokens": ("prompt_tokens", "Prompt tokens vLLM processed."),
    "vllm:generation_tokens": ("generation_tokens", "Tokens vLLM generated."),
    "vllm:request_success": (
        "requests_finished", "Pages vLLM finished, by why they ended."),
    "vllm:time_to_first_token_seconds": (
        "time_to_first_token_seconds", "Seconds from a page's arrival in vLLM to its first "
        "token (its image encoded and its prompt processed)."),
    "vllm:e2e_request_latency_seconds": (
        "request_seconds", "Seconds from a page's arrival in vLLM to its end."),
    "vllm:request_queue_time_seconds": (
        "request_queue_seconds", "Seconds a page waited in vLLM's queue."),
}
# One engine per worker: these labels say nothing here and would only split series.
DROPPED_LABELS = frozenset({"model_name", "engine"})


def _bound(le: str) -> float:
    try:
        return float(le)
    except ValueError:
        return math.inf


def figure_of(metric: object) -> Figure | None:
    """One of vLLM's reader objects as a :class:`Figure`, or None when not wanted."""
    name = getattr(metric, "name", None)
    if name not in WANTED:
        return None
    raw = getattr(metric, "labels", None) or {}
    labels = tuple(sorted((str(k), str(v)) for k, v in dict(raw).items()
                          if k not in DROPPED_LABELS))
    kind = type(metric).__name__
    if kind == "Histogram":
        buckets = dict(getattr(metric, "buckets", {}) or {})
        ordered = tuple(sorted(((str(le), float(n)) for le, n in buckets.items()),
                               key=lambda b: _bound(b[0])))
        if not ordered or _bound(ordered[-1][0]) != math.inf:
            return None  # not a Prometheus histogram's shape
        return Figure("histogram", name, labels, float(getattr(metric, "count", 0)),
                      ordered, float(getattr(metric, "sum", 0.0)))
    if kind in ("Gauge", "Counter"):
        return Figure(kind.lower(), name, labels, float(getattr(metric, "value", 0.0)))
    return None  # Vector (speculative decoding), or a kind of a later vLLM


def figures_of(metrics: Iterable[object], taken: float | None = None) -> VllmFigures:
    """vLLM's ``get_metrics()`` as the message the worker sends."""
    kept = tuple(f for f in (figure_of(m) for m in metrics) if f is not None)
    return VllmFigures(time.time() if taken is None else taken, kept)
