"""The process that holds vLLM for the embedded engine.

The daemon starts this module's :func:`main` in a process of its own ("spawn") and
talks to it over a pipe, so that ending the process gives every byte of GPU memory
back: deleting a vLLM ``LLM`` object does not reliably do that, and only one
sleep-enabled engine fits in a process.

This module needs only the standard library, Pillow and vLLM (imported lazily), so
that it runs wherever vLLM runs.

Protocol: the parent sends tuples, the worker answers each with exactly one tuple.

=========================================  ==================================
parent sends                               worker answers
=========================================  ==================================
(after start, nothing)                     ("ok", info) or ("error", "start", msg)
("generate", images, params)               ("ok", outputs) or ("error", kind, msg)
("sleep",) / ("wake",)                     ("ok", seconds taken)
("stop",)                                  ("ok", None), then it exits
=========================================  ==================================

``images`` are ``(width, height, rgb_bytes)``; ``params`` one dict per image
(temperature, top_p, max_tokens, ignore_eos); ``outputs`` one dict per image
(text, tokens, finish). ``kind`` is "input" (that request was refused, the worker
carries on), "oom" or "failed" (the worker exits after answering: its engine may be
broken, and a fresh process is the only sure way back).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from PIL import Image

ImageData = tuple[int, int, bytes]
Params = dict[str, Any]
Output = dict[str, Any]

# The prompt when the tokenizer has no usable chat template: the image alone.
FALLBACK_PROMPT = ("<|im_start|>system<|im_end|>\n<|im_start|>user\n<|image_pad|><|im_end|>\n"
                   "<|im_start|>assistant\n")


class Backend(Protocol):
    info: dict[str, Any]

    def generate(self, images: Sequence[Image.Image], params: Sequence[Params]) -> list[Output]:
        ...

    def sleep(self) -> None: ...

    def wake(self) -> None: ...

    def close(self) -> None: ...


class InputRefused(Exception):
    """The engine refused a request but is still fine (e.g. a prompt too long)."""


class VllmBackend:
    """vLLM's offline ``LLM`` with the settings the parent planned for the card."""

    def __init__(self, settings: dict[str, Any]) -> None:
        started = time.monotonic()
        from vllm import LLM

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
        )
        self._prompt = self._build_prompt()
        import vllm

        self.info = {"vllm": vllm.__version__,
                     "start_seconds": round(time.monotonic() - started, 1)}

    def _build_prompt(self) -> str:
        """The chat template applied to one user turn holding only the image."""
        try:
            tokenizer = self._llm.get_tokenizer()
            prompt = tokenizer.apply_chat_template(
                [{"role": "user", "content": [{"type": "image"}]}],
                tokenize=False, add_generation_prompt=True)
        except Exception:  # no template, or one that wants other content: use the known shape
            return FALLBACK_PROMPT
        if not isinstance(prompt, str) or "<|image_pad|>" not in prompt:
            return FALLBACK_PROMPT
        return prompt

    def generate(self, images: Sequence[Image.Image], params: Sequence[Params]) -> list[Output]:
        from vllm import SamplingParams

        requests = [{"prompt": self._prompt, "multi_modal_data": {"image": im}} for im in images]
        sampling = [SamplingParams(temperature=p["temperature"], top_p=p["top_p"],
                                   max_tokens=p["max_tokens"],
                                   ignore_eos=p.get("ignore_eos", False)) for p in params]
        try:
            outs = self._llm.generate(requests, sampling, use_tqdm=False)
        except (ValueError, TypeError) as exc:  # vLLM checks inputs before they reach the GPU
            raise InputRefused(str(exc)) from exc
        return [{"text": o.outputs[0].text, "tokens": len(o.outputs[0].token_ids),
                 "finish": o.outputs[0].finish_reason or "stop"} for o in outs]

    def sleep(self) -> None:
        self._llm.sleep(level=1)

    def wake(self) -> None:
        self._llm.wake_up()

    def close(self) -> None:
        del self._llm


class FakeBackend:
    """A stand-in for vLLM so the protocol, faults and timers are tested on any CPU.

    The top-left pixel of a page tells it how to misbehave (the tests paint it):
    (255, 0, 1) kills the process when the batch holds more than one page;
    (255, 0, 2) kills it while the page is 100 px wide or more; (255, 0, 3) always kills it;
    (255, 0, 4) runs out of memory when the batch holds more than one page;
    (255, 0, 5) is refused as input; (0, 255, 1) loops at temperature 0.2 or below;
    (0, 255, 2) always loops.
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

    def generate(self, images: Sequence[Image.Image], params: Sequence[Params]) -> list[Output]:
        if self.asleep:
            raise RuntimeError("generate called while asleep")
        time.sleep(self._delay)
        marks = [im.getpixel((0, 0)) for im in images]
        for mark, im in zip(marks, images, strict=True):
            if mark == (255, 0, 1) and len(images) > 1:
                os._exit(70)
            if (mark == (255, 0, 2) and im.width >= 100) or mark == (255, 0, 3):
                os._exit(71)
            if mark == (255, 0, 4) and len(images) > 1:
                raise MemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            if mark == (255, 0, 5):
                raise InputRefused("prompt is longer than the maximum model length")
        outputs = []
        for mark, im, p in zip(marks, images, params, strict=True):
            loops = mark == (0, 255, 2) or (mark == (0, 255, 1) and p["temperature"] <= 0.2)
            if loops:
                text = "# Page\n\n" + "the same line again\n" * (p["max_tokens"] // 4)
                outputs.append({"text": text, "tokens": p["max_tokens"], "finish": "length"})
            else:
                text = f"# Page {im.width}x{im.height}\n\nSome **bold** text, t={p['temperature']}."
                outputs.append({"text": text, "tokens": 12, "finish": "stop"})
        return outputs

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


def _to_images(images: Sequence[ImageData]) -> list[Image.Image]:
    from PIL import Image

    return [Image.frombytes("RGB", (w, h), data) for w, h, data in images]


def main(conn: Connection, settings: dict[str, Any]) -> None:
    """Entry point of the worker process."""
    # A group of its own, so the parent can end vLLM's engine process together with this one.
    if hasattr(os, "setsid"):
        with contextlib.suppress(OSError):
            os.setsid()
    threading.Thread(target=_watch_parent, args=(settings["parent_pid"],), daemon=True,
                     name="ocrwatch-parent-watch").start()
    try:
        backend = _make_backend(settings)
    except BaseException as exc:
        traceback.print_exc(file=sys.stderr)
        conn.send(("error", _error_kind(exc) if _error_kind(exc) == "oom" else "start",
                   _short(exc)))
        return
    conn.send(("ok", backend.info))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        op = message[0]
        if op == "stop":
            conn.send(("ok", None))
            break
        try:
            started = time.monotonic()
            if op == "generate":
                result: Any = backend.generate(_to_images(message[1]), message[2])
            elif op == "sleep":
                backend.sleep()
                result = round(time.monotonic() - started, 3)
            elif op == "wake":
                backend.wake()
                result = round(time.monotonic() - started, 3)
            else:
                raise ValueError(f"unknown request {op!r}")
        except InputRefused as exc:
            conn.send(("error", "input", str(exc)))
            continue
        except BaseException as exc:
            traceback.print_exc(file=sys.stderr)
            conn.send(("error", _error_kind(exc), _short(exc)))
            break  # the engine may be broken: a fresh process is the sure way back
        conn.send(("ok", result))
    try:
        backend.close()
    finally:
        conn.close()
