"""What the model's answers mean for a page: a whole reading, or a doubt that keeps the
original (ocrwatch/engines/lightonocr.py, shared by the vLLM and remote engines).

vLLM itself cannot be installed here (CUDA wheels); the vLLM engine's page builder is
fed objects of the shape vLLM's ``LLMEngine.step()`` returns (``RequestOutput`` holding
``CompletionOutput``: text, token ids, finish reason), through the engine's real backend
code (``VllmBackend.step``) and page builder (``page_of``). The GPU machine's tests run
the same code on real outputs. The remote engine is tested over real HTTP in
``tests/reliability/test_doubts.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from ocrwatch.engines import lightonocr
from ocrwatch.engines.vllm.backends import VllmBackend
from ocrwatch.engines.vllm.engine import page_of


@dataclass
class CompletionOutput:
    """The fields of ``vllm.outputs.CompletionOutput`` the engine reads, as vLLM 0.26
    has them."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None = None
    logprobs: Any = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    """The fields of ``vllm.outputs.RequestOutput`` the engine reads."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


class StandInEngine:
    """``LLMEngine`` as far as the backend's ``step`` uses it: each step hands back the
    outputs it was given."""

    def __init__(self, outputs: list[RequestOutput]) -> None:
        self.outputs = outputs

    def step(self) -> list[RequestOutput]:
        out, self.outputs = self.outputs, []
        return out

    def has_unfinished_requests(self) -> bool:
        return bool(self.outputs)


def read_through_backend(text: str, finish: str | None, tokens: int) -> Any:
    backend = object.__new__(VllmBackend)  # no model: only step() and its bookkeeping
    backend._engine = StandInEngine([RequestOutput(  # type: ignore[assignment]
        "p1", None, [1] * 40,
        [CompletionOutput(0, text, list(range(tokens)), finish_reason=finish)], True)])
    backend._open = {"p1": 1}
    (done,) = backend.step()
    looped = lightonocr.looped(done.text, done.finish)
    return page_of(done, looped=looped)


DENSE = "| Item | Qty | Price |\n|---|---|---|\n" + "".join(
    f"| Bolt M{n} | {n * 3} | {n / 7:.2f} |\n" for n in range(4, 54))


@pytest.mark.parametrize(("text", "finish", "why"), [
    (DENSE[:900], "length", "ran out of tokens"),  # a dense page cut at max_tokens
    ("Total\n" + "row 17 | 0.00 |\n" * 120, "stop", "repeated itself"),  # a loop
    ("# Invoice", "abort", "finish_reason 'abort'"),
    ("", "stop", "was empty"),
    ("\u200b\u2060", "stop", "was empty"),
    ("![image](image_1.png)", "stop", "only markup"),
    ("I'm sorry, but I can't help with that.", "stop", "declined"),
], ids=["cut-off", "loop", "abort", "empty", "zero-width", "image-only", "refusal"])
def test_vllm_outputs_that_are_not_a_whole_reading_are_doubts(text: str, finish: str,
                                                               why: str) -> None:
    result = read_through_backend(text, finish, tokens=4096 if finish == "length" else 300)
    assert result.error is None
    assert result.keep_original is not None and why in result.keep_original, result


def test_a_whole_vllm_reading_keeps_nothing_back() -> None:
    result = read_through_backend("# Invoice 4711\n\n" + DENSE, "stop", tokens=700)
    assert result.keep_original is None and "Bolt M6\t18" in result.text
    # vLLM leaves finish_reason None on an output that ended without one: read as "stop".
    assert read_through_backend("# Page", None, tokens=3).keep_original is None


def test_a_benchmark_page_run_to_max_tokens_on_purpose_is_no_doubt() -> None:
    from ocrwatch.engines.vllm.messages import Done

    done = Done("p1", "# Page", 4096, "length")
    assert page_of(done, looped=False, ignore_eos=True).keep_original is None
    assert page_of(done, looped=False).keep_original is not None


def test_right_to_left_overrides_go_and_scripts_keep_their_joiners() -> None:
    """A direction override or zero-width space never reaches the sidecars; Arabic,
    Hebrew and Persian text keep what they need (ZWNJ inside a word, RLM)."""
    persian = "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"  # ZWNJ inside the word
    hebrew = "\u05e9\u05dc\u05d5\u05dd\u200f 42"
    answer = f"Invoice \u202egpj.exe\u202c to\u200bday\n\n{persian} {hebrew}"
    result = lightonocr.page_text(answer)
    assert "\u202e" not in result.markdown + result.text
    assert "\u200b" not in result.markdown + result.text and "today" in result.text
    assert persian in result.text and hebrew in result.text
    assert any("invisible format" in w for w in result.warnings), result.warnings
    assert result.keep_original is None


def test_a_failed_page_says_could_not_be_read_once() -> None:
    from ocrwatch.pipeline import judge

    verdict = judge({0: lightonocr.failed_page("the server answered HTTP 400: bad image")}, 1)
    assert verdict.error == "the page could not be read: the server answered HTTP 400: " \
        "bad image", verdict.error
