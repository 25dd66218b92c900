"""The memory plan: how many pages the card holds, and vLLM's settings for them.

Pure arithmetic, imported by ``ocrwatch doctor`` too (which must not import vLLM), so that
the check and the engine agree on what a budget allows. The card's peak is the sum of
parts that are each measured or read from the model's config, not a fixed headroom:

- the CUDA context and vLLM's own buffers (:data:`CONTEXT_GIB`);
- the weights (the model folder's safetensors files, or :data:`WEIGHTS_GIB`);
- the working memory of one step (:func:`working_gib`): activations, the vision encoder
  on the largest page, CUDA graphs and the sampler; it grows with the tokens one step
  handles (``max_num_batched_tokens``), not with the pages in flight;
- the KV cache: exactly what the planned pages need (``kv_cache_memory_bytes``), at
  :func:`kv_bytes_per_token` from the model's config.

All of it is planned within ``min(budget, card - what other programs hold - MARGIN_GIB)``,
asked of the driver (NVML) before each start and wake. When that leaves less than one
page needs, :func:`plan_memory` raises :class:`GpuBusy`: the engine holds its pages and
starts once memory is free again.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ocrwatch.core.errors import EngineUnavailable
from ocrwatch.engines import profiles
from ocrwatch.engines.profiles import Profile

GIB = 1024**3
BUDGET_CAP_GIB = 16.0
# A sleeping engine keeps about 0.9 GiB (the CUDA context and vLLM's own buffers); more
# than this means the sleep did not give the weights or the KV cache back.
ASLEEP_MAX_MIB = 2048

# -- measured constants (LightOnOCR-2-1B shape, vLLM 0.26, H200; benchmarks/results/) -----
# CUDA context and vLLM's buffers: what a sleeping engine leaves on the card, 0.81 to
# 0.90 GiB (gpu_tests.txt, gpu_daemon.txt).
CONTEXT_GIB = 0.90
# The weights in bf16 when the model folder has none to measure (load_format = "dummy"):
# vLLM's "Model loading took 1.88 GiB" (gpu_start.txt).
WEIGHTS_GIB = 1.88
# One step's working memory above context, weights and KV cache at a 4096-token step,
# decode steps as CUDA graphs (the default): the card's peak less the KV cache was 3.78 to
# 3.90 GiB (plain vLLM at 8, 16 and 24 pages, the engine on the 64-page drop, the worst
# page of 1540x1540 px writing 4096 tokens: gpu_daemon.txt, gpu_tests.txt at d38e036),
# less context and weights: 1.0 to 1.12 GiB, of which vLLM counts 0.13 GiB of activations
# and 0.09 GiB of CUDA graphs itself; the rest is the vision encoder and the allocator.
WORKING_GIB_AT_STEP = 1.4
# The same without CUDA graphs (vllm.enforce_eager, the GPU tests): the corpus's real
# scans peaked 5.86 GiB above the KV cache (gpu_tests.txt at d38e036): 3.08 GiB working.
WORKING_GIB_EAGER = 3.5
STEP_TOKENS = 4096
# 8192-token steps peaked 9.4 GiB higher than 4096 (24.6 against 15.2 GiB): the encoder's
# attention over one step's image tokens grows faster than linearly. Squared, as an
# attention matrix does, for steps other than the measured one.
WORKING_EXPONENT = 2.0
# Room kept free on a shared card: programs beside ocrwatch grow, and the allocator
# rounds up.
MARGIN_GIB = 0.5
# More pages in flight pay while a step is overhead-bound: plain vLLM read 3.33, 4.19 and
# 4.46 pages/s with 8, 16 and 24 (gpu_daemon.txt). Memory bounds the plan below this; the
# cap only bounds the CUDA graphs captured at start (one per 8 pages).
SEQS_CAP = 64
# The page the KV cache is planned for besides the worst one: a portrait letter-size page
# (the larger of the two common paper sizes; an A4 page needs 10% less) fitted to 1540 px,
# writing a dense page of Markdown, or max_tokens when that is less. A page that needs
# more (a square page, a longer text) takes KV from others: vLLM admits fewer at once, or
# pauses one and recomputes it later, so nothing is lost, only time.
TYPICAL_PAGE_PX = (1190, 1540)
TYPICAL_OUTPUT_TOKENS = 1024
# LightOnOCR-2-1B's decoder (Qwen3): 28 layers, 8 KV heads of 128 (its config.json).
LIGHTONOCR_TEXT = {"num_hidden_layers": 28, "num_key_value_heads": 8, "head_dim": 128}
KV_DTYPES = {"auto": 2, "bfloat16": 2, "fp8": 1}  # bytes per value


class GpuBusy(EngineUnavailable):
    """Other programs hold so much of the card that not even one page fits now."""

    def __init__(self, message: str, others_gib: float) -> None:
        super().__init__(message)
        self.others_gib = others_gib


def text_config(model_dir: str | None) -> dict[str, Any]:
    """The decoder's part of the model's config.json (LightOnOCR's when unreadable)."""
    if model_dir:
        try:
            config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
            text = config.get("text_config", config)
            if all(key in text for key in ("num_hidden_layers", "num_key_value_heads")):
                return dict(text)
        except (OSError, ValueError, AttributeError):
            pass
    return dict(LIGHTONOCR_TEXT)


def kv_bytes_per_token(text: dict[str, Any], kv_dtype: str = "auto") -> int:
    """Keys and values of every layer for one token: 112 KiB for LightOnOCR in bf16."""
    head_dim = text.get("head_dim") or (
        int(text.get("hidden_size", 1024)) // int(text.get("num_attention_heads", 8)))
    return (2 * int(text["num_hidden_layers"]) * int(text["num_key_value_heads"])
            * int(head_dim) * KV_DTYPES[kv_dtype])


def weights_gib(model_dir: str | None) -> float:
    """The weights' size on the card: their files' size, or the measured default."""
    if model_dir:
        files = list(Path(model_dir).glob("*.safetensors"))
        if files:
            return sum(f.stat().st_size for f in files) / GIB
    return WEIGHTS_GIB


def working_gib(step_tokens: int, eager: bool = False) -> float:
    """One step's working memory (activations, encoder, graphs, sampler) at this step."""
    at_step = WORKING_GIB_EAGER if eager else WORKING_GIB_AT_STEP
    return float(at_step * (step_tokens / STEP_TOKENS) ** WORKING_EXPONENT)


@dataclass(frozen=True)
class MemoryPlan:
    """vLLM's settings for one budget, how many pages may be in flight, and why."""

    budget_gib: float  # what ocrwatch may use: min(budget, card - others - margin)
    card_gib: float  # the card's size as planned (vllm.card_gb on an emulated card)
    gpu_memory_utilization: float  # only vLLM's start check: the planned share of the card
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_bytes: int = 0  # vLLM's kv_cache_memory_bytes: what the pages need
    kv_cache_dtype: str = "auto"
    others_gib: float = 0.0  # what other programs held when this was planned
    fixed_gib: float = 0.0  # context + weights + one step's working memory
    kv_bytes_per_token: int = 0
    quantization: str = ""  # "fp8": vLLM's dynamic fp8 weights; "": the model's bf16

    @property
    def total_gib(self) -> float:
        """The card's peak this plan expects from ocrwatch."""
        return self.fixed_gib + self.kv_cache_bytes / GIB

    @property
    def kv_tokens(self) -> int:
        return self.kv_cache_bytes // max(1, self.kv_bytes_per_token)

    @property
    def cudagraph_sizes(self) -> list[int]:
        """Decode batch sizes worth a CUDA graph: 1, 2, 4, 8, then every 8 up to
        ``max_num_seqs``. A batch between two sizes runs padded to the next one.

        vLLM's default captures up to twice ``max_num_seqs``; more than ``max_num_seqs``
        sequences never decode together, so those graphs only cost start-up time.
        """
        sizes = [n for n in (1, 2, 4, 8) if n <= self.max_num_seqs]
        sizes += list(range(16, self.max_num_seqs + 1, 8))
        if sizes[-1] != self.max_num_seqs:
            sizes.append(self.max_num_seqs)
        return sizes

    def describe(self) -> str:
        return (f"{self.max_num_seqs} pages in flight, {self.max_num_batched_tokens}-token "
                f"steps, {self.kv_cache_bytes / GIB:.2f} GiB KV cache "
                f"({self.kv_tokens} tokens, {self.kv_cache_dtype}), "
                f"{self.total_gib:.2f} GiB planned of {self.budget_gib:.2f} GiB usable")


def typical_prompt_tokens(profile: Profile | None = None) -> int:
    """The prompt of the typical page (:data:`TYPICAL_PAGE_PX`): 2452 tokens."""
    return (profile or profiles.get(profiles.DEFAULT)).prompt_tokens(*TYPICAL_PAGE_PX)


def default_budget(card_gib: float, configured_gb: float) -> float:
    """``vllm.gpu_memory_gb``, or the card's size capped at 16 GiB when it is 0."""
    return configured_gb or min(card_gib, BUDGET_CAP_GIB)


def _gib(value: float) -> str:
    return f"{value:.1f} GiB"


def plan_memory(budget_gib: float, card_gib: float, max_tokens: int, *,
                others_gib: float = 0.0, device_gib: float | None = None,
                model_dir: str | None = None, kv_cache_dtype: str = "auto",
                eager: bool = False, profile: Profile | None = None,
                quantization: str = "") -> MemoryPlan:
    """Turn a memory budget into vLLM's settings.

    ``card_gib`` is the card's size as planned; ``device_gib`` the real card's, when a
    smaller card is emulated on a larger one (vLLM's utilization is a share of the real
    one). ``others_gib`` is what other programs hold now; ``eager``: no CUDA graphs
    (``vllm.enforce_eager``), which needs more working memory. ``profile``: the model's
    (its prompts and longest sequence; the default profile's when None). With
    ``quantization`` "fp8" the weights are still counted at bf16's size: an upper bound,
    as vLLM keeps the embeddings and the vision encoder's norms in bf16. Raises
    :class:`GpuBusy` when they leave too little, EngineUnavailable when the budget itself
    is too small.
    """
    device_gib = device_gib or card_gib
    usable = min(budget_gib, card_gib - others_gib - MARGIN_GIB, card_gib)
    text = text_config(model_dir)
    per_token = kv_bytes_per_token(text, kv_cache_dtype)
    profile = profile or profiles.get(profiles.DEFAULT)
    largest = profile.max_prompt_tokens
    # One page at its largest writing max_tokens: for LightOnOCR-3-1B by default the
    # model's whole 16384-token sequence (profiles.max_tokens), planned as one page.
    max_model_len = math.ceil((largest + max_tokens) / 256) * 256
    worst = max_model_len * per_token / GIB  # one page at its largest, writing max_tokens
    weights = weights_gib(model_dir)
    smallest_step = math.ceil(largest / 256) * 256  # the largest page in one step
    # The measured step when the budget holds it with room for pages, else the largest page.
    step = STEP_TOKENS
    if CONTEXT_GIB + weights + working_gib(step, eager) + 2 * worst > usable:
        step = smallest_step
    fixed = CONTEXT_GIB + weights + working_gib(step, eager)
    need = fixed + worst
    if need > usable:
        if budget_gib < need or others_gib <= 0:
            raise EngineUnavailable(
                f"the GPU memory budget is {_gib(min(budget_gib, card_gib))}, but the vLLM "
                f"engine needs at least {_gib(need + MARGIN_GIB)} for one page. Raise "
                "vllm.gpu_memory_gb, lower vllm.max_tokens, use a larger card, or use "
                "engine = \"tesseract\".")
        free = max(0.0, card_gib - others_gib)
        raise GpuBusy(
            f"the GPU is busy: {_gib(others_gib)} held by other programs, "
            f"{_gib(free)} free; the vLLM engine needs {_gib(need + MARGIN_GIB)}. Pages wait "
            "and are read once memory is free.", others_gib)
    typical = typical_prompt_tokens(profile) + min(max_tokens, TYPICAL_OUTPUT_TOKENS)
    page = typical * per_token / GIB
    seqs = max(1, min(SEQS_CAP, 1 + math.floor((usable - need) / page)))
    kv_bytes = int((worst + (seqs - 1) * page) * GIB)
    total = fixed + kv_bytes / GIB
    # vLLM checks at start that the card has utilization x its size free, measured after
    # its own CUDA context is made: the context is left out of that share.
    util = round(max(0.01, (total - CONTEXT_GIB) / device_gib), 4)
    return MemoryPlan(
        budget_gib=round(usable, 2), card_gib=round(card_gib, 2),
        gpu_memory_utilization=util, max_model_len=max_model_len, max_num_seqs=seqs,
        max_num_batched_tokens=step, kv_cache_bytes=kv_bytes, kv_cache_dtype=kv_cache_dtype,
        others_gib=round(others_gib, 2), fixed_gib=round(fixed, 3),
        kv_bytes_per_token=per_token, quantization=quantization)
