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

This module and :mod:`.backends` (what it drives: vLLM, or a stand-in for tests) need
only the standard library, Pillow and vLLM (imported lazily), so that they run wherever
vLLM runs.

The messages on the pipe, and which answers which, are in :mod:`.messages`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any

from ocrwatch.core.errors import is_out_of_memory
from ocrwatch.engines.vllm.backends import Backend, InputRefused, make_backend, preload
from ocrwatch.engines.vllm.messages import (
    Add,
    Failed,
    Ready,
    Refused,
    Sleep,
    Slept,
    StandbyReady,
    Start,
    Stop,
    Stopped,
    UnknownMessage,
    Wake,
    Woke,
)

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from PIL import Image

ImageData = tuple[int, int, bytes]




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
    """Live processes of ``session`` (psutil's process table), this one left out.

    vLLM's engine process may move to a process group of its own, but it stays in the
    worker's session, so the session is what gets ended.
    """
    import psutil

    found: list[int] = []
    if session <= 1:
        return found
    me = os.getpid()
    for proc in psutil.process_iter(["status"]):
        if proc.pid == me or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if os.getsid(proc.pid) == session:  # psutil has no session id: the kernel's
                found.append(proc.pid)
        except OSError:  # ended meanwhile
            continue
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


def _reader(conn: Connection, inbox: queue.Queue[tuple[object, float]]) -> None:
    """Takes the parent's messages off the pipe at once, so its writes never wait on a step;
    each with when it came.

    None in ``inbox``: the pipe closed."""
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            inbox.put((None, time.monotonic()))
            return
        inbox.put((message, time.monotonic()))


FIGURES_EVERY = 1.0  # seconds between two sends of vLLM's figures while pages are in flight


def _serve(conn: Connection, backend: Backend) -> None:
    inbox: queue.Queue[tuple[object, float]] = queue.Queue()
    threading.Thread(target=_reader, args=(conn, inbox), daemon=True,
                     name="ocrwatch-worker-reader").start()
    figures_sent = 0.0
    # Each page in flight: when its Add came and when vLLM had taken it (Done's timeline).
    times: dict[str, tuple[float, float]] = {}
    while True:
        messages: list[tuple[object, float]] = []
        if not backend.busy():
            messages.append(inbox.get())  # nothing to step: wait for the parent
        while True:
            try:
                messages.append(inbox.get_nowait())
            except queue.Empty:
                break
        for message, received in messages:
            match message:
                case None:
                    return
                case Stop():
                    conn.send(Stopped())
                    return
                case Add(rid=rid, image=data, sampling=sampling):
                    try:
                        backend.add(rid, _to_image(data), sampling)
                        times[rid] = (received, time.monotonic())
                    except InputRefused as exc:
                        conn.send(Refused(rid, str(exc)))
                case Sleep():
                    started = time.monotonic()
                    backend.sleep()
                    conn.send(Slept(round(time.monotonic() - started, 3)))
                case Wake():
                    started = time.monotonic()
                    backend.wake()
                    conn.send(Woke(round(time.monotonic() - started, 3)))
                case _:
                    raise UnknownMessage(message, "vLLM worker")
        if backend.busy():
            for done in backend.step():
                received, taken = times.pop(done.rid, (0.0, 0.0))
                conn.send(dataclasses.replace(done, received=received, taken=taken))
            # vLLM's own figures (docs/metrics.md): about once a second while pages are in
            # flight, and once more as the last one ends, so the daemon's are never staler.
            now = time.monotonic()
            if now - figures_sent >= FIGURES_EVERY or not backend.busy():
                figures_sent = now
                figures = backend.figures()
                if figures is not None:
                    conn.send(figures)


def _standby(conn: Connection, settings: dict[str, Any]) -> dict[str, Any] | None:
    """Import what the engine needs without touching the card, say so, and wait for the
    settings to start with (:class:`Start`). None when told to stop instead."""
    started = time.monotonic()
    preload(settings)
    conn.send(StandbyReady(round(time.monotonic() - started, 2), os.getpid()))
    try:
        message = conn.recv()
    except (EOFError, OSError):
        return None
    if not isinstance(message, Start):  # Stop, or the daemon's end closed
        return None
    return message.settings


def main(conn: Connection, settings: dict[str, Any]) -> None:
    """Entry point of the worker process."""
    # A session of its own, so the parent can end vLLM's engine process with this one.
    if hasattr(os, "setsid"):
        with contextlib.suppress(OSError):
            os.setsid()
    threading.Thread(target=_watch_parent, args=(settings["parent_pid"],), daemon=True,
                     name="ocrwatch-parent-watch").start()
    if settings.get("standby"):
        started = _standby(conn, settings)
        if started is None:
            conn.close()
            return
        settings = started
    try:
        backend = make_backend(settings)
    except BaseException as exc:
        traceback.print_exc(file=sys.stderr)
        conn.send(Failed(_short(exc), oom=is_out_of_memory(exc)))
        return
    conn.send(Ready(backend.info))
    try:
        _serve(conn, backend)
    except BaseException as exc:
        traceback.print_exc(file=sys.stderr)
        with contextlib.suppress(OSError):
            conn.send(Failed(_short(exc), oom=is_out_of_memory(exc)))
        _kill_group_and_exit(1)  # the engine may be broken; the parent starts a fresh one
    try:
        backend.close()
    finally:
        conn.close()
