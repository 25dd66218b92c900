"""The embedded vLLM engine: LightOnOCR-2-1B on the local GPU, in a worker process.

The daemon owns one worker process (see :mod:`ocrwatch.engines.vllm_worker`). It is
started on the first page, put to sleep (weights to CPU memory, about 0.9 GiB left on
the card) after ``idle_sleep_seconds`` with nothing to read, and ended after
``idle_stop_seconds`` (nothing left on the card). The next page wakes or restarts it.

Memory: the card sees more than vLLM reserves, because the vision encoder's working
memory sits outside vLLM's own accounting (two A4 pages at the 16 GB card's usual 0.9
peaked at 15.7 GiB, eight at 26.6 GiB). :func:`plan_memory` therefore reserves the
budget less a headroom, bounds the tokens vLLM encodes in one step, and gives the
batcher a bound on the image tokens of one batch.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import logging
import math
import multiprocessing
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ocrwatch.batching import MAX_IMAGE_TOKENS
from ocrwatch.domain import Page, PageText
from ocrwatch.engines.base import BatchPolicy
from ocrwatch.errors import EngineError, EngineUnavailable
from ocrwatch.textutil import markdown_to_text, repeats_itself

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

    from PIL import Image

    from ocrwatch.config import Config

log = logging.getLogger(__name__)

MAX_SIDE = 1540  # LightOnOCR's processor scales pages to this longest side
BUDGET_CAP_GIB = 16.0
MIN_BUDGET_GIB = 7.0
# Prompt of the largest page: 55 rows of 55 image tokens, a break token per row, template.
MAX_PROMPT_TOKENS = 55 * 56 + 32
SMALLER = 0.7  # a page that keeps failing is tried once more at this scale (half the tokens)
RETRY_TEMPERATURE = 0.6  # a page that looped is tried once more, less greedily
STATES = ("stopped", "starting", "ready", "busy", "asleep", "closed")


@dataclass(frozen=True)
class MemoryPlan:
    """vLLM settings and batch bounds that keep the card's peak under the budget."""

    budget_gib: float
    card_gib: float
    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    batch_pages: int
    batch_tokens: int


def plan_memory(budget_gib: float, card_gib: float, max_tokens: int,
                batch_tokens: int = 0) -> MemoryPlan:
    """Turn a memory budget into vLLM's settings and the batcher's bounds.

    Measured with the LightOnOCR-2-1B shape: the card peaks 1.3 to 1.8 GiB above what
    vLLM reserves (CUDA context, the vision encoder's working memory), so vLLM gets the
    budget less 3 GiB. ``max_num_batched_tokens`` of 4096 (one A4 page or seven cards
    per step) is what kept eight pages in flight near the 16 GiB line. Each batch holds
    at most one full-size page per 8 GiB of budget: pairs of A4 pages on a 16 GB card,
    and up to ``max_num_seqs`` small pages; ``batch_tokens`` (vllm.batch_image_tokens)
    overrides that bound.
    """
    if budget_gib > card_gib:
        budget_gib = card_gib
    if budget_gib < MIN_BUDGET_GIB:
        raise EngineUnavailable(
            f"the GPU memory budget is {budget_gib:.1f} GiB, but the vLLM engine needs at least "
            f"{MIN_BUDGET_GIB:.0f} GiB. Raise vllm.gpu_memory_gb, free the GPU, or use "
            "engine = \"tesseract\"."
        )
    headroom = 3.0 if budget_gib >= 10 else 2.5
    utilization = round(min(0.95, (budget_gib - headroom) / card_gib), 4)
    max_model_len = math.ceil((MAX_PROMPT_TOKENS + max_tokens) / 256) * 256
    large = budget_gib >= 12
    max_num_seqs = 8 if large else 4
    return MemoryPlan(
        budget_gib=round(budget_gib, 2),
        card_gib=round(card_gib, 2),
        gpu_memory_utilization=utilization,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=4096 if large else MAX_PROMPT_TOKENS,
        batch_pages=max_num_seqs,
        batch_tokens=batch_tokens or MAX_IMAGE_TOKENS * max(1, int(budget_gib // 8)),
    )


def _nvidia_smi(*query: str) -> list[str] | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", *query, "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [line.strip() for line in out.splitlines() if line.strip()]


def _gpu_index() -> str:
    """The first GPU this process may use, as nvidia-smi numbers it."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return visible if visible.isdigit() else "0"


def card_memory_mib() -> int | None:
    """Total memory of the GPU vLLM will use, or None without an NVIDIA GPU."""
    lines = _nvidia_smi("--query-gpu=memory.total", f"--id={_gpu_index()}")
    try:
        return int(float(lines[0])) if lines else None
    except ValueError:
        return None


def _process_group_memory_mib(group: int) -> int | None:
    """GPU memory held by the worker's process group (vLLM runs a child process)."""
    lines = _nvidia_smi("--query-compute-apps=pid,used_memory")
    if lines is None:
        return None
    total = 0
    for line in lines:
        try:
            pid_text, used = (part.strip() for part in line.split(","))
            if os.getpgid(int(pid_text)) == group:
                total += int(float(used))
        except (ValueError, OSError):
            continue
    return total


class _WorkerGone(Exception):
    """The worker process ended (crash, out of memory, killed); a fresh one may work."""


class _Refused(Exception):
    """The worker refused one request but carries on."""


class VllmEngine:
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
    ) -> None:
        self._cfg = config.vllm
        self._backend = backend
        self._backend_options = dict(backend_options or {})
        self._clock = clock
        if backend == "vllm" and importlib.util.find_spec("vllm") is None:
            raise EngineUnavailable(
                "vLLM is not installed. Install the GPU extra (pip install 'ocrwatch[gpu]', "
                "Linux with an NVIDIA driver for CUDA 13) or use engine = \"tesseract\"."
            )
        if card_mib is None:
            card_mib = card_memory_mib() if backend == "vllm" else 16 * 1024
        if card_mib is None:
            raise EngineUnavailable(
                "no NVIDIA GPU was found (nvidia-smi is missing or failed). Install the NVIDIA "
                "driver, or use engine = \"tesseract\" to read pages on the CPU."
            )
        card_gib = card_mib / 1024
        budget = self._cfg.gpu_memory_gb or min(card_gib, BUDGET_CAP_GIB)
        self.plan = plan_memory(budget, card_gib, self._cfg.max_tokens,
                                self._cfg.batch_image_tokens)
        self._policy = BatchPolicy(
            max_pages=self.plan.batch_pages,
            max_tokens=self.plan.batch_tokens,
            size_matched=True,
            partner_wait=self._cfg.partner_wait_seconds,
            concurrency=1,  # one batch at a time: vLLM batches inside the worker
        )
        self._io = threading.Lock()  # one conversation with the worker at a time
        self._cond = threading.Condition()  # guards the fields below
        self._state = "stopped"
        self._busy = 0
        self._last_used = clock()
        self._closing = False
        self._timer: threading.Thread | None = None
        self._proc: BaseProcess | None = None
        self._conn: Connection | None = None
        self._model_path: str | None = None
        self._detail = ""
        self._pages_per_second: float | None = None
        self._restarts = 0
        self._last_error: str | None = None
        self.timings: dict[str, float] = {}
        self.worker_info: dict[str, Any] = {}
        atexit.register(self.close)

    # -- the Engine interface ------------------------------------------------------------

    @property
    def max_side(self) -> int | None:
        return MAX_SIDE

    @property
    def policy(self) -> BatchPolicy:
        return self._policy

    def recognize(self, pages: Sequence[Page]) -> list[PageText]:
        """Read one batch; a page that cannot be read gets ``error`` set instead of raising."""
        if not pages:
            return []
        self._enter()
        try:
            with self._io:
                started = self._clock()
                results = self._recognize_locked(pages)
                elapsed = max(self._clock() - started, 1e-6)
                rate = len(pages) / elapsed
                with self._cond:
                    old = self._pages_per_second
                    self._pages_per_second = rate if old is None else 0.7 * old + 0.3 * rate
                return results
        finally:
            self._leave()

    def release(self) -> None:
        """End the worker so the card gets every byte back; the next page restarts it."""
        with self._io:
            self._stop_locked("released")

    def close(self) -> None:
        """Stop the idle timer and the worker. Safe to call twice."""
        with self._cond:
            if self._state == "closed":
                return
            self._closing = True
            self._cond.notify_all()
            timer = self._timer
        if timer is not None:
            timer.join()
        with self._io:
            self._stop_locked("closed")
        with self._cond:
            self._set_state("closed")
        atexit.unregister(self.close)

    def describe(self) -> dict[str, object]:
        with self._cond:
            state, proc = self._state, self._proc
            facts: dict[str, object] = {
                "engine": self.name,
                "state": state,
                "model": self._cfg.model,
                "gpu_memory_budget_gb": self.plan.budget_gib,
                "pages_per_second": (round(self._pages_per_second, 2)
                                     if self._pages_per_second is not None else None),
                "restarts": self._restarts,
            }
            if self._detail:
                facts["detail"] = self._detail
            if self._last_error:
                facts["last_error"] = self._last_error
        if proc is not None and proc.pid is not None and self._backend == "vllm":
            facts["gpu_memory_mb"] = _process_group_memory_mib(proc.pid)
        elif state in ("stopped", "closed"):
            facts["gpu_memory_mb"] = 0
        return facts

    # -- extra controls (benchmarks, tests, status) ---------------------------------------

    @property
    def state(self) -> str:
        with self._cond:
            return self._state

    @property
    def worker_pid(self) -> int | None:
        with self._cond:
            return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Start (or wake) the worker now instead of on the first page."""
        self._enter()
        try:
            with self._io:
                self._ready_locked()
        finally:
            self._leave()

    def sleep(self) -> None:
        """Put the worker to sleep now (what the idle timer does after a while)."""
        with self._io:
            if self.state == "ready":
                self._sleep_locked()

    def wake(self) -> None:
        self.start()

    def wait_for_state(self, states: Iterable[str], timeout: float) -> bool:
        """Block until the engine is in one of ``states``; False after ``timeout`` seconds."""
        wanted = set(states)
        with self._cond:
            return self._cond.wait_for(lambda: self._state in wanted, timeout)

    # -- state and idle timer -----------------------------------------------------------

    def _set_state(self, state: str) -> None:
        """Caller holds ``_cond``."""
        if state != self._state:
            log.debug("vLLM engine: %s -> %s", self._state, state)
            self._state = state
            self._cond.notify_all()

    def _enter(self) -> None:
        with self._cond:
            if self._closing:
                raise EngineError("the vLLM engine was closed; start the daemon again.")
            self._busy += 1
            if self._timer is None:
                self._timer = threading.Thread(target=self._idle_loop, name="ocrwatch-vllm-idle",
                                               daemon=True)
                self._timer.start()

    def _leave(self) -> None:
        with self._cond:
            self._busy -= 1
            self._last_used = self._clock()
            self._cond.notify_all()

    def _idle_action(self) -> tuple[str | None, float | None]:
        """What the idle timer should do now, or how long it may wait. Caller holds ``_cond``."""
        if self._busy or self._state not in ("ready", "asleep"):
            return None, None
        idle = self._clock() - self._last_used
        sleep_after, stop_after = self._cfg.idle_sleep_seconds, self._cfg.idle_stop_seconds
        waits = []
        if self._state == "ready" and sleep_after > 0:
            if idle >= sleep_after:
                return "sleep", None
            waits.append(sleep_after - idle)
        if stop_after > 0:
            if idle >= stop_after:
                return "stop", None
            waits.append(stop_after - idle)
        return None, (min(waits) if waits else None)

    def _idle_loop(self) -> None:
        while True:
            with self._cond:
                if self._closing:
                    return
                action, wait = self._idle_action()
                if action is None:
                    self._cond.wait(wait)
                    continue
            with self._io:
                with self._cond:
                    if self._closing:
                        return
                    action, _ = self._idle_action()  # a page may have come meanwhile
                try:
                    if action == "sleep":
                        log.info("No pages for %g s: putting the vLLM engine to sleep.",
                                 self._cfg.idle_sleep_seconds)
                        self._sleep_locked()
                    elif action == "stop":
                        log.info("No pages for %g s: ending the vLLM worker to free the GPU.",
                                 self._cfg.idle_stop_seconds)
                        self._stop_locked("idle")
                except Exception:  # the timer must outlive a failed sleep; the worker is gone
                    log.exception("The vLLM worker failed while going idle; it will restart.")

    # -- the worker -----------------------------------------------------------------------

    def _settings(self) -> dict[str, Any]:
        plan = self.plan
        return {
            "backend": self._backend,
            "fake": self._backend_options,
            "model": self._model_path,
            "load_format": self._cfg.load_format,
            "enforce_eager": self._cfg.enforce_eager,
            "gpu_memory_utilization": plan.gpu_memory_utilization,
            "max_model_len": plan.max_model_len,
            "max_num_seqs": plan.max_num_seqs,
            "max_num_batched_tokens": plan.max_num_batched_tokens,
            "parent_pid": os.getpid(),
        }

    def _progress(self, message: str) -> None:
        with self._cond:
            self._detail = message

    def _start_locked(self) -> None:
        from ocrwatch.engines import vllm_worker

        with self._cond:
            self._set_state("starting")
            self._detail = "loading the model"
        try:
            if self._model_path is None:
                if self._backend == "vllm":
                    from ocrwatch import model

                    self._model_path = str(model.resolve(self._cfg.model, progress=self._progress))
                else:
                    self._model_path = self._cfg.model
            log.info("Starting the vLLM worker (%s, budget %.1f GiB, utilization %.3f).",
                     self._cfg.model, self.plan.budget_gib, self.plan.gpu_memory_utilization)
            started = time.monotonic()
            ctx = multiprocessing.get_context("spawn")
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=vllm_worker.main, args=(child, self._settings()),
                               name="ocrwatch-vllm-worker")
            proc.start()
            child.close()
            self._proc, self._conn = proc, parent
            try:
                reply = self._receive(self._cfg.start_timeout_seconds)
            except _WorkerGone as exc:
                raise EngineUnavailable(
                    f"the vLLM worker could not start: {exc}. See the log for vLLM's own "
                    "messages; lower vllm.gpu_memory_gb if other programs use the GPU."
                ) from exc
            if reply[0] != "ok":
                if reply[1] == "oom":
                    raise EngineUnavailable(
                        f"the GPU ran out of memory while the model loaded ({reply[2]}). Close "
                        "programs that use the GPU, or lower vllm.gpu_memory_gb."
                    )
                raise EngineUnavailable(
                    f"the vLLM worker could not start: {reply[2]}. Check vllm.model, and lower "
                    "vllm.gpu_memory_gb if other programs use the GPU."
                )
        except BaseException as exc:
            self._reap()
            with self._cond:
                self._last_error = str(exc)
                self._detail = ""
                self._set_state("stopped")
            raise
        self.worker_info = dict(reply[1])
        self.timings["start"] = round(time.monotonic() - started, 2)
        log.info("vLLM worker ready in %.1f s.", self.timings["start"])
        with self._cond:
            self._detail = ""
            self._set_state("ready")

    def _ready_locked(self) -> None:
        state = self.state
        if state == "stopped":
            self._start_locked()
        elif state == "asleep":
            self.timings["wake"] = float(self._call(("wake",)))
            with self._cond:
                self._set_state("ready")

    def _sleep_locked(self) -> None:
        self.timings["sleep"] = float(self._call(("sleep",)))
        with self._cond:
            self._set_state("asleep")

    def _stop_locked(self, why: str) -> None:
        if self._proc is None:
            return
        if self._proc.is_alive() and self._conn is not None:
            try:
                self._send(("stop",))
                self._receive(30.0)
            except (_WorkerGone, _Refused, OSError):
                pass
        self._reap()
        log.info("vLLM worker ended (%s).", why)
        with self._cond:
            if self._state != "closed":
                self._set_state("stopped")

    def _reap(self) -> None:
        """End the worker and its process group (vLLM's engine process) and wait for them."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            conn.close()
        if proc is None:
            return
        proc.join(10.0)
        session = proc.pid or 0
        for sig in (signal.SIGTERM, signal.SIGKILL):
            # vLLM's engine process outlives a killed worker and holds the GPU memory.
            members = _session_members(session)
            if not members:
                break
            for pid in members:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
            _wait_session_gone(session, 5.0)
        if proc.is_alive():
            proc.kill()
            proc.join(5.0)
        proc.close()

    def _receive(self, timeout: float | None) -> tuple[Any, ...]:
        """The worker's next answer; raises _WorkerGone if it ends or stays silent."""
        proc, conn = self._proc, self._conn
        assert proc is not None and conn is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                if conn.poll(0.2):
                    reply: tuple[Any, ...] = conn.recv()
                    return reply
            except (EOFError, OSError):  # the worker's end closed: it has ended
                proc.join(5.0)
                raise _WorkerGone(self._how_it_ended(proc)) from None
            if not proc.is_alive():
                raise _WorkerGone(self._how_it_ended(proc))
            if deadline is not None and time.monotonic() > deadline:
                raise _WorkerGone(f"the vLLM worker did not answer within {timeout:.0f} s")

    @staticmethod
    def _how_it_ended(proc: BaseProcess) -> str:
        code = proc.exitcode
        if code is None:
            return "the vLLM worker closed its connection"
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            return f"the vLLM worker was killed by {name}"
        return f"the vLLM worker ended with exit code {code}"

    def _send(self, message: tuple[Any, ...]) -> None:
        """Write to the worker without hanging if it dies mid-write.

        Pages are megabytes, more than the pipe holds. vLLM's engine process is forked
        from the worker and keeps the pipe open, so a write to a dead worker would
        block forever; ending that process makes the write fail instead.
        """
        proc, conn = self._proc, self._conn
        assert proc is not None and conn is not None
        failed: list[BaseException] = []

        def push() -> None:
            try:
                conn.send(message)
            except BaseException as exc:  # handed to the caller below
                failed.append(exc)

        sender = threading.Thread(target=push, name="ocrwatch-vllm-send", daemon=True)
        sender.start()
        while sender.is_alive():
            sender.join(0.2)
            if sender.is_alive() and not proc.is_alive():
                for pid in _session_members(proc.pid or 0):
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
        if failed:
            raise failed[0]

    def _call(self, message: tuple[Any, ...]) -> Any:
        """Send one request and return the answer's payload. Caller holds ``_io``."""
        if self._conn is None:
            raise _WorkerGone("the vLLM worker is not running")
        try:
            self._send(message)
            reply = self._receive(None)
        except (_WorkerGone, OSError) as exc:
            self._lost(str(exc))
            raise _WorkerGone(str(exc)) from exc
        if reply[0] == "ok":
            return reply[1]
        kind, text = reply[1], reply[2]
        if kind == "input":
            raise _Refused(text)
        reason = ("the GPU ran out of memory" if kind == "oom" else "the vLLM worker failed")
        self._lost(f"{reason}: {text}")
        raise _WorkerGone(f"{reason} ({text})")

    def _lost(self, why: str) -> None:
        """The worker is gone or unusable: clean up; the next request starts a fresh one."""
        log.warning("%s; the worker will be restarted.", why)
        self._reap()
        with self._cond:
            self._restarts += 1
            self._last_error = why
            if self._state != "closed":
                self._set_state("stopped")

    # -- reading pages ------------------------------------------------------------------

    def _params(self, temperature: float | None = None) -> dict[str, Any]:
        return {
            "temperature": self._cfg.temperature if temperature is None else temperature,
            "top_p": self._cfg.top_p,
            "max_tokens": self._cfg.max_tokens,
            "ignore_eos": self._cfg.ignore_eos,
        }

    def _generate(self, images: Sequence[Image.Image], temperature: float | None = None,
                  ) -> list[dict[str, Any]]:
        self._ready_locked()
        with self._cond:
            self._set_state("busy")
        try:
            data = [_image_data(im) for im in images]
            outputs: list[dict[str, Any]] = self._call(
                ("generate", data, [self._params(temperature)] * len(data)))
            return outputs
        finally:
            with self._cond:
                if self._state == "busy":
                    self._set_state("ready")

    def _recognize_locked(self, pages: Sequence[Page]) -> list[PageText]:
        images = [p.image for p in pages]
        try:
            outputs: list[dict[str, Any] | str] = list(self._generate(images))
        except (_WorkerGone, _Refused) as exc:
            if len(pages) > 1:
                log.warning("A batch of %d pages failed (%s); reading them one by one.",
                            len(pages), exc)
            outputs = [self._one_page(page, first_error=str(exc) if len(pages) == 1 else None)
                       for page in pages]
        self._retry_loops(images, outputs)
        return [self._to_text(out) for out in outputs]

    def _one_page(self, page: Page, first_error: str | None) -> dict[str, Any] | str:
        """One page alone, then once at a smaller size; the reason if both fail."""
        attempts = [page.image, _smaller(page.image)]
        if first_error is not None:  # it already failed alone at full size
            attempts = attempts[1:]
        reason = first_error or ""
        for image in attempts:
            try:
                return self._generate([image])[0]
            except (_WorkerGone, _Refused) as exc:
                reason = str(exc)
        log.warning("Page %d of %s could not be read: %s", page.index + 1, page.source.name,
                    reason)
        return reason

    def _looped(self, out: dict[str, Any]) -> bool:
        if self._cfg.ignore_eos:  # benchmarks: every page runs to max_tokens on purpose
            return False
        return out["finish"] == "length" or repeats_itself(out["text"])

    def _retry_loops(self, images: Sequence[Image.Image],
                     outputs: list[dict[str, Any] | str]) -> None:
        """Pages that ran out of tokens or repeated themselves get one warmer try, together."""
        looped = [i for i, out in enumerate(outputs) if isinstance(out, dict) and self._looped(out)]
        if not looped:
            return
        log.info("%d page(s) did not finish cleanly; trying again at temperature %.1f.",
                 len(looped), RETRY_TEMPERATURE)
        try:
            again = self._generate([images[i] for i in looped], RETRY_TEMPERATURE)
        except (_WorkerGone, _Refused) as exc:
            log.warning("The second try failed (%s); keeping the first text.", exc)
            again = [outputs[i] for i in looped]  # type: ignore[misc]
        for i, out in zip(looped, again, strict=True):
            if self._looped(out):
                out = dict(out)
                out["warning"] = (
                    "the model ran out of tokens before the page ended; the text may be "
                    "incomplete" if out["finish"] == "length" else
                    "the model repeated itself on this page; the text may hold repeated lines")
            outputs[i] = out

    @staticmethod
    def _to_text(out: dict[str, Any] | str) -> PageText:
        if isinstance(out, str):
            return PageText(markdown="", text="", error=f"the page could not be read: {out}")
        markdown = out["text"].strip()
        warnings = [out["warning"]] if out.get("warning") else []
        return PageText(markdown=markdown + "\n" if markdown else "",
                        text=markdown_to_text(markdown), warnings=warnings)


def _session_members(session: int) -> list[int]:
    """Processes left in the worker's session (it called setsid, so the id is its pid)."""
    from ocrwatch.engines.vllm_worker import session_members

    return session_members(session) if session > 1 else []


def _wait_session_gone(session: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _session_members(session):
        time.sleep(0.05)


def _image_data(image: Image.Image) -> tuple[int, int, bytes]:
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    return rgb.width, rgb.height, rgb.tobytes()


def _smaller(image: Image.Image) -> Image.Image:
    w, h = image.size
    return image.resize((max(1, round(w * SMALLER)), max(1, round(h * SMALLER))))
