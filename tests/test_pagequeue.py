"""The bounded page queue between the preparers and the readers: the bound kept, every
page once and in order, and a close that wakes whoever waits."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from helpers import wait_for
from hypothesis import given, settings
from hypothesis import strategies as st

from ocrwatch.pagequeue import PageQueue


class Watched(threading.Condition):
    """A condition that counts the threads inside ``wait``: a test knows a thread waits."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = 0

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting += 1  # under the lock, as wait must be
        try:
            return super().wait(timeout)
        finally:
            self.waiting -= 1


def started(target: Callable[..., Any], *args: Any) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def test_a_full_queue_makes_put_wait_until_a_page_is_done() -> None:
    cond = Watched()
    q: PageQueue[int] = PageQueue(2, cond)
    assert q.put(1) and q.put(2)
    assert q.full() and q.in_hand == 2
    assert q.put(3, timeout=0.2) is False  # no room: not queued
    assert q.get() == 1
    # Handed out but not yet read: it still counts against the bound.
    assert q.full() and len(q) == 1 and q.in_hand == 2
    assert q.put(3, timeout=0.2) is False
    queued = threading.Event()
    thread = started(lambda: q.put(3) and queued.set())
    wait_for(lambda: cond.waiting == 1, 5, "put waiting for room")
    assert not queued.is_set() and len(q) == 1
    q.done()
    assert queued.wait(5), "put did not wake when a page was done"
    thread.join(5)
    assert [q.get(), q.get()] == [2, 3] and q.in_hand == 2


def test_close_wakes_a_waiting_put_and_a_waiting_get() -> None:
    cond = Watched()
    full: PageQueue[int] = PageQueue(1, cond)
    full.put(0)
    empty: PageQueue[int] = PageQueue(1, cond)
    answers: dict[str, object] = {}
    putter = started(lambda: answers.update(put=full.put(1)))
    getter = started(lambda: answers.update(get=empty.get()))
    wait_for(lambda: cond.waiting == 2, 5, "put and get waiting")
    start = time.monotonic()
    full.close()
    empty.close()
    putter.join(5)
    getter.join(5)
    # Each waits one second at most between checks: woken at once, not at that second.
    assert time.monotonic() - start < 0.5, "close did not wake the waiters at once"
    assert answers == {"put": False, "get": None}
    assert full.closed and full.put(2) is False and full.get() is None
    assert len(full) == 1  # nothing put after the close


def test_cancel_ends_a_waiting_put_without_queueing() -> None:
    cond = Watched()
    q: PageQueue[int] = PageQueue(1, cond)
    q.put(0)
    paused = False
    answer: list[bool] = []
    thread = started(lambda: answer.append(q.put(1, cancel=lambda: paused)))
    wait_for(lambda: cond.waiting == 1, 5, "put waiting for room")
    with cond:  # the owner's state changes under the shared lock; one notify wakes it
        paused = True
        cond.notify_all()
    thread.join(5)
    assert answer == [False] and len(q) == 1


def test_get_hands_out_nothing_until_ready() -> None:
    cond = Watched()
    q: PageQueue[str] = PageQueue(4, cond)
    q.put("page")
    reading = False
    assert q.get(timeout=0.2, ready=lambda: reading) is None
    got: list[str | None] = []
    thread = started(lambda: got.append(q.get(ready=lambda: reading)))
    wait_for(lambda: cond.waiting == 1, 5, "get waiting until ready")
    assert got == [] and len(q) == 1
    with cond:
        reading = True
        cond.notify_all()
    thread.join(5)
    assert got == ["page"]


def test_drain_takes_the_waiting_pages_in_order_and_frees_their_room() -> None:
    q: PageQueue[int] = PageQueue(3)
    for n in range(3):
        q.put(n)
    assert q.get() == 0
    assert q.drain() == [1, 2]
    assert len(q) == 0 and q.in_hand == 1  # the page handed out is still being read
    assert q.put(9) and q.put(10) and not q.put(11, timeout=0.05)
    q.done()
    assert q.in_hand == 2


def test_done_for_more_pages_than_handed_out_and_an_empty_bound_are_refused() -> None:
    q: PageQueue[int] = PageQueue(2)
    q.put(1)
    with pytest.raises(ValueError, match="only 0 handed out"):
        q.done()
    with pytest.raises(ValueError, match="at least one page"):
        PageQueue(0)


@settings(max_examples=40, deadline=None)
@given(bound=st.integers(min_value=1, max_value=6),
       producers=st.integers(min_value=1, max_value=3),
       consumers=st.integers(min_value=1, max_value=4),
       pages=st.integers(min_value=0, max_value=50))
def test_threads_lose_no_page_keep_the_order_and_the_bound(
        bound: int, producers: int, consumers: int, pages: int) -> None:
    cond = threading.Condition()
    q: PageQueue[tuple[int, int]] = PageQueue(bound, cond)
    got: list[tuple[int, int]] = []  # in the order get() handed them out
    refused: list[tuple[int, int]] = []
    most = 0

    def produce(who: int) -> None:
        for n in range(pages):
            if not q.put((who, n), timeout=20):
                refused.append((who, n))

    def consume() -> None:
        nonlocal most
        while True:
            with cond:  # the get and its record in one hold: the record keeps its order
                page = q.get(timeout=20)
                if page is None:
                    return
                got.append(page)
                most = max(most, q.in_hand)
            q.done()

    makers = [started(produce, who) for who in range(producers)]
    readers = [started(consume) for _ in range(consumers)]
    for thread in makers:
        thread.join(30)
    wait_for(lambda: len(got) == producers * pages and q.in_hand == 0, 30, "every page read",
             interval=0.005)
    q.close()
    for thread in readers:
        thread.join(30)
    assert not any(t.is_alive() for t in makers + readers)
    assert refused == []
    assert sorted(got) == sorted((w, n) for w in range(producers) for n in range(pages))
    for who in range(producers):  # one FIFO: each producer's pages leave in its order
        assert [n for w, n in got if w == who] == list(range(pages))
    assert most <= bound
