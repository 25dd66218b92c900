"""The page-at-a-time vision encoder (ocrwatch/engines/vllm/pagewise.py) against vLLM's own.

Runs the tiny LightOnOCR-shaped model (real random weights, make_model.py --tiny) in
vLLM and compares, inside vLLM's worker, the encoder's output for two pages of different
sizes: vLLM's way (one sequence, a block-diagonal mask) and a page at a time (no mask).
"""

from __future__ import annotations

import gc
import os
import sys
from typing import Any

import pytest
from gpu_helpers import Sampler, why_not

REASON = why_not()
if REASON:
    pytest.skip(REASON, allow_module_level=True)

pytestmark = pytest.mark.gpu
# bf16 through two attention kernels: the same sums in another order.
TOLERANCE = 0.03


def compare(model: Any) -> list[tuple[str, float, float]]:
    """Run inside vLLM's worker: (what, largest difference, largest value) per output."""
    import torch
    from vllm.model_executor.models.mistral3 import Mistral3ForConditionalGeneration

    from ocrwatch.engines.vllm.pagewise import encode_page

    tower = model.vision_tower
    side = tower.config.image_size
    patch = tower.config.patch_size
    gen = torch.Generator().manual_seed(0)
    shapes = [(side, side - 2 * patch), (side // 2, side)]  # a portrait and a landscape page
    images = [torch.randn(3, h, w, generator=gen).to(tower.device, tower.dtype)
              for h, w in shapes]
    pixels = {"type": "pixel_values_pixtral", "pixel_values": images}
    out = []
    with torch.inference_mode():
        stock = tower(images)
        mine = [encode_page(tower, image) for image in images]
        for i, (a, b) in enumerate(zip(stock, mine, strict=True)):
            assert a.shape == b.shape, (a.shape, b.shape)
            out.append((f"encoder, page {i}", float((a - b).abs().max()), float(a.abs().max())))
        stock_embeds = Mistral3ForConditionalGeneration._process_image_input(model, pixels)
        mine_embeds = model._process_image_input(pixels)
        for i, (a, b) in enumerate(zip(stock_embeds, mine_embeds, strict=True)):
            assert a.shape == b.shape, (a.shape, b.shape)
            out.append((f"embeddings, page {i}", float((a - b).abs().max()),
                        float(a.abs().max())))
    return out


def test_the_pagewise_encoder_gives_vllms_own_result(sampler: Sampler,
                                                     baseline_mib: int) -> None:
    tiny = os.environ.get("OCRWATCH_GPU_TINY_MODEL")
    if not tiny:
        pytest.skip("OCRWATCH_GPU_TINY_MODEL is not set")
    from vllm import LLM

    from ocrwatch.engines.vllm.backends import _register_model_class

    assert _register_model_class(tiny, pagewise=True) == "pagewise"
    # apply_model sends the function to vLLM's engine process.
    os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    llm = LLM(model=tiny, dtype="bfloat16", enforce_eager=True, gpu_memory_utilization=0.05,
              max_model_len=1024, limit_mm_per_prompt={"image": 1}, seed=0)
    try:
        (rows,) = llm.apply_model(compare)
        print("\n" + "\n".join(f"{what}: max |diff| {d:.4g}, max |value| {v:.4g}"
                               for what, d, v in rows), file=sys.stderr)
        assert len(rows) == 4
        for what, diff, value in rows:
            assert value > 0, what
            assert diff <= TOLERANCE * value, f"{what}: {diff} against {value}"
        (name,) = llm.apply_model(lambda m: type(m).__name__)
        assert name == "PagewiseLightOnOCR"
    finally:
        os.environ.pop("VLLM_ALLOW_INSECURE_SERIALIZATION", None)
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
    assert sampler.wait_until(lambda v: v <= baseline_mib + 64, 60) <= baseline_mib + 64
