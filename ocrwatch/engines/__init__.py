"""Engine selection: which engine runs, and why."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from ocrwatch.config import Config
from ocrwatch.core.domain import Page, PageText
from ocrwatch.core.errors import EngineUnavailable
from ocrwatch.engines import gpu as gpus
from ocrwatch.engines.base import BatchPolicy, Engine

__all__ = ["BatchPolicy", "Choice", "Engine", "Page", "PageText", "choose", "create"]


@dataclass(frozen=True)
class Choice:
    name: str
    why: str


def choose(config: Config) -> Choice:
    """Resolve ``engine = "auto"`` and explain the choice for ``ocrwatch status``."""
    if config.engine != "auto":
        return Choice(config.engine, "set in the configuration")
    gpu = gpus.gpu_name()
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
