"""How the engines that run a LightOnOCR model read its answers, for every profile.

The embedded vLLM engine and the remote engine send the same requests and read the
answers the same way: what the request holds and how it is sampled come from the model's
profile (:mod:`ocrwatch.engines.profiles`); here a page that looped is recognised for one
warmer retry, and the answer (Markdown, or LightOnOCR-3's layout blocks) is turned into
:class:`PageText`.
"""

from __future__ import annotations

import logging
import re

from ocrwatch.core.domain import PageText
from ocrwatch.core.invisible import strip_invisible
from ocrwatch.core.layout import Block, PageLayout
from ocrwatch.core.textutil import markdown_to_text, repeats_itself, strip_controls
from ocrwatch.engines import grounding
from ocrwatch.engines.base import ReadPolicy
from ocrwatch.engines.profiles import Profile

log = logging.getLogger(__name__)

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
              looped: bool = False, profile: Profile | None = None,
              size: tuple[int, int] | None = None, keep_margins: bool = False) -> PageText:
    """The model's answer as the sidecars and the index want it: no control characters
    (an ESC or NUL from a model or server is never written), no invisible format
    characters, and a page whose answer is not a whole reading (:func:`doubt`) marked so
    that its file's original is kept.

    With a grounding ``profile`` the answer's layout blocks become the page's layout (boxes
    in the pixels of the ``size`` image that was read) and its Markdown leaves out the
    running headers, footers and page numbers unless ``keep_margins``; an answer that is
    not in the block format is kept as plain text, with a warning."""
    warnings = list(warnings or [])
    blocks: tuple[Block, ...] = ()
    judged = markdown
    if profile is not None and profile.fix_dollars:
        markdown = grounding.fix_escaped_dollars(markdown)
    if profile is not None and profile.grounding:
        reading = grounding.parse(markdown)
        warnings.extend(reading.warnings)
        if reading.blocks:
            judged = grounding.markdown(reading.blocks, keep_margins=True)
            markdown = grounding.markdown(reading.blocks, keep_margins=keep_margins)
            if size is not None:
                blocks = grounding.layout_blocks(reading.blocks, *size)
        elif markdown.strip():
            note = ("the model's grounding answer held no layout blocks: its text is kept as "
                    "plain text, without a layout")
            log.warning("%s", note)
            warnings.append(note)
            judged = markdown
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
    # placeholder's alt text ("image"), an HTML comment, an <img> tag. A page whose only
    # words are its running header is judged on them: it was read whole.
    judged_clean = strip_controls(strip_invisible(judged)[0]).strip()
    why = doubt(markdown_to_text(_PLACEHOLDERS.sub(" ", judged_clean)), finish, looped)
    if why == EMPTY_ANSWER and judged_clean:
        why = f"the model's answer holds no words, only markup ({_quoted(judged_clean)})"
    layout = None
    if blocks and size is not None:
        layout = PageLayout(size[0], size[1], blocks=blocks)
    return PageText(markdown=cleaned + "\n" if cleaned else "", text=text,
                    warnings=warnings, keep_original=why, layout=layout)


def failed_page(reason: str) -> PageText:
    """A page that could not be read; its file fails with ``reason``."""
    # The file's verdict says "page 2 of 5 could not be read: …" (pipeline.judge): the
    # reason alone here, or the user read "could not be read" twice.
    return PageText(markdown="", text="", error=reason)


class LightOnOCREngine:
    """What the engines that run a LightOnOCR model (vllm, remote) say about pages: the
    model's largest side, from the profile each engine sets in ``_profile``, and the read
    policy each sets in ``_policy``."""

    _policy: ReadPolicy
    _profile: Profile

    @property
    def profile(self) -> Profile:
        return self._profile

    @property
    def max_side(self) -> int | None:
        return self._profile.max_side

    @property
    def policy(self) -> ReadPolicy:
        return self._policy
