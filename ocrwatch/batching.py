"""Group prepared pages into engine batches.

The vision model's memory grows with the image tokens it encodes at once, and pages of
similar size run faster together, so the batcher bounds the tokens in a batch and keeps
sizes matched. It is pure (time is passed in) so that it can be tested exhaustively.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from ocrwatch.engines.base import BatchPolicy

T = TypeVar("T")

SIMILAR = 0.5  # two pages are "similar" when the smaller has at least half the tokens


@dataclass
class _Entry(Generic[T]):
    item: T
    tokens: int
    arrived: float


class Batcher(Generic[T]):
    """Holds waiting pages and hands out batches that respect a :class:`BatchPolicy`."""

    def __init__(self, policy: BatchPolicy, tokens: Callable[[T], int]) -> None:
        self.policy = policy
        self._tokens = tokens
        self._waiting: list[_Entry[T]] = []

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, item: T, now: float) -> None:
        self._waiting.append(_Entry(item, self._tokens(item), now))

    def _similar(self, a: int, b: int) -> bool:
        return not self.policy.size_matched or min(a, b) >= SIMILAR * max(a, b)

    def _plan(self) -> tuple[list[_Entry[T]], bool]:
        """The batch the oldest page would run in now, and whether it is full."""
        oldest = self._waiting[0]
        batch = [oldest]
        total = oldest.tokens
        limit = self.policy.max_tokens
        others = sorted(self._waiting[1:], key=lambda e: abs(e.tokens - oldest.tokens))
        low = high = oldest.tokens
        for entry in others:
            if len(batch) >= self.policy.max_pages:
                break
            # Similar to every page already in the batch, not only to the oldest.
            if not self._similar(min(low, entry.tokens), max(high, entry.tokens)):
                continue
            if limit is not None and total + entry.tokens > limit:
                continue
            batch.append(entry)
            total += entry.tokens
            low, high = min(low, entry.tokens), max(high, entry.tokens)
        # Full when one more page the size of the smallest here would not fit: a pair of
        # A4 pages runs at once instead of waiting for a half-size page that may never come.
        smallest = min(e.tokens for e in batch)
        full = len(batch) >= self.policy.max_pages or (
            limit is not None and total + smallest > limit
        )
        return batch, full

    def take(self, now: float, *, flush: bool = False) -> list[T] | None:
        """The next batch to run now, or ``None`` while its pages should wait for partners."""
        if not self._waiting:
            return None
        batch, full = self._plan()
        waited = now - self._waiting[0].arrived
        if not (full or flush or waited >= self.policy.partner_wait):
            return None
        chosen = {id(e) for e in batch}
        self._waiting = [e for e in self._waiting if id(e) not in chosen]
        return [e.item for e in batch]

    def next_deadline(self) -> float | None:
        """When the oldest waiting page stops waiting for a partner."""
        if not self._waiting:
            return None
        return self._waiting[0].arrived + self.policy.partner_wait
