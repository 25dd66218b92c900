"""vLLM's own figures served as ``ocrwatch_vllm_*``: taken in the worker from what vLLM's
``get_metrics()`` returns, sent over the pipe, served by prometheus_client.

vLLM is not installed here, so its reader's objects are built from dataclasses of the
same shapes as vLLM 0.26's ``vllm/v1/metrics/reader.py`` (the same class names and
fields: ``name``, ``labels``, then ``value``; ``count``, ``sum`` and ``buckets``; or
``values`` for a Vector), with labels as vLLM's stat logger sets them. The GPU run
(docs/metrics.md) checks the real ones.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from helpers import wait_for
from PIL import Image
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ocrwatch.config import Config
from ocrwatch.core.domain import Page
from ocrwatch.engines.vllm import VllmEngine
from ocrwatch.engines.vllm.figures import figures_of
from ocrwatch.engines.vllm.messages import VllmFigures
from ocrwatch.metrics.vllm import VllmCollector


@dataclass
class Metric:
    name: str
    labels: dict[str, str]


@dataclass
class Counter(Metric):
    value: int


@dataclass
class Vector(Metric):
    values: list[int]


@dataclass
class Gauge(Metric):
    value: float


@dataclass
class Histogram(Metric):
    count: int
    sum: float
    buckets: dict[str, int]


ENGINE = {"model_name": "lightonai/LightOnOCR-2-1B", "engine": "0"}


def served(figures: VllmFigures | None) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(VllmCollector(lambda: figures))
    text = generate_latest(registry).decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out


def test_vllm_reader_figures_are_served_as_ocrwatch_vllm_metrics() -> None:
    snapshot = [
        Gauge("vllm:num_requests_running", dict(ENGINE), 3.0),
        Gauge("vllm:num_requests_waiting", dict(ENGINE), 5.0),
        Gauge("vllm:kv_cache_usage_perc", dict(ENGINE), 0.42),
        Counter("vllm:generation_tokens", dict(ENGINE), 1234),
        Counter("vllm:prompt_tokens", dict(ENGINE), 9000),
        Counter("vllm:request_success", {**ENGINE, "finished_reason": "length"}, 7),
        Counter("vllm:request_success", {**ENGINE, "finished_reason": "stop"}, 2),
        # Cumulative counts by upper bound, as Prometheus keeps them ("+Inf" = count).
        Histogram("vllm:time_to_first_token_seconds", dict(ENGINE), count=9, sum=6.3,
                  buckets={"0.1": 1, "0.5": 4, "1.0": 8, "+Inf": 9}),
        # Not served: a Vector (speculative decoding) and a series ocrwatch does not keep.
        Vector("vllm:spec_decode_num_accepted_tokens_per_pos", dict(ENGINE), [1, 2]),
        Gauge("vllm:engine_sleep_state", {**ENGINE, "sleep_state": "awake"}, 1.0),
    ]
    figures = figures_of(snapshot, taken=1_700_000_000.0)
    assert len(figures.figures) == 8
    m = served(figures)
    assert m["ocrwatch_vllm_requests_running"] == 3
    assert m["ocrwatch_vllm_requests_waiting"] == 5
    assert m["ocrwatch_vllm_kv_cache_usage_ratio"] == 0.42
    assert m["ocrwatch_vllm_generation_tokens_total"] == 1234
    assert m["ocrwatch_vllm_prompt_tokens_total"] == 9000
    assert m['ocrwatch_vllm_requests_finished_total{finished_reason="length"}'] == 7
    assert m['ocrwatch_vllm_requests_finished_total{finished_reason="stop"}'] == 2
    assert m['ocrwatch_vllm_time_to_first_token_seconds_bucket{le="0.5"}'] == 4
    assert m['ocrwatch_vllm_time_to_first_token_seconds_bucket{le="+Inf"}'] == 9
    assert m["ocrwatch_vllm_time_to_first_token_seconds_count"] == 9
    assert m["ocrwatch_vllm_time_to_first_token_seconds_sum"] == 6.3
    assert m["ocrwatch_vllm_figures_timestamp_seconds"] == 1_700_000_000.0
    # vLLM's per-engine labels say nothing for one engine and are not served.
    assert not any("model_name" in k or "engine=" in k for k in m)
    assert not any("sleep" in k or "spec_decode" in k for k in m)


def test_no_worker_no_vllm_series() -> None:
    assert served(None) == {}


def test_the_worker_sends_the_figures_while_pages_are_in_flight() -> None:
    config = Config()
    config.vllm.idle_sleep_seconds = 0
    config.vllm.idle_stop_seconds = 0
    config.vllm.max_tokens = 64
    eng = VllmEngine(config, backend="fake", backend_options={"delay": 2.0},
                     card_mib=16 * 1024)
    try:
        assert eng.vllm_figures is None  # no worker yet
        pages = [Page(Path(f"scan{i}.png"), i, Image.new("RGB", (120, 160), "white"))
                 for i in range(3)]
        reader = threading.Thread(target=eng.recognize, args=(pages,))
        reader.start()
        # Sent about once a second while the pages (2 s each) are in flight.
        wait_for(lambda: served(eng.vllm_figures).get("ocrwatch_vllm_requests_running") == 3,
                 30, "figures with the three pages running")
        reader.join(30)
        # Once the last page ended the worker sent its figures once more.
        ended = wait_for(lambda: (m := served(eng.vllm_figures)).get(
            "ocrwatch_vllm_generation_tokens_total") and m, 10, "the last figures")
        assert ended["ocrwatch_vllm_requests_running"] == 0
        assert ended["ocrwatch_vllm_generation_tokens_total"] == 3 * 12
    finally:
        eng.close()
    assert eng.vllm_figures is None  # the worker's figures end with it
