"""Noticing finished files: watchdog events, the settle check, startup scan and rescans.

Watchdog runs its handlers unguarded on the observer thread, so the handler only puts
paths on a queue. The :class:`Settler` decides when a file is finished: its size and
mtime unchanged for ``settle_seconds`` and its content looking complete (a JPEG that
ends in its end marker, a PDF with its trailer). A close-after-write event or a rename
into the folder shortens the wait for the first check but never replaces it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import warnings
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

from ocrwatch.intake.settle import Event, Settler

log = logging.getLogger(__name__)

NETWORK_FS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "fuse.sshfs", "9p", "afpfs",
                        "fuse.rclone", "davfs", "fuse.davfs2", "ncpfs", "glusterfs", "ceph"})


def fs_type(path: Path) -> str | None:
    """The file system type holding ``path`` (psutil's mount table: Linux, macOS, BSD),
    or None when it cannot be told."""
    import psutil

    try:
        partitions = psutil.disk_partitions(all=True)
    except (OSError, RuntimeError):
        return None
    target = str(path.resolve())
    best, best_type = "", None
    for part in partitions:
        mount = part.mountpoint
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) > len(best):
            best, best_type = mount, part.fstype or None
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
    # A folder renamed inside the inbox keeps its inotify watch (the watch follows the
    # folder, not its name); watchdog adds it again under the new name and, now and
    # then, warns that it replaces its own callback for it. That replacement is the
    # point (files dropped into the renamed folder are seen: tests/test_follow.py), so
    # the warning is not shown to the user (watchdog pull request 1278 discusses it).
    warnings.filterwarnings("ignore", message="Callback with id .* already exists for watch",
                            category=RuntimeWarning)
    return Observer()


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
        elif event.event_type == "created":
            self.events.put(("created", src, None))
        elif event.event_type == "modified":
            self.events.put(("changed", src, None))


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
    """An observer feeding a :class:`Settler`, the two started and stopped together."""

    def __init__(self, settler: Settler, *, observer: str = "auto") -> None:
        roots = self.roots = settler.roots
        self.settler = settler
        settler.tick = self._check_roots
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
