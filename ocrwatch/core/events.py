"""What happens to a file, as events that anything may subscribe to.

The daemon publishes one :class:`Events` stream (``Context.events``): a file queued, a page
read, a file done, failed or put back for later, its original archived or deleted. The
hook runner, the batch notification, the metrics and the tray subscribe to it instead of
being called by name from the stages, so a new listener (a plugin, a log of its own) is
one ``subscribe`` call and no change to the stages.

Delivery is synchronous, on the publisher's thread, in the order of subscription: a
subscriber that must not hold a reader up hands the event to a thread of its own (the hook
runner queues it). A subscriber that raises is logged and the others still get the event:
no listener can fail a file.

Two pairs of events exist for subscribers that must survive a kill or wait for a quiet
moment (the hook runner): :class:`FileCommitting` comes just before a file's index rows
are committed (:class:`FileDone` after, :class:`FileNotCommitted` when it was not after
all), and :class:`OutcomeStarted`/:class:`OutcomeEnded` bracket the recording of a file's
outcome, whatever it is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ocrwatch.core.domain import Job, PageText

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FileQueued:
    """A settled file was queued for reading (new, or its content changed)."""

    path: Path
    changed: bool = False  # known before with another content


@dataclass(frozen=True)
class PageRead:
    """A page came back from the engine (``seconds``: None when no engine was asked: a
    PDF page's own text, a blank page)."""

    engine: str
    seconds: float | None
    results: Sequence[PageText]


@dataclass(frozen=True)
class FileCommitting:
    """``source``'s outputs are written and its index rows are about to be committed."""

    source: Path
    outputs: Mapping[str, Path]  # output name ("md", "txt", "pdf") -> the file written
    pages: int


@dataclass(frozen=True)
class FileNotCommitted:
    """``source`` was not marked done after :class:`FileCommitting` (it changed meanwhile,
    the disk is full...): nothing about it is due."""

    source: Path


@dataclass(frozen=True)
class FileDone:
    """A file was read and indexed, and its original archived, deleted or kept."""

    job: Job
    pages: Sequence[PageText]
    engine: str
    original: Path | None  # where the original is now; None when on_success deleted it
    outputs: Mapping[str, Path] = field(default_factory=dict)  # where each output is now

    @property
    def source(self) -> Path:
        """Where the file was read."""
        return self.job.path


@dataclass(frozen=True)
class FileFailed:
    """A file was given up on for good, with the reason the user sees."""

    path: Path
    reason: str


@dataclass(frozen=True)
class FileDeferred:
    """A passing trouble: the file goes back to the queue (``again``) or, after
    ``max_attempts``, is given up on."""

    path: Path
    reason: str
    again: bool


@dataclass(frozen=True)
class OriginalRetired:
    """A read file's original was moved to the archive (``to`` its new place) or deleted
    (``to`` None), as ``on_success`` asked."""

    source: Path
    to: Path | None


@dataclass(frozen=True)
class OutcomeStarted:
    """A file's outcome is being recorded (whichever it is)."""


@dataclass(frozen=True)
class OutcomeEnded:
    """The outcome announced by :class:`OutcomeStarted` is recorded."""


E = TypeVar("E")
Handler = Callable[[Any], object]


class Events:
    """A synchronous, thread-safe publish/subscribe stream of typed events."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: tuple[tuple[type, Handler], ...] = ()

    def subscribe(self, kind: type[E], handler: Callable[[E], object]) -> Callable[[], None]:
        """Call ``handler`` with each event of type ``kind`` (or a subclass) published
        from now on; returns the function that unsubscribes it."""
        entry = (kind, handler)
        with self._lock:
            self._subscribers = (*self._subscribers, entry)

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers = tuple(s for s in self._subscribers if s is not entry)

        return unsubscribe

    def publish(self, event: object) -> None:
        """Hand ``event`` to its subscribers, in the order they subscribed. A subscriber
        that raises is logged; the others still get the event."""
        for kind, handler in self._subscribers:  # a snapshot: subscribing meanwhile is safe
            if not isinstance(event, kind):
                continue
            try:
                handler(event)
            except Exception:
                log.exception("a subscriber to %s failed (%r); the others carry on",
                              type(event).__name__, handler)
