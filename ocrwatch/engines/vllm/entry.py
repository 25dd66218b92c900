"""The vLLM engine's entry in the engine registry."""

from __future__ import annotations

from ocrwatch.engines.base import Doctor, Registration
from ocrwatch.engines.vllm.engine import VllmEngine

ENGINE = Registration("vllm", VllmEngine, section="vllm", doctor=(Doctor.GPU,))
