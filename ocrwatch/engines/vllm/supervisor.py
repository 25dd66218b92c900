"""Starting, talking to and ending the vLLM worker process.

The worker runs in a session of its own; vLLM forks its engine process inside that
session, where it may outlive a killed worker and keep the GPU memory. Ending the
worker therefore ends its whole session, and a write to a dead worker is never left
hanging on the pipe that the forked engine process still holds open.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import time
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any, TypeVar

from ocrwatch.core.errors import EngineUnavailable, WorkerGone
from ocrwatch.engines.profiles import Profile
from ocrwatch.engines.vllm import worker
from ocrwatch.engines.vllm.memory import ASLEEP_MAX_MIB, MemoryPlan
from ocrwatch.engines.vllm.messages import (
    Failed,
    FromWorker,
    Ready,
    StandbyReady,
    Start,
    Stop,
    Stopped,
    ToWorker,
    UnknownMessage,
    VllmFigures,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

    from PIL import Image

    from ocrwatch.config import VllmConfig

log = logging.getLogger(__name__)

_Answer = TypeVar("_Answer", bound=FromWorker)


def _spawn(settings: dict[str, Any]) -> tuple[BaseProcess, Connection]:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=worker.main, args=(child, settings), name="ocrwatch-vllm-worker")
    proc.start()
    child.close()
    return proc, parent


def rss_mib(pid: int) -> int | None:
    """Resident memory of a process (Linux), or None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as f:
            resident = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return resident * os.sysconf("SC_PAGE_SIZE") // (1024 * 1024)


class Standby:
    """A worker process that has imported torch and vLLM and waits for its settings.

    It holds no CUDA context and so nothing on the card; the next start hands it the
    plan (:class:`~.messages.Start`) and pays only the engine's creation, not the 20 s of
    imports.
    """

    def __init__(self, settings: dict[str, Any]) -> None:
        self.proc, self.conn = _spawn({**settings, "standby": True})
        self.pid: int = self.proc.pid or 0
        self.info: dict[str, Any] = {}

    def members(self) -> list[int]:
        return [self.pid, *worker.session_members(self.pid)]

    def poll_ready(self) -> bool:
        """Whether its imports are done (reads the standby's one message if it came).

        Called by the feeder thread only: one reader of the pipe."""
        if not self.info:
            with contextlib.suppress(EOFError, OSError):
                if self.conn.poll(0):
                    message = self.conn.recv()
                    if isinstance(message, StandbyReady):
                        self.info = _standby_info(message)
        return bool(self.info)

    def rss_mib(self) -> int | None:
        return rss_mib(self.pid)

    def alive(self) -> bool:
        return self.proc.is_alive()

    def end(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(Stop())
        _end_process(self.proc, self.conn, self.pid)


def _standby_info(message: StandbyReady) -> dict[str, Any]:
    """What describe() and the worker's facts say about a standby."""
    return {"import_seconds": message.import_seconds, "pid": message.pid}


class Worker:
    """One running worker process and the parent's end of its pipe."""

    def __init__(self, settings: dict[str, Any], start_timeout: float,
                 standby: Standby | None = None) -> None:
        if standby is not None and standby.alive():
            self._proc, self.conn = standby.proc, standby.conn
            self.standby_info: dict[str, Any] = dict(standby.info)
            try:
                self.conn.send(Start(settings))
            except OSError:
                standby.end()
                self._proc, self.conn = _spawn(settings)
        else:
            if standby is not None:
                standby.end()
            self._proc, self.conn = _spawn(settings)
            self.standby_info = {}
        self.pid: int = self._proc.pid or 0
        # vLLM's own figures, the latest the worker sent (docs/metrics.md).
        self.figures: VllmFigures | None = None
        try:
            reply = self.receive(start_timeout)
            while isinstance(reply, StandbyReady):  # a standby's own message, before the reply
                self.standby_info = _standby_info(reply)
                reply = self.receive(start_timeout)
        except (WorkerGone, UnknownMessage) as exc:
            self.end()
            raise EngineUnavailable(
                f"the vLLM worker could not start: {exc}. See the log for vLLM's own "
                "messages; lower vllm.gpu_memory_gb if other programs use the GPU."
            ) from exc
        match reply:
            case Ready(info=info):
                self.info: dict[str, Any] = dict(info)
            case Failed(reason=reason, oom=True):
                self.end()
                raise EngineUnavailable(
                    f"the GPU ran out of memory while the model loaded ({reason}). Close "
                    "programs that use the GPU, or lower vllm.gpu_memory_gb.")
            case Failed(reason=reason):
                self.end()
                raise EngineUnavailable(
                    f"the vLLM worker could not start: {reason}. Check vllm.model, and lower "
                    "vllm.gpu_memory_gb if other programs use the GPU.")
            case _:
                self.end()
                raise EngineUnavailable(
                    f"the vLLM worker could not start: it answered {reply!r:.80} instead of "
                    "saying it was ready. Restart the daemon.")

    def alive(self) -> bool:
        return self._proc.is_alive()

    def members(self) -> list[int]:
        """The worker and every process of its session (vLLM's engine process)."""
        return [self.pid, *worker.session_members(self.pid)]

    def how_it_ended(self) -> str:
        code = self._proc.exitcode
        if code is None:
            return "the vLLM worker closed its connection"
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            return f"the vLLM worker was killed by {name}"
        return f"the vLLM worker ended with exit code {code}"

    def ready(self, others: list[Any], timeout: float | None) -> list[Any]:
        """Wait for the worker's pipe or one of ``others`` (file descriptors) to be readable."""
        return wait([self.conn, *others], timeout)

    def receive(self, timeout: float | None) -> FromWorker:
        """The worker's next message; raises WorkerGone if it ends or stays silent, and
        UnknownMessage for anything that is not a message of :mod:`.messages`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                if self.conn.poll(0.2):
                    return _checked(self.conn.recv())
            except (EOFError, OSError):  # the worker's end closed: it has ended
                self._proc.join(5.0)
                raise WorkerGone(self.how_it_ended()) from None
            if not self._proc.is_alive():
                raise WorkerGone(self.how_it_ended())
            if deadline is not None and time.monotonic() > deadline:
                raise WorkerGone(f"the vLLM worker did not answer within {timeout:.0f} s")

    def pending(self) -> list[object]:
        """Every message waiting on the pipe now, in order, for the caller to dispatch on
        (an unknown one included); raises WorkerGone once the worker has ended."""
        out: list[object] = []
        try:
            while self.conn.poll(0):
                out.append(self.conn.recv())
        except (EOFError, OSError):
            if out:
                return out  # hand these over first; the end is seen on the next call
            self._proc.join(5.0)
            raise WorkerGone(self.how_it_ended()) from None
        if not out and not self._proc.is_alive():
            raise WorkerGone(self.how_it_ended())
        return out

    def send(self, message: ToWorker) -> None:
        """Write without hanging if the worker dies mid-write.

        Pages are megabytes, more than the pipe holds. vLLM's engine process is forked
        from the worker and keeps the pipe open, so a write to a dead worker would
        block forever; ending that process makes the write fail instead.
        """
        failed: list[BaseException] = []

        def push() -> None:
            try:
                self.conn.send(message)
            except BaseException as exc:  # handed to the caller below
                failed.append(exc)

        sender = threading.Thread(target=push, name="ocrwatch-vllm-send", daemon=True)
        sender.start()
        while sender.is_alive():
            sender.join(0.2)
            if sender.is_alive() and not self._proc.is_alive():
                for pid in worker.session_members(self.pid):
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
        if failed:
            raise WorkerGone(f"{self.how_it_ended()} ({failed[0]})")

    def request(self, message: ToWorker, answer: type[_Answer],
                timeout: float | None) -> _Answer:
        """Send ``message`` with no page in flight and return its answer, of type ``answer``."""
        self.send(message)
        reply = self.receive(timeout)
        while isinstance(reply, VllmFigures) and answer is not VllmFigures:
            self.figures = reply  # sent before the answer, after the last page ended
            reply = self.receive(timeout)
        if not isinstance(reply, answer):
            why = reply.reason if isinstance(reply, Failed) else repr(reply)
            raise WorkerGone(f"the vLLM worker failed ({why})")
        return reply

    def stop(self) -> None:
        """Ask the worker to exit, then make sure its whole session has ended."""
        if self._proc.is_alive():
            with contextlib.suppress(WorkerGone, UnknownMessage, OSError):
                self.request(Stop(), Stopped, 30.0)
        self.end()

    def end(self) -> None:
        """End the worker and every process of its session, and wait for them."""
        _end_process(self._proc, self.conn, self.pid)


def _checked(message: object) -> FromWorker:
    """A message from the worker, or UnknownMessage for anything else."""
    if not isinstance(message, FromWorker):
        raise UnknownMessage(message, "daemon")
    return message


def _end_process(proc: BaseProcess, conn: Connection, session: int) -> None:
    """End a worker process and every process of its session, and wait for them."""
    with contextlib.suppress(OSError):
        conn.close()
    proc.join(10.0)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        members = worker.session_members(session)
        if not members:
            break
        for pid in members:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and worker.session_members(session):
            time.sleep(0.05)
    if proc.is_alive():
        proc.kill()
        proc.join(5.0)
    with contextlib.suppress(ValueError):
        proc.close()


def worker_settings(cfg: VllmConfig, plan: MemoryPlan, backend: str,
                    backend_options: dict[str, Any], model_path: str | None, *,
                    profile: Profile | None = None) -> dict[str, Any]:
    """What the worker process is started with: the plan, the model, the engine's flags
    and what the profile puts beside the image (``prompt_text``: None, or "grounding")."""
    return {
        "backend": backend,
        "fake": backend_options,
        "model": model_path,
        "load_format": cfg.load_format,
        "enforce_eager": cfg.enforce_eager,
        "torch_compile": cfg.torch_compile,
        "pagewise_encoder": cfg.pagewise_encoder,
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
        "gpu_memory_utilization": plan.gpu_memory_utilization,
        "max_model_len": plan.max_model_len,
        "max_num_seqs": plan.max_num_seqs,
        "max_num_batched_tokens": plan.max_num_batched_tokens,
        "kv_cache_memory_bytes": plan.kv_cache_bytes,
        "kv_cache_dtype": plan.kv_cache_dtype,
        "quantization": cfg.quantization,
        "prompt_text": profile.prompt_text if profile is not None else None,
        "cudagraph_sizes": plan.cudagraph_sizes,
        "parent_pid": os.getpid(),
    }


def image_data(image: Image.Image) -> tuple[int, int, bytes]:
    """A page as the pipe carries it: width, height and RGB bytes."""
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    return rgb.width, rgb.height, rgb.tobytes()


def memory_kept(worker: Worker, held_mib: Callable[[list[int]], int | None],
                wait: float = 3.0) -> int | None:
    """GPU memory a sleeping worker still holds, if more than a sleep leaves; else None.

    Checked from outside (NVML): a sleep that left the weights or the KV cache on
    the card would keep the memory an idle daemon promises to give back.
    """
    deadline = time.monotonic() + wait
    while True:  # the driver may show the freed memory a moment late
        held = held_mib(worker.members())
        if held is None or held <= ASLEEP_MAX_MIB:
            return None
        if time.monotonic() > deadline:
            return held
        time.sleep(0.25)
