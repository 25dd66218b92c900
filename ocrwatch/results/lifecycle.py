"""What becomes of an original once it is read: kept, archived with its sidecars, or deleted.

Moves go through :mod:`ocrwatch.fs.fsmove` (never replacing a file; across file systems a
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
from ocrwatch.core.domain import Job
from ocrwatch.core.errors import Doing, MachineError, OcrwatchError, os_reason
from ocrwatch.fs.fsmove import move_no_replace
from ocrwatch.results.retire import disposal
from ocrwatch.results.sidecar import pdf_path
from ocrwatch.store.db import Database
from ocrwatch.store.jobs import JobQueue, file_sha256

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
        self.jobs = JobQueue(db)
        # The move of the source happens between these steps; a test may stop it there.
        self._move: Callable[[Path, Path], None] = move_no_replace

    # -- journal -------------------------------------------------------------------------
    def _journal(self, job_id: int, moves: list[tuple[Path, Path]]) -> None:
        self.jobs.journal_moves(job_id, moves)

    def _settle(self, job_id: int, moves: list[tuple[Path, Path]],
                original: Path | None,
                retire: tuple[str | None, str | None] = (None, None)) -> None:
        """Point the job at the moved files, drop the journal rows and record what
        on_success still owes the file (``retire``: nothing, by default), in one
        transaction."""
        self.jobs.settle_moves(job_id, moves, original, retire)

    def record(self, job_id: int, retire: str | None, reason: str | None = None) -> None:
        """What on_success still owes the job: None (nothing), "kept" or "failed" (and
        why: shown by ``ocrwatch status`` and kept in the job row)."""
        self.jobs.record_retire(job_id, retire, reason)

    # -- after a good read ---------------------------------------------------------------
    def finish(self, job_id: int, original: Path, sidecars: list[Path],
               sha256: str | None = None, mode: str = "keep") -> Outcome:
        """Carry out ``mode`` ("keep", "archive", "delete": what
        :func:`ocrwatch.results.retire.disposal` says of the job) on ``original`` and the
        sidecars beside it.

        ``sha256``: the content that was read. A new version saved over the file since
        (an editor's save, a scanner's second pass) was never read: it is left in place,
        to be read in its turn, never deleted or archived unread.

        Raises OSError when archiving or deleting failed; the files are then where they
        were (or, where a move back failed too, where the job row now says) and the job
        row says "failed" with the reason.
        """
        if mode == "keep":
            return Outcome(original, {})
        if sha256 is not None and not self._still_read(original, sha256):
            log.warning("%s changed after it was read: left in place for its next reading "
                        "(on_success = \"%s\" waits for that)", original, mode)
            self.record(job_id, "kept", "a new version was saved after the read; it is "
                                        "read in its turn")
            return Outcome(original, {})
        if mode == "delete":
            return self._delete(job_id, original, sidecars)
        if self.config.archive_dir is None:
            raise MachineError("archive_dir is not set any more: the original stays where "
                               "it is; set archive_dir, or on_success = \"keep\"")
        folder = placed(self.config.archive_dir, original, self.config.inbox,
                        self.config.archive_layout)
        beside = [s for s in sidecars if s.parent == original.parent and s.exists()]
        try:
            moves = self._plan(original, beside, folder)
        except OSError as exc:
            self.record(job_id, "failed", f"could not be archived: {move_failure(exc)}")
            raise
        # The sidecars first, the original last: a move that fails part way leaves the
        # original in place, with its results beside it (they are moved back).
        moves = moves[1:] + moves[:1]
        self._journal(job_id, moves)
        try:
            done = self._carry_out(moves)
        except _Failed as failed:
            kept = self._undo(failed.done)
            self._settle(job_id, kept, original,
                         retire=("failed", f"could not be archived: {move_failure(failed.error)}"))
            raise failed.error from None
        self._settle(job_id, done, original)
        moved = dict(done)
        if original in moved:
            log.info("archived %s to %s", original, moved[original])
        return Outcome(moved.pop(original, original), moved)

    def _delete(self, job_id: int, original: Path, sidecars: list[Path]) -> Outcome:
        # The index entry then names the result, so that it stays (the index follows
        # the files: an entry whose file is gone is dropped, its sidecars with it). A
        # crash between the two leaves "pending" with the original gone: the next start
        # points the entry at the result (:meth:`resume`).
        result = next((p for p in reversed(sidecars) if os.path.lexists(p)), None)
        try:
            original.unlink(missing_ok=True)
        except OSError as exc:
            self.record(job_id, "failed", f"could not be deleted: {move_failure(exc)}")
            raise
        self.jobs.deleted_original(job_id, result)
        log.info("deleted %s after reading it (on_success = \"delete\", or as asked by "
                 "`ocrwatch add --on-success delete`)", original)
        return Outcome(None, {})

    def _undo(self, done: list[tuple[Path, Path]]) -> list[tuple[Path, Path]]:
        """Move back what a failed archive moved; returns the moves that stay."""
        kept = []
        for src, dest in reversed(done):
            try:
                self._move(dest, src)
            except OSError as exc:
                log.warning("could not move %s back to %s (%s): it stays in the archive",
                            dest, src, move_failure(exc))
                kept.append((src, dest))
        return kept

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
        done: list[tuple[Path, Path]] = []
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
            except OSError as exc:  # a full disk, a folder that cannot be written
                raise _Failed(exc, done) from exc
            done.append((src, dest))
        return done

    # -- at start --------------------------------------------------------------------
    def recover(self, src: Path | None = None) -> int:
        """Finish the moves a crash cut short (with ``src``: those of the job moving
        ``src`` only); returns how many jobs were settled.

        A move is finished only for a job still ``done`` whose original still holds the
        content that was read: a new version saved at the original's name since (after
        an archive that failed, say) is never archived unread beside the old sidecars.
        """
        jobs = self.jobs.journal(src)
        for job_id, moves in jobs.items():
            found = self.jobs.get(job_id)
            if found is None or found.state != "done":
                log.warning("a move of %s was cut short, but that file is no longer done: "
                            "left where it is", moves[-1][0])
                self._settle(job_id, [], None)
                continue
            original = found.path
            sha = found.sha256
            if (os.path.lexists(original) and sha is not None
                    and not self._still_read(original, sha)):
                log.warning("%s changed since its archiving was cut short: left in place "
                            "with its results, to be read in its turn", original)
                self._settle(job_id, [], None,
                             retire=("kept", "a new version was saved after the read; it "
                                             "is read in its turn"))
                continue
            done = self._finish_moves(moves)
            if any(s == original for s, _ in done):
                self._settle(job_id, done, original)
            else:  # the original's own move could not be finished: tried again at start
                self._settle(job_id, done, None, retire=(
                    "failed", "its archiving was cut short and could not be finished"))
        return len(jobs)

    def _finish_moves(self, moves: list[tuple[Path, Path]]) -> list[tuple[Path, Path]]:
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
                except OSError as exc:
                    log.warning("could not finish moving %s to %s (%s); left in place",
                                src, dest, move_failure(exc))
                    continue
            elif not os.path.lexists(dest):
                log.warning("neither %s nor %s exists any more", src, dest)
                continue
            done.append((src, dest))
        return done

    def journalled(self, path: Path) -> bool:
        """Whether a move of ``path`` is in the journal (under way, or cut short)."""
        return self.jobs.journalled(path)

    def owed(self) -> list[Job]:
        """Done files whose on_success was cut short ("pending": killed between "done"
        and archiving) or failed (a full disk...): to be tried again at start."""
        return self.jobs.owed()

    def resume(self) -> int:
        """At start, after :meth:`recover`: carry out the on_success still owed.

        What is owed is what :func:`ocrwatch.results.retire.disposal` says now (with
        on_success = "keep" now, an inbox file owes nothing any more). Returns how many
        files were archived or deleted.
        """
        count = 0
        for job in self.owed():
            mode = disposal(self.config, job)
            if mode == "keep":
                continue
            md, txt = self.jobs.sidecar_names(job.id)
            outputs = [v for v in (txt, md) if v]
            if md:
                outputs.append(pdf_path(md.with_suffix("")))
            outputs = [p for p in outputs if os.path.lexists(p)]
            if not os.path.lexists(job.path):
                if mode == "delete" and outputs:
                    # Deleted, then killed before the entry named the result.
                    self._delete(job.id, job.path, outputs)
                    count += 1
                continue  # gone otherwise: the rescan tells a move from a deletion
            try:
                outcome = self.finish(job.id, job.path, outputs, job.sha256, mode)
            except (OSError, OcrwatchError) as exc:
                log.warning("%s is done but could not be %s: %s", job.display,
                            "archived" if mode == "archive" else "deleted",
                            move_failure(exc) if isinstance(exc, OSError) else exc)
                continue
            if outcome.original != job.path:
                count += 1
        if count:
            log.info("%d files read before ocrwatch last stopped are now archived or "
                     "deleted, as on_success says", count)
        return count


class _Failed(MachineError):
    """A move of an archive failed; ``done`` are the moves made before it."""

    def __init__(self, error: OSError, done: list[tuple[Path, Path]]) -> None:
        super().__init__(str(error))
        self.error = error
        self.done = done


def move_failure(exc: OSError) -> str:
    """A plain reason for a failed move, with what to do."""
    return str(os_reason(exc, Doing.MOVE))
