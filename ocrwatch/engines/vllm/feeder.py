"""The feeder: the one thread that talks to the vLLM worker, and the state it owns.

It admits pages from the queue (:mod:`.admission`) up to ``max_num_seqs`` in flight,
sends each to the worker as soon as it is chosen, hands each result back the moment
its page ends, and carries out sleep, wake and stop between pages.

- **Faults.** When the worker dies (a crash, out of memory, a kill) every page it had in
  flight is read again by a fresh worker (the rules are in :mod:`.admission`); each
  page's result is handed back exactly once.
- **Idle.** After ``idle_sleep_seconds`` with nothing in flight the model sleeps (about
  0.9 GiB left on the card; a sleep that leaves more ends the worker instead); after
  ``idle_stop_seconds`` the worker ends (0 left) and, with ``vllm.standby``, a standby
  process takes its place: vLLM imported, no CUDA context, nothing on the card, so the
  next start pays only the engine's creation. Sleep and wake wait for the pages in
  flight; stop (the daemon pausing) first reads every page handed over. The next page
  wakes or restarts the worker.
- **A shared card.** Before each start and wake the plan is made again within what other
  programs leave (:mod:`.memory`, NVML). When not even one page fits, the pages wait
  (state ``waiting``, the reason in ``describe()``), the card is asked again every
  :data:`HOLD_POLL_S` seconds, and the worker starts once memory is free.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_fds
from typing import TYPE_CHECKING, Any

from ocrwatch.core.domain import Page
from ocrwatch.core.errors import EngineError, EngineUnavailable, WorkerGone
from ocrwatch.engines import gpu, lightonocr, profiles
from ocrwatch.engines.profiles import Profile
from ocrwatch.engines.vllm.admission import Admission, Request
from ocrwatch.engines.vllm.memory import GpuBusy, MemoryPlan
from ocrwatch.engines.vllm.messages import (
    Add,
    Done,
    Failed,
    Ready,
    Refused,
    Sampling,
    Sleep,
    Slept,
    StandbyReady,
    Stopped,
    UnknownMessage,
    VllmFigures,
    Wake,
    Woke,
)
from ocrwatch.engines.vllm.supervisor import (
    Standby,
    Worker,
    image_data,
    memory_kept,
    worker_settings,
)

if TYPE_CHECKING:
    from ocrwatch.config import VllmConfig

log = logging.getLogger(__name__)

STATES = ("stopped", "waiting", "starting", "ready", "busy", "asleep", "closed")
HOLD_POLL_S = 2.0  # how often a busy card is asked again (NVML: microseconds a question)


@dataclass(eq=False)
class _Command:
    op: str  # "start", "sleep" or "stop"
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    waited: bool = True  # False: nobody waits for it (warm), its error is only logged


def timeline(request: Request, done: Done) -> str:
    """One page's way through the engine, for the debug log: when (time.monotonic) it was
    queued, sent to the worker, taken off the pipe there, taken by vLLM's front end, and
    when its result came back; benchmarks/gpu_daemon.py reads these lines."""
    page = request.page
    return (f"page timeline: {page.source.name} page {page.index + 1}: "
            f"queued {request.queued_at:.3f} sent {request.sent_at:.3f} "
            f"received {done.received:.3f} taken {done.taken:.3f} "
            f"done {time.monotonic():.3f}")


class Feeder:
    """The pages, the worker and their state (under ``_cond``, which only this class
    takes), and the one thread that talks to the worker.

    The engine holds one and calls its public methods from any thread."""

    def __init__(self, cfg: VllmConfig, plan: MemoryPlan, backend: str,
                 backend_options: dict[str, Any], clock: Callable[[], float],
                 held_mib: Callable[[list[int]], int | None] | None,
                 replan: Callable[[float, str | None], MemoryPlan],
                 others_mib: Callable[[list[int]], int | None] | None, *,
                 profile: Profile | None = None) -> None:
        self._cfg = cfg
        self._profile = profile or profiles.get(profiles.DEFAULT)
        self._held_mib = held_mib  # GPU memory of some processes (None: not checked)
        self._others_mib = others_mib  # what other programs hold on the card (None: not asked)
        self._replan = replan  # (others GiB, model folder) -> plan; raises GpuBusy
        self.plan = plan
        self._backend = backend
        self._backend_options = backend_options
        self._clock = clock
        self._cond = threading.Condition()  # guards every field below
        self._state = "stopped"
        self._queue = Admission(self._bound(self.plan), self._cfg.admit_wait_seconds,
                                self._profile.retry_temperature)
        self._commands: collections.deque[_Command] = collections.deque()
        self._last_used = clock()
        self._closing = False
        self._thread: threading.Thread | None = None
        self._worker: Worker | None = None
        self._standby: Standby | None = None
        self._busy: GpuBusy | None = None  # set while pages wait for the card
        self._hold_until = 0.0
        self._model_path: str | None = None
        self._detail = ""
        self._finished_at: collections.deque[float] = collections.deque(maxlen=32)
        self._restarts = 0
        self._last_error: str | None = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.timings: dict[str, float] = {}
        self.worker_info: dict[str, Any] = {}

    # -- what the engine calls (any thread) ------------------------------------------------

    def read(self, pages: Sequence[Page]) -> list[Request]:
        """Queue ``pages`` and wait until each has its result (or its error)."""
        now = self._clock()
        requests = [Request(p, p.image, self._profile.image_tokens(*p.size), now,
                            self._cfg.temperature) for p in pages]
        with self._cond:
            if self._closing:
                raise EngineError("the vLLM engine was closed; start the daemon again.")
            self._queue.pending.extend(requests)
            self._start_feeder()
        self.poke()
        for request in requests:
            request.done.wait()
        return requests

    def close(self) -> None:
        """Stop the feeder thread and the worker. Safe to call twice."""
        with self._cond:
            if self._state == "closed":
                return
            self._closing = True
            thread = self._thread
            self._cond.notify_all()
        self.poke()
        if thread is not None:
            thread.join()
        self._end_worker("closed")
        self._end_standby()
        with self._cond:
            self._queue.close()
            self._set_state("closed")
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    @property
    def vllm_figures(self) -> VllmFigures | None:
        """vLLM's own figures as the running worker last sent them; None with no worker
        (an ended worker's figures end with it)."""
        worker = self._worker
        return worker.figures if worker is not None else None

    def describe(self) -> dict[str, object]:
        """The facts ``ocrwatch status`` shows (the engine adds its name)."""
        with self._cond:
            facts: dict[str, object] = {
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
            # Only the feeder thread reads the standby's pipe; its message sets ``info``.
            facts["standby"] = {"pid": standby.pid, "ready": bool(standby.info),
                                "rss_mb": standby.rss_mib()}
        if worker is not None and self._backend == "vllm":
            facts["gpu_memory_mb"] = gpu.processes_mib(worker.members())
        elif state in ("stopped", "closed", "waiting"):
            facts["gpu_memory_mb"] = 0
        return facts

    @property
    def state(self) -> str:
        with self._cond:
            return self._state

    @property
    def most_in_flight(self) -> int:
        with self._cond:
            return self._queue.most_in_flight

    @most_in_flight.setter
    def most_in_flight(self, value: int) -> None:
        with self._cond:
            self._queue.most_in_flight = value

    @property
    def admit_wait(self) -> float:
        with self._cond:
            return self._queue.admit_wait

    @admit_wait.setter
    def admit_wait(self, seconds: float) -> None:
        with self._cond:
            self._queue.admit_wait = seconds

    @property
    def standby_pid(self) -> int | None:
        with self._cond:
            return self._standby.pid if self._standby is not None else None

    @property
    def worker_pid(self) -> int | None:
        with self._cond:
            return self._worker.pid if self._worker is not None else None

    def wait_for_state(self, states: Iterable[str], timeout: float) -> bool:
        wanted = set(states)
        with self._cond:
            return self._cond.wait_for(lambda: self._state in wanted, timeout)

    def command(self, op: str) -> None:
        """Have the feeder thread run ``op`` ("start", "sleep" or "stop") between pages,
        and wait for it; its error, if any, is raised here."""
        command = _Command(op)
        with self._cond:
            if self._closing:
                if op == "start":
                    raise EngineError("the vLLM engine was closed; start the daemon again.")
                return
            self._commands.append(command)
            self._start_feeder()
        self.poke()
        command.done.wait()
        if command.error is not None:
            raise command.error

    def warm(self) -> None:
        """Start or wake the worker in the background, without a page: a file is arriving,
        and it settles and is prepared meanwhile. Does nothing while the engine is up,
        starting, waiting for the card or closing; a failure is only logged (the page that
        follows meets it again and reports it)."""
        with self._cond:
            if (self._closing or self._state not in ("stopped", "asleep")
                    or self._busy is not None or any(c.op == "start" for c in self._commands)):
                return
            self._commands.append(_Command("start", waited=False))
            self._start_feeder()
        self.poke()

    def stand_by(self) -> None:
        """Start the standby process now (``vllm.standby``): torch and vLLM imported in
        the background, nothing on the card, so that the first page pays only the
        engine's creation. Does nothing while a worker or a standby exists."""
        with self._cond:
            if self._closing or self._worker is not None or self._state != "stopped":
                return
        self._start_standby()
        with self._cond:
            self._start_feeder()  # its loop reads the standby's message
        self.poke()

    def _bound(self, plan: MemoryPlan) -> int:
        """Pages handed to vLLM at most: the plan's in flight, plus ``vllm.queued_pages``
        waiting in vLLM's own queue (they take no card memory until they run)."""
        return plan.max_num_seqs + self._cfg.queued_pages

    def _start_feeder(self) -> None:
        """Caller holds ``_cond``."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._feed_loop, name="ocrwatch-vllm-feed",
                                            daemon=True)
            self._thread.start()

    def poke(self) -> None:
        """Wake the feeder thread, which may be waiting on the worker's pipe: it looks at
        its queue, its commands and its idle timers again."""
        with contextlib.suppress(OSError):  # full (it wakes anyway) or closed
            os.write(self._wake_w, b".")

    def _rate(self) -> float | None:
        """Pages per second over the last pages read. Caller holds ``_cond``."""
        times = self._finished_at
        if len(times) < 2 or times[-1] <= times[0]:
            return None
        return round((len(times) - 1) / (times[-1] - times[0]), 2)

    def _set_state(self, state: str) -> None:
        """Caller holds ``_cond``."""
        if state != self._state:
            log.debug("vLLM engine: %s -> %s", self._state, state)
            self._state = state
            self._cond.notify_all()

    # -- the feeder: the only thread that talks to the worker --------------------------------

    def _feed_loop(self) -> None:
        while True:
            self._drain_pokes()
            with self._cond:
                if self._closing:
                    self._queue.close()
                    commands = list(self._commands)
                    self._commands.clear()
                    break
                # Sleep and wake wait for the pages in flight, and no page goes in while
                # one of them waits. Stop (the daemon pausing) first reads every page
                # handed over, so that the worker it ends is not started again for them.
                command, admit = None, []
                head = self._commands[0] if self._commands else None
                if head is not None and head.op == "stop" and self._busy is not None:
                    # Paused while the card is busy: the waiting pages' files go back to
                    # the queue rather than hold the pause.
                    self._queue.fail_pending(self._busy)
                idle_queue = not self._queue.in_flight and not self._queue.pending
                holding = self._busy is not None and self._clock() < self._hold_until
                if head is not None and (idle_queue or (head.op != "stop"
                                                        and not self._queue.in_flight)):
                    command = self._commands.popleft()
                elif (head is None or head.op == "stop") and not holding:
                    admit = self._queue.choose(self._clock())
                idle_action, idle_wait = self._idle_action() if not (
                    command or admit or self._queue.in_flight or self._queue.pending
                ) else (None, None)
                if holding:
                    idle_wait = max(0.0, self._hold_until - self._clock())
            if command is not None:
                self._run_command(command)
                continue
            if idle_action is not None:
                self._idle(idle_action)
                continue
            if admit:
                self._admit(admit)
                continue
            self._wait_and_collect(idle_wait)
        for command in commands:
            command.done.set()

    def _drain_pokes(self) -> None:
        with contextlib.suppress(OSError):
            while os.read(self._wake_r, 4096):
                pass

    def _admit(self, requests: list[Request]) -> None:
        try:
            worker = self._ready_worker()
        except GpuBusy as exc:
            self._hold(requests, exc)
            return
        except EngineUnavailable as exc:
            with self._cond:
                for request in requests:
                    request.finish(unavailable=exc)
                self._queue.fail_pending(exc)
            return
        with self._cond:
            if self._busy is not None:
                log.info("The GPU has room again: reading the pages that waited.")
            self._busy = None
            sending = self._queue.admit(requests)
            self._last_used = self._clock()
            self._set_state("busy")
        for rid, request in sending:
            sampling = Sampling(request.temperature, self._cfg.top_p, self._cfg.max_tokens,
                                self._cfg.ignore_eos)
            try:
                worker.send(Add(rid, image_data(request.image), sampling))
            except WorkerGone as exc:
                self._lost(str(exc))
                return
            with self._cond:
                request.sent, request.sent_at = True, time.monotonic()

    def _hold(self, requests: list[Request], busy: GpuBusy) -> None:
        """Not even one page fits beside the other programs: the pages wait, in order."""
        with self._cond:
            if self._busy is None or str(self._busy) != str(busy):
                log.warning("%s", busy)
            self._busy = busy
            self._hold_until = self._clock() + HOLD_POLL_S
            self._queue.pending[:0] = [r for r in requests if not r.done.is_set()]
            self._detail = str(busy)
            self._set_state("waiting")
        self._start_standby()  # the imports are done while the card is busy

    def _wait_and_collect(self, idle_wait: float | None) -> None:
        worker = self._worker
        if worker is None:
            with self._cond:
                holding = self._busy is not None and self._clock() < self._hold_until
                if (self._queue.pending and not holding) or self._commands:
                    return
                standby = self._standby
            waiting_on: list[Any] = [self._wake_r]
            if standby is not None and not standby.info:
                waiting_on.append(standby.conn)
            if standby is not None and standby.conn in wait_fds(waiting_on, idle_wait):
                self._standby_said(standby)
            return
        timeout = 0.2 if idle_wait is None else min(0.2, max(0.0, idle_wait))
        try:
            if not worker.ready([self._wake_r], timeout) and worker.alive():
                return
            messages = worker.pending()
        except WorkerGone as exc:  # pending() sees the end once every message is read
            if self._queue.in_flight:
                self._lost(str(exc))
            else:
                self._worker_failed(str(exc))
            return
        for message in messages:
            match message:
                case Done():
                    self._finished(message)
                case Refused(rid=rid, reason=reason):
                    self._refused(rid, reason)
                case Failed(reason=reason, oom=oom):
                    why = "the GPU ran out of memory" if oom else "the vLLM worker failed"
                    self._lost(f"{why}: {reason}")
                    return
                case VllmFigures():
                    worker.figures = message
                case Ready() | StandbyReady() | Slept() | Woke() | Stopped():  # not now
                    log.warning("The vLLM worker sent %r while reading pages; ignored.",
                                message)
                case _:  # not one of ours: this worker cannot be talked to
                    self._lost(str(UnknownMessage(message, "daemon")))
                    return

    def _finished(self, done: Done) -> None:
        rid = done.rid
        with self._cond:
            request = self._queue.in_flight.get(rid)
            looped = lightonocr.looped(done.text, done.finish,
                                       ignore_eos=self._cfg.ignore_eos)
            if request is not None and looped and not request.retried_loop:
                log.info("Page %d of %s did not finish cleanly; trying again at temperature "
                         "%.1f.", request.page.index + 1, request.page.source.name,
                         self._profile.retry_temperature)
            if request is not None and log.isEnabledFor(logging.DEBUG):
                log.debug(timeline(request, done))
            if self._queue.finished(rid, done, looped) is not None:
                self._finished_at.append(self._clock())
            self._last_used = self._clock()
            if not self._queue.in_flight:
                self._set_state("ready")

    def _refused(self, rid: str, reason: str) -> None:
        with self._cond:
            self._queue.refused(rid, reason)
            if not self._queue.in_flight:
                self._set_state("ready")

    def _worker_failed(self, why: str) -> None:
        """The worker died with no page in flight: clean up; the next page starts a fresh one."""
        log.warning("%s; the worker will be restarted.", why)
        self._end_worker(why)
        with self._cond:
            self._restarts += 1
            self._last_error = why

    def _lost(self, why: str) -> None:
        """The worker died with pages in flight: each goes back to the queue, or fails."""
        self._worker_failed(f"{why}; its pages will be read again")
        with self._cond:
            self._last_error = why
            self._queue.lost(why)

    # -- the worker's life -------------------------------------------------------------------

    def _progress(self, message: str) -> None:
        with self._cond:
            self._detail = message

    def _ready_worker(self) -> Worker:
        """The worker, started or woken if need be."""
        with self._cond:
            state, worker = self._state, self._worker
        if worker is not None and state == "asleep" and not self._wake_fits(worker):
            self._end_worker("other programs took the GPU memory it needs to wake")
            return self._start_worker()
        if worker is not None and state == "asleep":
            try:
                self.timings["wake"] = worker.request(Wake(), Woke, None).seconds
            except (WorkerGone, UnknownMessage, OSError) as exc:
                self._worker_failed(str(exc))
                return self._ready_worker()
            with self._cond:
                self._set_state("ready")
            return worker
        if worker is not None:
            return worker
        return self._start_worker()

    def _others_gib(self, own: list[int]) -> float:
        """What other programs hold on the card now (0 when it cannot be asked)."""
        if self._others_mib is None:
            return 0.0
        mib = self._others_mib(own)
        return 0.0 if mib is None else mib / 1024

    def _wake_fits(self, worker: Worker) -> bool:
        """Whether the sleeping engine's plan still fits beside the other programs."""
        if self._others_mib is None:
            return True
        try:
            room = self._replan(self._others_gib(worker.members()), self._model_path).budget_gib
        except GpuBusy:
            return False
        return self.plan.total_gib <= room + 0.01

    def _start_worker(self) -> Worker:
        with self._cond:
            standby, self._standby = self._standby, None
        try:
            if self._model_path is None:
                if self._backend == "vllm":
                    from ocrwatch.engines import model

                    self._model_path = str(model.resolve(self._cfg.model, progress=self._progress))
                else:
                    self._model_path = self._cfg.model
            plan = self._replan(self._others_gib(standby.members() if standby else []),
                                self._model_path)
        except BaseException:
            with self._cond:
                self._standby = standby  # kept for the next try
            raise
        with self._cond:
            self.plan = plan
            self._queue.max_in_flight = self._bound(plan)
            self._set_state("starting")
            self._detail = "loading the model"
        try:
            log.info("Starting the vLLM worker (%s%s): %s.", self._cfg.model,
                     ", from the standby process" if standby else "", plan.describe())
            started = time.monotonic()
            worker = Worker(worker_settings(self._cfg, self.plan, self._backend,
                                            self._backend_options, self._model_path,
                                            profile=self._profile),
                            self._cfg.start_timeout_seconds, standby)
        except BaseException as exc:
            with self._cond:
                self._last_error = str(exc)
                self._detail = ""
                self._set_state("stopped")
            raise
        self.worker_info = dict(worker.info)
        if worker.standby_info:
            self.worker_info["standby"] = worker.standby_info
        self.timings["start"] = round(time.monotonic() - started, 2)
        log.info("vLLM worker ready in %.1f s.", self.timings["start"])
        with self._cond:
            self._worker = worker
            self._detail = ""
            self._last_used = self._clock()
            self._set_state("ready")
        return worker

    def _start_standby(self) -> None:
        """A process that has imported vLLM and holds nothing on the card, ready to
        become the next worker (``vllm.standby``)."""
        with self._cond:
            if (not self._cfg.standby or self._standby is not None or self._worker is not None
                    or self._closing):
                return
        standby = Standby(worker_settings(self._cfg, self.plan, self._backend,
                                          self._backend_options, None,
                                          profile=self._profile))
        with self._cond:
            self._standby = standby
        log.info("vLLM standby process started (PID %d): vLLM imported, no GPU memory.",
                 standby.pid)

    def _standby_said(self, standby: Standby) -> None:
        """The standby's one message: its imports are done, or (end of pipe) it died."""
        if standby.poll_ready():
            log.info("vLLM standby ready: imports took %.1f s; it holds %s MiB of RAM and "
                     "nothing on the GPU.", standby.info.get("import_seconds", 0.0),
                     standby.rss_mib())
            return
        log.warning("The vLLM standby process ended; the next page starts a fresh worker.")
        with self._cond:
            if self._standby is standby:
                self._standby = None
        standby.end()

    def _end_standby(self) -> None:
        with self._cond:
            standby, self._standby = self._standby, None
        if standby is not None:
            standby.end()

    def _end_worker(self, why: str) -> None:
        # The worker stays named until it has ended, and is let go in the same step as the
        # state turns "stopped": no other thread ever sees "asleep" (or "ready") without one.
        with self._cond:
            worker = self._worker
        if worker is None:
            return
        try:
            worker.stop() if worker.alive() else worker.end()
        finally:
            with self._cond:
                self._worker = None
                if self._state != "closed":
                    self._set_state("stopped")
        log.info("vLLM worker ended (%s).", why)

    def _run_command(self, command: _Command) -> None:
        try:
            if command.op == "start":
                self._ready_worker()
            elif command.op == "sleep":
                self._sleep()
            elif command.op == "stop":
                self._end_worker("released")
                self._end_standby()
        except BaseException as exc:  # handed to the caller
            command.error = exc
            if not command.waited:
                log.info("The vLLM engine could not be started ahead of a file: %s", exc)
        command.done.set()

    def _sleep(self) -> None:
        with self._cond:
            worker, state = self._worker, self._state
        if worker is None or state != "ready":
            return
        try:
            self.timings["sleep"] = worker.request(Sleep(), Slept, None).seconds
        except (WorkerGone, UnknownMessage, OSError) as exc:
            self._worker_failed(str(exc))
            return
        held = None if self._held_mib is None else memory_kept(worker, self._held_mib)
        if held is not None:
            log.warning("The vLLM engine went to sleep but its processes still hold %d MiB of GPU "
                        "memory; ending its worker to give the memory back.", held)
            self._end_worker("sleep kept the GPU memory")
            return
        with self._cond:
            self._set_state("asleep")

    def _idle_action(self) -> tuple[str | None, float | None]:
        """What to do with nothing to read, or how long until then. Caller holds ``_cond``."""
        if self._state not in ("ready", "asleep"):
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

    def _idle(self, action: str) -> None:
        try:
            if action == "sleep":
                log.info("No pages for %g s: putting the vLLM engine to sleep.",
                         self._cfg.idle_sleep_seconds)
                self._sleep()
            else:
                log.info("No pages for %g s: ending the vLLM worker to free the GPU.",
                         self._cfg.idle_stop_seconds)
                self._end_worker("idle")
                self._start_standby()
        except Exception:  # the feeder must outlive a failed sleep; the worker is gone
            log.exception("The vLLM worker failed while going idle; it will restart.")
