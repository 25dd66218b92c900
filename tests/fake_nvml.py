"""A stand-in for nvidia-ml-py's ``pynvml``, for tests on machines without an NVIDIA GPU.

It answers the few NVML questions ``ocrwatch.engines.gpu`` asks with the card and processes the
test describes; ``install`` puts it where ``ocrwatch.engines.gpu`` looks (a real NVML is used on
the GPU machine's tests, tests/gpu).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from ocrwatch.engines import gpu

MIB = 1024 * 1024


class NVMLError(Exception):
    pass


@dataclass
class FakeNvml:
    name: str = "NVIDIA GeForce RTX 4080"
    driver: str = "580.95.05"
    total_mib: int = 16376
    used_mib: int = 0
    compute: dict[int, int | None] = field(default_factory=dict)  # pid -> MiB (None: unknown)
    graphics: dict[int, int | None] = field(default_factory=dict)
    capability: tuple[int, int] = (8, 9)  # an RTX 4080's CUDA compute capability
    NVMLError: type[Exception] = NVMLError

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self.name

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(total=self.total_mib * MIB, used=self.used_mib * MIB,
                               free=(self.total_mib - self.used_mib) * MIB)

    @staticmethod
    def _procs(table: dict[int, int | None]) -> list[Any]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=None if mib is None else mib * MIB)
                for pid, mib in table.items()]

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        return self.capability

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        return self._procs(self.compute)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> list[Any]:
        return self._procs(self.graphics)


def install(monkeypatch: pytest.MonkeyPatch, nvml: FakeNvml | None,
            why_not: str = "the NVIDIA driver did not answer (NVML Shared Library Not Found)"
            ) -> None:
    """Make ``ocrwatch.engines.gpu`` see ``nvml``, or (None) a machine without an NVIDIA driver."""
    monkeypatch.setattr(gpu, "_nvml", nvml)
    monkeypatch.setattr(gpu, "_why_not", None if nvml is not None else why_not)
