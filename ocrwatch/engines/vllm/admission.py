"""Which pages go into the engine next, and what happens to a page whose try went wrong.

Pure bookkeeping, no threads and no I/O: the engine holds its lock around every call.
Each page's ``done`` is set exactly once, so a page read again after its worker died is
handed back (and indexed) once.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ocrwatch.core.domain import Page
from ocrwatch.core.errors import EngineUnavailable
from ocrwatch.engines.vllm.messages import Done

if TYPE_CHECKING:
    from PIL import Image

SMALLER = 0.7  # a page that kills the worker alone is tried once more at this scale


@dataclass(eq=False)
class Request:
    """One page on its way through the engine."""

    page: Page
    image: Image.Image
    tokens: int
    arrived: float
    temperature: float
    done: threading.Event = field(default_factory=threading.Event)
    output: Done | None = None
    looped: bool = False  # its output looped (lightonocr.looped), after the retry too
    error: str | None = None
    unavailable: EngineUnavailable | None = None
    alone: bool = False  # admitted only with nothing else in flight
    deaths: int = 0  # worker deaths while this page was in flight
    alone_deaths: int = 0
    shrunk: bool = False
    retried_loop: bool = False
    sent_alone: bool = False
    sent: bool = False  # handed to the worker
    # The page's way through, by time.monotonic (one clock for the worker's process too):
    # queued here, handed to the worker (the feeder's debug log tells each page's).
    queued_at: float = field(default_factory=time.monotonic)
    sent_at: float = 0.0

    def finish(self, *, output: Done | None = None, looped: bool = False,
               error: str | None = None, unavailable: EngineUnavailable | None = None) -> None:
        self.output, self.looped = output, looped
        self.error, self.unavailable = error, unavailable
        self.done.set()


def pick_next(waiting: Sequence[tuple[int, float]], last_tokens: int | None, now: float,
              admit_wait: float) -> int:
    """Which waiting page (image tokens, arrival time; oldest first) goes in next.

    The one most like the page admitted last, so that like sizes decode together; but
    the oldest once it has waited ``admit_wait`` seconds, so no page waits longer than
    that. With ``admit_wait`` 0 (the default) that is always the oldest: arrival order,
    which the engine benchmark measured as fast on mixed sizes (docs/gpu.md).
    """
    if last_tokens is None or now - waiting[0][1] >= admit_wait:
        return 0
    return min(range(len(waiting)),
               key=lambda i: (abs(waiting[i][0] - last_tokens), waiting[i][1]))


def smaller(image: Image.Image) -> Image.Image:
    w, h = image.size
    return image.resize((max(1, round(w * SMALLER)), max(1, round(h * SMALLER))))


class Admission:
    """The pages waiting and the pages in flight, and the rules that move them."""

    def __init__(self, max_in_flight: int, admit_wait: float,
                 retry_temperature: float = 0.6) -> None:
        self.max_in_flight = max_in_flight
        self.retry_temperature = retry_temperature  # the profile's, for a page that looped
        self.admit_wait = admit_wait
        self.pending: list[Request] = []
        self.in_flight: dict[str, Request] = {}
        self.most_in_flight = 0
        self._last_tokens: int | None = None
        self._ids = itertools.count(1)

    def sent_count(self) -> int:
        return sum(r.sent for r in self.in_flight.values())

    def choose(self, now: float) -> list[Request]:
        """Pages to admit now, in order, taken off the queue."""
        chosen: list[Request] = []
        if any(r.alone for r in self.in_flight.values()):
            return chosen
        room = self.max_in_flight - len(self.in_flight)
        while room > 0 and self.pending:
            oldest = self.pending[0]
            pick = oldest if oldest.alone else self.pending[pick_next(
                [(r.tokens, r.arrived) for r in self.pending], self._last_tokens, now,
                self.admit_wait)]
            if pick.alone and (self.in_flight or chosen):
                break
            self.pending.remove(pick)
            chosen.append(pick)
            self._last_tokens = pick.tokens
            room -= 1
            if pick.alone:
                break
        return chosen

    def admit(self, requests: list[Request]) -> list[tuple[str, Request]]:
        """Give each chosen page a request id and count it in flight."""
        alone = not self.in_flight and len(requests) == 1
        out = []
        for request in requests:
            rid = f"p{next(self._ids)}"
            request.sent_alone = alone
            self.in_flight[rid] = request
            out.append((rid, request))
        self.most_in_flight = max(self.most_in_flight, len(self.in_flight))
        return out

    def finished(self, rid: str, output: Done, looped: bool) -> Request | None:
        """The page that ended, or None when it goes round again (looped) or is unknown."""
        request = self.in_flight.pop(rid, None)
        if request is None:
            return None
        if looped and not request.retried_loop:
            request.retried_loop = True
            request.temperature = self.retry_temperature
            request.sent = False
            self.pending.insert(0, request)
            return None
        request.finish(output=output, looped=looped)
        return request

    def refused(self, rid: str, reason: str) -> None:
        """vLLM refused the page: once more alone at a smaller size, then it fails."""
        request = self.in_flight.pop(rid, None)
        if request is None:
            return
        if request.shrunk:
            request.finish(error=reason)
            return
        request.image, request.shrunk = smaller(request.image), True
        request.alone, request.sent = True, False
        self.pending.insert(0, request)

    def lost(self, why: str) -> None:
        """The worker died: its pages go back to the front of the queue, or fail.

        Once with the others; after a second death alone; a page that dies alone goes
        once more at a smaller size, then fails with ``why``.
        """
        again = []
        for request in self.in_flight.values():
            request.sent = False
            request.deaths += 1
            if request.sent_alone:
                request.alone_deaths += 1
            if request.alone_deaths >= 2 or (request.alone_deaths and request.shrunk):
                request.finish(error=why)
                continue
            if request.alone_deaths == 1:
                request.image, request.shrunk = smaller(request.image), True
            request.alone = request.deaths >= 2 or request.alone_deaths > 0
            again.append(request)
        self.in_flight.clear()
        self.pending[:0] = sorted(again, key=lambda r: r.arrived)

    def fail_pending(self, exc: EngineUnavailable) -> None:
        """The worker cannot start: every waiting page hears why (its file goes back)."""
        pending, self.pending = self.pending, []
        for request in pending:
            request.finish(unavailable=exc)

    def close(self) -> None:
        for request in [*self.in_flight.values(), *self.pending]:
            request.finish(error="the vLLM engine was closed")
        self.in_flight.clear()
        self.pending.clear()
