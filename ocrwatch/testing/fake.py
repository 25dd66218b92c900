"""A fake engine for testing everything around the engine. It reads nothing.

Each page "reads" as a line naming its file, page number and size, so tests can check
that every page arrived, in order, at the size the engine asked for. Like every engine it
takes one page per call unless its ``policy`` lets several run at once. Environment knobs
make it slow (``OCRWATCH_FAKE_DELAY`` seconds a page), fail pages whose file name
contains ``OCRWATCH_FAKE_FAIL`` (default ``fake-engine-fail``), or abort the whole
process, as a native reader's assertion does, on a page whose file name contains
``OCRWATCH_FAKE_ABORT`` (default: never).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

from ocrwatch.core.domain import Page, PageText
from ocrwatch.engines import profiles
from ocrwatch.engines.base import ReadPolicy


class FakeEngine:
    name = "fake"

    def __init__(self, *, max_side: int | None = profiles.get(profiles.DEFAULT).max_side,
                 policy: ReadPolicy | None = None,
                 delay: float | None = None) -> None:
        self._max_side = max_side
        self._policy = policy or ReadPolicy()
        self.delay = float(os.environ.get("OCRWATCH_FAKE_DELAY", "0")) if delay is None else delay
        self.fail_marker = os.environ.get("OCRWATCH_FAKE_FAIL", "fake-engine-fail")
        self.abort_marker = os.environ.get("OCRWATCH_FAKE_ABORT", "")
        self.batches: list[list[tuple[str, int]]] = []
        self.released = 0
        self.closed = False
        self._stop = threading.Event()

    @property
    def max_side(self) -> int | None:
        return self._max_side

    @property
    def policy(self) -> ReadPolicy:
        return self._policy

    def recognize(self, pages: Sequence[Page]) -> list[PageText]:
        self.batches.append([(p.source.name, p.index) for p in pages])
        if self.delay:
            self._stop.wait(self.delay * len(pages))
        out = []
        for p in pages:
            if self.abort_marker and self.abort_marker in p.source.name:
                os.abort()
            if self.fail_marker and self.fail_marker in p.source.name:
                out.append(PageText("", "", error="the fake engine was told to fail this page"))
                continue
            line = f"fake text of {p.source.name} page {p.index + 1} ({p.size[0]}x{p.size[1]})"
            out.append(PageText(markdown=f"# {line}", text=line))
        return out

    def release(self) -> None:
        self.released += 1

    def close(self) -> None:
        self.closed = True
        self._stop.set()

    def describe(self) -> dict[str, object]:
        return {"state": "closed" if self.closed else "ready", "batches": len(self.batches)}
