"""Noticing finished files: watchdog events, the settle check, startup scan and rescans.

Watchdog runs its handlers unguarded on the observer thread, so the handler only puts
paths on a queue. The :class:`Settler` decides when a file is finished: its size and
mtime unchanged for ``settle_seconds`` and its content looking complete (a JPEG that
ends in its end marker, a PDF with its trailer). A close-after-write event shortens
the wait for the first check but never replaces it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from watchdog.events import (
    DirMovedEvent,
    FileClosedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch
from watchdog.observers.polling import PollingObserver

from ocrwatch.errors import TransientError
from ocrwatch.pages import SUFFIXES
from ocrwatch.threads import Service

log = logging.getLogger(__name__)

IGNORED_SUFFIXES = frozenset({".part", ".crdownload", ".tmp", ".partial", ".download", ".swp"})
NETWORK_FS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "fuse.sshfs", "9p", "afpfs",
                        "fuse.rclone", "davfs", "fuse.davfs2", "ncpfs", "glusterfs", "ceph"})
INCOMPLETE_GRACE = 15.0  # settle periods a file that looks incomplete may keep us waiting
RETRY_SECONDS = 5.0  # a file that could not be recorded is offered again after this (+settle)
ROOT_CHECK_SECONDS = 1.0  # how often the watched folders are checked for being gone or back
# A file or folder that vanished is dropped from the index only after this many settle
# periods plus GONE_EXTRA seconds (more than the polling observer's 2 s round): a move
# whose events come late or as a deletion and a creation (a move between two watched
# folders) is then recognised by its inode when the new name settles.
GONE_SETTLES = 2.0
GONE_EXTRA = 3.0


def is_ignored_name(name: str) -> bool:
    """Temporary, partial, hidden and lock files are never read."""
    return (
        name.startswith((".", "~$", "~lock."))
        or Path(name).suffix.lower() in IGNORED_SUFFIXES
        or name.endswith("~")
        or name.lower().endswith(".ocr.pdf")  # ocrwatch's own searchable PDFs
    )


def wanted(path: Path, roots: list[Path]) -> bool:
    """Whether ``path`` is a file the daemon should read, judged by its name alone."""
    if path.suffix.lower() not in SUFFIXES or is_ignored_name(path.name):
        return False
    for root in roots:
        try:
            rel = path.relative_to(root)
        except ValueError:
            continue
        # Hidden folders (.git, .Trash-1000, our own temp files) are skipped too.
        return not any(part.startswith(".") for part in rel.parts[:-1])
    return False


def looks_complete(path: Path) -> bool:
    """Cheap check that a writer has finished: the format's end marker is present."""
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 2048))
            tail = fh.read()
    except OSError:
        return True  # let the reader report the real problem
    if size == 0:
        return False
    tail = tail.rstrip(b"\x00\r\n\t ")
    if head.startswith(b"\xff\xd8"):
        return tail.endswith(b"\xff\xd9")
    if head.startswith(b"\x89PNG"):
        return b"IEND" in tail[-16:]
    if head.startswith(b"%PDF"):
        return b"%%EOF" in tail
    if head[:2] == b"BM" or head[:4] == b"RIFF":
        # BMP and WebP state their whole length in the header.
        declared = (int.from_bytes(head[2:6], "little") if head[:2] == b"BM"
                    else int.from_bytes(head[4:8], "little") + 8)
        return size >= declared
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return _tiff_complete(path, size, "<" if head[:2] == b"II" else ">")
    return True


def _tiff_complete(path: Path, size: int, order: str) -> bool:
    """Whether a TIFF's first page is all there: its directory and every strip or tile
    lie inside the file. Writers such as libtiff put the directory last."""
    import struct

    try:
        with path.open("rb") as fh:
            fh.seek(4)
            (ifd,) = struct.unpack(order + "I", fh.read(4))
            if ifd == 0:
                return True  # no directory yet, or none at all: the settle time decides
            if ifd + 2 > size:
                return False  # the directory is not written yet
            fh.seek(ifd)
            (count,) = struct.unpack(order + "H", fh.read(2))
            if ifd + 2 + 12 * count + 4 > size:
                return False
            entries = fh.read(12 * count)
            values: dict[int, list[int]] = {}
            for i in range(count):
                tag, kind, n, raw = struct.unpack(order + "HHI4s", entries[12 * i:12 * i + 12])
                if tag not in (273, 279, 324, 325) or kind not in (3, 4):
                    continue  # only strip and tile offsets and byte counts matter
                item = "H" if kind == 3 else "I"
                width = 2 if kind == 3 else 4
                if n * width <= 4:
                    data = raw[:n * width]
                else:
                    (where,) = struct.unpack(order + "I", raw)
                    if where + n * width > size:
                        return False
                    fh.seek(where)
                    data = fh.read(n * width)
                values[tag] = list(struct.unpack(order + item * n, data))
    except (OSError, struct.error):
        return True  # not a TIFF we understand: let the reader judge it
    for offsets_tag, counts_tag in ((273, 279), (324, 325)):
        offsets, counts = values.get(offsets_tag, []), values.get(counts_tag, [])
        if any(o + c > size for o, c in zip(offsets, counts, strict=False)):
            return False
    return True


def fs_type(path: Path) -> str | None:
    """The file system type holding ``path`` (Linux /proc/mounts), or None."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    best, best_type = "", None
    target = str(path.resolve())
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount = fields[1].replace("\\040", " ")
        if (target == mount or target.startswith(mount.rstrip("/") + "/")) and len(mount) > len(
            best
        ):
            best, best_type = mount, fields[2]
    return best_type


def make_observer(kind: str, folders: list[Path]) -> BaseObserver:
    """inotify (or the platform's native API) unless polling is asked for or needed."""
    if kind == "polling":
        return PollingObserver(timeout=2)
    if kind == "auto":
        for folder in folders:
            fstype = fs_type(folder)
            if fstype in NETWORK_FS:
                log.info("%s is on %s: watching it by polling", folder, fstype)
                return PollingObserver(timeout=2)
    return Observer()


Event = tuple[str, Path, Path | None]  # kind, path, and where it went for a move


class _Handler(FileSystemEventHandler):
    """Only enqueues: watchdog calls it on its own thread, without guarding errors."""

    def __init__(self, events: queue.Queue[Event], roots: list[Path]) -> None:
        self.events = events
        self.roots = set(roots)

    def on_any_event(self, event: FileSystemEvent) -> None:
        src = Path(os.fsdecode(event.src_path))
        if event.event_type == "deleted" and src in self.roots:
            self.events.put(("root-gone", src, None))  # its watch has ended with it
            return
        if isinstance(event, DirMovedEvent):
            # One event for the folder: its rows follow, then look inside for the rest.
            self.events.put(("moved-tree", src, Path(os.fsdecode(event.dest_path))))
            return
        if event.is_directory:
            if event.event_type == "created":
                self.events.put(("scan", src, None))
            elif event.event_type == "deleted":
                # Deleted, or moved out of the watched folders (inotify reports that so).
                self.events.put(("gone-tree", src, None))
            return
        if isinstance(event, FileMovedEvent):
            self.events.put(("moved", src, Path(os.fsdecode(event.dest_path))))
        elif isinstance(event, FileDeletedEvent):
            self.events.put(("gone", src, None))
        elif isinstance(event, FileClosedEvent):
            self.events.put(("closed", src, None))
        elif event.event_type in ("created", "modified"):
            self.events.put(("changed", src, None))


@dataclass
class _Pending:
    size: int
    mtime_ns: int
    stable_since: float
    closed: bool = False


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
        scan: Callable[[], Iterator[Path]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        gone_tree: Callable[[Path], object] | None = None,
        moved: Callable[[Path, Path], bool] | None = None,
        moved_tree: Callable[[Path, Path], object] | None = None,
        prune: Callable[[], Iterable[Path]] | None = None,
        tick: Callable[[set[Path]], None] | None = None,
    ) -> None:
        super().__init__("ocrwatch-settle")
        self.roots = roots
        # Called about once a second with the roots whose deletion was seen since.
        self.tick = tick
        self._roots_gone: set[Path] = set()
        self._next_tick = 0.0
        self.gone_tree = gone_tree or (lambda folder: None)
        self.moved = moved
        self.moved_tree = moved_tree
        self.prune = prune
        self.settle = settle_seconds
        self.ready = ready
        self.gone = gone
        self.rescan_seconds = rescan_seconds
        self.scan = scan
        self.clock = clock
        self.events: queue.Queue[Event] = queue.Queue()
        self.pending: dict[Path, _Pending] = {}
        self.vanished: dict[Path, tuple[float, bool]] = {}  # path -> (due, is a folder)
        self._prune_due: float | None = None
        self._next_rescan: float | None = None

    # -- thread: start, stop, join as every long-lived thread (ocrwatch/threads.py) --
    def wake(self) -> None:
        self.events.put(("stop", Path(), None))

    def request_rescan(self) -> None:
        self.events.put(("rescan", Path(), None))

    # -- logic (also driven directly by tests) ----------------------------------------
    def feed(self, kind: str, path: Path, dest: Path | None = None) -> None:
        if kind == "moved" and dest is not None:
            self.pending.pop(path, None)
            if wanted(path, self.roots) and wanted(dest, self.roots) and self.moved is not None:
                # Known: its row follows, and the settle check below finds it current.
                self.moved(path, dest)
            elif wanted(path, self.roots):
                self.feed("gone", path)
            self.feed("changed", dest)
            return
        if kind == "moved-tree" and dest is not None:
            for known in [p for p in self.pending if p.is_relative_to(path)]:
                del self.pending[known]
            inside = any(dest.is_relative_to(r) for r in self.roots) and wanted(
                dest / "x.png", self.roots)
            if inside and self.moved_tree is not None:
                self.moved_tree(path, dest)
            else:
                self.feed("gone-tree", path)  # into a hidden folder: as good as gone
            self.feed("scan", dest)
            return
        if kind == "gone":
            self.pending.pop(path, None)
            if wanted(path, self.roots) and not os.path.lexists(path):
                self.vanished[path] = (self.clock() + self._grace(), False)
            return
        if kind == "rescan":
            self._scan()
            return
        if kind == "root-gone":
            self._roots_gone.add(path)
            return
        if kind == "scan":
            for found in walk([path]):
                if wanted(found, self.roots):
                    self.feed("changed", found)
            return
        if kind == "gone-tree":
            for known in [p for p in self.pending if p.is_relative_to(path)]:
                del self.pending[known]
            self.vanished[path] = (self.clock() + self._grace(), True)
            return
        if not wanted(path, self.roots):
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
                self.gone_tree(path)
            else:
                self.gone(path)
        if self._prune_due is not None and now >= self._prune_due and not self.pending:
            self._prune_due = None
            if self.prune is not None:
                for path in self.prune():  # known files gone while nothing watched
                    self.vanished.setdefault(path, (now + self._grace(), False))

    def _check_pending(self, now: float) -> None:
        for path, entry in list(self.pending.items()):
            try:
                st = path.stat()
                size, mtime = st.st_size, st.st_mtime_ns
            except FileNotFoundError:
                if not os.path.lexists(path):
                    del self.pending[path]
                    self.vanished[path] = (now + self._grace(), False)
                    continue
                size, mtime = -1, -1  # a dangling link: report it once it is still
            except OSError:
                size, mtime = -1, -1  # a link loop and the like: reported by the reader
            if (size, mtime) != (entry.size, entry.mtime_ns):
                entry.size, entry.mtime_ns, entry.stable_since = size, mtime, now
                entry.closed = False
                continue
            # Close-after-write lets a small file go sooner, but it must still be still.
            need = min(self.settle, 0.5) if entry.closed else self.settle
            still = now - entry.stable_since
            if still < need:
                continue
            if size > 0 and not looks_complete(path) and still < self.settle * INCOMPLETE_GRACE:
                continue  # a scanner pausing mid-file; wait for the rest
            del self.pending[path]
            try:
                self.ready(path)
            except TransientError:
                # Not recorded (the index's disk is full...): offer it again later.
                self.pending[path] = _Pending(size, mtime, now + RETRY_SECONDS)

    def _scan(self) -> None:
        if self.scan is None:
            return
        for path in self.scan():
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
                self._guarded(self.feed, kind, path, dest)
                while True:  # drain what else arrived
                    kind, path, dest = self.events.get_nowait()
                    if kind == "stop":
                        return
                    self._guarded(self.feed, kind, path, dest)
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

    def _guarded(self, fn: Callable[..., None], *args: object) -> None:
        # One bad path must never stop the watcher.
        try:
            fn(*args)
        except Exception:
            log.exception("error while watching %s", args[1] if len(args) > 1 else "")


def walk(roots: list[Path]) -> Iterator[Path]:
    """Every candidate file under the roots, hidden folders skipped, links not followed."""
    for root in roots:
        for folder, dirs, files in os.walk(root, followlinks=False, onerror=None):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            base = Path(folder)
            for name in files:
                path = base / name
                if wanted(path, roots):
                    yield path


_INOTIFY_LOGGER = "watchdog.observers.inotify_c"


class _OverflowRescan(logging.Handler):
    """Rescan when the kernel's inotify queue overflowed.

    Events are lost then (a burst of folders, a 60-deep tree made at once): files dropped
    meanwhile would wait for the next periodic rescan, and deleted ones stay indexed.
    watchdog reports the overflow only in its log, so its warning is the signal.
    """

    def __init__(self, settler: Settler) -> None:
        super().__init__(logging.WARNING)
        self.settler = settler

    def emit(self, record: logging.LogRecord) -> None:
        if "overflow" in str(record.msg):
            self.settler.request_rescan()


class Watcher:
    """The observer plus the settler, started and stopped together."""

    def __init__(
        self,
        roots: list[Path],
        settle_seconds: float,
        ready: Callable[[Path], object],
        gone: Callable[[Path], None],
        *,
        observer: str = "auto",
        rescan_seconds: float | None = 300.0,
        gone_tree: Callable[[Path], object] | None = None,
        moved: Callable[[Path, Path], bool] | None = None,
        moved_tree: Callable[[Path, Path], object] | None = None,
        prune: Callable[[], Iterable[Path]] | None = None,
    ) -> None:
        self.roots = roots
        self.settler = Settler(roots, settle_seconds, ready, gone,
                               rescan_seconds=rescan_seconds, scan=lambda: walk(roots),
                               gone_tree=gone_tree, tick=self._check_roots, moved=moved,
                               moved_tree=moved_tree, prune=prune)
        self.observer = make_observer(observer, roots)
        self._handler = _Handler(self.settler.events, roots)
        # Each root's watch and the folder (device, inode) it watches; None: not armed.
        self._armed: dict[Path, tuple[ObservedWatch, tuple[int, int]] | None] = {}
        self._overflow = _OverflowRescan(self.settler)
        for root in roots:
            self._armed[root] = None
            if not self._arm(root):
                log.warning("the watched folder %s does not exist; it is watched once it "
                            "is made", root)

    def _arm(self, root: Path) -> bool:
        try:
            st = os.stat(root)
            watch = self.observer.schedule(self._handler, str(root), recursive=True)
        except OSError:
            return False
        self._armed[root] = (watch, (st.st_dev, st.st_ino))
        return True

    def _check_roots(self, deleted: set[Path]) -> None:
        """Re-arm a watched folder that was deleted (or replaced) and is there again.

        A deleted folder's watch ends with it (inotify drops it), so a folder made again
        under the same name would go unwatched until the next rescan.
        """
        for root, armed in self._armed.items():
            try:
                st = os.stat(root)
                now: tuple[int, int] | None = (st.st_dev, st.st_ino)
            except OSError:
                now = None
            if armed is not None and now == armed[1] and root not in deleted:
                continue  # the same folder, still watched
            if armed is not None:
                with contextlib.suppress(KeyError, OSError):
                    self.observer.unschedule(armed[0])
                self._armed[root] = None
                if now is None:
                    log.warning("the watched folder %s is gone; it is watched again once "
                                "it is back", root)
            if now is not None and self._arm(root):
                log.info("the watched folder %s is there again: watching it", root)
                self.settler.feed("scan", root)  # files that came with it

    def start(self) -> None:
        logging.getLogger(_INOTIFY_LOGGER).addHandler(self._overflow)
        self.observer.start()
        self.settler.start()

    def rescan(self) -> None:
        self.settler.request_rescan()

    def stop(self) -> None:
        logging.getLogger(_INOTIFY_LOGGER).removeHandler(self._overflow)
        self.observer.stop()
        self.settler.close(timeout=10)
        if self.observer.is_alive():
            self.observer.join(timeout=10)
