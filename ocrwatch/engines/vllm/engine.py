"""The ``vllm`` engine as the daemon sees it: pages in, one result per page out.

Pages stream through one worker process (:mod:`.worker`). Any number of threads may
call :meth:`VllmEngine.recognize` at once; their pages wait in one admission queue
(:mod:`.admission`: arrival order, or like sizes together within a bound), and the feeder
thread (:mod:`.feeder`) keeps up to ``max_num_seqs`` of them in flight and hands each
result back as soon as its page ends. Each page gets exactly one result.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ocrwatch.core.domain import Page, PageText
from ocrwatch.core.errors import EngineError, EngineUnavailable
from ocrwatch.engines import gpu, lightonocr
from ocrwatch.engines.base import ReadPolicy, gpu_preparers
from ocrwatch.engines.vllm.admission import Request
from ocrwatch.engines.vllm.feeder import Feeder
from ocrwatch.engines.vllm.memory import MemoryPlan, default_budget, plan_memory

if TYPE_CHECKING:
    from ocrwatch.config import Config

log = logging.getLogger(__name__)


class VllmEngine(lightonocr.LightOnOCREngine, Feeder):
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
    ) -> None:
        cfg = config.vllm
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
        device_gib = card_mib / 1024
        card_gib = min(cfg.card_gb or device_gib, device_gib)  # vllm.card_gb: a smaller card
        budget = default_budget(card_gib, cfg.gpu_memory_gb)
        local = cfg.model if os.path.isdir(os.path.expanduser(cfg.model)) else None

        def replan(others_gib: float, model_dir: str | None) -> MemoryPlan:
            return plan_memory(budget, card_gib, cfg.max_tokens, others_gib=others_gib,
                               device_gib=device_gib, model_dir=model_dir or local,
                               kv_cache_dtype=cfg.kv_cache_dtype, eager=cfg.enforce_eager)

        # The plan of an empty card bounds the callers; each start plans again within what
        # other programs leave then (the feeder).
        plan = replan(0.0, None)
        if held_mib is None and backend == "vllm":
            held_mib = gpu.processes_mib
        if others_mib is None and backend == "vllm":
            others_mib = gpu.others_mib
        super().__init__(cfg, plan, backend, dict(backend_options or {}), clock, held_mib,
                         replan, others_mib)
        # One page per call: each page's result goes on to its file the moment it ends.
        # Twice max_num_seqs callers keep a choice of pages waiting for admission.
        self._policy = ReadPolicy(concurrency=2 * plan.max_num_seqs, preparers=gpu_preparers())
        atexit.register(self.close)

    # -- the Engine interface ------------------------------------------------------------

    def recognize(self, pages: Sequence[Page]) -> list[PageText]:
        """Read pages; each streams through on its own, and a page that cannot be read
        gets ``error`` set. Raises EngineUnavailable when the worker cannot start."""
        if not pages:
            return []
        now = self._clock()
        requests = [Request(p, p.image, lightonocr.image_tokens(*p.size), now,
                             self._cfg.temperature) for p in pages]
        with self._cond:
            if self._closing:
                raise EngineError("the vLLM engine was closed; start the daemon again.")
            self._queue.pending.extend(requests)
            self._start_feeder()
        self._poke()
        for request in requests:
            request.done.wait()
        for request in requests:
            if request.unavailable is not None:
                raise request.unavailable
        return [self._to_text(r) for r in requests]

    def release(self) -> None:
        """End the worker so the card gets every byte back; the next page restarts it.

        The pages already handed over (in flight or waiting) are read first."""
        self._command("stop")

    def close(self) -> None:
        """Stop the feeder and the worker. Safe to call twice."""
        with self._cond:
            if self._state == "closed":
                return
            self._closing = True
            feeder = self._feeder
            self._cond.notify_all()
        self._poke()
        if feeder is not None:
            feeder.join()
        self._end_worker("closed")
        self._end_standby()
        with self._cond:
            self._queue.close()
            self._set_state("closed")
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        atexit.unregister(self.close)

    def describe(self) -> dict[str, object]:
        with self._cond:
            facts: dict[str, object] = {
                "engine": self.name,
                "state": self._state,
                "model": self._cfg.model,
                "gpu_memory_budget_gb": self.plan.budget_gib,
                "memory_plan": self.plan.describe(),
                "pages_per_second": self._rate(),
                "pages_in_flight": self._queue.sent_count(),
                "pages_waiting": len(self._queue.pending),
                "restarts": self._restarts,
            }
            if self._detail:
                facts["detail"] = self._detail
            if self._busy is not None:
                facts["waiting_reason"] = str(self._busy)
            if self._last_error:
                facts["last_error"] = self._last_error
            worker, state, standby = self._worker, self._state, self._standby
        if standby is not None:
            # Only the feeder reads the standby's pipe; its message sets ``info``.
            facts["standby"] = {"pid": standby.pid, "ready": bool(standby.info),
                                "rss_mb": standby.rss_mib()}
        if worker is not None and self._backend == "vllm":
            facts["gpu_memory_mb"] = gpu.processes_mib(worker.members())
        elif state in ("stopped", "closed", "waiting"):
            facts["gpu_memory_mb"] = 0
        return facts

    # -- extra controls (benchmarks, tests, status) ---------------------------------------

    @property
    def state(self) -> str:
        with self._cond:
            return self._state

    @property
    def most_in_flight(self) -> int:
        """The most pages in flight at once since the last reset (benchmarks, tests)."""
        with self._cond:
            return self._queue.most_in_flight

    @most_in_flight.setter
    def most_in_flight(self, value: int) -> None:
        with self._cond:
            self._queue.most_in_flight = value

    @property
    def standby_pid(self) -> int | None:
        with self._cond:
            return self._standby.pid if self._standby is not None else None

    @property
    def worker_pid(self) -> int | None:
        with self._cond:
            return self._worker.pid if self._worker is not None else None

    def start(self) -> None:
        """Start (or wake) the worker now instead of on the first page."""
        self._command("start")

    def sleep(self) -> None:
        """Put the worker to sleep now (what the idle timer does after a while)."""
        self._command("sleep")

    def wake(self) -> None:
        self.start()

    def wait_for_state(self, states: Iterable[str], timeout: float) -> bool:
        """Block until the engine is in one of ``states``; False after ``timeout`` seconds."""
        wanted = set(states)
        with self._cond:
            return self._cond.wait_for(lambda: self._state in wanted, timeout)

    def _to_text(self, request: Request) -> PageText:
        if request.output is None:
            page = request.page
            log.warning("Page %d of %s could not be read: %s", page.index + 1, page.source.name,
                        request.error)
            return lightonocr.failed_page(request.error or "no answer from the vLLM worker")
        out = request.output
        warnings = []
        if self._looped(out):
            warnings.append(lightonocr.loop_warning(out["finish"]))
        return lightonocr.page_text(out["text"], warnings)
