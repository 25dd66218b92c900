"""What becomes of an original once it is read: kept, archived with its sidecars, or deleted.

Moves go through :mod:`ocrwatch.fsmove` (never replacing a file; across file systems a
synced copy, then the source removed) and are journalled in the index first: a crash
between the copy and the removal leaves both files, and the next start finishes the move
(the source is removed only when the copy's bytes are the same), so nothing is lost and
nothing is left twice. Each move's journal row is removed once the job row points at the
file's new place.
"""

from __future__ import annotations

import datetime as _dt
import filecmp
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ocrwatch.config import Config
from ocrwatch.db import Database, decode_path, display_path, encode_path
from ocrwatch.fsmove import move_no_replace
from ocrwatch.jobs import file_sha256

log = logging.getLogger(__name__)


def placed(base: Path, source: Path, inboxes: list[Path], layout: str,
           when: float | None = None) -> Path:
    """The folder under ``base`` for ``source``: the inbox's tree mirrored
    (``base/INBOX-NAME/sub/folders``), or ``base/YYYY/MM`` of ``when`` (default now)."""
    if layout == "date":
        day = _dt.datetime.fromtimestamp(time.time() if when is None else when)
        return base / f"{day.year:04d}" / f"{day.month:02d}"
    for inbox in inboxes:
        try:
            rel = source.parent.relative_to(inbox)
        except ValueError:
            continue
        return base / inbox.name / rel
    return base / "other"


def output_folder(config: Config, source: Path) -> Path:
    """Where the sidecars of ``source`` go: beside it, or under ``output_dir``."""
    if config.output_dir is None:
        return source.parent
    return placed(config.output_dir, source, config.inbox, config.output_layout)


@dataclass(frozen=True)
class Outcome:
    """Where the original and its sidecars are after ``on_success``."""

    original: Path | None  # None: deleted
    sidecars: dict[Path, Path]  # old path -> new path, for those that moved


def _renamed(name: str, stem: str, n: int) -> str:
    """``scan.jpg`` -> ``scan.2.jpg``; a sidecar ``scan.md`` -> ``scan.2.md`` alike."""
    return f"{stem}.{n}{name[len(stem):]}" if name.startswith(stem) else f"{n}.{name}"


class Lifecycle:
    """Carries out ``on_success`` for finished files; recovers moves cut short by a crash."""

    def __init__(self, config: Config, db: Database) -> None:
        self.config = config
        self.db = db
        # The move of the source happens between these steps; a test may stop it there.
        self._move: Callable[[Path, Path], None] = move_no_replace

    # -- journal -------------------------------------------------------------------------
    def _journal(self, job_id: int, moves: list[tuple[Path, Path]]) -> None:
        with self.db.transaction() as conn:
            conn.executemany(
                "INSERT INTO moves(job_id, src, dest) VALUES (?, ?, ?)",
                [(job_id, encode_path(s), encode_path(d)) for s, d in moves])

    def _settle(self, job_id: int, moves: list[tuple[Path, Path]],
                original: Path | None) -> None:
        """Point the job at the moved files and drop the journal rows, in one transaction."""
        with self.db.transaction() as conn:
            for src, dest in moves:
                old, new = encode_path(src), encode_path(dest)
                if original is not None and src == original:
                    conn.execute("UPDATE jobs SET path = ?, display = ? WHERE id = ? AND path = ?",
                                 (new, display_path(dest), job_id, old))
                conn.execute("UPDATE jobs SET md_path = ? WHERE id = ? AND md_path = ?",
                             (new, job_id, old))
                conn.execute("UPDATE jobs SET txt_path = ? WHERE id = ? AND txt_path = ?",
                             (new, job_id, old))
            conn.execute("DELETE FROM moves WHERE job_id = ?", (job_id,))

    # -- after a good read ---------------------------------------------------------------
    def finish(self, job_id: int, original: Path, sidecars: list[Path],
               sha256: str | None = None) -> Outcome:
        """Apply ``on_success`` to ``original`` (and the sidecars beside it in the inbox).

        ``sha256``: the content that was read. A new version saved over the file since
        (an editor's save, a scanner's second pass) was never read: it is left in place,
        to be read in its turn, never deleted or archived unread.
        """
        mode = self.config.on_success
        if mode == "keep":
            return Outcome(original, {})
        if sha256 is not None and not self._still_read(original, sha256):
            log.warning("%s changed after it was read: left in place for its next reading "
                        "(on_success = \"%s\" waits for that)", original, mode)
            return Outcome(original, {})
        if mode == "delete":
            # The index entry now names the result, so that it stays (the index follows
            # the files: an entry whose file is gone is dropped, its sidecars with it).
            result = next((p for p in reversed(sidecars) if os.path.lexists(p)), None)
            if result is not None:
                with self.db.transaction() as conn:
                    conn.execute("UPDATE jobs SET path = ?, display = ? WHERE id = ?",
                                 (encode_path(result), display_path(result), job_id))
            original.unlink(missing_ok=True)
            log.info("deleted %s after reading it (on_success = \"delete\")", original)
            return Outcome(None, {})
        assert self.config.archive_dir is not None
        folder = placed(self.config.archive_dir, original, self.config.inbox,
                        self.config.archive_layout)
        beside = [s for s in sidecars if s.parent == original.parent and s.exists()]
        moves = self._plan(original, beside, folder)
        self._journal(job_id, moves)
        done = self._carry_out(moves)
        self._settle(job_id, done, original)
        moved = dict(done)
        if original in moved:
            log.info("archived %s to %s", original, moved[original])
        return Outcome(moved.pop(original, original), moved)

    @staticmethod
    def _still_read(original: Path, sha256: str) -> bool:
        """Whether ``original`` still holds the content that was read (gone counts: there
        is nothing left to lose)."""
        try:
            return file_sha256(original) == sha256
        except FileNotFoundError:
            return True
        except OSError:
            return False

    def _plan(self, original: Path, sidecars: list[Path], folder: Path
              ) -> list[tuple[Path, Path]]:
        """Destinations free for the original and every sidecar under one name: on a
        collision all get the same ``.N`` so they still belong together."""
        folder.mkdir(parents=True, exist_ok=True)
        stem = original.stem
        n = 1
        while True:
            names = [p.name if n == 1 else _renamed(p.name, stem, n)
                     for p in (original, *sidecars)]
            if not any(os.path.lexists(folder / name) for name in names):
                return [(p, folder / name) for p, name in zip((original, *sidecars), names,
                                                                 strict=True)]
            n += 1

    def _carry_out(self, moves: list[tuple[Path, Path]]) -> list[tuple[Path, Path]]:
        done = []
        for src, dest in moves:
            try:
                self._move(src, dest)
            except FileExistsError:
                # Taken since we looked (another program): the file stays where it is,
                # which loses nothing; say so.
                log.warning("could not archive %s: %s appeared meanwhile; left in place",
                            src, dest)
                continue
            except FileNotFoundError:
                log.info("%s was removed before it could be archived", src)
                continue
            done.append((src, dest))
        return done

    # -- at start --------------------------------------------------------------------
    def recover(self) -> int:
        """Finish the moves a crash cut short; returns how many jobs were settled."""
        rows = self.db.query("SELECT job_id, src, dest FROM moves ORDER BY id")
        jobs: dict[int, list[tuple[Path, Path]]] = {}
        for row in rows:
            jobs.setdefault(int(row["job_id"]), []).append(
                (decode_path(row["src"]), decode_path(row["dest"])))
        for job_id, moves in jobs.items():
            done: list[tuple[Path, Path]] = []
            for src, dest in moves:
                if os.path.lexists(src) and os.path.lexists(dest):
                    # Killed between the copy and the removal: the copy is whole (it is
                    # linked into place only once synced); remove the source only if the
                    # bytes agree, else keep both.
                    if filecmp.cmp(src, dest, shallow=False):
                        src.unlink()
                        log.info("finished moving %s to %s (cut short before)", src, dest)
                    else:
                        log.warning("%s and %s differ: both kept", src, dest)
                        continue
                elif os.path.lexists(src):
                    try:
                        self._move(src, dest)
                    except FileExistsError:
                        log.warning("could not finish moving %s: %s exists; left in place",
                                    src, dest)
                        continue
                elif not os.path.lexists(dest):
                    log.warning("neither %s nor %s exists any more", src, dest)
                    continue
                done.append((src, dest))
            first = moves[0][0]
            self._settle(job_id, done, first if (first, moves[0][1]) in done else None)
        return len(jobs)
