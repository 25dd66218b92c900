"""The ``jobs`` rows as files: found, offered, moved, forgotten, and their sidecars named.

:class:`JobFiles` is the part of the queue (:class:`ocrwatch.store.jobs.JobQueue`) that follows
where each file is; the queue adds the states a job goes through. Both write the
``jobs`` table only through this pair of classes.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from ocrwatch.core.domain import Job, State
from ocrwatch.core.naming import choose_stem, sidecar_paths
from ocrwatch.store.db import Database, decode_path, display_path, encode_path


@dataclass(frozen=True)
class Forgotten:
    """A job dropped from the index: what is needed to clean up after it."""

    id: int
    path: Path
    sha256: str | None
    md_path: Path | None
    txt_path: Path | None
    pages: list[tuple[str, str]]  # (markdown, text) of each page, to recognise our sidecars
    finished: float | None = None  # when its result was stored


@dataclass(frozen=True)
class Moved:
    """A job whose file was moved: its row now names ``path``."""

    id: int
    old: Path
    path: Path
    md_path: Path | None  # where its sidecars are now (moved along with a folder or not)
    txt_path: Path | None


class Seen(StrEnum):
    NEW = "new"  # first time: queued
    CHANGED = "changed"  # content changed: queued again
    UNCHANGED = "unchanged"  # nothing to do


def new_id(conn: sqlite3.Connection) -> int:
    """A job id never used before, even by a job since forgotten.

    SQLite would reuse the highest id once its row is deleted; a reader still holding
    the forgotten job would then fail or defer a different file's job.
    """
    (top,) = conn.execute("SELECT COALESCE(MAX(id), 0) FROM jobs").fetchone()
    row = conn.execute("SELECT value FROM settings WHERE key = 'last_job_id'").fetchone()
    new = max(int(top), int(row[0]) if row else 0) + 1
    conn.execute("INSERT INTO settings(key, value) VALUES ('last_job_id', ?) "
                 "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (str(new),))
    return new


def job_from_row(row: object) -> Job:
    r = row  # sqlite3.Row
    return Job(
        id=r["id"],  # type: ignore[index]
        path=decode_path(r["path"]),  # type: ignore[index]
        sha256=r["sha256"],  # type: ignore[index]
        size=r["size"] or 0,  # type: ignore[index]
        mtime_ns=r["mtime_ns"] or 0,  # type: ignore[index]
        state=State(r["state"]),  # type: ignore[index]
        attempts=r["attempts"],  # type: ignore[index]
        reason=r["reason"],  # type: ignore[index]
        retire=r["retire"],  # type: ignore[index]
        retire_reason=r["retire_reason"],  # type: ignore[index]
    )


class JobFiles:
    """Where each job's file is, on a :class:`Database`."""

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
              dev: int | None = None, inode: int | None = None) -> Seen:
        """Record a settled file; queue it when new or when its content changed."""
        now = time.time()
        key = encode_path(path)
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT id, sha256, state FROM jobs WHERE path = ?", (key,)
            ).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO jobs(id, path, display, sha256, size, mtime_ns, state, "
                    "attempts, not_before, created, updated, dev, inode) "
                    "VALUES (?, ?, ?, ?, ?, ?, 'queued', 0, 0, ?, ?, ?, ?)",
                    (new_id(conn), key, display_path(path), sha256, size, mtime_ns, now, now,
                     dev, inode),
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
                "reason = NULL, attempts = 0, not_before = 0, updated = ?, "
                "dev = COALESCE(?, dev), inode = COALESCE(?, inode) WHERE id = ?",
                (sha256, size, mtime_ns, now, dev, inode, job_id),
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
        low, high = _tree_range(folder)
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
        import os

        return [decode_path(r["path"]) for r in self.db.query("SELECT path FROM jobs")
                if not os.path.lexists(os.fsdecode(r["path"]))]

    def move(self, old: Path, new: Path) -> tuple[Moved | None, Forgotten | None]:
        """A file was renamed or moved: its row follows it, with its pages and state.

        A known file that the move replaced is forgotten (returned second).
        """
        old_key, new_key = encode_path(old), encode_path(new)
        with self.db.transaction() as conn:
            row = conn.execute("SELECT id, md_path, txt_path FROM jobs WHERE path = ?",
                               (old_key,)).fetchone()
            if row is None:
                return None, None
            replaced = _forget_where(conn, "path = ?", (new_key,))
            conn.execute("UPDATE jobs SET path = ?, display = ?, updated = ? WHERE id = ?",
                         (new_key, display_path(new), time.time(), row[0]))
        return (Moved(row[0], old, new, _opt_path(row[1]), _opt_path(row[2])),
                replaced[0] if replaced else None)

    def move_tree(self, old: Path, new: Path) -> list[Moved]:
        """A folder was renamed or moved: every row under it follows.

        Sidecars kept beside the originals moved with the folder, so their recorded
        names follow too; those kept in ``output_dir`` are the caller's to move.
        """
        low, high = _tree_range(old)
        old_key, new_key = encode_path(old), encode_path(new)
        out: list[Moved] = []
        now = time.time()
        with self.db.transaction() as conn:
            rows = conn.execute("SELECT id, path, md_path, txt_path FROM jobs "
                                "WHERE path > ? AND path < ?", (low, high)).fetchall()
            for job_id, key, md, txt in rows:
                dest = new_key + key[len(old_key):]
                conn.execute("DELETE FROM pages WHERE job_id IN "
                             "(SELECT id FROM jobs WHERE path = ?)", (dest,))
                conn.execute("DELETE FROM jobs WHERE path = ?", (dest,))
                md, txt = (_rebase(v, old_key, new_key) for v in (md, txt))
                conn.execute("UPDATE jobs SET path = ?, display = ?, md_path = ?, txt_path = ?, "
                             "updated = ? WHERE id = ?",
                             (dest, display_path(decode_path(dest)), md, txt, now, job_id))
                out.append(Moved(job_id, decode_path(key), decode_path(dest), _opt_path(md),
                                 _opt_path(txt)))
        return out

    def moved_away(self, dev: int, inode: int, size: int, mtime_ns: int,
                   sha256: str | None = None) -> Job | None:
        """A known job whose file is gone and that ``path`` may be, moved while nothing
        watched: the same inode, size and time, or else the same content (``sha256``)."""
        import os

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

    def restore(self, path: Path, st: os.stat_result, sha256: str) -> int:
        """A job for a file whose pages come back from its sidecars (``ocrwatch reindex
        --from-sidecars``): recorded as being read, for :meth:`complete` to finish."""
        now = time.time()
        with self.db.transaction() as conn:
            job_id = new_id(conn)
            conn.execute(
                "INSERT INTO jobs(id, path, display, sha256, size, mtime_ns, state, attempts, "
                "not_before, created, updated, dev, inode) "
                "VALUES (?, ?, ?, ?, ?, ?, 'running', 0, 0, ?, ?, ?, ?)",
                (job_id, encode_path(path), display_path(path), sha256, st.st_size,
                 st.st_mtime_ns, now, now, st.st_dev, st.st_ino))
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

    def exists(self, job_id: int) -> bool:
        return bool(self.db.query("SELECT 1 FROM jobs WHERE id = ?", (job_id,)))

    def sidecars_of_others(self, job_id: int) -> set[Path]:
        """Sidecar files that belong to other originals (never to be overwritten)."""
        rows = self.db.query(
            "SELECT md_path, txt_path FROM jobs WHERE id != ? AND md_path IS NOT NULL", (job_id,)
        )
        out: set[Path] = set()
        for r in rows:
            out.add(decode_path(r["md_path"]))
            if r["txt_path"] is not None:
                out.add(decode_path(r["txt_path"]))
        return out

    def refresh(self, job_id: int, size: int, mtime_ns: int, sha256: str) -> None:
        """Record what a running job's file is now (it was refused before being hashed)."""
        with self.db.transaction() as conn:
            conn.execute("UPDATE jobs SET sha256 = ?, size = ?, mtime_ns = ?, updated = ? "
                         "WHERE id = ?", (sha256, size, mtime_ns, time.time(), job_id))

    def reserve_sidecars(self, job_id: int, md: Path, txt: Path) -> None:
        """Record the sidecar names before writing them, so that after a crash between
        writing and storing, the next try knows them as its own and reuses them."""
        with self.db.transaction() as conn:
            conn.execute("UPDATE jobs SET md_path = ?, txt_path = ? WHERE id = ?",
                         (encode_path(md), encode_path(txt), job_id))

    def drop_sidecar_names(self, job_id: int) -> None:
        """Forget a job's sidecar names (they are gone): another file may take them, and
        the job's later removal cannot mistake that file's sidecars for its own."""
        with self.db.transaction() as conn:
            conn.execute("UPDATE jobs SET md_path = NULL, txt_path = NULL WHERE id = ?",
                         (job_id,))

    def sidecars_owned(self, md: Path, txt: Path) -> bool:
        """Whether a job has these sidecar names recorded."""
        return bool(self.db.query(
            "SELECT 1 FROM jobs WHERE md_path = ? OR txt_path = ? LIMIT 1",
            (encode_path(md), encode_path(txt))))

    def own_sidecars(self, job_id: int) -> set[Path]:
        rows = self.db.query("SELECT md_path, txt_path FROM jobs WHERE id = ?", (job_id,))
        return {decode_path(v) for r in rows for v in (r["md_path"], r["txt_path"]) if v}

    def name_sidecars(self, job: Job, folder: Path) -> Path:
        """The stem for the job's sidecars in ``folder``, reserved for it before writing.

        Never a name another original's sidecars hold; the job's own earlier names are
        reused (a crash between writing and completing leaves them behind).
        """
        stem = choose_stem(job.path, folder, self.sidecars_of_others(job.id),
                           self.own_sidecars(job.id))
        self.reserve_sidecars(job.id, *sidecar_paths(stem))
        return stem


def _tree_range(folder: Path) -> tuple[bytes, bytes]:
    """Bounds of the keys of every path under ``folder``: ``folder/`` < key < ``folder0``
    ('0' follows '/' in ASCII), which the path index answers directly."""
    key = encode_path(folder).rstrip(b"/")
    return key + b"/", key + b"0"


def _rebase(raw: bytes | None, old: bytes, new: bytes) -> bytes | None:
    if raw is not None and raw.startswith(old + b"/"):
        return new + raw[len(old):]
    return raw


def _opt_path(raw: bytes | None) -> Path | None:
    return decode_path(raw) if raw is not None else None


def _forget_where(conn: sqlite3.Connection, where: str,
                  params: tuple[object, ...]) -> list[Forgotten]:
    out: list[Forgotten] = []
    rows = conn.execute("SELECT id, path, sha256, md_path, txt_path, finished FROM jobs "
                        f"WHERE {where}", params).fetchall()
    for job_id, key, sha, md, txt, finished in rows:
        pages = conn.execute("SELECT markdown, text FROM pages WHERE job_id = ? ORDER BY page",
                             (job_id,)).fetchall()
        conn.execute("DELETE FROM pages WHERE job_id = ?", (job_id,))
        conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
        out.append(Forgotten(job_id, decode_path(key), sha, _opt_path(md), _opt_path(txt),
                             [(m, t) for m, t in pages], finished))
    return out
