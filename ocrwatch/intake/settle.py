"""The settler: raw file events in, "this file is finished" and "this file is gone" out."""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ocrwatch.core.errors import TransientError
from ocrwatch.core.threads import Service
from ocrwatch.intake.inbox_files import Ignore, OtherKinds, looks_complete, walk, wanted

log = logging.getLogger(__name__)


INCOMPLETE_GRACE = 15.0  # settle periods a file that looks incomplete may keep us waiting
RETRY_SECONDS = 5.0  # a file that could not be recorded is offered again after this (+settle)
ROOT_CHECK_SECONDS = 1.0  # how often the watched folders are checked for being gone or back
# A file or folder that vanished is dropped from the index only after this many settle
# periods plus GONE_EXTRA seconds (more than the polling observer's 2 s round): a move
# whose events come late or as a deletion and a creation (a move between two watched
# folders) is then recognised by its inode when the new name settles.
GONE_SETTLES = 2.0
GONE_EXTRA = 3.0
# How long a file must be seen unchanged (at most; settle_seconds when shorter): one
# closed after writing may be opened again by a writer that adds a page at a time; one
# renamed in whole (its end marker there) was finished under another name, so one look
# later than its event is enough to see that nobody writes on through the new name.
CLOSED_STILL = 0.5
WHOLE_STILL = 0.2
Event = tuple[str, Path, Path | None]  # kind, path, and where it went for a move


class Follows(Protocol):
    """What keeps the index in step with files that move or vanish (follow.Follower)."""

    def moved(self, old: Path, new: Path) -> bool: ...
    def moved_tree(self, old: Path, new: Path) -> object: ...
    def gone_tree(self, folder: Path) -> object: ...
    def missing(self) -> Iterable[Path]: ...


@dataclass
class _Pending:
    size: int
    mtime_ns: int
    stable_since: float
    closed: bool = False
    whole: bool = False  # renamed in with its end marker there


class Settler(Service):
    """Turns raw events into "this file is finished" and "this file is gone" calls.

    Runs on its own thread; ``ready(path)`` and ``gone(path)`` are called from it.
    """

    TICK = 0.2

    def __init__(
        self,
        roots: list[Path],
        settle_seconds: float,
        ready: Callable[[Path], object],
        gone: Callable[[Path], None],
        *,
        rescan_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        follow: Follows | None = None,
        arriving: Callable[[Path], None] | None = None,
        ignore: Ignore | None = None,
        settled: Callable[[], None] | None = None,
        intake: Callable[[], AbstractContextManager[None]] | None = None,
    ) -> None:
        super().__init__("ocrwatch-settle")
        self.roots = roots
        self.ignore = ignore  # the user's ignore patterns
        self.others = OtherKinds(ignore)  # files of kinds it does not read, counted
        # Called about once a second with the roots whose deletion was seen since (the
        # Watcher sets it, to watch a folder again that was deleted and is back).
        self.tick: Callable[[set[Path]], None] | None = None
        self._roots_gone: set[Path] = set()
        self._next_tick = 0.0
        self.follow = follow
        # Called when the watcher reports a file being written or moved in that was not
        # settling yet (not for what a scan finds): the daemon starts its engine then.
        self.arriving = arriving
        # Called once after a look that handed files on (the daemon wakes its preparers
        # then, not per file: see _check_pending).
        self.settled = settled
        # Held while a look records the files that settled (the scheduler's preparers
        # claim none meanwhile, Scheduler.intake).
        self.intake = intake or contextlib.nullcontext
        self.settle = settle_seconds
        self.ready = ready
        self.gone = gone
        self.rescan_seconds = rescan_seconds
        self.clock = clock
        self.events: queue.Queue[Event] = queue.Queue()
        self.pending: dict[Path, _Pending] = {}
        self.vanished: dict[Path, tuple[float, bool]] = {}  # path -> (due, is a folder)
        self._prune_due: float | None = None
        self._next_rescan: float | None = None

    # -- thread: start, stop, join as every long-lived thread (ocrwatch/core/threads.py) --
    def wake(self) -> None:
        self.events.put(("stop", Path(), None))

    def request_rescan(self) -> None:
        self.events.put(("rescan", Path(), None))

    # -- logic (also driven directly by tests) ----------------------------------------
    def feed(self, kind: str, path: Path, dest: Path | None = None) -> None:
        if kind == "moved" and dest is not None:
            self._moved(path, dest)
            return
        if kind == "created":
            self._created(path)
            return
        if kind == "moved-tree" and dest is not None:
            for known in [p for p in self.pending if p.is_relative_to(path)]:
                del self.pending[known]
            inside = any(dest.is_relative_to(r) for r in self.roots) and wanted(
                dest / "x.png", self.roots)  # a folder's place only: no pattern applies
            if inside and self.follow is not None:
                self.follow.moved_tree(path, dest)
            else:
                self.feed("gone-tree", path)  # into a hidden folder: as good as gone
            self.feed("scan", dest)
            return
        if kind == "gone":
            self.pending.pop(path, None)
            if wanted(path, self.roots, self.ignore) and not os.path.lexists(path):
                self.vanished[path] = (self.clock() + self._grace(), False)
            return
        if kind == "rescan":
            self._scan()
            return
        if kind == "root-gone":
            self._roots_gone.add(path)
            return
        if kind == "scan":
            for found in walk([path], self.ignore, self.others):
                if wanted(found, self.roots):  # the patterns were applied by walk
                    self.feed("changed", found)
            return
        if kind == "gone-tree":
            for known in [p for p in self.pending if p.is_relative_to(path)]:
                del self.pending[known]
            self.vanished[path] = (self.clock() + self._grace(), True)
            return
        if not wanted(path, self.roots, self.ignore):
            self.others(path, self.roots)
            return
        entry = self.pending.get(path)
        if entry is None:
            try:
                st = path.lstat()
            except OSError:
                # Broken or looping links and files gone already: let the reader say why.
                self.pending[path] = _Pending(-1, -1, self.clock())
                return
            entry = self.pending[path] = _Pending(st.st_size, st.st_mtime_ns, self.clock())
        if kind == "closed":
            entry.closed = True

    def _moved(self, path: Path, dest: Path) -> None:
        self.pending.pop(path, None)
        if (wanted(path, self.roots, self.ignore) and wanted(dest, self.roots, self.ignore)
                and self.follow is not None):
            # Known: its row follows, and the settle check below finds it current.
            self.follow.moved(path, dest)
        elif wanted(path, self.roots, self.ignore):
            self.feed("gone", path)
        self.feed("changed", dest)
        entry = self.pending.get(dest)
        if entry is not None:
            # Renamed in: written under another name (a download's .part, a scanner's
            # temporary file, mv), so as good as closed after writing; whole when its
            # end marker is there.
            entry.closed = True
            entry.whole = entry.size > 0 and looks_complete(dest)

    def _created(self, path: Path) -> None:
        # Made in place (empty then: its writer's events follow), or renamed in from
        # outside the watched folders, which inotify reports as a creation: a file whole
        # when it appears (its format's end marker there) is as good as closed after
        # writing, as a rename inside them is.
        fresh = path not in self.pending
        self.feed("changed", path)
        entry = self.pending.get(path)
        if fresh and entry is not None and entry.size > 0 and looks_complete(path):
            entry.closed = entry.whole = True

    def waiting(self, limit: int = 200) -> tuple[int, int]:
        """Files not handed on yet: (settling, looking incomplete), for the status.

        Read from another thread: a copy of the table, retried if it changed meanwhile."""
        for _ in range(3):
            try:
                entries = list(self.pending.items())
                break
            except RuntimeError:  # changed size during the copy
                continue
        else:
            return len(self.pending), 0
        incomplete = sum(1 for path, entry in entries[:limit]
                         if entry.size > 0 and not looks_complete(path))
        return len(entries) - incomplete, incomplete

    def _grace(self) -> float:
        return self.settle * GONE_SETTLES + GONE_EXTRA

    def check(self) -> None:
        """Stat every pending file; report those that have been still long enough."""
        now = self.clock()
        self._check_pending(now)
        for path, (due, folder) in list(self.vanished.items()):
            if now < due:
                continue
            del self.vanished[path]
            if os.path.lexists(path):
                continue  # back again (a file replaced by a rename, say)
            if folder:
                if self.follow is not None:
                    self.follow.gone_tree(path)
            else:
                self.gone(path)
        if self._prune_due is not None and now >= self._prune_due and not self.pending:
            self._prune_due = None
            if self.follow is not None:
                for path in self.follow.missing():  # known files gone while nothing watched
                    self.vanished.setdefault(path, (now + self._grace(), False))

    def _check_pending(self, now: float) -> None:
        handed = 0
        try:
            with self.intake():
                for path, entry in list(self.pending.items()):
                    handed += self._check_one(path, entry, now)
        finally:
            # Files that settle together are all recorded before anything is prepared: a
            # drop of 52 files took 3-4.5 s to record on a 16-core machine whose 13
            # preparers, woken by the first, held the interpreter's lock between each
            # file's database calls (1.2 ms a file otherwise).
            if handed and self.settled is not None:
                self.settled()

    def _check_one(self, path: Path, entry: _Pending, now: float) -> bool:
        """Whether the pending file at ``path`` was handed on now."""
        try:
            st = path.stat()
            size, mtime = st.st_size, st.st_mtime_ns
        except FileNotFoundError:
            if not os.path.lexists(path):
                del self.pending[path]
                self.vanished[path] = (now + self._grace(), False)
                return False
            size, mtime = -1, -1  # a dangling link: report it once it is still
        except OSError:
            size, mtime = -1, -1  # a link loop and the like: reported by the reader
        if (size, mtime) != (entry.size, entry.mtime_ns):
            entry.size, entry.mtime_ns, entry.stable_since = size, mtime, now
            entry.closed = entry.whole = False
            return False
        # Close-after-write or a rename lets a file go sooner, but it must still be still.
        need = self.settle
        if entry.whole:
            need = min(need, WHOLE_STILL)
        elif entry.closed:
            need = min(need, CLOSED_STILL)
        still = now - entry.stable_since
        if still < need:
            return False
        if size > 0 and not looks_complete(path) and still < self.settle * INCOMPLETE_GRACE:
            return False  # a scanner pausing mid-file; wait for the rest
        del self.pending[path]
        try:
            self.ready(path)
        except TransientError:
            # Not recorded (the index's disk is full...): offer it again later.
            self.pending[path] = _Pending(size, mtime, now + RETRY_SECONDS)
            return False
        return True

    def _scan(self) -> None:
        for path in walk(self.roots, self.ignore, self.others):
            self.feed("changed", path)
        # Rows of files gone while nothing watched are pruned once what the scan found has
        # settled: a file moved meanwhile is recognised by its inode first.
        self._prune_due = self.clock() + self._grace()

    def run(self) -> None:
        self._scan()
        if self.rescan_seconds:
            self._next_rescan = self.clock() + self.rescan_seconds
        while not self.stopping:
            try:
                kind, path, dest = self.events.get(timeout=self.TICK)
                if kind == "stop":
                    break
                self._guarded(self._live, kind, path, dest)
                while True:  # drain what else arrived
                    kind, path, dest = self.events.get_nowait()
                    if kind == "stop":
                        return
                    self._guarded(self._live, kind, path, dest)
            except queue.Empty:
                pass
            self._guarded(self.check)
            if self.tick is not None and self.clock() >= self._next_tick:
                self._next_tick = self.clock() + ROOT_CHECK_SECONDS
                gone, self._roots_gone = self._roots_gone, set()
                self._guarded(self.tick, gone)
            if self._next_rescan is not None and self.clock() >= self._next_rescan:
                assert self.rescan_seconds is not None
                self._next_rescan = self.clock() + self.rescan_seconds
                self._guarded(self._scan)

    def _live(self, kind: str, path: Path, dest: Path | None) -> None:
        """An event from the watcher: fed, and a file newly written or moved in is told to
        ``arriving`` (a rename inside the folders is a file that was there already)."""
        new = kind in ("created", "changed", "closed") and path not in self.pending
        self.feed(kind, path, dest)
        if new and self.arriving is not None and path in self.pending:
            self.arriving(path)

    def _guarded(self, fn: Callable[..., None], *args: object) -> None:
        # One bad path must never stop the watcher.
        try:
            fn(*args)
        except Exception:
            log.exception("error while watching %s", args[1] if len(args) > 1 else "")
