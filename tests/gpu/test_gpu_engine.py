"""The real vLLM engine on a GPU, under the 16 GB card's budget.

Runs the LightOnOCR-2-1B-shaped model with random weights (load_format="dummy"): the
real model's compute and memory, meaningless text. The card's memory is read from
outside through NVML every 0.1 s. Tests run in file order and share one engine.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from gpu_helpers import GIB, Sampler, why_not

REASON = why_not()
if REASON:
    print(f"GPU tests skipped: {REASON}", file=sys.stderr)
    pytest.skip(REASON, allow_module_level=True)

from PIL import Image  # noqa: E402

from ocrwatch.config import Config  # noqa: E402
from ocrwatch.core.domain import Page, PageText  # noqa: E402
from ocrwatch.engines.vllm import VllmEngine  # noqa: E402
from ocrwatch.engines.vllm.backends import warm_up_sizes  # noqa: E402
from ocrwatch.pages.decode import iter_pages  # noqa: E402

pytestmark = pytest.mark.gpu
CARD_LIMIT_MIB = 16 * GIB  # what a 16 GB card holds
ASLEEP_LIMIT_MIB = 1.5 * GIB


def gpu_config(model: str, load_format: str = "dummy") -> Config:
    config = Config()
    config.vllm.model = model
    config.vllm.load_format = load_format
    config.vllm.enforce_eager = True  # starts in seconds; speed is the benchmark's business
    config.vllm.max_tokens = 32  # noise either way; fewer tokens keep the run short
    config.vllm.idle_sleep_seconds = 0  # the tests drive sleep and stop themselves
    config.vllm.idle_stop_seconds = 0
    config.vllm.card_gb = 16.0  # plan for the 16 GB card, whatever this one holds
    return config


def run_pipeline(engine: VllmEngine, pages: list[Page]) -> list[tuple[Page, PageText]]:
    """Read pages the way the daemon does: ``policy.concurrency`` threads, a page each."""
    with ThreadPoolExecutor(engine.policy.concurrency) as pool:
        results = list(pool.map(lambda p: engine.recognize([p]), pages))
    assert all(len(r) == 1 for r in results)
    return [(p, r[0]) for p, r in zip(pages, results, strict=True)]


def a4_pages(n: int, first: int = 0) -> list[Page]:
    return [Page(Path(f"p{i}.png"), i, Image.new("RGB", (1088, 1540), "white"))
            for i in range(first, first + n)]


def read_in_background(engine: VllmEngine, pages: list[Page],
                       into: list[PageText]) -> threading.Thread:
    reader = threading.Thread(target=lambda: into.extend(engine.recognize(pages)))
    reader.start()
    return reader


@pytest.fixture(scope="module")
def engine(baseline_mib: int) -> Iterator[VllmEngine]:
    eng = VllmEngine(gpu_config(os.environ["OCRWATCH_GPU_MODEL"]))
    yield eng
    eng.close()


def test_tiny_model_loads_its_weights_and_reads(sampler: Sampler, baseline_mib: int) -> None:
    tiny = os.environ.get("OCRWATCH_GPU_TINY_MODEL")
    if not tiny:
        pytest.skip("OCRWATCH_GPU_TINY_MODEL is not set")
    eng = VllmEngine(gpu_config(tiny, load_format="auto"))
    try:
        page = Page(Path("tiny.png"), 0, Image.new("RGB", (300, 200), "white"))
        (result,) = eng.recognize([page])
        assert result.error is None
        assert isinstance(result.markdown, str)
    finally:
        eng.close()
    assert sampler.wait_until(lambda v: v <= baseline_mib + 64, 60) <= baseline_mib + 64


def test_corpus_through_the_daemon_pipeline_stays_under_16_gib(
        engine: VllmEngine, corpus: Path, sampler: Sampler) -> None:
    since = sampler.now()
    engine.start()
    start_s = time.monotonic() - since
    pages: list[Page] = []
    for path in sorted(corpus.iterdir()):
        if path.suffix.lower() in (".jpg", ".jpeg", ".png", ".tif", ".tiff", ".pdf"):
            pages.extend(iter_pages(path, Config(), engine.max_side))
    assert len(pages) >= 18
    t0 = time.monotonic()
    done = run_pipeline(engine, pages)
    elapsed = time.monotonic() - t0
    peak = sampler.peak(since)
    errors = [r.error for _, r in done if r.error]
    print(f"\ncorpus: {len(pages)} pages in {elapsed:.1f} s ({len(pages) / elapsed:.2f} pages/s, "
          f"start {start_s:.1f} s), peak card memory {peak / GIB:.2f} GiB, errors {errors}, "
          f"warnings {sum(len(r.warnings) for _, r in done)}, plan {engine.plan}",
          file=sys.stderr)
    assert sorted((p.source.name, p.index) for p, _ in done) == sorted(
        (p.source.name, p.index) for p in pages)  # every page exactly once
    assert not errors
    # Random weights write noise, mostly ids the stand-in tokenizer lacks: the text may
    # be empty, so only its type is checked here.
    assert all(isinstance(r.markdown, str) and isinstance(r.text, str) for _, r in done)
    assert peak < CARD_LIMIT_MIB


def test_the_worker_hands_vllm_the_model_class_and_warms_each_kind_of_batch(
        engine: VllmEngine) -> None:
    engine.start()
    info = engine.worker_info
    print(f"\nworker: {info}", file=sys.stderr)
    # Handed over, vLLM skips its inspection of the class in a process of its own (~25 s
    # on a first start); the class is the one that encodes each page alone (vLLM 0.26);
    # warmed, no sampling kernel compiles while pages wait.
    assert info["model_class"] == "pagewise"
    assert info["warmed_up"] == warm_up_sizes(engine.plan.cudagraph_sizes)


def test_sleep_frees_the_card_and_the_next_page_wakes_it(
        engine: VllmEngine, sampler: Sampler) -> None:
    engine.start()
    engine.sleep()
    assert engine.state == "asleep"
    asleep = sampler.wait_until(lambda v: v < ASLEEP_LIMIT_MIB, 30)
    print(f"\nasleep: {asleep / GIB:.2f} GiB on the card, sleep took {engine.timings['sleep']} s",
          file=sys.stderr)
    assert asleep < ASLEEP_LIMIT_MIB
    page = Page(Path("a4.png"), 0, Image.new("RGB", (1088, 1540), "white"))
    (result,) = engine.recognize([page])
    assert result.error is None and engine.state == "ready"
    print(f"woke in {engine.timings['wake']} s", file=sys.stderr)
    assert engine.timings["wake"] < 5


def test_a_page_added_while_others_decode_joins_them(engine: VllmEngine) -> None:
    engine.start()
    first: list[PageText] = []
    reader = read_in_background(engine, a4_pages(1), first)
    deadline = time.monotonic() + 60
    while engine.describe()["pages_in_flight"] != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    engine.most_in_flight = 0
    (second,) = engine.recognize(a4_pages(1, first=1))
    reader.join(120)
    assert not reader.is_alive() and first[0].error is None and second.error is None
    assert engine.most_in_flight >= 2  # the second went in while the first decoded


def test_a_worker_killed_with_eight_pages_in_flight_reads_each_again_once(
        engine: VllmEngine, sampler: Sampler) -> None:
    engine.start()
    pid = engine.worker_pid
    restarts = engine.describe()["restarts"]
    assert pid is not None and isinstance(restarts, int)
    since = sampler.now()
    results: list[PageText] = []
    reader = read_in_background(engine, a4_pages(8), results)
    deadline = time.monotonic() + 60
    while engine.describe()["pages_in_flight"] != 8 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.describe()["pages_in_flight"] == 8
    os.kill(pid, signal.SIGKILL)
    reader.join(300)
    assert not reader.is_alive()
    assert len(results) == 8 and all(r.error is None for r in results)
    assert engine.worker_pid not in (None, pid)
    assert engine.describe()["restarts"] == restarts + 1
    assert sampler.peak(since) < CARD_LIMIT_MIB


def test_sleep_with_pages_pending_finishes_them_first(engine: VllmEngine,
                                                      sampler: Sampler) -> None:
    engine.start()
    results: list[PageText] = []
    reader = read_in_background(engine, a4_pages(8), results)
    deadline = time.monotonic() + 60
    while engine.describe()["pages_in_flight"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    engine.timings.pop("sleep", None)
    engine.sleep()  # waits for the pages in flight, then sleeps
    assert "sleep" in engine.timings
    reader.join(120)
    # At 32 tokens every page runs out and goes round again, warmer: those second tries
    # come after the sleep and wake the engine. None is lost.
    assert len(results) == 8 and all(r.error is None for r in results)
    engine.sleep()
    # A sleep that leaves the memory on the card ends the worker instead (the feeder
    # checks through NVML): either way the card is given back.
    left = sampler.wait_until(lambda v: v < ASLEEP_LIMIT_MIB, 30)
    print(f"\nsecond sleep: state {engine.state}, {left} MiB on the card", file=sys.stderr)
    assert engine.state in ("asleep", "stopped")
    assert left < ASLEEP_LIMIT_MIB


def test_release_gives_every_byte_back(engine: VllmEngine, sampler: Sampler,
                                       baseline_mib: int) -> None:
    engine.start()
    pid = engine.worker_pid
    engine.release()
    assert engine.state == "stopped"
    left = sampler.wait_until(lambda v: v <= baseline_mib + 64, 60)
    print(f"\nstopped: {left} MiB on the card (baseline {baseline_mib} MiB)", file=sys.stderr)
    assert left <= baseline_mib + 64
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
