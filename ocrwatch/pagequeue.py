"""The bounded queue between the threads that open pages and the threads that read them.

Opened pages wait here in arrival order, one handed out per ``get``; every engine takes
one page at a time and does its own admission (vLLM groups pages inside its worker). The
bound counts pages handed out and not yet marked :meth:`~PageQueue.done` as well as the
waiting ones, so that the pages in memory (opened, waiting or being read) never exceed it
and a 500-page PDF is never opened whole.

The queue waits on a condition it may share with its owner (the scheduler): the owner's
other state (paused, stopping) is then checked under the same lock, and one
``notify_all`` wakes every waiter.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


def _never() -> bool:
    return False


class PageQueue(Generic[T]):
    """A FIFO of at most ``bound`` pages in hand (waiting, or out and not yet done)."""

    def __init__(self, bound: int, cond: threading.Condition | None = None) -> None:
        if bound < 1:
            raise ValueError(f"a page queue holds at least one page, not {bound}")
        self.bound = bound
        self._cond = cond if cond is not None else threading.Condition()
        self._items: deque[T] = deque()
        self._out = 0  # handed out by get() and not yet done()
        self._closed = False

    def __len__(self) -> int:
        """Pages waiting to be handed out."""
        with self._cond:
            return len(self._items)

    @property
    def in_hand(self) -> int:
        """Pages waiting or handed out and not yet done: what the bound counts."""
        with self._cond:
            return len(self._items) + self._out

    @property
    def closed(self) -> bool:
        return self._closed

    def full(self) -> bool:
        with self._cond:
            return len(self._items) + self._out >= self.bound

    def put(self, item: T, *, timeout: float | None = None,
            cancel: Callable[[], bool] = _never) -> bool:
        """Queue ``item`` once there is room; False (item not queued) when the queue is
        closed, ``cancel()`` turns true, or ``timeout`` seconds pass first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self.full() and not self._closed and not cancel():
                left = 1.0 if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 1.0))
            if self._closed or cancel():
                return False
            self._items.append(item)
            self._cond.notify_all()
            return True

    def get(self, *, timeout: float | None = None,
            ready: Callable[[], bool] = lambda: True) -> T | None:
        """The oldest waiting page, once there is one and ``ready()`` holds; None when the
        queue is closed or ``timeout`` seconds pass first. Mark it :meth:`done` once read."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._closed and not (self._items and ready()):
                left = 1.0 if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(min(left, 1.0))
            if self._closed:
                return None
            self._out += 1
            return self._items.popleft()

    def done(self, count: int = 1) -> None:
        """``count`` pages handed out are read: their room is free again."""
        with self._cond:
            if count > self._out:
                raise ValueError(f"{count} pages marked done, only {self._out} handed out")
            self._out -= count
            self._cond.notify_all()

    def drain(self) -> list[T]:
        """Take every waiting page out at once, in order (a pause drops them unread)."""
        with self._cond:
            items = list(self._items)
            self._items.clear()
            self._cond.notify_all()
            return items

    def close(self) -> None:
        """Wake every waiter; from now on ``put`` queues nothing and ``get`` gives None."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
