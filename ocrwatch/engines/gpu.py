"""Questions to the NVIDIA driver, through NVML (nvidia-ml-py's ``pynvml``).

The only place that asks the driver: engine choice, the vLLM engine's memory plan and
status, and ``ocrwatch doctor`` all ask here. NVML answers in microseconds and without a
CUDA context, so asking before each start and wake costs nothing on the card; nothing
here imports torch or CUDA, which takes seconds and may touch the card.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MIB = 1024 * 1024

_lock = threading.Lock()
_nvml: Any = None  # the pynvml module once nvmlInit succeeded (tests put a stand-in here)
_why_not: str | None = None  # why NVML cannot be used, once that is known


@dataclass(frozen=True)
class Gpu:
    name: str
    driver: str
    total_mb: int
    free_mb: int


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _lib() -> Any:
    """The initialised pynvml module, or a sentence saying why there is none."""
    global _nvml, _why_not
    with _lock:
        if _nvml is not None:
            return _nvml
        if _why_not is not None:
            return _why_not
        try:
            import pynvml
        except ImportError:
            _why_not = "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
            return _why_not
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            # No driver (LibraryNotFound), or one that does not answer: no NVIDIA GPU here.
            _why_not = f"the NVIDIA driver did not answer ({_text(exc)})"
            return _why_not
        _nvml = pynvml
        return _nvml


def _handles(nvml: Any) -> list[Any] | str:
    """Every card's handle, the one CUDA_VISIBLE_DEVICES names first (vLLM uses that one)."""
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    except nvml.NVMLError as exc:
        return f"NVML failed: {_text(exc)}"
    if not handles:
        return "NVML lists no GPU"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible.isdigit() and int(visible) < len(handles):
        handles.insert(0, handles.pop(int(visible)))
    return handles


def _first() -> tuple[Any, Any] | None:
    nvml = _lib()
    if isinstance(nvml, str):
        return None
    handles = _handles(nvml)
    return None if isinstance(handles, str) else (nvml, handles[0])


def gpus() -> list[Gpu] | str:
    """The GPUs this process may use (``CUDA_VISIBLE_DEVICES`` first), or why none."""
    nvml = _lib()
    if isinstance(nvml, str):
        return nvml
    handles = _handles(nvml)
    if isinstance(handles, str):
        return handles
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        found = []
        for handle in handles:
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            found.append(Gpu(_text(nvml.nvmlDeviceGetName(handle)), driver,
                             int(mem.total // MIB), int(mem.free // MIB)))
    except nvml.NVMLError as exc:
        return f"NVML failed: {_text(exc)}"
    return found


def card_memory_mib() -> int | None:
    """Total memory of the GPU vLLM will use, or None without an NVIDIA GPU."""
    found = gpus()
    return None if isinstance(found, str) else found[0].total_mb


def gpu_name() -> str | None:
    found = gpus()
    return None if isinstance(found, str) else found[0].name


def used_mib() -> int | None:
    """Memory in use on the first visible card, by every process (what a user sees)."""
    first = _first()
    if first is None:
        return None
    nvml, handle = first
    try:
        return int(nvml.nvmlDeviceGetMemoryInfo(handle).used // MIB)
    except nvml.NVMLError:
        return None


def _per_process(nvml: Any, handle: Any) -> dict[int, int]:
    """MiB each process holds on the card (compute and graphics users together)."""
    held: dict[int, int] = {}
    for query in (nvml.nvmlDeviceGetComputeRunningProcesses,
                  nvml.nvmlDeviceGetGraphicsRunningProcesses):
        for proc in query(handle):
            used = getattr(proc, "usedGpuMemory", None)
            # None: the driver cannot say (another container's process); it still counts
            # in the card's "used" total, and so among the others' memory.
            held[int(proc.pid)] = max(held.get(int(proc.pid), 0), int((used or 0) // MIB))
    return held


def processes_mib(pids: Iterable[int]) -> int | None:
    """GPU memory held by the processes ``pids`` together, or None without NVML."""
    first = _first()
    if first is None:
        return None
    nvml, handle = first
    try:
        held = _per_process(nvml, handle)
    except nvml.NVMLError:
        return None
    wanted = set(pids)
    return sum(mib for pid, mib in held.items() if pid in wanted)


def others_mib(own: Iterable[int]) -> int | None:
    """Memory other programs hold on the card: all that is used, less what ``own`` holds.

    "Used" covers what no process list shows (a compositor's, another container's), so
    that is what the memory plan has to leave alone. None without NVML.
    """
    first = _first()
    if first is None:
        return None
    nvml, handle = first
    try:
        used = int(nvml.nvmlDeviceGetMemoryInfo(handle).used // MIB)
        held = _per_process(nvml, handle)
    except nvml.NVMLError:
        return None
    mine = set(own)
    return max(0, used - sum(mib for pid, mib in held.items() if pid in mine))


def compute_capability() -> tuple[int, int] | None:
    """The first visible card's CUDA compute capability (8, 9 for an RTX 40-series), or
    None when the driver cannot be asked."""
    first = _first()
    if first is None:
        return None
    nvml, handle = first
    try:
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
    except nvml.NVMLError:
        return None
    return int(major), int(minor)


# fp8 arithmetic (vLLM's dynamic fp8 weights, the fp8 KV cache's attention) needs Ada
# Lovelace or newer: compute capability 8.9 (RTX 40-series, L4, L40), 9.0 (H100, H200).
FP8_CAPABILITY = (8, 9)


def fp8_problem(quantization: str, kv_cache_dtype: str,
                capability: tuple[int, int] | None) -> str | None:
    """Why ``vllm.quantization`` / ``vllm.kv_cache_dtype`` cannot be fp8 on this card, or
    None. An unknown card (the driver not asked) is not refused here: vLLM says so."""
    asked = [key for key, on in (("vllm.quantization = \"fp8\"", quantization == "fp8"),
                                 ("vllm.kv_cache_dtype = \"fp8\"", kv_cache_dtype == "fp8"))
             if on]
    if not asked or capability is None or capability >= FP8_CAPABILITY:
        return None
    major, minor = capability
    return (f"{' and '.join(asked)} need{'s' if len(asked) == 1 else ''} fp8 arithmetic, which "
            f"needs a card of compute capability 8.9 or newer (RTX 40-series, L4, H100); this "
            f"card has {major}.{minor}. An Ampere card (RTX 30-series, A100: 8.0 or 8.6) reads "
            "in bf16: set vllm.quantization = \"none\" and vllm.kv_cache_dtype = \"auto\" "
            "(bf16 is the model's own precision, the one whose accuracy LightOn measured).")
