"""The durable job queue: one row per file, moving queued -> running -> done | failed.

Every transition is one transaction, so a crash at any moment loses nothing: at start,
rows left ``running`` go back to ``queued`` (a file that crashed the daemon itself is
read alone, and fails when it crashes it again). This module is the only writer of the
``jobs`` table and of the ``moves`` journal: :class:`JobQueue` takes a job through its
states, completes it (with its index rows, in the same transaction), finds a finished copy
to reuse and records what ``on_success`` did and still owes; the :class:`JobFiles` it
holds follows where each file is and names and reserves sidecars.

A job's outputs are rows of ``job_outputs`` (job, output name, path), written here only:
every format alike. ``jobs.md_path`` and ``jobs.txt_path`` are kept in step with the rows
of "md" and "txt" (:func:`_mirror`): search hits, ``ocrwatch status``'s last result and
older readers of the index read them.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

from ocrwatch.core.domain import Job, PageText, State
from ocrwatch.core.naming import choose_stem, output_paths
from ocrwatch.core.status import Failure
from ocrwatch.store.db import Database, decode_path, display_path, encode_path, put_setting
from ocrwatch.store.index import (
    Hit,
    drop_pages,
    first_doubt,
    pages_of,
    replace_pages,
    warnings_json,
)
from ocrwatch.store.jobfiles import (
    Forgotten,
    Moved,
    Seen,
    job_from_row,
    opt_path,
    rebase,
    tree_range,
)

log = logging.getLogger(__name__)

BACKOFF_BASE = 5.0  # seconds before the first retry of a transient failure
BACKOFF_MAX = 600.0
# Claim order: a file waits as if it had arrived one second later per this many bytes,
# so a small file (a born-digital letter, one page) passes a big one (scans) dropped up to
# that long before it, and no file waits for ever behind small ones.
BYTES_A_SECOND = 50_000
CRASH_LIMIT = 2  # deaths while a file was being read: the second (alone) fails it
CRASHED_REASON = (
    "ocrwatch crashed twice while reading this file, the second time reading it alone "
    "(a fatal error, whose trace is in the log, or killed: the out-of-memory killer ends "
    "a process whose page takes all the memory): the file may be damaged or made to "
    "stop a reader. `ocrwatch retry FILE` reads it again")
# A file retried after it crashed the daemon is read alone again: crashing once more,
# it fails at once, and no file read beside it is blamed.
_ALONE_AGAIN = "crashes = MIN(crashes, 1)"
_RUNNING = ("SELECT COUNT(*), COALESCE(MAX(crashes > 0), 0) FROM jobs "
            "WHERE state = 'running'")


@dataclass(frozen=True)
class Recovered:
    """What :meth:`JobQueue.recover` did with the files the last daemon was reading."""

    queued: int  # put back in the queue
    crashers: list[Job]  # crashed it again, alone: left running, for outcome.fail


def _first_queued(conn: sqlite3.Connection, extra: str,
                  params: tuple[float | int, ...]) -> dict[str, object] | None:
    """The oldest queued job that may run now (``params``: now, then ``extra``'s).

    ``not_before`` is wall-clock time (``ocrwatch status`` names it); one further ahead
    than the longest backoff can only mean the clock was set back since: due now, not
    hours later."""
    now, *rest = params
    cur = conn.execute("SELECT * FROM jobs WHERE state = 'queued' AND (not_before <= ? "
                       f"OR not_before > ?) {extra} ORDER BY not_before, "
                       f"created + COALESCE(size, 0) / {BYTES_A_SECOND}, id LIMIT 1",
                       (now, now + BACKOFF_MAX + 1, *rest))
    found = cur.fetchone()
    if found is None:
        return None
    return dict(zip([d[0] for d in cur.description], found, strict=True))


def _held_back(running: int, alone: int, *, suspect: bool) -> bool:
    """Whether a claim waits: nothing is claimed beside a file being read alone after a
    crash (``alone``), and such a file (``suspect``) waits until nothing else is being
    read, so that, crashing again, it is the one to blame."""
    return bool(alone) or (suspect and running > 0)


def file_sha256(source: Path | BinaryIO, chunk: int = 1 << 20) -> str:
    """SHA-256 of a file, given by path or already open (read from its start)."""
    if isinstance(source, Path):
        with source.open("rb") as fh:
            return file_sha256(fh, chunk)
    digest = hashlib.sha256()
    source.seek(0)
    while block := source.read(chunk):
        digest.update(block)
    return digest.hexdigest()


def new_id(conn: sqlite3.Connection) -> int:
    """A job id never used before, even by a job since forgotten.

    SQLite would reuse the highest id once its row is deleted; a reader still holding
    the forgotten job would then fail or defer a different file's job.
    """
    (top,) = conn.execute("SELECT COALESCE(MAX(id), 0) FROM jobs").fetchone()
    row = conn.execute("SELECT value FROM settings WHERE key = 'last_job_id'").fetchone()
    new = max(int(top), int(row[0]) if row else 0) + 1
    put_setting(conn, "last_job_id", str(new))
    return new


# The outputs that also have a column of their own in ``jobs`` (migration 001).
_COLUMNS = {"md": "md_path", "txt": "txt_path"}


def outputs_in(conn: sqlite3.Connection, job_id: int) -> dict[str, Path]:
    """The job's recorded outputs, by name, in the order recorded."""
    return {str(name): decode_path(path) for name, path in conn.execute(
        "SELECT name, path FROM job_outputs WHERE job_id = ? ORDER BY rowid", (job_id,))}


def _record(conn: sqlite3.Connection, job_id: int,
            outputs: Mapping[str, Path | None]) -> None:
    """Record ``outputs`` for the job: each name's path (None: it has none now); the
    outputs not named keep their rows (a PDF written while ``outputs`` held "pdf" stays
    the file's after "pdf" was dropped: it moves and is archived with it)."""
    for name, path in outputs.items():
        if path is None:
            conn.execute("DELETE FROM job_outputs WHERE job_id = ? AND name = ?",
                         (job_id, name))
        else:
            conn.execute("INSERT INTO job_outputs(job_id, name, path) VALUES (?, ?, ?) "
                         "ON CONFLICT(job_id, name) DO UPDATE SET path = excluded.path",
                         (job_id, name, encode_path(path)))
    _mirror(conn, job_id)


def _mirror(conn: sqlite3.Connection, job_id: int) -> None:
    """``jobs.md_path`` and ``txt_path`` as the job's rows say."""
    have = outputs_in(conn, job_id)
    conn.execute("UPDATE jobs SET md_path = ?, txt_path = ? WHERE id = ?",
                 (*(encode_path(p) if (p := have.get(n)) else None for n in _COLUMNS),
                  job_id))


def _drop_outputs(conn: sqlite3.Connection, job_id: int) -> dict[str, Path]:
    """Forget the job's outputs; returns what they were."""
    had = outputs_in(conn, job_id)
    conn.execute("DELETE FROM job_outputs WHERE job_id = ?", (job_id,))
    conn.execute("UPDATE jobs SET md_path = NULL, txt_path = NULL WHERE id = ?", (job_id,))
    return had


class JobFiles:
    """Where each job's file is, on a :class:`Database`: the queue's file bookkeeping,
    held by :class:`JobQueue` as ``files``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- discovery -----------------------------------------------------------------
    def known(self, path: Path) -> Job | None:
        rows = self.db.query("SELECT * FROM jobs WHERE path = ?", (encode_path(path),))
        return job_from_row(rows[0]) if rows else None

    def get(self, job_id: int) -> Job | None:
        rows = self.db.query("SELECT * FROM jobs WHERE id = ?", (job_id,))
        return job_from_row(rows[0]) if rows else None

    def is_current(self, path: Path, size: int, mtime_ns: int) -> bool:
        """Whether ``path`` is known with this size and mtime (no need to hash it again)."""
        rows = self.db.query(
            "SELECT size, mtime_ns FROM jobs WHERE path = ?", (encode_path(path),)
        )
        return bool(rows) and rows[0]["size"] == size and rows[0]["mtime_ns"] == mtime_ns

    def offer(self, path: Path, size: int, mtime_ns: int, sha256: str, *,
              dev: int | None = None, inode: int | None = None,
              asked: str | None = None) -> Seen:
        """Record a settled file; queue it when new or when its content changed.

        ``asked``: what the command that named the file asked for its original after a
        whole reading (``ocrwatch add --on-success``); None: its place decides. A new
        version found by the watcher starts again from None."""
        now = time.time()
        key = encode_path(path)
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT id, sha256, state FROM jobs WHERE path = ?", (key,)
            ).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO jobs(id, path, display, sha256, size, mtime_ns, state, "
                    "attempts, not_before, created, updated, dev, inode, asked) "
                    "VALUES (?, ?, ?, ?, ?, ?, 'queued', 0, 0, ?, ?, ?, ?, ?)",
                    (new_id(conn), key, display_path(path), sha256, size, mtime_ns, now, now,
                     dev, inode, asked),
                )
                return Seen.NEW
            job_id, old_sha, state = row
            if old_sha == sha256 and state != State.RUNNING:
                # Touched but same content: remember the new stat, keep the result.
                conn.execute(
                    "UPDATE jobs SET size = ?, mtime_ns = ?, updated = ?, "
                    "dev = COALESCE(?, dev), inode = COALESCE(?, inode) WHERE id = ?",
                    (size, mtime_ns, now, dev, inode, job_id),
                )
                return Seen.UNCHANGED
            conn.execute(
                "UPDATE jobs SET sha256 = ?, size = ?, mtime_ns = ?, state = 'queued', "
                "reason = NULL, attempts = 0, crashes = 0, not_before = 0, updated = ?, "
                "dev = COALESCE(?, dev), inode = COALESCE(?, inode), asked = ?, "
                "original_gone = 0 WHERE id = ?",
                (sha256, size, mtime_ns, now, dev, inode, asked, job_id),
            )
            return Seen.CHANGED

    def forget(self, path: Path) -> bool:
        """The file is gone: drop its job and its index entries."""
        return self.remove(path) is not None

    def remove(self, path: Path) -> Forgotten | None:
        """Like :meth:`forget`, returning what the caller needs to clean up after it."""
        with self.db.transaction() as conn:
            found = _forget_where(conn, "path = ?", (encode_path(path),))
        return found[0] if found else None

    def forget_tree(self, folder: Path) -> list[Forgotten]:
        """A folder is gone (deleted, or moved out of the watched folders)."""
        low, high = tree_range(folder)
        with self.db.transaction() as conn:
            return _forget_where(conn, "path > ? AND path < ?", (low, high))

    def forget_ids(self, ids: list[int]) -> list[Forgotten]:
        out: list[Forgotten] = []
        with self.db.transaction() as conn:
            for job_id in ids:
                out += _forget_where(conn, "id = ?", (job_id,))
        return out

    def missing(self) -> list[Path]:
        """Known files that no longer exist (the rescan prunes them)."""
        return [path for _id, path, _dev, there in self.whereabouts() if not there]

    def whereabouts(self) -> list[tuple[int, Path, int | None, bool]]:
        """Every known file: its job, path, the device it was on, and whether it is there."""
        return [(r["id"], decode_path(r["path"]), r["dev"],
                 os.path.lexists(os.fsdecode(r["path"])))
                for r in self.db.query("SELECT id, path, dev FROM jobs")]

    def move(self, old: Path, new: Path) -> tuple[Moved | None, Forgotten | None]:
        """A file was renamed or moved: its row follows it, with its pages and state.

        A known file that the move replaced is forgotten (returned second).
        """
        old_key, new_key = encode_path(old), encode_path(new)
        with self.db.transaction() as conn:
            row = conn.execute("SELECT id FROM jobs WHERE path = ?", (old_key,)).fetchone()
            if row is None:
                return None, None
            replaced = _forget_where(conn, "path = ?", (new_key,))
            conn.execute("UPDATE jobs SET path = ?, display = ?, updated = ? WHERE id = ?",
                         (new_key, display_path(new), time.time(), row[0]))
            outputs = outputs_in(conn, row[0])
        return Moved(row[0], old, new, outputs), replaced[0] if replaced else None

    def move_tree(self, old: Path, new: Path) -> list[Moved]:
        """A folder was renamed or moved: every row under it follows.

        Sidecars kept beside the originals moved with the folder, so their recorded
        names follow too; those kept in ``output_dir`` are the caller's to move.
        """
        low, high = tree_range(old)
        old_key, new_key = encode_path(old), encode_path(new)
        out: list[Moved] = []
        now = time.time()
        with self.db.transaction() as conn:
            rows = conn.execute("SELECT id, path FROM jobs "
                                "WHERE path > ? AND path < ?", (low, high)).fetchall()
            for job_id, key in rows:
                dest = new_key + key[len(old_key):]
                for (replaced,) in conn.execute("SELECT id FROM jobs WHERE path = ?",
                                                (dest,)).fetchall():
                    drop_pages(conn, replaced)
                    _drop_outputs(conn, replaced)
                conn.execute("DELETE FROM jobs WHERE path = ?", (dest,))
                conn.execute("UPDATE jobs SET path = ?, display = ?, updated = ? WHERE id = ?",
                             (dest, display_path(decode_path(dest)), now, job_id))
                # Outputs kept beside the originals moved with the folder: their names follow.
                _record(conn, job_id, {name: opt_path(rebase(encode_path(path), old_key,
                                                             new_key))
                                       for name, path in outputs_in(conn, job_id).items()})
                out.append(Moved(job_id, decode_path(key), decode_path(dest),
                                 outputs_in(conn, job_id)))
        return out

    def moved_away(self, dev: int, inode: int, size: int, mtime_ns: int,
                   sha256: str | None = None) -> Job | None:
        """A known job whose file is gone and that ``path`` may be, moved while nothing
        watched: the same inode, size and time, or else the same content (``sha256``)."""
        rows = self.db.query(
            "SELECT * FROM jobs WHERE dev = ? AND inode = ? AND size = ? AND mtime_ns = ?",
            (dev, inode, size, mtime_ns))
        if sha256 is not None:
            rows += self.db.query("SELECT * FROM jobs WHERE sha256 = ? AND state = 'done'",
                                  (sha256,))
        for row in rows:
            if not os.path.lexists(os.fsdecode(row["path"])):
                return job_from_row(row)
        return None

    def restore(self, path: Path, st: os.stat_result, sha256: str, *,
                original_gone: bool = False) -> int:
        """A job for a file whose pages come back from its sidecars (``ocrwatch reindex
        --from-sidecars``): recorded as being read, for :meth:`complete` to finish.
        ``original_gone``: ``path`` is the result of an original deleted after reading."""
        now = time.time()
        with self.db.transaction() as conn:
            job_id = new_id(conn)
            conn.execute(
                "INSERT INTO jobs(id, path, display, sha256, size, mtime_ns, state, attempts, "
                "not_before, created, updated, dev, inode, original_gone) "
                "VALUES (?, ?, ?, ?, ?, ?, 'running', 0, 0, ?, ?, ?, ?, ?)",
                (job_id, encode_path(path), display_path(path), sha256, st.st_size,
                 st.st_mtime_ns, now, now, st.st_dev, st.st_ino, int(original_gone)))
        return job_id

    def reject(self, path: Path, reason: str) -> None:
        """Record a file that cannot even be opened (a looping link...) as failed."""
        now = time.time()
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO jobs(id, path, display, state, reason, attempts, not_before, "
                "created, updated, finished) VALUES (?, ?, ?, 'failed', ?, 0, 0, ?, ?, ?) "
                "ON CONFLICT(path) DO UPDATE SET state = 'failed', reason = excluded.reason, "
                "sha256 = NULL, size = NULL, mtime_ns = NULL, updated = excluded.updated, "
                "finished = excluded.finished",
                (new_id(conn), encode_path(path), display_path(path), reason, now, now, now),
            )

    def contents(self) -> set[str]:
        """The content hash of every known file."""
        return {str(r["sha256"]) for r in
                self.db.query("SELECT DISTINCT sha256 FROM jobs WHERE sha256 IS NOT NULL")}

    def has_content(self, sha256: str) -> bool:
        """Whether a known file has this content."""
        return bool(self.db.query("SELECT 1 FROM jobs WHERE sha256 = ? LIMIT 1", (sha256,)))

    def exists(self, job_id: int) -> bool:
        return bool(self.db.query("SELECT 1 FROM jobs WHERE id = ?", (job_id,)))

    def sidecars_of_others(self, job_id: int) -> set[Path]:
        """Output files that belong to other originals (never to be overwritten)."""
        rows = self.db.query("SELECT path FROM job_outputs WHERE job_id != ?", (job_id,))
        return {decode_path(r["path"]) for r in rows}

    def refresh(self, job_id: int, size: int, mtime_ns: int, sha256: str) -> None:
        """Record what a running job's file is now (it was refused before being hashed)."""
        with self.db.transaction() as conn:
            conn.execute("UPDATE jobs SET sha256 = ?, size = ?, mtime_ns = ?, updated = ? "
                         "WHERE id = ?", (sha256, size, mtime_ns, time.time(), job_id))

    def reserve_outputs(self, job_id: int, outputs: Mapping[str, Path | None]) -> None:
        """Record output names before writing them (so that after a crash between writing
        and storing, the next try knows them as its own and reuses them), or where they
        are now (moved with their original); None: the job has no such output now."""
        with self.db.transaction() as conn:
            _record(conn, job_id, outputs)

    def reserve_sidecars(self, job_id: int, md: Path, txt: Path) -> None:
        """:meth:`reserve_outputs` for the ``.md`` and ``.txt``."""
        self.reserve_outputs(job_id, {"md": md, "txt": txt})

    def drop_sidecar_names(self, job_id: int) -> None:
        """Forget a job's output names (they are gone): another file may take them, and
        the job's later removal cannot mistake that file's outputs for its own."""
        with self.db.transaction() as conn:
            _drop_outputs(conn, job_id)

    def outputs_owned(self, paths: Iterable[Path]) -> bool:
        """Whether a job has one of these output names recorded."""
        keys = [encode_path(p) for p in paths]
        marks = ", ".join("?" * len(keys))
        return bool(keys) and bool(self.db.query(
            f"SELECT 1 FROM job_outputs WHERE path IN ({marks}) LIMIT 1", tuple(keys)))

    def sidecars_owned(self, md: Path, txt: Path) -> bool:
        """Whether a job has these sidecar names recorded."""
        return self.outputs_owned((md, txt))

    def outputs_of(self, job_id: int) -> dict[str, Path]:
        """The job's recorded outputs, by name ("md", "txt", "pdf", "hocr"...)."""
        rows = self.db.query("SELECT name, path FROM job_outputs WHERE job_id = ? "
                             "ORDER BY rowid", (job_id,))
        return {str(r["name"]): decode_path(r["path"]) for r in rows}

    def own_sidecars(self, job_id: int) -> set[Path]:
        """Every output name the job has recorded."""
        return set(self.outputs_of(job_id).values())

    def name_sidecars(self, job: Job, folder: Path,
                      edited: Callable[[Path], bool] | None = None,
                      outputs: Iterable[str] = ("md", "txt")) -> Path:
        """The stem for the job's outputs in ``folder``, the names of ``outputs`` reserved
        for it before writing.

        Never a name another original's outputs hold; the job's own earlier names are
        reused (a crash between writing and completing leaves them behind), except
        those ``edited`` says someone else changed since: those are the user's now.
        """
        # The job's own names, and whether someone edited them (reads of files), before
        # the write lock: only this job's finishing changes them.
        own = self.own_sidecars(job.id)
        if edited is not None:
            own = {p for p in own if not edited(p)}
        # The others' names read, a stem chosen and reserved in one write transaction:
        # two files of one stem finished at once (a.JPG and a.jpg) could each choose "a"
        # before either had reserved it, and the second's write would replace the first's.
        with self.db.transaction() as conn:
            stem = choose_stem(job.path, folder, self.sidecars_of_others(job.id), own)
            names = output_paths(stem, outputs)
            if names:
                _record(conn, job.id, names)
        return stem


class JobQueue:
    """Queue operations on a :class:`Database`: the files' rows (:attr:`files`, a
    :class:`JobFiles`) and their way through the states."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.files = JobFiles(db)

    # -- the files' rows, as most callers need them ------------------------------------
    def known(self, path: Path) -> Job | None:
        return self.files.known(path)

    def get(self, job_id: int) -> Job | None:
        return self.files.get(job_id)

    def offer(self, path: Path, size: int, mtime_ns: int, sha256: str, *,
              dev: int | None = None, inode: int | None = None,
              asked: str | None = None) -> Seen:
        """Record a settled file; queue it when new or when its content changed."""
        return self.files.offer(path, size, mtime_ns, sha256, dev=dev, inode=inode,
                                asked=asked)

    def ask(self, job_id: int, asked: str) -> None:
        """What the command that named this file asks for its original after its next
        whole reading (``ocrwatch add --on-success``, ``reread``: "keep")."""
        with self.db.transaction() as conn:
            conn.execute("UPDATE jobs SET asked = ? WHERE id = ?", (asked, job_id))

    # -- processing ----------------------------------------------------------------
    def recover(self, *, crashed: bool = False) -> Recovered:
        """At start: rows left ``running`` by a crash go back to ``queued``.

        ``crashed``: the last daemon did not stop cleanly (a reader's abort or
        segmentation fault, or a kill: the out-of-memory killer, :mod:`ocrwatch.control.
        crashes`). Each file it was reading counts it, and from then on is read alone
        (:meth:`claim`); one that crashed it again, alone, stays ``running`` and is
        returned, for the caller to fail with :data:`CRASHED_REASON` instead of reading
        it again at every start."""
        now = time.time()
        with self.db.transaction() as conn:
            if crashed:
                conn.execute("UPDATE jobs SET crashes = crashes + 1 WHERE state = 'running'")
            cur = conn.execute(
                "UPDATE jobs SET state = 'queued', updated = ? "
                "WHERE state = 'running' AND crashes < ?", (now, CRASH_LIMIT))
            queued = cur.rowcount
            cur = conn.execute("SELECT * FROM jobs WHERE state = 'running' ORDER BY id")
            cur.row_factory = sqlite3.Row  # as Database.query reads rows
            crashers = [job_from_row(row) for row in cur]
        return Recovered(queued, crashers)

    def claim(self, now: float | None = None) -> Job | None:
        """Take the queued job that may run now, oldest first counting a second of age
        per :data:`BYTES_A_SECOND` of its size, and mark it running."""
        return self._claim("", (), now)

    def claim_among(self, ids: set[int], now: float | None = None) -> Job | None:
        """Like :meth:`claim`, restricted to the given job ids (``ocrwatch add``)."""
        if not ids:
            return None
        marks = ",".join("?" * len(ids))
        return self._claim(f"AND id IN ({marks})", tuple(sorted(ids)), now)

    def _claim(self, extra: str, params: tuple[int, ...], now: float | None) -> Job | None:
        now = time.time() if now is None else now
        with self.db.transaction() as conn:
            # A file that was being read when the daemon crashed goes first, and alone.
            row = (_first_queued(conn, f"AND crashes > 0 {extra}", (now, *params))
                   or _first_queued(conn, extra, (now, *params)))
            if row is None:
                return None
            if _held_back(*conn.execute(_RUNNING).fetchone(), suspect=bool(row["crashes"])):
                return None
            conn.execute(
                "UPDATE jobs SET state = 'running', updated = ? WHERE id = ?", (now, row["id"])
            )
        row["state"] = "running"
        # ``updated`` still holds when it was queued (offered, deferred or put back).
        return replace(job_from_row(row), queued_at=float(str(row["updated"] or now)))

    def next_due(self) -> float | None:
        """When the earliest deferred job may run (for the worker's wait); None while
        claims are held back for a file read alone (the worker waits to be woken)."""
        (row,) = self.db.query(
            "SELECT (SELECT MIN(not_before) FROM jobs WHERE state = 'queued'), "
            "EXISTS (SELECT 1 FROM jobs WHERE crashes > 0 AND state = 'queued'), "
            f"r.* FROM ({_RUNNING}) AS r")
        if row[0] is None or _held_back(row[2], row[3], suspect=bool(row[1])):
            return None
        return float(row[0])

    def fail(self, job_id: int, reason: str, sha256: str | None = None) -> bool:
        """Fail a running job; with ``sha256``, only while it still stands for that content
        (a reader of the old content must not fail the job queued again for the new)."""
        now = time.time()
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE jobs SET state = 'failed', reason = ?, updated = ?, finished = ? "
                "WHERE id = ? AND state = 'running' AND (? IS NULL OR sha256 IS ?)",
                (reason, now, now, job_id, sha256, sha256),
            )
            return cur.rowcount > 0

    def defer(self, job_id: int, reason: str, max_attempts: int,
              sha256: str | None = None) -> bool:
        """A transient failure: queue again after a backoff; fail after ``max_attempts``.

        Returns True when the job will be tried again. Like :meth:`fail`, it touches only
        a running job and, with ``sha256``, only while it stands for that content.
        """
        now = time.time()
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT attempts FROM jobs WHERE id = ? AND state = 'running' "
                "AND (? IS NULL OR sha256 IS ?)", (job_id, sha256, sha256)
            ).fetchone()
            if row is None:
                return False  # forgotten (file deleted) or queued again meanwhile
            attempts = row[0] + 1
            if attempts >= max_attempts:
                conn.execute(
                    "UPDATE jobs SET state = 'failed', attempts = ?, updated = ?, finished = ?, "
                    "reason = ? WHERE id = ?",
                    (attempts, now, now, f"{reason} (gave up after {attempts} tries)", job_id),
                )
                return False
            delay = min(BACKOFF_MAX, BACKOFF_BASE * 2 ** (attempts - 1))
            conn.execute(
                "UPDATE jobs SET state = 'queued', attempts = ?, not_before = ?, reason = ?, "
                "updated = ? WHERE id = ?",
                (attempts, now + delay, reason, now, job_id),
            )
            return True

    def complete(self, job_id: int, pages: list[PageText], *, engine: str,
                 outputs: Mapping[str, Path | None] | None = None,
                 md_path: Path | None = None, txt_path: Path | None = None,
                 sha256: str | None = None, read_with: str | None = None,
                 retire: str | None = None, retire_reason: str | None = None) -> bool:
        """Replace the job's index rows and mark it done, in one transaction.

        ``outputs``: what was written, by name (None: not written: the job has none of
        that name now); outputs not named keep what was recorded. Without ``outputs``,
        ``md_path`` and ``txt_path`` say it for the ``.md`` and ``.txt``.

        With ``sha256``, nothing is stored when the file's content changed meanwhile (the
        job was queued again for the new content): returns False then. ``retire``: what
        on_success still owes the original ("pending", or "kept" with ``retire_reason``),
        recorded with ``done`` so that a crash right after cannot lose it.
        """
        now = time.time()
        warnings = [f"page {i}: {w}" for i, p in enumerate(pages, 1) for w in p.warnings]
        with self.db.transaction() as conn:
            row = conn.execute("SELECT sha256, state FROM jobs WHERE id = ?",
                               (job_id,)).fetchone()
            if row is None or (sha256 is not None and (row[0] != sha256 or row[1] != "running")):
                return False
            replace_pages(conn, job_id, pages)
            conn.execute(
                "UPDATE jobs SET state = 'done', reason = NULL, pages = ?, engine = ?, "
                "warnings = ?, updated = ?, finished = ?, "
                "read_with = coalesce(?, read_with), retire = ?, retire_reason = ? "
                "WHERE id = ?",
                (len(pages), engine, warnings_json(warnings), now, now, read_with, retire,
                 retire_reason, job_id),
            )
            _record(conn, job_id, {"md": md_path, "txt": txt_path} if outputs is None
                    else outputs)
            # Moves journalled for an earlier version of this file are no longer its own.
            conn.execute("DELETE FROM moves WHERE job_id = ?", (job_id,))
        return True

    def reuse(self, sha256: str, exclude_job: int,
              read_with: str | None = None) -> tuple[list[PageText], str] | None:
        """Pages already read for identical content, and the engine that read them, so a
        copy needs no second OCR.

        With ``read_with``, only pages read the same way count (a copy read with other
        languages is no answer after a language change).
        """
        rows = self.db.query(
            "SELECT id, engine FROM jobs WHERE sha256 = ? AND state = 'done' AND id != ? "
            "AND (? IS NULL OR read_with = ?) ORDER BY finished DESC LIMIT 1",
            (sha256, exclude_job, read_with, read_with),
        )
        if not rows:
            return None
        pages = pages_of(self.db, rows[0]["id"])
        return (pages, str(rows[0]["engine"])) if pages else None

    def release(self, job_id: int) -> None:
        """Put a running job back (pause or shutdown before it was read)."""
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE jobs SET state = 'queued', updated = ? WHERE id = ? AND state = 'running'",
                (time.time(), job_id),
            )

    def retry(self, paths: list[Path] | None = None, *, asked: str | None = None) -> int:
        """Queue failed jobs again: the given paths, or every failed one but those that
        crashed the daemon twice (read again only when named: retrying every failure, from
        the tray, must not bring the daemon down). An entry whose original was deleted
        after its reading names its result: never queued.

        ``asked``: what the reading may do with the original ("keep" for ``reread``: read
        again, not handled again); None leaves what the first reading had."""
        now = time.time()
        with self.db.transaction() as conn:
            if paths is None:
                cur = conn.execute(
                    "UPDATE jobs SET state = 'queued', reason = NULL, attempts = 0, "
                    f"{_ALONE_AGAIN}, not_before = 0, updated = ?, "
                    "asked = COALESCE(?, asked) WHERE state = 'failed' "
                    "AND crashes < ? AND original_gone = 0", (now, asked, CRASH_LIMIT),
                )
                return cur.rowcount
            count = 0
            for path in paths:
                cur = conn.execute(
                    "UPDATE jobs SET state = 'queued', reason = NULL, attempts = 0, "
                    f"{_ALONE_AGAIN}, not_before = 0, updated = ?, "
                    "asked = COALESCE(?, asked) "
                    "WHERE path = ? AND state IN ('failed', 'done') AND original_gone = 0",
                    (now, asked, encode_path(path)),
                )
                count += cur.rowcount
            return count

    def read_otherwise(self, read_with: str) -> list[Job]:
        """Files read (done) with another engine or other languages than ``read_with``,
        or before ocrwatch recorded how."""
        rows = self.db.query(
            "SELECT * FROM jobs WHERE state = 'done' AND (read_with IS NULL OR read_with != ?) "
            "AND original_gone = 0 ORDER BY id", (read_with,))
        return [job_from_row(r) for r in rows]

    # -- on_success: the moves journal and what is still owed (results.lifecycle) -----
    def journal_moves(self, job_id: int, moves: list[tuple[Path, Path]]) -> None:
        """Record the moves of an archive before any is made (a crash mid-move is
        finished at the next start)."""
        with self.db.transaction() as conn:
            conn.executemany(
                "INSERT INTO moves(job_id, src, dest) VALUES (?, ?, ?)",
                [(job_id, encode_path(s), encode_path(d)) for s, d in moves])

    def settle_moves(self, job_id: int, moves: list[tuple[Path, Path]],
                     original: Path | None,
                     retire: tuple[str | None, str | None] = (None, None)) -> None:
        """Point the job at the moved files, drop its journal rows and record what
        on_success still owes the file (``retire``: nothing, by default), in one
        transaction."""
        with self.db.transaction() as conn:
            for src, dest in moves:
                old, new = encode_path(src), encode_path(dest)
                if original is not None and src == original:
                    conn.execute("UPDATE jobs SET path = ?, display = ? WHERE id = ? AND path = ?",
                                 (new, display_path(dest), job_id, old))
                conn.execute("UPDATE job_outputs SET path = ? WHERE job_id = ? AND path = ?",
                             (new, job_id, old))
            _mirror(conn, job_id)
            conn.execute("DELETE FROM moves WHERE job_id = ?", (job_id,))
            conn.execute("UPDATE jobs SET retire = ?, retire_reason = ? WHERE id = ?",
                         (*retire, job_id))

    def record_retire(self, job_id: int, retire: str | None, reason: str | None = None) -> None:
        """What on_success still owes the job: None (nothing), "kept" or "failed", and
        why."""
        with self.db.transaction() as conn:
            conn.execute("UPDATE jobs SET retire = ?, retire_reason = ? WHERE id = ?",
                         (retire, reason, job_id))

    def deleted_original(self, job_id: int, result: Path | None) -> None:
        """The original was deleted after its reading: the job names its result (when
        there is one) and owes nothing more, in one transaction."""
        with self.db.transaction() as conn:
            if result is not None:
                conn.execute("UPDATE jobs SET path = ?, display = ? WHERE id = ?",
                             (encode_path(result), display_path(result), job_id))
            conn.execute("UPDATE jobs SET retire = NULL, retire_reason = NULL, "
                         "original_gone = 1 WHERE id = ?", (job_id,))

    def journal(self, src: Path | None = None) -> dict[int, list[tuple[Path, Path]]]:
        """The journalled moves, by job, in the order made (with ``src``: those of the job
        moving ``src`` only)."""
        rows = self.db.query(
            "SELECT job_id, src, dest FROM moves WHERE ? IS NULL OR job_id IN "
            "(SELECT job_id FROM moves WHERE src = ?) ORDER BY id",
            (None if src is None else encode_path(src),) * 2)
        jobs: dict[int, list[tuple[Path, Path]]] = {}
        for row in rows:
            jobs.setdefault(int(row["job_id"]), []).append(
                (decode_path(row["src"]), decode_path(row["dest"])))
        return jobs

    def journalled(self, path: Path) -> bool:
        """Whether a move of ``path`` is in the journal (under way, or cut short)."""
        return bool(self.db.query("SELECT 1 FROM moves WHERE src = ? LIMIT 1",
                                  (encode_path(path),)))

    def owed(self) -> list[Job]:
        """Done files whose on_success was cut short ("pending") or failed."""
        rows = self.db.query("SELECT * FROM jobs WHERE state = 'done' "
                             "AND retire IN ('pending', 'failed') ORDER BY id")
        return [job_from_row(r) for r in rows]

    def outputs_of(self, job_id: int) -> dict[str, Path]:
        """The job's recorded outputs, by name."""
        return self.files.outputs_of(job_id)

    # -- reporting -----------------------------------------------------------------
    def was_done(self, source: Path, outputs: Iterable[Path | None] = ()) -> bool:
        """Whether the index holds ``source`` (or one of its ``outputs``, moved with it,
        or naming the entry of a deleted original) as done."""
        keys = [encode_path(source)] + [encode_path(p) for p in outputs if p is not None]
        marks = ", ".join("?" * len(keys))
        return bool(self.db.query(
            f"SELECT 1 FROM jobs WHERE state = 'done' AND (path IN ({marks}) OR id IN "
            f"(SELECT job_id FROM job_outputs WHERE path IN ({marks}))) LIMIT 1",
            (*keys, *keys)))

    def done_paths(self) -> list[Path]:
        """Every file read (done), in no particular order."""
        return [decode_path(r["path"])
                for r in self.db.query("SELECT path FROM jobs WHERE state = 'done'")]

    def recent_done(self, limit: int) -> list[Hit]:
        """The files read last, newest first, at most ``limit``: each as a hit on its
        first page, without a snippet."""
        rows = self.db.query(
            "SELECT id, display, sha256, pages, mtime_ns, md_path, txt_path, warnings "
            "FROM jobs "
            "WHERE state = 'done' ORDER BY finished DESC, id DESC LIMIT ?", (limit,))
        return [Hit(path=r["display"], page=1, pages=r["pages"] or 1, snippet="", rank=0.0,
                    md_path=os.fsdecode(r["md_path"]) if r["md_path"] else None,
                    job_id=r["id"],
                    mtime=r["mtime_ns"] / 1e9 if r["mtime_ns"] is not None else None,
                    sha256=r["sha256"] or None, doubt=first_doubt(r["warnings"]),
                    txt_path=os.fsdecode(r["txt_path"]) if r["txt_path"] else None)
                for r in rows]

    def done_files(self, job_id: int) -> dict[str, Path | None] | None:
        """A done job's original ("original") and outputs ("md", "txt", "pdf"...), or None
        when no such job is done."""
        rows = self.db.query("SELECT path FROM jobs WHERE id = ? AND state = 'done'",
                             (job_id,))
        if not rows:
            return None
        return {"original": opt_path(rows[0]["path"]), "md": None, "txt": None,
                **self.outputs_of(job_id)}

    def done_content(self, job_id: int) -> str | None:
        """The content hash of a done job (names its thumbnails), or None."""
        rows = self.db.query("SELECT sha256 FROM jobs WHERE id = ? AND state = 'done'",
                             (job_id,))
        return str(rows[0]["sha256"]) if rows and rows[0]["sha256"] else None

    def counts(self) -> dict[str, int]:
        counts = {s.value: 0 for s in State}
        for row in self.db.query("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state"):
            counts[row["state"]] = row["n"]
        return counts

    def failures(self, limit: int = 10) -> list[Failure]:
        rows = self.db.query(
            "SELECT display, reason, finished FROM jobs WHERE state = 'failed' "
            "ORDER BY finished DESC LIMIT ?",
            (limit,),
        )
        return [Failure(r["display"], r["reason"] or "", r["finished"]) for r in rows]

    def kept(self, limit: int = 10) -> list[Failure]:
        """Done files whose original on_success left in place, and why (newest first)."""
        if not any(r["name"] == "retire" for r in self.db.query("PRAGMA table_info(jobs)")):
            return []  # an index of an older version, opened read-only (not migrated)
        rows = self.db.query(
            "SELECT display, retire_reason, finished FROM jobs WHERE state = 'done' "
            "AND retire IN ('kept', 'failed') ORDER BY finished DESC LIMIT ?", (limit,))
        return [Failure(r["display"], r["retire_reason"] or "", r["finished"]) for r in rows]

    def unfinished(self, limit: int = 10_000) -> list[tuple[Path, str, float]]:
        """Queued and running files in queue order: (path, state, not before), for the
        status's pages left."""
        rows = self.db.query(
            "SELECT path, state, not_before FROM jobs WHERE state IN ('queued', 'running') "
            "ORDER BY id LIMIT ?", (limit,))
        return [(decode_path(r["path"]), str(r["state"]), float(r["not_before"] or 0))
                for r in rows]

    def average_pages(self) -> float | None:
        """Pages per file read so far (the guess for a file not counted yet)."""
        rows = self.db.query("SELECT AVG(pages) AS n FROM jobs WHERE state = 'done' "
                             "AND pages > 0")
        value = rows[0]["n"] if rows else None
        return float(value) if value is not None else None

    def pages_since(self, since: float) -> int:
        rows = self.db.query(
            "SELECT COALESCE(SUM(pages), 0) AS n FROM jobs WHERE state = 'done' AND finished >= ?",
            (since,),
        )
        return int(rows[0]["n"])

    def prepared_since(self, since: float) -> tuple[int, int]:
        """Pages of files done since ``since`` that were turned upright, and recorded
        blank."""
        rows = self.db.query(
            "SELECT COALESCE(SUM(p.turned != 0), 0) AS turned, COALESCE(SUM(p.blank), 0) "
            "AS blank FROM pages p JOIN jobs j ON j.id = p.job_id "
            "WHERE j.state = 'done' AND j.finished >= ?", (since,))
        return int(rows[0]["turned"]), int(rows[0]["blank"])

    def last_result(self) -> Path | None:
        rows = self.db.query(
            "SELECT md_path FROM jobs WHERE state = 'done' AND md_path IS NOT NULL "
            "ORDER BY finished DESC LIMIT 1"
        )
        return decode_path(rows[0]["md_path"]) if rows else None


def _forget_where(conn: sqlite3.Connection, where: str,
                  params: tuple[object, ...]) -> list[Forgotten]:
    out: list[Forgotten] = []
    rows = conn.execute("SELECT id, path, sha256, finished FROM jobs "
                        f"WHERE {where}", params).fetchall()
    for job_id, key, sha, finished in rows:
        pages = drop_pages(conn, job_id)
        outputs = _drop_outputs(conn, job_id)
        conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
        out.append(Forgotten(job_id, decode_path(key), sha, outputs, pages, finished))
    return out
