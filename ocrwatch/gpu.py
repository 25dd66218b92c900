"""Questions to the NVIDIA driver, through ``nvidia-smi`` with a timeout.

The only place that runs ``nvidia-smi``: engine choice, the vLLM engine's memory plan
and status, and ``ocrwatch doctor`` all ask here. Nothing here imports torch or CUDA,
which takes seconds and may touch the card.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass

TIMEOUT = 10.0


@dataclass(frozen=True)
class Gpu:
    name: str
    driver: str
    total_mb: int
    free_mb: int


def _run(*query: str) -> list[str] | str:
    """The answer's lines, or why there is none."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return "nvidia-smi not found"
    try:
        out = subprocess.run([exe, *query, "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return f"nvidia-smi did not answer within {TIMEOUT:.0f} s"
    except OSError as exc:
        return f"nvidia-smi failed: {exc.strerror}"
    if out.returncode != 0:
        return f"nvidia-smi failed: {(out.stderr or out.stdout).strip()[:200]}"
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def gpus() -> list[Gpu] | str:
    """The GPUs this process may use (``CUDA_VISIBLE_DEVICES`` first), or why none."""
    lines = _run("--query-gpu=name,driver_version,memory.total,memory.free")
    if isinstance(lines, str):
        return lines
    found = []
    for line in lines:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            continue
        try:
            found.append(Gpu(parts[0], parts[1], int(float(parts[2])), int(float(parts[3]))))
        except ValueError:
            continue
    if not found:
        return "nvidia-smi lists no GPU"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible.isdigit() and int(visible) < len(found):  # the card vLLM will use comes first
        found.insert(0, found.pop(int(visible)))
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
    lines = _run("--query-gpu=memory.used")
    if isinstance(lines, str) or not lines:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    index = int(visible) if visible.isdigit() and int(visible) < len(lines) else 0
    try:
        return int(float(lines[index]))
    except ValueError:
        return None


def processes_mib(pids: Iterable[int]) -> int | None:
    """GPU memory held by the processes ``pids`` together, or None without nvidia-smi."""
    lines = _run("--query-compute-apps=pid,used_memory")
    if isinstance(lines, str):
        return None
    wanted = set(pids)
    total = 0
    for line in lines:
        try:
            pid_text, used = (part.strip() for part in line.split(","))
            if int(pid_text) in wanted:
                total += int(float(used))
        except ValueError:
            continue
    return total
