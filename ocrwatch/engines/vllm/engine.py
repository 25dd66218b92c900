"""The ``vllm`` engine as the daemon sees it: pages in, one result per page out.

Pages stream through one worker process (:mod:`.worker`). Any number of threads may
call :meth:`VllmEngine.recognize` at once; their pages wait in one admission queue
(:mod:`.admission`: arrival order, or like sizes together within a bound), and the
engine's :class:`~.feeder.Feeder` keeps up to ``max_num_seqs`` of them in flight and hands
each result back as soon as its page ends. Each page gets exactly one result. The feeder
owns the pages, the worker, their state and the lock around them; the engine adds what
the daemon sees (policy, page text) and otherwise asks the feeder.
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib.util
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ocrwatch.core.domain import Page, PageText
from ocrwatch.core.errors import EngineUnavailable
from ocrwatch.engines import gpu, lightonocr, profiles
from ocrwatch.engines.base import gpu_read_policy
from ocrwatch.engines.profiles import Profile
from ocrwatch.engines.vllm.admission import Request
from ocrwatch.engines.vllm.feeder import Feeder
from ocrwatch.engines.vllm.memory import MemoryPlan, default_budget, plan_memory
from ocrwatch.engines.vllm.messages import Done, VllmFigures

if TYPE_CHECKING:
    from ocrwatch.config import Config

log = logging.getLogger(__name__)


class VllmEngine(lightonocr.LightOnOCREngine):
    """The ``vllm`` engine. Thread-safe; one worker process at most."""

    name = "vllm"

    def __init__(
        self,
        config: Config,
        *,
        backend: str = "vllm",
        backend_options: dict[str, Any] | None = None,
        card_mib: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        held_mib: Callable[[list[int]], int | None] | None = None,
        others_mib: Callable[[list[int]], int | None] | None = None,
        prepare_processes: bool | None = None,
    ) -> None:
        self._profile = profiles.of(config)
        self._keep_margins = config.keep_margins
        temperature, top_p = profiles.sampling(config, "vllm")
        # The section as the profile completes it: the model, sampling and answer length
        # that the user did not set are the profile's.
        cfg = dataclasses.replace(config.vllm, model=profiles.model_id(config, "vllm"),
                                  temperature=temperature, top_p=top_p,
                                  max_tokens=profiles.max_tokens(config, "vllm"))
        self._ignore_eos = cfg.ignore_eos
        if backend == "vllm" and importlib.util.find_spec("vllm") is None:
            raise EngineUnavailable(
                "vLLM is not installed. Install the GPU extra (`make run GPU=1` in the checkout, "
                "Linux with an NVIDIA driver for CUDA 13) or use engine = \"tesseract\"."
            )
        if card_mib is None:
            card_mib = gpu.card_memory_mib() if backend == "vllm" else 16 * 1024
        if card_mib is None:
            raise EngineUnavailable(
                "no NVIDIA GPU was found (the NVIDIA driver did not answer). Install the NVIDIA "
                "driver, or use engine = \"tesseract\" to read pages on the CPU."
            )
        # The fake backend (tests) is told a card's compute capability in its options.
        capability = (gpu.compute_capability() if backend == "vllm"
                      else (backend_options or {}).get("capability"))
        problem = gpu.fp8_problem(cfg.quantization, cfg.kv_cache_dtype, capability)
        if problem is not None:
            raise EngineUnavailable(problem)
        device_gib = card_mib / 1024
        card_gib = min(cfg.card_gb or device_gib, device_gib)  # vllm.card_gb: a smaller card
        budget = default_budget(card_gib, cfg.gpu_memory_gb)
        local = cfg.model if os.path.isdir(os.path.expanduser(cfg.model)) else None

        def replan(others_gib: float, model_dir: str | None) -> MemoryPlan:
            return plan_memory(budget, card_gib, cfg.max_tokens, others_gib=others_gib,
                               device_gib=device_gib, model_dir=model_dir or local,
                               kv_cache_dtype=cfg.kv_cache_dtype, eager=cfg.enforce_eager,
                               profile=self._profile, quantization=cfg.quantization)

        # The plan of an empty card bounds the callers; each start plans again within what
        # other programs leave then (the feeder).
        plan = replan(0.0, None)
        if held_mib is None and backend == "vllm":
            held_mib = gpu.processes_mib
        if others_mib is None and backend == "vllm":
            others_mib = gpu.others_mib
        self._feeder = Feeder(cfg, plan, backend, dict(backend_options or {}), clock,
                              held_mib, replan, others_mib, profile=self._profile)
        # One page per call: each page's result goes on to its file the moment it ends.
        # Twice max_num_seqs callers keep a choice of pages waiting for admission.
        # Pages prepared in processes (vllm.prepare_processes) for the real worker; the
        # tests' fake one keeps threads unless asked.
        if prepare_processes is None:
            prepare_processes = cfg.prepare_processes and backend == "vllm"
        self._policy = gpu_read_policy(2 * plan.max_num_seqs, config.rotate_pages,
                                       processes=prepare_processes)
        atexit.register(self.close)

    # -- the Engine interface ------------------------------------------------------------

    def recognize(self, pages: Sequence[Page]) -> list[PageText]:
        """Read pages; each streams through on its own, and a page that cannot be read
        gets ``error`` set. Raises EngineUnavailable when the worker cannot start."""
        if not pages:
            return []
        requests = self._feeder.read(pages)
        for request in requests:
            if request.unavailable is not None:
                raise request.unavailable
        return [self._to_text(r) for r in requests]

    def release(self) -> None:
        """End the worker so the card gets every byte back; the next page restarts it.

        The pages already handed over (in flight or waiting) are read first."""
        self._feeder.command("stop")

    def close(self) -> None:
        """Stop the feeder and the worker. Safe to call twice."""
        self._feeder.close()
        atexit.unregister(self.close)

    def describe(self) -> dict[str, object]:
        return {"engine": self.name, **self._feeder.describe()}

    # -- extra controls (benchmarks, tests, status) ---------------------------------------

    @property
    def plan(self) -> MemoryPlan:
        """The memory plan of the running worker (of an empty card before the first start)."""
        return self._feeder.plan

    @property
    def timings(self) -> dict[str, float]:
        """Seconds the last start, sleep and wake took."""
        return self._feeder.timings

    @property
    def worker_info(self) -> dict[str, Any]:
        """What the running worker said about itself (and its standby) when it started."""
        return self._feeder.worker_info

    @property
    def state(self) -> str:
        return self._feeder.state

    @property
    def vllm_figures(self) -> VllmFigures | None:
        """vLLM's own figures from the running worker (KV cache, requests running and
        waiting, tokens, time to first token), for the metrics; None with no worker."""
        return self._feeder.vllm_figures

    @property
    def most_in_flight(self) -> int:
        """The most pages in flight at once since the last reset (benchmarks, tests)."""
        return self._feeder.most_in_flight

    @most_in_flight.setter
    def most_in_flight(self, value: int) -> None:
        self._feeder.most_in_flight = value

    @property
    def admit_wait(self) -> float:
        """How long a page may wait while like sizes go first (``vllm.admit_wait_seconds``);
        set on a running engine by the benchmarks."""
        return self._feeder.admit_wait

    @admit_wait.setter
    def admit_wait(self, seconds: float) -> None:
        self._feeder.admit_wait = seconds

    @property
    def standby_pid(self) -> int | None:
        return self._feeder.standby_pid

    @property
    def worker_pid(self) -> int | None:
        return self._feeder.worker_pid

    def start(self) -> None:
        """Start (or wake) the worker now instead of on the first page."""
        self._feeder.command("start")

    def warm(self) -> None:
        """A file is arriving: start or wake the worker now, in the background, so that
        its pages do not wait for the start after they are prepared."""
        self._feeder.warm()

    def stand_by(self) -> None:
        """The daemon has started: import vLLM in a standby process now, in the
        background and with nothing on the card (``vllm.standby``), so that the first
        file does not wait for the 20 s of imports."""
        self._feeder.stand_by()

    def sleep(self) -> None:
        """Put the worker to sleep now (what the idle timer does after a while)."""
        self._feeder.command("sleep")

    def wake(self) -> None:
        self.start()

    def poke(self) -> None:
        """Have the feeder look at its idle timers now (tests that step the clock)."""
        self._feeder.poke()

    def wait_for_state(self, states: Iterable[str], timeout: float) -> bool:
        """Block until the engine is in one of ``states``; False after ``timeout`` seconds."""
        return self._feeder.wait_for_state(states, timeout)

    def _to_text(self, request: Request) -> PageText:
        if request.output is None:
            page = request.page
            log.warning("Page %d of %s could not be read: %s", page.index + 1, page.source.name,
                        request.error)
            return lightonocr.failed_page(request.error or "no answer from the vLLM worker")
        return page_of(request.output, looped=request.looped, ignore_eos=self._ignore_eos,
                       profile=self._profile, size=request.page.size,
                       keep_margins=self._keep_margins)


def page_of(out: Done, *, looped: bool, ignore_eos: bool = False,
            profile: Profile | None = None, size: tuple[int, int] | None = None,
            keep_margins: bool = False) -> PageText:
    """The page the model's output makes: a doubt when it is not a whole reading (cut off
    at max_tokens, looping after the retry, aborted, empty, markup alone, a refusal).
    Benchmarks ask for every page to run to max_tokens (``ignore_eos``): no doubt there.
    ``profile``, ``size``, ``keep_margins``: as :func:`lightonocr.page_text` takes them."""
    return lightonocr.page_text(out.text, finish="stop" if ignore_eos else out.finish,
                                looped=looped, profile=profile, size=size,
                                keep_margins=keep_margins)
