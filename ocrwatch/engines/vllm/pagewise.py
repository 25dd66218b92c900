"""LightOnOCR in vLLM with its vision encoder run a page at a time, without a mask.

vLLM 0.26 encodes all the images of one step as one sequence and, without xformers (which
it does not install), hands PyTorch's attention a dense block-diagonal mask over it. A
mask rules out the flash kernel, and the pages of a step attend to each other only for
that to be masked away. A page encoded alone needs no mask: the same arithmetic (a
block-diagonal mask of one block masks nothing), and the encoder's attention measured
1.7x faster for one A4 page and 3.4x for two pages in one step
(``benchmarks/results/gpu_encoder_attention.txt``).

Imports vLLM and torch: only the worker process imports this module. Other vLLM versions
get vLLM's own class (:func:`model_class` returns None), since this follows 0.26's code.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.models.pixtral.modeling_pixtral import position_ids_in_meshgrid
from vllm.model_executor.models.lightonocr import LightOnOCRForConditionalGeneration

TESTED_VLLM = "0.26."


def encode_page(tower: Any, image: torch.Tensor) -> torch.Tensor:
    """One page through vLLM's PixtralHFVisionModel, as its ``forward`` does for a list
    of one image, but with no attention mask. Returns its features, a row per patch."""
    patches = tower.patch_conv(image.unsqueeze(0).to(tower.dtype))  # (1, hidden, h, w)
    embeds = tower.ln_pre(patches.flatten(2).permute(0, 2, 1))
    positions = position_ids_in_meshgrid(
        [patches], max_width=tower.config.image_size // tower.config.patch_size,
    ).to(tower.device)
    rotary = tower.patch_positional_embedding(embeds, positions)
    out = tower.transformer(embeds, None, rotary, return_all_hidden_states=False)
    return out.squeeze(0)


class PagewiseLightOnOCR(LightOnOCRForConditionalGeneration):  # type: ignore[misc]
    """vLLM's LightOnOCR with :func:`encode_page` in place of the batched encoder."""

    def _process_image_input(self, image_input: Any) -> Any:
        # As Mistral3ForConditionalGeneration._process_image_input in vLLM 0.26.
        if image_input["type"] == "image_embeds":
            return image_input["data"]
        images = image_input["pixel_values"]
        sizes = [(img.shape[-2], img.shape[-1]) for img in images]
        features = [encode_page(self.vision_tower, img) for img in images]
        merge = self.config.spatial_merge_size ** 2
        embeds = self.multi_modal_projector(torch.cat(features), sizes)
        return tuple(torch.split(embeds, [f.shape[0] // merge for f in features]))


def model_class() -> type | None:
    """The class to register for LightOnOCR, or None to leave vLLM's own."""
    import vllm

    if not vllm.__version__.startswith(TESTED_VLLM):
        return None
    return PagewiseLightOnOCR
