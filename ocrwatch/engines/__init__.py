"""Engine selection: which engine runs, and why."""

from __future__ import annotations

import importlib.util
import shutil
from dataclasses import dataclass

from ocrwatch.config import Config
from ocrwatch.domain import Page, PageText
from ocrwatch.engines.base import BatchPolicy, Engine
from ocrwatch.errors import EngineUnavailable

__all__ = ["BatchPolicy", "Choice", "Engine", "Page", "PageText", "choose", "create"]


@dataclass(frozen=True)
class Choice:
    name: str
    why: str


def _cuda_gpu() -> str | None:
    """Name of a CUDA GPU when one is visible, without importing torch."""
    if shutil.which("nvidia-smi") is None:
        return None
    import subprocess

    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0] if out else None


def choose(config: Config) -> Choice:
    """Resolve ``engine = "auto"`` and explain the choice for ``ocrwatch status``."""
    if config.engine != "auto":
        return Choice(config.engine, "set in the configuration")
    gpu = _cuda_gpu()
    has_vllm = importlib.util.find_spec("vllm") is not None
    if gpu and has_vllm:
        return Choice("vllm", f"CUDA GPU found ({gpu}) and vLLM is installed")
    if gpu:
        return Choice("tesseract", f"CUDA GPU found ({gpu}) but vLLM is not installed: "
                                   "install the 'gpu' extra to use it")
    return Choice("tesseract", "no CUDA GPU found, using the CPU engine")


def create(config: Config, name: str | None = None) -> Engine:
    """Build the engine called ``name`` (default: the configured or automatic choice)."""
    name = name or choose(config).name
    if name == "tesseract":
        from ocrwatch.engines.tesseract import TesseractEngine

        return TesseractEngine(config)
    if name == "fake":
        from ocrwatch.engines.fake import FakeEngine

        return FakeEngine()
    if name == "vllm":
        from ocrwatch.engines.vllm import VllmEngine

        return VllmEngine(config)
    if name == "remote":
        from ocrwatch.engines.remote import RemoteEngine

        return RemoteEngine(config)
    raise EngineUnavailable(f"unknown engine {name!r}")
