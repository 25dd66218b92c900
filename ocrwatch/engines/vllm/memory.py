"""The memory plan: vLLM settings that keep the card's peak under the budget.

Pure arithmetic, imported by ``ocrwatch doctor`` too (which must not import vLLM), so
that the check and the engine agree on what a budget allows.

Measured with the LightOnOCR-2-1B shape on an H200 with a 16 GB card emulated: the
card peaks 1.3 to 1.8 GiB above what vLLM reserves, because the vision encoder's
working memory and the CUDA context sit outside vLLM's own accounting. Eight A4 pages
in flight at the card's usual 0.9 peaked at 26.6 GiB. What bounds that memory is the
number of tokens vLLM handles in one step (``max_num_batched_tokens``): 4096 kept eight
pages in flight at 14.9 GiB with vLLM given the budget less 3 GiB. The real scans of the
corpus, larger pages than A4 among them, once peaked at 16.16 GiB that way, so vLLM now
gets the budget less 4 GiB; its KV cache still holds eight pages several times over.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ocrwatch.engines.lightonocr import MAX_PROMPT_TOKENS
from ocrwatch.errors import EngineUnavailable

BUDGET_CAP_GIB = 16.0
MIN_BUDGET_GIB = 7.0
# A sleeping engine keeps about 0.9 GiB (the CUDA context and vLLM's own buffers); more
# than this means the sleep did not give the weights or the KV cache back.
ASLEEP_MAX_MIB = 2048


@dataclass(frozen=True)
class MemoryPlan:
    """vLLM's settings for one budget, and how many pages may be in flight."""

    budget_gib: float
    card_gib: float
    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int

    @property
    def cudagraph_sizes(self) -> list[int]:
        """Decode batch sizes worth a CUDA graph: powers of two up to ``max_num_seqs``.

        vLLM's default captures up to twice ``max_num_seqs``; more than ``max_num_seqs``
        sequences never decode together, so those graphs only cost start-up time.
        """
        sizes = [1]
        while sizes[-1] * 2 <= self.max_num_seqs:
            sizes.append(sizes[-1] * 2)
        if sizes[-1] != self.max_num_seqs:
            sizes.append(self.max_num_seqs)
        return sizes


def default_budget(card_gib: float, configured_gb: float) -> float:
    """``vllm.gpu_memory_gb``, or the card's size capped at 16 GiB when it is 0."""
    return configured_gb or min(card_gib, BUDGET_CAP_GIB)


def plan_memory(budget_gib: float, card_gib: float, max_tokens: int) -> MemoryPlan:
    """Turn a memory budget into vLLM's settings; refuse a budget the model cannot run in."""
    budget_gib = min(budget_gib, card_gib)
    if budget_gib < MIN_BUDGET_GIB:
        raise EngineUnavailable(
            f"the GPU memory budget is {budget_gib:.1f} GiB, but the vLLM engine needs at least "
            f"{MIN_BUDGET_GIB:.0f} GiB. Raise vllm.gpu_memory_gb, free the GPU, or use "
            "engine = \"tesseract\"."
        )
    headroom = 4.0 if budget_gib >= 12 else 3.0 if budget_gib >= 10 else 2.5
    large = budget_gib >= 12
    return MemoryPlan(
        budget_gib=round(budget_gib, 2),
        card_gib=round(card_gib, 2),
        gpu_memory_utilization=round(min(0.95, (budget_gib - headroom) / card_gib), 4),
        max_model_len=math.ceil((MAX_PROMPT_TOKENS + max_tokens) / 256) * 256,
        max_num_seqs=8 if large else 4,
        max_num_batched_tokens=4096 if large else MAX_PROMPT_TOKENS,
    )
