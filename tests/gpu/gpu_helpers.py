"""Helpers of the GPU tests: why they may not run, and the card's memory sampler."""

from __future__ import annotations

import importlib.util
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

GIB = 1024


def why_not() -> str | None:
    """Why the GPU tests cannot run here, or None when they can."""
    from ocrwatch.engines import gpu

    cards = gpu.gpus()
    if isinstance(cards, str):
        return f"no NVIDIA GPU ({cards})"
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed"
    model = os.environ.get("OCRWATCH_GPU_MODEL")
    if not model or not (Path(model) / "config.json").is_file():
        return "OCRWATCH_GPU_MODEL does not name a model folder (see docs/gpu.md)"
    return None


def used_mib() -> int:
    from ocrwatch.engines import gpu

    value = gpu.used_mib()
    if value is None:
        raise RuntimeError("NVML did not answer")
    return value


class Sampler:
    """The card's memory in use, read through NVML every 0.1 s from outside vLLM."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="gpu-memory-sampler")

    def _run(self) -> None:
        while not self._stop.is_set():
            value = used_mib()
            with self._lock:
                self.samples.append((time.monotonic(), value))
            self._stop.wait(0.1)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def now(self) -> float:
        return time.monotonic()

    def peak(self, since: float) -> int:
        with self._lock:
            return max((v for t, v in self.samples if t >= since), default=0)

    def wait_until(self, ok: Callable[[int], bool], timeout: float) -> int:
        """Wait for a fresh sample that satisfies ``ok``; returns the last value seen."""
        deadline = time.monotonic() + timeout
        start = time.monotonic()
        last = -1
        while time.monotonic() < deadline:
            with self._lock:
                fresh = [v for t, v in self.samples if t > start]
            if fresh:
                last = fresh[-1]
                if ok(last):
                    return last
            self._stop.wait(0.1)
        return last


class Holder:
    """Another program holding GPU memory (benchmarks/gpu_hold.py) until ``release``."""

    def __init__(self, gib: float) -> None:
        import subprocess
        import sys

        script = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_hold.py"
        self.proc = subprocess.Popen([sys.executable, str(script), str(gib)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("held"):
            self.release()
            raise RuntimeError(f"could not hold {gib} GiB of GPU memory: {line!r}")

    def release(self) -> float:
        """End it; returns when it has exited (time.monotonic())."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except Exception:
            self.proc.kill()
            self.proc.wait(10)
        return time.monotonic()
