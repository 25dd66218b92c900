"""The models ocrwatch runs, one profile each: everything that differs between them.

A profile is chosen by ``model_profile`` (``lightonocr-2-1b`` by default) and read by the
engines that run the model (vllm, remote), the memory plan, the worker process and
``ocrwatch doctor``: the Hugging Face id, vLLM's model class, the page size, the longest
sequence, what the prompt holds beside the image, the sampling, how the answer is read
and which library versions are known to break the model. LightOn's own client
(``lightonai/LightOnOCR``: ``lightonocr/models.py``, ``client.py``) is the source of each
value; docs/models.md says which profile to choose.

The vLLM worker process reads it: it imports nothing heavier than the config's schema.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ocrwatch.config.schema import MODEL_PROFILES

if TYPE_CHECKING:
    from ocrwatch.config import Config

Section = Literal["vllm", "remote"]


@dataclass(frozen=True)
class BadVersion:
    """A library release that breaks the model, and what it does."""

    package: str
    version: str  # an exact release ("0.27.1"), or a prefix ending in "." ("5.17.")
    why: str

    def matches(self, version: str) -> bool:
        if self.version.endswith("."):
            return version == self.version[:-1] or version.startswith(self.version)
        return version == self.version


@dataclass(frozen=True)
class Profile:
    """One model's rules."""

    name: str  # the value of model_profile
    generation: int
    hf_id: str  # vllm.model's and remote.model's default
    model_class: str  # vLLM's class for the architecture (Mistral3: Pixtral + Qwen3)
    max_model_len: int  # the longest sequence the model was trained for, prompt and answer
    # vllm.max_tokens' and remote.max_tokens' default (less the largest prompt, at most)
    max_tokens: int
    top_p: float  # LightOn's client: 0.9 for generations 1 and 2, 1.0 for 3
    # Sent beside the image: None for the image alone (the 2-1B echoes any text prompt);
    # "grounding" asks a generation-3 model for labelled layout blocks.
    prompt_text: str | None = None
    temperature: float = 0.2  # LightOn's client and model cards, every generation
    retry_temperature: float = 0.6  # a page that looped is tried once more, less greedily
    max_side: int = 1540  # pixels on the longest side: the 1B models' Pixtral processor
    patch: int = 28  # pixels per image token side (Pixtral encoder with a 2x2 merge)
    template_tokens: int = 32  # the chat template around the image, with room to spare
    fix_dollars: bool = False  # repair escaped math delimiters (\$x\$ -> $x$)
    known_good: str = ""  # the library versions the model is known to work with
    bad_versions: tuple[BadVersion, ...] = ()

    @property
    def grounding(self) -> bool:
        """Whether answers come as layout blocks (``![label](x1,y1,x2,y2) text``)."""
        return self.prompt_text == "grounding"

    @property
    def max_image_tokens(self) -> int:
        return math.ceil(self.max_side / self.patch) ** 2

    def _grid(self, width: int, height: int) -> tuple[int, int]:
        """Image tokens across and down of a page once fitted to ``max_side``."""
        scale = self.max_side / max(width, height, 1)
        w = max(1, round(width * scale))
        h = max(1, round(height * scale))
        return math.ceil(w / self.patch), math.ceil(h / self.patch)

    def image_tokens(self, width: int, height: int) -> int:
        """Image tokens of a page once fitted to ``max_side`` on its longest side."""
        across, down = self._grid(width, height)
        return min(self.max_image_tokens, across * down)

    def prompt_tokens(self, width: int, height: int) -> int:
        """A page's whole prompt, counted as the memory plan counts it: its image tokens,
        a break token per row of them, the template and the text beside the image."""
        across, down = self._grid(width, height)
        extra = 4 if self.prompt_text else 0  # "grounding" is one or two tokens
        return min(self.max_image_tokens, across * down) + down + self.template_tokens + extra

    @property
    def max_prompt_tokens(self) -> int:
        """The prompt of the largest page (a square one at ``max_side``)."""
        return self.prompt_tokens(self.max_side, self.max_side)

    def raw_prompt(self) -> str:
        """The prompt for tokenizers without a usable chat template (:func:`raw_prompt`)."""
        return raw_prompt(self.prompt_text)

    def chat_content(self, image_part: dict[str, object]) -> list[dict[str, object]]:
        """A user turn's content: the image, then the prompt text when there is one (the
        order of LightOn's client)."""
        content: list[dict[str, object]] = [image_part]
        if self.prompt_text:
            content.append({"type": "text", "text": self.prompt_text})
        return content

    def version_problems(self, versions: dict[str, str]) -> list[str]:
        """What the installed library versions (package -> version) do to this model."""
        return [f"{bad.package} {versions[bad.package]} {bad.why}"
                for bad in self.bad_versions
                if bad.package in versions and bad.matches(versions[bad.package])]


def raw_prompt(text: str | None) -> str:
    """One user turn holding the image and ``text`` after it, for tokenizers without a
    usable chat template."""
    return ("<|im_start|>system<|im_end|>\n<|im_start|>user\n<|image_pad|>"
            f"{text or ''}<|im_end|>\n<|im_start|>assistant\n")


# LightOn's README: "vLLM 0.27.1 makes every model loop", "transformers 5.17 breaks the
# 1B models on vLLM 0.30.0"; ../shared/design.md: vLLM 0.26 imports Pixtral names that
# transformers 5.17 removed.
_BAD_1B = (
    BadVersion("vllm", "0.27.1", "makes LightOnOCR loop on every page (LightOn's README); "
               "use vLLM 0.26.0 or 0.30.0"),
    BadVersion("transformers", "5.17.", "breaks the 1B LightOnOCR models (LightOn's README); "
               "install transformers 5.16.1"),
)
_KNOWN_GOOD = ("vLLM 0.26.0 or 0.30.0 with transformers 5.16.1 (LightOn serves the 1B "
               "models on vLLM 0.30.0 with transformers 5.16.1)")

PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile(name="lightonocr-2-1b", generation=2, hf_id="lightonai/LightOnOCR-2-1B",
            model_class="LightOnOCRForConditionalGeneration", max_model_len=8192,
            max_tokens=4096, top_p=0.9, known_good=_KNOWN_GOOD, bad_versions=_BAD_1B),
    # LightOnOCR-2-1B's architecture, page size and serving flags; max_model_len 16384
    # (LightOn's `vllm serve` line). The answer's boxes and labels make it longer.
    Profile(name="lightonocr-3-1b", generation=3, hf_id="lightonai/LightOnOCR-3-1B",
            model_class="LightOnOCRForConditionalGeneration", max_model_len=16384,
            max_tokens=16384, top_p=1.0, prompt_text="grounding", fix_dollars=True,
            known_good=_KNOWN_GOOD, bad_versions=_BAD_1B),
)}
DEFAULT = "lightonocr-2-1b"
assert tuple(PROFILES) == MODEL_PROFILES, "config/schema.py lists the profiles by name too"


def get(name: str) -> Profile:
    """The profile called ``name``; ValueError naming the choices for another."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"model_profile = {name!r} is not a known model profile; choose one "
                         f"of {', '.join(repr(n) for n in PROFILES)}") from None


def of(config: Config) -> Profile:
    """The configuration's profile."""
    return get(config.model_profile)


def _given(config: Config, section: Section, name: str) -> bool:
    """Whether ``section.name`` holds a value of the user's own rather than the built-in
    default. The default (what config.example.toml writes too) stands for the profile's
    value: a copied example file then follows ``model_profile``."""
    from dataclasses import fields

    cfg = getattr(config, section)
    default = next(f.default for f in fields(cfg) if f.name == name)
    return bool(getattr(cfg, name) != default)


def model_id(config: Config, section: Section) -> str:
    """``vllm.model`` / ``remote.model`` as set, else the profile's model."""
    value: str = getattr(config, section).model
    return value if _given(config, section, "model") else of(config).hf_id


def sampling(config: Config, section: Section) -> tuple[float, float]:
    """Temperature and top_p: the section's values where the user set them, else the
    profile's (LightOn's client samples generation 3 at top_p 1.0, generation 2 at 0.9)."""
    profile, cfg = of(config), getattr(config, section)
    temperature = cfg.temperature if _given(config, section, "temperature") \
        else profile.temperature
    top_p = cfg.top_p if _given(config, section, "top_p") else profile.top_p
    return float(temperature), float(top_p)


def max_tokens(config: Config, section: Section) -> int:
    """The most tokens a page's answer may take: as set, else the profile's, which is what
    the model's sequence leaves after the largest page's prompt, at most."""
    profile, cfg = of(config), getattr(config, section)
    if _given(config, section, "max_tokens"):
        return int(cfg.max_tokens)
    return min(profile.max_tokens, profile.max_model_len - profile.max_prompt_tokens)
