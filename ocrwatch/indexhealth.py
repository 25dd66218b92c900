"""The index file's health: checked at start, watched while the daemon runs.

- At start, ``PRAGMA quick_check``. A damaged index is renamed aside
  (``NAME.damaged-YYYYMMDD-HHMMSS``, with its ``-wal`` and ``-shm``; never deleted), a new
  one is made, and it is filled from the sidecars ocrwatch wrote beside the originals (as
  ``ocrwatch reindex --from-sidecars`` does): nothing is read or written again.
- While running, every second: is the file at the index's path still the one this
  process has open? If it was deleted, moved away or replaced, the open connection still
  holds every row: it is written back to the path (a file found there is renamed aside,
  ``NAME.replaced-…``) and the daemon carries on with it. Left unnoticed, the next start
  would make an empty index and read every file again, beside a second pair of sidecars.

Each event is said in the log and in ``ocrwatch status``; ``ocrwatch doctor`` checks the
file and names what was set aside.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

from ocrwatch.config import Config
from ocrwatch.core.errors import IndexDamaged, OcrwatchError
from ocrwatch.core.threads import Service
from ocrwatch.fs.fsmove import move_no_replace
from ocrwatch.store.db import SQLITE_SIDE_FILES, Database, file_identity

log = logging.getLogger(__name__)

CHECK_SECONDS = 1.0  # how often a running daemon looks at its index file
RETRY_SECONDS = 10.0  # after writing it back failed (a full disk...)
ASIDE_LABELS = ("damaged", "replaced")  # NAME.LABEL-STAMP: files set aside, for doctor


def _held_by_us(path: Path) -> bool:
    """Whether this process has ``path`` open (SQLite's own -wal or -shm of the open
    index), by comparing inodes with /proc/self/fd (Linux); False where unknown."""
    try:
        st = os.stat(path)
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            held = os.stat(f"/proc/self/fd/{fd}")
            if (held.st_dev, held.st_ino) == (st.st_dev, st.st_ino):
                return True
    return False


def set_aside(path: Path, label: str, *, keep_ours: bool = False) -> Path | None:
    """Rename the index at ``path`` and its side files to ``NAME.LABEL-STAMP[-wal|-shm]``
    (a free name, never replacing anything); returns the main file's new path, or None
    when no main file was there. ``keep_ours``: leave side files this process has open
    (the running index's own, which SQLite removes when it closes them)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    n = 1
    while True:
        base = path.with_name(f"{path.name}.{label}-{stamp}" + (f".{n}" if n > 1 else ""))
        names = [base, *(Path(f"{base}{s}") for s in SQLITE_SIDE_FILES)]
        if not any(os.path.lexists(p) for p in names):
            break
        n += 1
    moved: Path | None = None
    for suffix in ("", *SQLITE_SIDE_FILES):
        src = Path(f"{path}{suffix}")
        if not os.path.lexists(src) or (suffix and keep_ours and _held_by_us(src)):
            continue
        dest = Path(f"{base}{suffix}")
        move_no_replace(src, dest)
        if not suffix:
            moved = dest
    return moved


def set_aside_files(database: Path) -> list[Path]:
    """Index files set aside beside ``database`` (damaged or found in its place)."""
    try:
        names = os.listdir(database.parent)
    except OSError:
        return []
    prefixes = tuple(f"{database.name}.{label}-" for label in ASIDE_LABELS)
    return sorted(database.parent / n for n in names
                  if n.startswith(prefixes) and not n.endswith(SQLITE_SIDE_FILES))


def open_index(config: Config, *, repair: bool) -> tuple[Database, str | None]:
    """The daemon's index, checked; and a note for ``status`` when it had to be rebuilt.

    ``repair``: this process owns the index (the daemon's lock is held): a damaged file
    is set aside and the index rebuilt from the sidecars. Otherwise IndexDamaged says what
    to do.
    """
    origin = config.origin("database")
    fresh = not config.database.exists()
    try:
        db = Database(config.database, origin=origin, check=repair)
        if fresh and repair:
            _restore_archive(config, db)
        return db, None
    except IndexDamaged as exc:
        if not repair:
            raise
        log.error("%s", exc)
        damage = str(exc)
    aside = set_aside(config.database, "damaged")
    db = Database(config.database, origin=origin)
    log.error("the damaged index was kept as %s; rebuilding the index from the sidecars "
              "(nothing is read again)", aside)
    files, pages = _rebuild(config, db)
    note = (f"the index was damaged ({damage.split('(SQLite: ', 1)[-1].split(')', 1)[0]}) "
            f"and is kept as {aside}; rebuilt from the sidecars at "
            f"{time.strftime('%H:%M')}: {files} files, {pages} pages")
    log.warning("%s", note)
    return db, note


def _restore_archive(config: Config, db: Database) -> None:
    """A new index (the first start, or one lost while nothing ran): originals archived
    or deleted after reading whose sidecars carry ocrwatch's mark get their entries back.
    Those in the watched folders are restored by the scan, one by one."""
    from ocrwatch.reindex import archived, from_sidecars, results_of_deleted

    originals = archived(config)
    if not originals and not results_of_deleted(config):
        return
    restored = from_sidecars(config, db, originals=originals, marked=True, deleted=True)
    if restored.files:
        log.warning("a new index: %d files archived or deleted after reading (%d pages) "
                    "restored from their sidecars", restored.files, restored.pages)


def _rebuild(config: Config, db: Database) -> tuple[int, int]:
    from ocrwatch.reindex import from_sidecars

    try:
        restored = from_sidecars(config, db)
    except OcrwatchError as exc:  # sidecars filed by date name no original
        log.warning("the index cannot be rebuilt from the sidecars: %s; the files are "
                    "read again", exc)
        return 0, 0
    return restored.files, restored.pages


class IndexGuard(Service):
    """Notices the index file deleted, moved or replaced while the daemon runs, and puts
    the open index back at its path."""

    def __init__(self, db: Database, interval: float = CHECK_SECONDS) -> None:
        super().__init__("ocrwatch-index-guard")
        self.db = db
        self.interval = interval
        self.note: str | None = None  # what happened, for status
        self._damage_said: str | None = None

    def run(self) -> None:
        failed: str | None = None
        while not self.sleep(self.interval if failed is None else RETRY_SECONDS):
            try:
                self.check()
                failed = None
            except Exception as exc:  # the guard must outlive one bad look
                if str(exc) != failed:  # a full disk would say so every second
                    log.exception("could not put the index file %s back; trying again "
                                  "every %g s", self.db.path, RETRY_SECONDS)
                failed = str(exc)

    def check(self) -> bool:
        """Look once; True when the file had gone and was put back."""
        if self.db.damaged is not None and self._damage_said != self.db.damaged:
            # Found while running (a disk error under it): rebuilt at the next start.
            self._damage_said = self.db.damaged
            self.note = (f"the index is damaged ({self.db.damaged}); stop and start "
                         "ocrwatch: it keeps the damaged file aside and rebuilds the index "
                         "from the sidecars")
            log.error("%s", self.note)
        now = file_identity(self.db.path)
        if now == self.db.identity or self.stopping:
            return False
        what = "deleted or moved away" if now is None else "replaced by another file"
        log.error("the index %s was %s while ocrwatch was running; writing the open index "
                  "back there (nothing is lost or read again)", self.db.path, what)
        aside: list[Path | None] = []
        self.db.write_back(lambda: aside.append(
            set_aside(self.db.path, "replaced", keep_ours=True)))
        kept = aside[0] if aside else None
        self.note = (f"the index file was {what} at {time.strftime('%H:%M')}; "
                     "the open index was written back"
                     + (f" and the file found there kept as {kept}" if kept else ""))
        log.warning("%s", self.note)
        return True
