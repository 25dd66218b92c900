"""The real vLLM engine on a card it shares, and the worst page, under a 16 GB card's plan.

Another program is a torch process holding GPU memory (benchmarks/gpu_hold.py). The
engine plans for a 16 GB card (``vllm.card_gb``) and its decode steps run as CUDA graphs
(not eager), so the worst page writes its 4096 tokens in seconds. Tests run in file order
and share one engine.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpu_helpers import GIB, Holder, Sampler, why_not

REASON = why_not()
if REASON:
    pytest.skip(REASON, allow_module_level=True)

from PIL import Image  # noqa: E402

from ocrwatch.config import Config  # noqa: E402
from ocrwatch.core.domain import Page, PageText  # noqa: E402
from ocrwatch.engines import gpu  # noqa: E402
from ocrwatch.engines.vllm import VllmEngine  # noqa: E402

pytestmark = pytest.mark.gpu
CARD_LIMIT_MIB = 16 * GIB


def shared_config(max_tokens: int) -> Config:
    config = Config()
    config.vllm.model = os.environ["OCRWATCH_GPU_MODEL"]
    config.vllm.load_format = "dummy"
    config.vllm.max_tokens = max_tokens
    config.vllm.ignore_eos = True  # every page writes all its tokens
    config.vllm.card_gb = 16.0
    config.vllm.idle_sleep_seconds = config.vllm.idle_stop_seconds = 0
    return config


@pytest.fixture(scope="module")
def engine() -> Iterator[VllmEngine]:
    eng = VllmEngine(shared_config(4096))  # the worst case: 4096 tokens a page
    yield eng
    eng.close()


def noise(width: int, height: int) -> Image.Image:
    return Image.frombytes("RGB", (width, height), os.urandom(width * height * 3))


def test_the_worst_page_stays_under_16_gib(engine: VllmEngine, sampler: Sampler,
                                           baseline_mib: int) -> None:
    since = sampler.now()
    engine.start()
    page = Page(Path("worst.png"), 0, noise(1540, 1540))  # 3025 image tokens, the most
    t0 = time.monotonic()
    (result,) = engine.recognize([page])
    took = time.monotonic() - t0
    peak = sampler.peak(since) - baseline_mib
    print(f"\nworst page: 1540x1540, 4096 tokens in {took:.1f} s, peak {peak / GIB:.2f} GiB; "
          f"plan {engine.plan.describe()}", file=sys.stderr)
    assert result.error is None
    assert peak < CARD_LIMIT_MIB


def test_a_busy_card_holds_the_page_then_reads_it_once_memory_frees(
        engine: VllmEngine, sampler: Sampler) -> None:
    engine.release()  # the worst-page engine gives the card back; this one shares it
    eng = VllmEngine(shared_config(500))
    holder = Holder(11.0)  # a game: with its CUDA context, more than 11 GiB of 16
    results: list[PageText] = []
    reader = threading.Thread(target=lambda: results.extend(eng.recognize(
        [Page(Path("a4.png"), 0, noise(1088, 1540))])))
    try:
        reader.start()
        assert eng.wait_for_state(["waiting"], 60)
        facts = eng.describe()
        print(f"\nwaiting: {facts['waiting_reason']}", file=sys.stderr)
        assert "the GPU is busy" in str(facts["waiting_reason"])
        assert eng.worker_pid is None and not results
        # While it waits its standby imports vLLM, and holds nothing on the card.
        deadline = time.monotonic() + 90
        while not (eng.describe().get("standby") or {}).get("ready"):
            assert time.monotonic() < deadline, "the standby never got ready"
            time.sleep(0.5)
        standby = eng.describe()["standby"]
        print(f"standby while waiting: {standby}", file=sys.stderr)
        assert gpu.processes_mib([standby["pid"]]) == 0
        assert not results and eng.state == "waiting"  # still held, not failed
    finally:
        freed = holder.release()
    reader.join(120)
    read_s = time.monotonic() - freed
    try:
        print(f"read {read_s:.1f} s after the other program exited; start "
              f"{eng.timings.get('start')} s; plan {eng.plan.describe()}", file=sys.stderr)
        assert results and results[0].error is None
        assert eng.worker_info.get("standby")  # the standby became the worker
        assert read_s <= 30
    finally:
        eng.close()
