"""A LightOnOCR-shaped model folder with no weights, for the GPU tests and benchmarks.

``write(folder, profile)`` writes what vLLM needs to build the model of a profile
(``config.json``, a byte-level tokenizer with the model's chat-template specials, the
Pixtral processor's settings) at the published sizes: Pixtral vision encoder 24 x 1024,
Qwen3 decoder 28 x 1024, vocabulary 151936. Loaded with ``load_format = "dummy"`` it has
the real model's compute and memory and writes random text, so the engine can be run,
timed and memory-profiled on a GPU without downloading the weights. LightOnOCR-3-1B keeps
LightOnOCR-2-1B's architecture; its folder differs in its name and its 16384-token
sequence (``max_position_embeddings``, the tokenizer's ``model_max_length``).

The chat template writes a text part after the image, so the 3-1B's "grounding" request
reaches the model as LightOn's client sends it.

    python -m ocrwatch.testing.model_folder OUT [PROFILE]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ocrwatch.engines import profiles
from ocrwatch.engines.profiles import Profile

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|image_pad|>", "<|vision_pad|>",
           "<|vision_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}"
    "{{ m['content'] }}{% else %}{% for c in m['content'] %}{% if c['type'].startswith('image')"
    " %}<|image_pad|>{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _dump(folder: Path, name: str, obj: dict[str, Any]) -> None:
    (folder / name).write_text(json.dumps(obj, indent=1))


def _tokenizer(folder: Path) -> dict[str, int]:
    """A byte-level BPE tokenizer with no merges and the model's special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    symbols = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={s: i for i, s in enumerate(symbols)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL)
    tok.save(str(folder / "tokenizer.json"))
    ids = {s: tok.token_to_id(s) for s in SPECIAL}
    return {s: i for s, i in ids.items() if i is not None}


def write(folder: Path, profile: Profile | None = None) -> Path:
    """The folder of ``profile``'s model (the default profile's when None)."""
    profile = profile or profiles.get(profiles.DEFAULT)
    folder.mkdir(parents=True, exist_ok=True)
    ids = _tokenizer(folder)
    specials = {"image_token": "<|image_pad|>", "image_break_token": "<|vision_pad|>",
                "image_end_token": "<|vision_end|>"}
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    _dump(folder, "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": profile.max_model_len,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "extra_special_tokens": specials, "chat_template": CHAT_TEMPLATE,
        "processor_class": "PixtralProcessor"})
    _dump(folder, "preprocessor_config.json", {
        "image_processor_type": "PixtralImageProcessor", "processor_class": "PixtralProcessor",
        "patch_size": {"height": 14, "width": 14}, "size": {"longest_edge": profile.max_side},
        "do_resize": True, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711], "do_convert_rgb": True})
    _dump(folder, "processor_config.json", {"processor_class": "PixtralProcessor",
                                            "patch_size": 14, "spatial_merge_size": 2,
                                            **specials})
    text = {"vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072,
            "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
            "head_dim": 128, "max_position_embeddings": profile.max_model_len,
            "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "rms_norm_eps": 1e-6,
            "rope_theta": 1e6, "hidden_act": "silu", "tie_word_embeddings": True,
            "eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"]}
    vision = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
              "num_attention_heads": 16, "head_dim": 64, "image_size": profile.max_side,
              "model_type": "pixtral", "patch_size": 14, "num_channels": 3,
              "rope_theta": 10000.0, "hidden_act": "silu", "attention_dropout": 0.0}
    _dump(folder, "config.json", {
        "_name_or_path": profile.hf_id, "architectures": [profile.model_class],
        "model_type": "mistral3", "image_token_index": ids["<|image_pad|>"],
        "spatial_merge_size": 2, "projector_hidden_act": "gelu",
        "multimodal_projector_bias": False, "vision_feature_layer": -1,
        "torch_dtype": "bfloat16", "tie_word_embeddings": True, "text_config": text,
        "vision_config": vision})
    return folder


if __name__ == "__main__":
    name = sys.argv[2] if len(sys.argv) > 2 else profiles.DEFAULT
    print("wrote", write(Path(sys.argv[1]), profiles.get(name)),
          "(load it with load_format = \"dummy\")")
