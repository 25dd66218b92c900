"""When will it be done: pages done and left, one rate, an ETA, and what waits and why.

The daemon gathers the facts (:func:`gather`); :class:`Progress` travels inside the
:class:`~ocrwatch.core.status.Status` and is written for people by :func:`lines` (the CLI)
and :func:`short` (the tray's tooltip).

Pages left are the unread pages of the files in hand plus the pages of the queued files.
Those are counted without decoding (a PDF's page count, an image's frames), within a
small time budget per status call and remembered by name, size and time; a file not
counted yet is taken to have as many pages as the files read so far had on average, and
the figure says it is partly estimated.

The rate is measured from the pages' results while there is work in hand: the mean time
a page costs over the last pages read (:class:`ocrwatch.core.status.PageRate`). Pages
read over the last minute counted the time files settled, the queue stood empty or the
engine started, and made the ETA rise and fall with them.
"""

from __future__ import annotations

import datetime as _dt
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

COUNT_BUDGET_SECONDS = 0.25  # page counting per status call; the rest is estimated
CACHE_LIMIT = 20_000


@dataclass(frozen=True)
class Waiting:
    """Files that are not being read, for one reason."""

    what: str  # settling, incomplete, paused, engine starting, retrying later
    files: int
    why: str

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Waiting:
        return cls(str(data.get("what", "?")), int(data.get("files") or 0),
                   str(data.get("why", "")))


@dataclass(frozen=True)
class Progress:
    pages_done: int = 0  # pages read since this stretch of work began
    pages_left: int = 0  # in the files in hand and the queued ones
    pages_guessed: int = 0  # of pages_left: in files not counted yet (an average)
    files_left: int = 0
    pages_per_second: float | None = None  # while reading; None before pages are read
    eta_seconds: float | None = None  # None: nothing left, or no rate yet
    waiting: tuple[Waiting, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["waiting"] = [asdict(w) for w in self.waiting]
        out["rate_unit"] = ("pages per second while reading: the last pages' results, "
                            "without the time nothing was read")
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Progress:
        if not data:
            return cls()

        def num(key: str) -> float | None:
            value = data.get(key)
            return float(value) if isinstance(value, int | float) else None

        return cls(pages_done=int(data.get("pages_done") or 0),
                   pages_left=int(data.get("pages_left") or 0),
                   pages_guessed=int(data.get("pages_guessed") or 0),
                   files_left=int(data.get("files_left") or 0),
                   pages_per_second=num("pages_per_second"), eta_seconds=num("eta_seconds"),
                   waiting=tuple(Waiting.from_dict(w) for w in data.get("waiting") or ()))


def rate_text(pages_per_second: float) -> str:
    """One rate with its unit: pages a minute below one a second (a CPU), else a second."""
    if pages_per_second < 1:
        return f"{pages_per_second * 60:.1f} pages/min"
    return f"{pages_per_second:.2f} pages/s"


def duration_text(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, sec = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {sec:02d} s" if minutes < 10 else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def eta_text(progress: Progress, now: float | None = None) -> str:
    """``about 4 min 10 s (done at 15:02)``, or why there is no figure."""
    if progress.pages_left == 0:
        return "nothing left"
    if progress.eta_seconds is None:
        return "no estimate until the first pages are read"
    at = _dt.datetime.fromtimestamp((time.time() if now is None else now)
                                    + progress.eta_seconds)
    return f"about {duration_text(progress.eta_seconds)} (done at {at:%H:%M})"


def lines(progress: Progress, now: float | None = None) -> list[str]:
    """The progress part of ``ocrwatch status``."""
    out = []
    if progress.pages_left or progress.pages_done:
        left = f"{progress.pages_left} left"
        if progress.pages_guessed:
            left += f" (of which {progress.pages_guessed} estimated)"
        out.append(f"  pages:   {progress.pages_done} done, {left}, in "
                   f"{progress.files_left} files")
        out.append(f"  eta:     {eta_text(progress, now)}")
    if progress.pages_per_second is not None:
        out.append(f"  rate:    {rate_text(progress.pages_per_second)} while reading")
    out += [f"  waiting: {w.files} {'file' if w.files == 1 else 'files'} {w.what}: {w.why}"
            for w in progress.waiting]
    return out


def short(progress: Progress) -> str | None:
    """For the tooltip: ``120/460 pages, about 2 min 40 s left``."""
    if not progress.pages_left:
        return None
    total = progress.pages_done + progress.pages_left
    eta = (f"about {duration_text(progress.eta_seconds)} left"
           if progress.eta_seconds is not None else "no estimate yet")
    return f"{progress.pages_done}/{total} pages, {eta}"


class PageCounts:
    """Page counts of queued files, by (path, size, mtime): each file counted once."""

    def __init__(self, count: Callable[[Path], int],
                 budget: float = COUNT_BUDGET_SECONDS) -> None:
        self._count = count
        self._budget = budget
        self._known: dict[tuple[Path, int, int], int] = {}

    def pages(self, paths: Iterable[Path]) -> list[int | None]:
        """Each file's count; None for those the time budget left for later."""
        deadline = time.monotonic() + self._budget
        out: list[int | None] = []
        for path in paths:
            try:
                st = path.stat()
            except OSError:
                out.append(None)
                continue
            key = (path, st.st_size, st.st_mtime_ns)
            if key not in self._known:
                if time.monotonic() > deadline:
                    out.append(None)
                    continue
                try:
                    self._known[key] = max(1, self._count(path))
                except Exception:  # reading it will say what is wrong; it counts as one
                    self._known[key] = 1
                if len(self._known) > CACHE_LIMIT:
                    self._known.pop(next(iter(self._known)))
            out.append(self._known[key])
        return out


def estimate(*, in_hand: Iterable[tuple[int, int | None]], queued: list[int | None],
             pages_done: int, seconds_per_page: float | None, since_last: float = 0.0,
             average_pages: float | None, waiting: tuple[Waiting, ...] = ()) -> Progress:
    """``in_hand``: (pages read, pages in all or None) for each file being read;
    ``seconds_per_page``: what a page costs while reading (:class:`PageRate`);
    ``since_last``: seconds since the last page was done."""
    left = guessed = files = 0
    mean = max(1.0, average_pages or 1.0)
    for done, total in in_hand:
        files += 1
        if total is None:
            extra = max(1, round(mean) - done)
            left += extra
            guessed += extra
        else:
            left += max(0, total - done)
    for count in queued:
        files += 1
        if count is None:
            left += round(mean)
            guessed += round(mean)
        else:
            left += count
    rate = 1 / max(seconds_per_page, 1e-3) if seconds_per_page is not None else None
    eta = None
    if left and seconds_per_page is not None:
        # Less the time the next page has been read already, up to a page's worth: the
        # figure counts down between pages instead of standing still.
        eta = max(0.0, seconds_per_page * left - min(since_last, seconds_per_page))
    return Progress(pages_done=pages_done, pages_left=left, pages_guessed=guessed,
                    files_left=files, pages_per_second=rate, eta_seconds=eta,
                    waiting=waiting)
