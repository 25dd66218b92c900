"""LightOnOCR-2-1B's rules, defined once for every engine that runs the model.

The embedded vLLM engine and the remote engine send the same requests and read the
answers the same way: pages scaled to 1540 px on the longest side, the image alone as
the prompt (a text prompt makes the model echo it), one warmer retry for a page that
looped, and Markdown turned into :class:`PageText`.
"""

from __future__ import annotations

import math
import re

from ocrwatch.core.domain import PageText
from ocrwatch.core.invisible import strip_invisible
from ocrwatch.core.textutil import markdown_to_text, repeats_itself, strip_controls
from ocrwatch.engines.base import ReadPolicy

# The model was made for pages whose longest side is 1540 px: every page is fitted to it,
# a smaller one enlarged and a larger one shrunk (pages.scale_to, with the engine's
# max_side); its text would otherwise be a few pixels high for the encoder.
MAX_SIDE = 1540
PATCH = 28  # pixels per image token side (Pixtral encoder with a 2x2 merge)
MAX_IMAGE_TOKENS = math.ceil(MAX_SIDE / PATCH) ** 2  # 3025
TEMPLATE_TOKENS = 32  # the chat template around the image, with room to spare
# One user turn holding only the image, for tokenizers without a usable chat template.
PROMPT = ("<|im_start|>system<|im_end|>\n<|im_start|>user\n<|image_pad|><|im_end|>\n"
          "<|im_start|>assistant\n")
RETRY_TEMPERATURE = 0.6  # a page that looped is tried once more, less greedily


def _grid(width: int, height: int, max_side: int) -> tuple[int, int]:
    """Image tokens across and down of a page once fitted to ``max_side``."""
    scale = max_side / max(width, height, 1)
    w = max(1, round(width * scale))
    h = max(1, round(height * scale))
    return math.ceil(w / PATCH), math.ceil(h / PATCH)


def image_tokens(width: int, height: int, max_side: int = MAX_SIDE) -> int:
    """Image tokens of a page once fitted to ``max_side`` on its longest side."""
    across, down = _grid(width, height, max_side)
    return min(MAX_IMAGE_TOKENS, across * down)


def prompt_tokens(width: int, height: int, max_side: int = MAX_SIDE) -> int:
    """A page's whole prompt, counted as the memory plan counts it: its image tokens, a
    break token per row of them, and the template."""
    across, down = _grid(width, height, max_side)
    return min(MAX_IMAGE_TOKENS, across * down) + down + TEMPLATE_TOKENS


# Prompt of the largest page: 55 rows of 55 image tokens, a break token per row, template.
MAX_PROMPT_TOKENS = prompt_tokens(MAX_SIDE, MAX_SIDE)  # 3112


def looped(text: str, finish: str, *, ignore_eos: bool = False) -> bool:
    """The model ran out of tokens or kept writing the same thing: worth a warmer retry.

    The one place that decides it, for every engine that runs the model. With
    ``ignore_eos`` (benchmarks: every page runs to max_tokens on purpose) no page loops.
    """
    if ignore_eos:
        return False
    return finish == "length" or repeats_itself(text)


def loop_warning(finish: str) -> str:
    """What a page that still looped after the retry carries into its index row."""
    if finish == "length":
        return "the model ran out of tokens before the page ended; the text may be incomplete"
    return "the model repeated itself on this page; the text may hold repeated lines"


EMPTY_ANSWER = "the model's answer for this page was empty"
# A short answer that opens like these is the model (or a filter in front of it)
# declining, not a page's text. Only short answers are looked at: a letter that says
# "I'm sorry, I cannot come" runs on; at worst a short note's original is kept.
_REFUSAL = re.compile(
    r"^\W*(?:I['’]?m sorry|I am sorry|sorry,|I (?:can(?:no|['’])t|am unable to|"
    r"won['’]t) (?:help|assist|comply|provide|process|do|transcribe|read|fulfil)|"
    r"as an AI\b)", re.IGNORECASE)
REFUSAL_MAX = 300
_PLACEHOLDERS = re.compile(r"!\[[^\]]*\]\([^)]*\)|<!--.*?-->|<img\b[^>]*>",
                           re.IGNORECASE | re.DOTALL)  # characters: a refusal is a sentence or two


def doubt(text: str, finish: str, looped: bool) -> str | None:
    """Why an answer of the model is not a whole reading of its page, or None.

    ``text`` is the answer as plain text (markup gone), ``finish`` the finish reason it
    ended with, ``looped`` whether it still looped after the warmer retry
    (:func:`looped`). The one place that decides it, for every engine that runs the
    model: such a page is indexed as read, and its file's original is kept.
    """
    words = text.strip()
    if looped or finish == "length":
        return loop_warning("length" if finish == "length" else finish)
    if finish == "content_filter":
        return ("the server's content filter withheld or cut the model's answer "
                "(finish_reason content_filter)")
    if finish != "stop":
        return f"the model's answer ended with finish_reason {finish!r}, not 'stop'"
    if not words:
        return EMPTY_ANSWER
    if not any(ch.isalnum() for ch in words):
        return ("the model's answer holds no words, only markup or marks "
                f"({_quoted(words)})")
    if len(words) <= REFUSAL_MAX and _REFUSAL.match(words):
        return f"the model declined to read the page ({_quoted(words)})"
    return None


def _quoted(text: str, most: int = 60) -> str:
    one_line = " ".join(text.split())
    return repr(one_line if len(one_line) <= most else one_line[:most] + "…")


def page_text(markdown: str, warnings: list[str] | None = None, *, finish: str = "stop",
              looped: bool = False) -> PageText:
    """The model's Markdown as the sidecars and the index want it: no control characters
    (an ESC or NUL from a model or server is never written), no invisible format
    characters, and a page whose answer is not a whole reading (:func:`doubt`) marked so
    that its file's original is kept."""
    warnings = list(warnings or [])
    visible, hidden = strip_invisible(markdown)
    cleaned = strip_controls(visible).strip()
    removed = len(visible.strip()) - len(cleaned)
    if removed > 0:
        warnings.append(f"{removed} control character{'s' if removed != 1 else ''} removed "
                        "from the model's answer")
    if hidden:
        warnings.append(f"{hidden} invisible format character{'s' if hidden != 1 else ''} "
                        "(zero-width, direction overrides) removed from the model's answer")
    text = strip_controls(markdown_to_text(cleaned))
    # Judged on the text without the markup that stands for no words: an image
    # placeholder's alt text ("image"), an HTML comment, an <img> tag.
    why = doubt(markdown_to_text(_PLACEHOLDERS.sub(" ", cleaned)), finish, looped)
    if why == EMPTY_ANSWER and cleaned:
        why = f"the model's answer holds no words, only markup ({_quoted(cleaned)})"
    return PageText(markdown=cleaned + "\n" if cleaned else "", text=text,
                    warnings=warnings, keep_original=why)


def failed_page(reason: str) -> PageText:
    """A page that could not be read; its file fails with ``reason``."""
    # The file's verdict says "page 2 of 5 could not be read: …" (pipeline.judge): the
    # reason alone here, or the user read "could not be read" twice.
    return PageText(markdown="", text="", error=reason)


class LightOnOCREngine:
    """What the engines that run this model (vllm, remote) say about pages: the model's
    largest side, and the read policy each engine sets in ``_policy``."""

    _policy: ReadPolicy

    @property
    def max_side(self) -> int | None:
        return MAX_SIDE

    @property
    def policy(self) -> ReadPolicy:
        return self._policy
