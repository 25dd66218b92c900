"""The messages on the pipe between the daemon and its vLLM worker process.

One frozen dataclass per kind; both sides import this module and nothing else decides
what goes over the pipe. Each side dispatches on the message's type and refuses any
other object with :class:`UnknownMessage`. Standard library only: the worker process
imports it wherever vLLM runs.

=========================================  ==========================================
the daemon sends                           the worker answers
=========================================  ==========================================
(after start, nothing)                     :class:`Ready` or :class:`Failed`
a standby (settings["standby"]): nothing   :class:`StandbyReady` once vLLM is imported
:class:`Start` to a standby                :class:`Ready` or :class:`Failed`
:class:`Add`                               :class:`Done` when the page ends, or
                                           :class:`Refused` at once
:class:`Sleep` / :class:`Wake`             :class:`Slept` / :class:`Woke`
:class:`Stop`                              :class:`Stopped`, then it exits
(while pages are in flight, unasked)       :class:`VllmFigures`, at most once a second
=========================================  ==========================================

The daemon sends Sleep, Wake and Stop only with no page in flight. A failure inside the
engine is answered :class:`Failed` and the worker exits: its engine may be broken, and a
fresh process is the sure way back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ocrwatch.core.errors import EngineError

# -- what the daemon sends -------------------------------------------------------------------


@dataclass(frozen=True)
class Sampling:
    """How one page is sampled."""

    temperature: float
    top_p: float
    max_tokens: int
    ignore_eos: bool = False  # benchmarks: every page runs to max_tokens


@dataclass(frozen=True)
class Start:
    """To a standby: the settings to make the engine with."""

    settings: dict[str, Any]


@dataclass(frozen=True)
class Add:
    """One page to read: ``image`` is width, height and RGB bytes."""

    rid: str
    image: tuple[int, int, bytes]
    sampling: Sampling


@dataclass(frozen=True)
class Sleep:
    """Put the model to sleep (weights and KV cache off the card)."""


@dataclass(frozen=True)
class Wake:
    """Wake the sleeping model."""


@dataclass(frozen=True)
class Stop:
    """End the worker."""


ToWorker = Start | Add | Sleep | Wake | Stop

# -- what the worker answers -----------------------------------------------------------------


@dataclass(frozen=True)
class StandbyReady:
    """A standby's imports are done (torch, vLLM, the model's class, in
    ``import_seconds``); process ``pid`` waits for :class:`Start` to become the worker."""

    import_seconds: float
    pid: int


@dataclass(frozen=True)
class Ready:
    """The engine is made; ``info`` holds what the backend reports about itself."""

    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Failed:
    """The engine failed (to start, or while reading); the worker exits after this."""

    reason: str
    oom: bool = False  # the GPU ran out of memory


@dataclass(frozen=True)
class Done:
    """A page ended: its text, the tokens written, why it stopped ("stop", "length"), and
    the most pages that were in flight while it was; ``received`` and ``taken``: when
    (``time.monotonic``, one clock for every process of the machine) the worker took its
    Add off the pipe and when vLLM's front end had taken the page (its image processed)."""

    rid: str
    text: str
    tokens: int
    finish: str
    peers: int = 1
    received: float = 0.0
    taken: float = 0.0


@dataclass(frozen=True)
class Refused:
    """vLLM refused the page (e.g. a prompt too long); the engine is still fine."""

    rid: str
    reason: str


@dataclass(frozen=True)
class Slept:
    seconds: float


@dataclass(frozen=True)
class Woke:
    seconds: float


@dataclass(frozen=True)
class Stopped:
    """The answer to :class:`Stop`."""


@dataclass(frozen=True)
class Figure:
    """One series of vLLM's own Prometheus figures, as its ``get_metrics()`` gives it:
    ``kind`` is "gauge", "counter" or "histogram"; ``name`` vLLM's (``vllm:...``);
    ``labels`` its labels; a histogram's ``buckets`` are (upper bound, cumulative count)
    with "+Inf" last, and ``value`` is then its count."""

    kind: str
    name: str
    labels: tuple[tuple[str, str], ...] = ()
    value: float = 0.0
    buckets: tuple[tuple[str, float], ...] = ()
    sum: float = 0.0


@dataclass(frozen=True)
class VllmFigures:
    """vLLM's own figures in the worker (KV cache in use, requests running and waiting,
    tokens, time to first token), sent while pages are in flight and once when the last
    one ends; ``taken`` is the worker's ``time.time()``."""

    taken: float
    figures: tuple[Figure, ...]


FromWorker = (StandbyReady | Ready | Failed | Done | Refused | Slept | Woke | Stopped
              | VllmFigures)


class UnknownMessage(EngineError):
    """Something that is not a message of this module came over the worker's pipe."""

    def __init__(self, message: object, side: str) -> None:
        super().__init__(
            f"the {side} got {type(message).__name__} {message!r:.80} on the vLLM worker's "
            "pipe, which is no message it knows; the daemon and the worker are from "
            "different versions of ocrwatch: restart the daemon.")
        self.message = message
