"""What becomes of an original once it is read: kept, archived with its sidecars, or deleted.

Moves go through :mod:`ocrwatch.fs.fsmove` (never replacing a file; across file systems a
synced copy, then the source removed) and are journalled in the index first: a crash
between the copy and the removal leaves both files, and the next start finishes the move
(the source is removed only when the copy's bytes are the same), so nothing is lost and
nothing is left twice. Each move's journal row is removed once the job row points at the
file's new place.

Before an original is archived or deleted, its sidecars (files and folders) and the
index row that records its reading are synced to disk: a power loss never leaves an
original gone and its text not yet written. The original is then renamed to a private
name in its folder (``.ocrwatch-retiring-JOB-NAME``, journalled first), opened without
following links and checked to be that very file, hashed through that handle, and only
then deleted or moved to the archive. A new version saved at the original's name at any
moment is a new file at that name: it is never the one deleted or archived. A private
name left by a crash is put back at the next start (:meth:`Lifecycle.recover`), and the
file is retired then, checked again (:meth:`Lifecycle.resume`).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import filecmp
import hashlib
import logging
import os
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ocrwatch.config import Config
from ocrwatch.core.domain import Job
from ocrwatch.core.errors import Doing, MachineError, OcrwatchError, os_reason
from ocrwatch.core.naming import NAME_MAX
from ocrwatch.fs.fsmove import (
    RETIRING_PREFIX,
    fsync_file,
    fsync_folder,
    move_no_replace,
    move_unique,
)
from ocrwatch.fs.safeopen import LinkRefused, open_dir_beneath
from ocrwatch.fs.writers import open_for_writing
from ocrwatch.results.formats import main_output
from ocrwatch.results.retire import disposal
from ocrwatch.store.db import Database
from ocrwatch.store.jobs import JobQueue

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


def retiring_name(original: Path, job_id: int) -> Path:
    """The private name ``original`` has in its folder while it is archived or deleted."""
    name = f"{RETIRING_PREFIX}{job_id}-{original.name}"
    if len(os.fsencode(name)) > NAME_MAX:
        name = f"{RETIRING_PREFIX}{job_id}"
    return original.with_name(name)


def is_retiring(path: Path) -> bool:
    return path.name.startswith(RETIRING_PREFIX)


_NEW_VERSION = "a new version was saved after the read; it is read in its turn"
_STILL_WRITTEN = ("another program still had it open for writing (an editor or a scanner "
                  "app): kept, so that nothing it adds is lost; it is tried again at the "
                  "next start, and read again if it changes")


def _holds(dirfd: int, path: Path) -> bool:
    """Whether ``path``, as named, is the entry of its name in the folder ``dirfd``."""
    try:
        inside = os.stat(path.name, dir_fd=dirfd, follow_symlinks=False)
        named = os.lstat(path)
    except OSError:
        return False
    return (inside.st_dev, inside.st_ino) == (named.st_dev, named.st_ino)


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
    def finish(self, job_id: int, original: Path, outputs: Mapping[str, Path],
               sha256: str | None = None, mode: str = "keep") -> Outcome:
        """Carry out ``mode`` ("keep", "archive", "delete": what
        :func:`ocrwatch.results.retire.disposal` says of the job) on ``original`` and its
        outputs beside it (by name: every one the job has; on "delete", the one that
        stands for the file, :func:`~ocrwatch.results.formats.main_output`, names its
        index entry).

        ``sha256``: the content that was read. A new version saved over the file since
        (an editor's save, a scanner's second pass) was never read: it is left in place,
        to be read in its turn, never deleted or archived unread.

        Raises OSError when archiving or deleting failed; the files are then where they
        were (or, where a move back failed too, where the job row now says) and the job
        row says "failed" with the reason.
        """
        if mode == "keep":
            return Outcome(original, {})
        if mode == "archive" and self.config.archive_dir is None:
            raise MachineError("archive_dir is not set any more: the original stays where "
                               "it is; set archive_dir, or on_success = \"keep\"")
        verb = "deleted" if mode == "delete" else "archived"
        private = retiring_name(original, job_id)
        sidecars = list(outputs.values())
        try:
            self._make_durable(sidecars)
            # The journal row, and with it the reading's index row, synced to disk before
            # the original leaves its name: a crash after it puts the file back at start.
            with self.db.durable():
                self._journal(job_id, [(original, private)])
            self._move(original, private)
        except FileNotFoundError:
            if not os.path.lexists(original):  # gone meanwhile: nothing left to lose
                self._settle(job_id, [], None)
                if mode == "delete":
                    return self._delete(job_id, original, outputs)
                return Outcome(original, {})
            self._settle(job_id, [], None, retire=("failed", f"could not be {verb}: a "
                                                   "folder of its results is gone"))
            raise
        except OSError as exc:
            self._settle(job_id, [], None,
                         retire=("failed", f"could not be {verb}: {move_failure(exc)}"))
            raise
        # From here the file under the private name is the one acted on, whatever is
        # saved at the original's name meanwhile.
        if open_for_writing(private):
            back = self._put_back(private, original)
            self._settle(job_id, [], None, retire=("failed", _STILL_WRITTEN))
            log.warning("%s is still open for writing in another program: kept, not %s "
                        "(what it adds would be lost)", back, verb)
            return Outcome(back, {})
        if sha256 is not None and not self._still_read(private, sha256):
            log.warning("%s changed after it was read: left in place for its next reading "
                        "(on_success = \"%s\" waits for that)", original, mode)
            back = self._put_back(private, original)
            self._settle(job_id, [], None, retire=("kept", _NEW_VERSION))
            return Outcome(back, {})
        if mode == "delete":
            try:
                private.unlink()
            except FileNotFoundError:
                # Put back by a start-up's recovery in another process: nothing deleted,
                # and it is done at that process's start.
                self._settle(job_id, [], None, retire=("pending", None))
                return Outcome(original, {})
            except OSError as exc:
                self._put_back(private, original)
                self._settle(job_id, [], None, retire=(
                    "failed", f"could not be deleted: {move_failure(exc)}"))
                raise
            # The journal first: a crash before the entry names the result leaves
            # "pending" with the original gone, finished at start (:meth:`resume`).
            self._settle(job_id, [], None, retire=("pending", None))
            return self._delete(job_id, original, outputs)
        return self._archive(job_id, original, private, sidecars)

    def _archive(self, job_id: int, original: Path, private: Path,
                 sidecars: list[Path]) -> Outcome:
        assert self.config.archive_dir is not None  # checked by finish
        folder = placed(self.config.archive_dir, original, self.config.inbox,
                        self.config.archive_layout)
        beside = [s for s in sidecars if s.parent == original.parent and s.exists()]
        try:
            # The archive folder, made and opened with no link followed below it, and
            # itself not followed if it was a real folder at start: one swapped for a
            # link mid-run never takes the user's files elsewhere.
            held = open_dir_beneath(self.config.archive_dir, folder, create=True)
        except LinkRefused as exc:
            self._put_back(private, original)
            self._settle(job_id, [], None, retire=("failed", f"could not be archived: {exc}"))
            raise
        except OSError as exc:
            self._put_back(private, original)
            self._settle(job_id, [], None,
                         retire=("failed", f"could not be archived: {move_failure(exc)}"))
            raise
        try:
            return self._archive_into(job_id, original, private, beside, folder, held)
        finally:
            os.close(held)

    def _archive_into(self, job_id: int, original: Path, private: Path,
                      beside: list[Path], folder: Path, held: int) -> Outcome:
        """The moves into ``folder``, which ``held`` is a handle on."""
        try:
            moves = self._plan(original, beside, folder)
        except OSError as exc:
            self._put_back(private, original)
            self._settle(job_id, [], None,
                         retire=("failed", f"could not be archived: {move_failure(exc)}"))
            raise
        # The sidecars first, the original last: a move that fails part way leaves the
        # original in place, with its results beside it (they are moved back).
        moves = moves[1:] + moves[:1]
        self._journal(job_id, moves)
        try:
            done = self._carry_out(moves, {original: private})
        except _Failed as failed:
            kept = self._undo(failed.done, {original: private})
            self._put_back(private, original)
            self._settle(job_id, kept, original,
                         retire=("failed", f"could not be archived: {move_failure(failed.error)}"))
            raise failed.error from None
        if any(not _holds(held, dest) for _, dest in done):
            # The moves go by name: a folder swapped for a link between the check and
            # them took the files elsewhere. They come back.
            kept = self._undo(done, {original: private})
            self._put_back(private, original)
            reason = (f"could not be archived: the folder {folder} was replaced by a "
                      "symbolic link while the files were moved into it; they were moved "
                      "back. Put the real folder back in its place")
            self._settle(job_id, kept, original, retire=("failed", reason))
            raise LinkRefused(reason)
        if os.path.lexists(private):  # its place in the archive was taken meanwhile
            self._put_back(private, original)
        self._settle(job_id, done, original)
        moved = dict(done)
        if original in moved:
            log.info("archived %s to %s", original, moved[original])
        return Outcome(moved.pop(original, original), moved)

    def _make_durable(self, sidecars: list[Path]) -> None:
        """The results on disk, files and names, before the original may go: a power
        loss right after never leaves neither (raises OSError when they cannot be)."""
        for path in sidecars:
            with contextlib.suppress(FileNotFoundError):  # moved or removed by the user
                fsync_file(path)
        for folder in dict.fromkeys(p.parent for p in sidecars):
            with contextlib.suppress(FileNotFoundError):
                fsync_folder(folder)

    def _put_back(self, private: Path, original: Path) -> Path:
        """``private`` back at ``original`` (a new version saved there meanwhile keeps its
        name: this one goes beside it, ``NAME.2.EXT``); returns where it is."""
        if not os.path.lexists(private):
            return original
        try:
            self._move(private, original)
            return original
        except FileExistsError:
            back = move_unique(private, original)
            log.warning("%s was saved again while it was being retired: the version that "
                        "was being retired is at %s", original, back)
            return back
        except OSError as exc:
            log.warning("could not put %s back at %s (%s): it stays there, and is put back "
                        "at the next start", private, original, move_failure(exc))
            return private

    def _delete(self, job_id: int, original: Path, outputs: Mapping[str, Path]) -> Outcome:
        """Record that ``original`` is deleted (it is gone by now: the file checked under
        its private name was removed, never a file at this name).

        The index entry then names the result, so that it stays (the index follows
        the files: an entry whose file is gone is dropped, its sidecars with it).
        """
        result = main_output({o: p for o, p in outputs.items() if os.path.lexists(p)})
        self.jobs.deleted_original(job_id, result)
        log.info("deleted %s after reading it (on_success = \"delete\", or as asked by "
                 "`ocrwatch add --on-success delete`)", original)
        return Outcome(None, {})

    def _undo(self, done: list[tuple[Path, Path]],
              moved_as: dict[Path, Path] | None = None) -> list[tuple[Path, Path]]:
        """Move back what a failed archive moved (to the name it was moved from:
        ``moved_as``); returns the moves that stay."""
        kept = []
        for src, dest in reversed(done):
            try:
                self._move(dest, (moved_as or {}).get(src, src))
            except OSError as exc:
                log.warning("could not move %s back to %s (%s): it stays in the archive",
                            dest, src, move_failure(exc))
                kept.append((src, dest))
        return kept

    @staticmethod
    def _still_read(original: Path, sha256: str) -> bool:
        """Whether the file at ``original`` (never a link's target) holds the content
        that was read (gone counts: there is nothing left to lose). The handle hashed is
        checked to be the file at that name."""
        try:
            fd = os.open(original, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        try:
            with os.fdopen(fd, "rb", closefd=False) as fh:
                opened = os.fstat(fd)
                named = os.lstat(original)
                if (not stat.S_ISREG(opened.st_mode)
                        or (opened.st_dev, opened.st_ino) != (named.st_dev, named.st_ino)):
                    return False
                return hashlib.file_digest(fh, "sha256").hexdigest() == sha256
        except OSError:
            return False
        finally:
            os.close(fd)

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

    def _carry_out(self, moves: list[tuple[Path, Path]],
                   moved_as: dict[Path, Path] | None = None) -> list[tuple[Path, Path]]:
        """Make ``moves``; a file under another name for now (the original under its
        private name) is moved from that name (``moved_as``)."""
        done: list[tuple[Path, Path]] = []
        for src, dest in moves:
            try:
                self._move((moved_as or {}).get(src, src), dest)
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
            moves, owed = self._put_back_retiring(moves)
            if found is None or found.state != "done":
                log.warning("a move of %s was cut short, but that file is no longer done: "
                            "left where it is", moves[-1][0] if moves else "a file")
                self._settle(job_id, [], None)
                continue
            original = found.path
            sha = found.sha256
            if (os.path.lexists(original) and sha is not None
                    and not self._still_read(original, sha)):
                log.warning("%s changed since its archiving was cut short: left in place "
                            "with its results, to be read in its turn", original)
                self._settle(job_id, [], None, retire=("kept", _NEW_VERSION))
                continue
            done = self._finish_moves(moves)
            if any(s == original for s, _ in done):
                self._settle(job_id, done, original)
            elif owed:  # put back: archived or deleted at start, checked again (resume)
                self._settle(job_id, done, None, retire=("pending", None))
            else:  # the original's own move could not be finished: tried again at start
                self._settle(job_id, done, None, retire=(
                    "failed", "its archiving was cut short and could not be finished"))
        return len(jobs)

    def _put_back_strays(self) -> None:
        """Originals under a private name that no journal row names (the index replaced
        or rebuilt since a crash): put back at their names, to be read or retired again."""
        journalled = {d for moves in self.jobs.journal().values() for _, d in moves}
        for inbox in self.config.inbox:
            for folder, _dirs, names in os.walk(inbox):
                for name in names:
                    private = Path(folder) / name
                    if not name.startswith(RETIRING_PREFIX) or private in journalled:
                        continue
                    job_text, _, original = name[len(RETIRING_PREFIX):].partition("-")
                    if not original:  # a long name, shortened: the job row knows it
                        job = self.jobs.get(int(job_text)) if job_text.isdigit() else None
                        if job is None or job.path.parent != private.parent:
                            log.warning("%s is an original left by a crash under a private "
                                        "name; rename it back yourself", private)
                            continue
                        original = job.path.name
                    back = self._put_back(private, private.with_name(original))
                    log.info("%s was left under a private name by a crash: put back at %s",
                             original, back)

    def _put_back_retiring(self, moves: list[tuple[Path, Path]]
                           ) -> tuple[list[tuple[Path, Path]], bool]:
        """An original left under its private name by a crash goes back to its name, and
        its move to the archive is not finished from there (:meth:`resume` retires it,
        checked again). Returns the moves left to finish, and whether an original's
        archiving or deletion is still owed."""
        retiring = {s: d for s, d in moves if is_retiring(d)}
        rest = [(s, d) for s, d in moves if not is_retiring(d)]
        for original, private in retiring.items():
            if not os.path.lexists(private):
                continue  # not yet renamed, or already deleted or archived
            dest = next((d for s, d in rest if s == original), None)
            if dest is not None and os.path.lexists(dest) and filecmp.cmp(
                    private, dest, shallow=False):
                # Killed between a copy to another file system and the removal.
                private.unlink()
                log.info("finished archiving %s to %s (cut short before)", original, dest)
                continue
            rest = [(s, d) for s, d in rest if s != original]
            back = self._put_back(private, original)
            log.info("%s was being archived or deleted when ocrwatch stopped: put back at "
                     "%s", original, back)
        return rest, bool(retiring)

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
        # The daemon's start only: an `ocrwatch add` beside it may be retiring a file now.
        self._put_back_strays()
        count = 0
        for job in self.owed():
            mode = disposal(self.config, job)
            if mode == "keep":
                continue
            outputs = {o: p for o, p in self.jobs.outputs_of(job.id).items()
                       if os.path.lexists(p)}
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
