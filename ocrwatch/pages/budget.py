"""What preparing one page may cost: a time and a memory budget, so one file cannot
stop the others.

Preparing a page (decoding it, checking its text layer, drawing it) runs on a preparer
thread, and a hostile file can make it take hours or gigabytes. The time budget counts
only the time spent preparing the page (not the wait for the engine to take it) and is
checked between steps and inside every loop over a page's parts. The memory budget is
checked before a step allocates, from what the file declares (pixels, the size of its
text). A file over either fails with a reason and is recorded ``failed``: it is not read
again until it changes. PDF pages are drawn so that the drawing pauses when the budget is
spent (:mod:`ocrwatch.pages.pdfdraw`); an image decoder's single call cannot be interrupted,
and the checks made before it (pixels, JPEG scans) keep it small.
"""

from __future__ import annotations

import time

from ocrwatch.core.errors import OverBudget


class Budget:
    """The time and memory one page's preparation may take."""

    def __init__(self, seconds: float, memory_mb: float) -> None:
        self.seconds = seconds
        self.memory = memory_mb * 1024 * 1024
        self._started = time.monotonic()
        self._spent = 0.0

    def page(self) -> None:
        """A new page starts: its own time counts from now."""
        self._started = time.monotonic()
        self._spent = 0.0

    def pause(self) -> None:
        """The page was handed on; waiting for the engine to take it does not count."""
        self._spent += time.monotonic() - self._started

    def resume(self) -> None:
        self._started = time.monotonic()

    def spent(self) -> float:
        return self._spent + time.monotonic() - self._started

    def check(self, where: str, doing: str) -> None:
        """Raise OverBudget when ``where`` has taken longer than the budget."""
        spent = self.spent()
        if spent > self.seconds:
            raise OverBudget(
                f"{where} took over {self.seconds:g} s to prepare ({doing}; "
                f"stopped after {spent:.1f} s): the file is built to be slow, or very "
                "unusual; raise prepare_seconds in the config if it is genuine")

    def allow(self, where: str, what: str, nbytes: int) -> None:
        """Raise OverBudget when ``what`` would take more memory than the budget."""
        if nbytes > self.memory:
            raise OverBudget(
                f"{where} would need {nbytes / 1024 / 1024:.0f} MB of memory for {what}, "
                f"over the budget of {self.memory / 1024 / 1024:.0f} MB; raise "
                "prepare_memory_mb in the config if the file is genuine")


def unlimited() -> Budget:
    return Budget(float("inf"), float("inf"))
