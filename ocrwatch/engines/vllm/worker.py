"""The process that holds vLLM for the embedded engine, and keeps it fed.

The daemon starts :func:`main` in a process of its own ("spawn") and talks to it over
a pipe, so that ending the process gives every byte of GPU memory back: deleting a
vLLM ``LLM`` object does not reliably do that, and only one sleep-enabled engine fits
in a process.

Pages stream: each page is added to vLLM's running engine as soon as it arrives
(``LLMEngine.add_request``), the engine is stepped while anything is in flight, and
each page's text goes back the moment that page finishes. No page waits for another:
vLLM's own scheduler keeps up to ``max_num_seqs`` pages decoding, and its
``max_num_batched_tokens`` bounds the memory of each step.

This module needs only the standard library, Pillow and vLLM (imported lazily), so
that it runs wherever vLLM runs.

Protocol (tuples over the pipe):

=========================================  ==========================================
parent sends                               worker answers
=========================================  ==========================================
(after start, nothing)                     ("ok", info) or ("error", kind, msg)
("add", id, image, params)                 ("done", id, output) when the page ends,
                                           or ("refused", id, msg) at once
("sleep",) / ("wake",)                     ("ok", seconds taken)
("stop",)                                  ("ok", None), then it exits
=========================================  ==========================================

``image`` is ``(width, height, rgb_bytes)``; ``params`` holds temperature, top_p,
max_tokens and ignore_eos; ``output`` text, tokens, finish and peers (the most pages
in flight while this one was). The parent sends sleep, wake and stop only with no page
in flight. A failure inside the engine is answered ``("error", "oom" | "failed", msg)``
and the worker exits: its engine may be broken, and a fresh process is the sure way back.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any, Protocol

from ocrwatch.engines.faults import Fault

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from PIL import Image

ImageData = tuple[int, int, bytes]
Params = dict[str, Any]
Output = dict[str, Any]


class Backend(Protocol):
    info: dict[str, Any]

    def add(self, request_id: str, image: Image.Image, params: Params) -> None: ...

    def step(self) -> list[tuple[str, Output]]:
        """Advance every page in flight; the pages that finished."""
        ...

    def busy(self) -> bool: ...

    def sleep(self) -> None: ...

    def wake(self) -> None: ...

    def close(self) -> None: ...


class InputRefused(Exception):
    """The engine refused a request but is still fine (e.g. a prompt too long)."""


class VllmBackend:
    """vLLM's engine with the settings the parent planned, fed page by page."""

    def __init__(self, settings: dict[str, Any]) -> None:
        started = time.monotonic()
        from vllm import LLM

        from ocrwatch.engines.lightonocr import PROMPT

        extra: dict[str, Any] = {}
        if settings.get("cudagraph_sizes"):
            extra["compilation_config"] = {"cudagraph_capture_sizes":
                                           list(settings["cudagraph_sizes"])}
        self._llm = LLM(
            model=settings["model"],
            load_format=settings.get("load_format", "auto"),
            dtype="bfloat16",
            max_model_len=settings["max_model_len"],
            gpu_memory_utilization=settings["gpu_memory_utilization"],
            max_num_seqs=settings["max_num_seqs"],
            max_num_batched_tokens=settings["max_num_batched_tokens"],
            limit_mm_per_prompt={"image": 1},
            mm_processor_cache_gb=0,
            enable_prefix_caching=False,
            enable_sleep_mode=True,
            enforce_eager=settings.get("enforce_eager", False),
            seed=0,
            **extra,
        )
        self._engine = self._llm.llm_engine
        self._prompt = self._build_prompt(PROMPT)
        self._open: dict[str, int] = {}  # request id -> most pages in flight alongside it
        import vllm

        self.info = {"vllm": vllm.__version__,
                     "start_seconds": round(time.monotonic() - started, 1)}

    def _build_prompt(self, fallback: str) -> str:
        """The chat template applied to one user turn holding only the image."""
        try:
            tokenizer = self._llm.get_tokenizer()
            prompt = tokenizer.apply_chat_template(
                [{"role": "user", "content": [{"type": "image"}]}],
                tokenize=False, add_generation_prompt=True)
        except Exception:  # no template, or one that wants other content: use the known shape
            return fallback
        if not isinstance(prompt, str) or "<|image_pad|>" not in prompt:
            return fallback
        return prompt

    def add(self, request_id: str, image: Image.Image, params: Params) -> None:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        # FINAL_ONLY: step() reports a page once, when it ends, not its growing text.
        sampling = SamplingParams(temperature=params["temperature"], top_p=params["top_p"],
                                  max_tokens=params["max_tokens"],
                                  ignore_eos=params.get("ignore_eos", False),
                                  output_kind=RequestOutputKind.FINAL_ONLY)
        try:
            self._engine.add_request(
                request_id, {"prompt": self._prompt, "multi_modal_data": {"image": image}},
                sampling)
        except (ValueError, TypeError) as exc:  # vLLM checks inputs before they reach the GPU
            raise InputRefused(str(exc)) from exc
        self._open[request_id] = 0
        n = len(self._open)
        for key in self._open:
            self._open[key] = max(self._open[key], n)

    def step(self) -> list[tuple[str, Output]]:
        done = []
        for out in self._engine.step():
            if not out.finished:
                continue
            rid = _known_id(out.request_id, self._open)
            peers = self._open.pop(rid, 1)
            first = out.outputs[0]
            done.append((rid, {"text": first.text, "tokens": len(first.token_ids),
                               "finish": first.finish_reason or "stop", "peers": peers}))
        return done

    def busy(self) -> bool:
        return bool(self._open) or bool(self._engine.has_unfinished_requests())

    def sleep(self) -> None:
        self._llm.sleep(level=1)

    def wake(self) -> None:
        self._llm.wake_up()

    def close(self) -> None:
        del self._engine
        del self._llm


def _known_id(reported: str, open_ids: dict[str, int]) -> str:
    """The id the parent gave: vLLM may report it with a suffix of its own."""
    if reported in open_ids:
        return reported
    for rid in open_ids:
        if reported.startswith(rid + "-") or reported.startswith(rid + "_"):
            return rid
    return reported


class FakeBackend:
    """A stand-in for vLLM so the protocol, streaming, faults and timers run on any CPU.

    Pages are in flight together and each one takes ``delay`` seconds, whatever else is
    in flight, as on a GPU with room to spare. The colour of a page's top-left pixel
    tells it how to misbehave (the tests paint it): see :class:`ocrwatch.engines.faults.Fault`.
    """

    def __init__(self, settings: dict[str, Any]) -> None:
        options = settings.get("fake", {})
        time.sleep(float(options.get("start_delay", 0.0)))
        if options.get("fail_start"):
            raise RuntimeError(str(options["fail_start"]))
        self._delay = float(options.get("delay", 0.0))
        self.info = {"vllm": "fake", "start_seconds": 0.0, "pid": os.getpid()}
        if options.get("helper"):
            # Like vLLM's engine process: forked (so it holds the worker's pipe too) and
            # in a process group of its own.
            child = os.fork()
            if child == 0:
                os.setpgid(0, 0)
                time.sleep(300)
                os._exit(0)
            self.info["helper_pid"] = child
        self.asleep = False
        # id -> (image, params, when it ends, most pages in flight alongside it)
        self._open: dict[str, tuple[Image.Image, Params, float, int]] = {}

    def add(self, request_id: str, image: Image.Image, params: Params) -> None:
        if self.asleep:
            raise RuntimeError("a page was added while asleep")
        if image.getpixel((0, 0)) == Fault.REFUSED:
            raise InputRefused("prompt is longer than the maximum model length")
        self._open[request_id] = (image, params, time.monotonic() + self._delay, 0)
        n = len(self._open)
        for key, (im, p, end, peers) in self._open.items():
            self._open[key] = (im, p, end, max(peers, n))

    def step(self) -> list[tuple[str, Output]]:
        many = len(self._open) > 1
        for image, _, _, _ in self._open.values():
            mark = image.getpixel((0, 0))
            if mark == Fault.CRASH_IN_BATCH and many:
                os._exit(70)
            if ((mark == Fault.CRASH_AT_FULL_SIZE and image.width >= 100)
                    or mark == Fault.CRASH_ALWAYS):
                os._exit(71)
            if mark == Fault.OOM_IN_BATCH and many:
                raise MemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        now = time.monotonic()
        ended = [rid for rid, (_, _, end, _) in self._open.items() if end <= now]
        if not ended:
            soonest = min(end for _, _, end, _ in self._open.values())
            time.sleep(min(0.005, max(0.0, soonest - now)))
        done = []
        for rid in ended:
            image, p, _, peers = self._open.pop(rid)
            mark = image.getpixel((0, 0))
            if mark == Fault.LOOPS_ALWAYS or (mark == Fault.LOOPS_WHEN_COLD
                                              and p["temperature"] <= 0.2):
                text = "# Page\n\n" + "the same line again\n" * (p["max_tokens"] // 4)
                done.append((rid, {"text": text, "tokens": p["max_tokens"], "finish": "length",
                                   "peers": peers}))
            else:
                text = (f"# Page {image.width}x{image.height}\n\nSome **bold** text, "
                        f"t={p['temperature']}.")
                done.append((rid, {"text": text, "tokens": 12, "finish": "stop",
                                   "peers": peers}))
        return done

    def busy(self) -> bool:
        return bool(self._open)

    def sleep(self) -> None:
        self.asleep = True

    def wake(self) -> None:
        self.asleep = False

    def close(self) -> None:
        pass


def _make_backend(settings: dict[str, Any]) -> Backend:
    if settings.get("backend") == "fake":
        return FakeBackend(settings)
    return VllmBackend(settings)


def _error_kind(exc: BaseException) -> str:
    text = f"{type(exc).__name__} {exc}".lower()
    return "oom" if "out of memory" in text or "outofmemory" in text else "failed"


def _short(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {first[0] if first else ''}".strip().rstrip(":")


def _watch_parent(parent: int) -> None:
    """End this process (and vLLM's helpers with it) if the daemon is gone."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            _kill_group_and_exit(75)


def session_members(session: int) -> list[int]:
    """Live processes of ``session`` (Linux /proc), this one left out.

    vLLM's engine process may move to a process group of its own, but it stays in the
    worker's session, so the session is what gets ended.
    """
    found: list[int] = []
    if session <= 1:
        return found
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[3]) == session:  # state, ppid, pgrp, session
            found.append(int(name))
    return found


def _kill_group_and_exit(code: int) -> None:
    try:
        if os.getsid(0) == os.getpid():  # only a session of our own, never the daemon's
            for pid in session_members(os.getpid()):
                with contextlib.suppress(OSError):
                    os.kill(pid, 9)
    finally:
        os._exit(code)


def _to_image(data: ImageData) -> Image.Image:
    from PIL import Image

    width, height, raw = data
    return Image.frombytes("RGB", (width, height), raw)


def _reader(conn: Connection, inbox: queue.Queue[tuple[Any, ...] | None]) -> None:
    """Takes the parent's messages off the pipe at once, so its writes never wait on a step."""
    while True:
        try:
            inbox.put(conn.recv())
        except (EOFError, OSError):
            inbox.put(None)
            return


def _serve(conn: Connection, backend: Backend) -> None:
    inbox: queue.Queue[tuple[Any, ...] | None] = queue.Queue()
    threading.Thread(target=_reader, args=(conn, inbox), daemon=True,
                     name="ocrwatch-worker-reader").start()
    while True:
        messages: list[tuple[Any, ...] | None] = []
        if not backend.busy():
            messages.append(inbox.get())  # nothing to step: wait for the parent
        while True:
            try:
                messages.append(inbox.get_nowait())
            except queue.Empty:
                break
        for message in messages:
            if message is None or message[0] == "stop":
                if message is not None:
                    conn.send(("ok", None))
                return
            op = message[0]
            if op == "add":
                _, rid, data, params = message
                try:
                    backend.add(rid, _to_image(data), params)
                except InputRefused as exc:
                    conn.send(("refused", rid, str(exc)))
            elif op in ("sleep", "wake"):
                started = time.monotonic()
                backend.sleep() if op == "sleep" else backend.wake()
                conn.send(("ok", round(time.monotonic() - started, 3)))
            else:
                raise ValueError(f"unknown request {op!r}")
        if backend.busy():
            for rid, output in backend.step():
                conn.send(("done", rid, output))


def main(conn: Connection, settings: dict[str, Any]) -> None:
    """Entry point of the worker process."""
    # A session of its own, so the parent can end vLLM's engine process with this one.
    if hasattr(os, "setsid"):
        with contextlib.suppress(OSError):
            os.setsid()
    threading.Thread(target=_watch_parent, args=(settings["parent_pid"],), daemon=True,
                     name="ocrwatch-parent-watch").start()
    try:
        backend = _make_backend(settings)
    except BaseException as exc:
        traceback.print_exc(file=sys.stderr)
        kind = "oom" if _error_kind(exc) == "oom" else "start"
        conn.send(("error", kind, _short(exc)))
        return
    conn.send(("ok", backend.info))
    try:
        _serve(conn, backend)
    except BaseException as exc:
        traceback.print_exc(file=sys.stderr)
        with contextlib.suppress(OSError):
            conn.send(("error", _error_kind(exc), _short(exc)))
        _kill_group_and_exit(1)  # the engine may be broken; the parent starts a fresh one
    try:
        backend.close()
    finally:
        conn.close()
