"""The durable job queue: one row per file, moving queued -> running -> done | failed.

Every transition is one transaction, so a crash at any moment loses nothing: at start,
rows left ``running`` go back to ``queued``. This module is the only writer of the
``jobs`` table: it also completes a job (with its index rows, in the same transaction),
finds a finished copy to reuse, and names and reserves sidecars.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import BinaryIO

from ocrwatch.core.domain import Job, PageText, State
from ocrwatch.core.status import Failure
from ocrwatch.store.db import decode_path, encode_path
from ocrwatch.store.index import pages_of, replace_pages, warnings_json
from ocrwatch.store.jobfiles import JobFiles, job_from_row

log = logging.getLogger(__name__)

BACKOFF_BASE = 5.0  # seconds before the first retry of a transient failure
BACKOFF_MAX = 600.0


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


class JobQueue(JobFiles):
    """Queue operations on a :class:`Database`: the files' rows (:class:`JobFiles`) and
    their way through the states."""

    # -- processing ----------------------------------------------------------------
    def recover(self) -> int:
        """At start: rows left ``running`` by a crash go back to ``queued``."""
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE jobs SET state = 'queued', updated = ? WHERE state = 'running'",
                (time.time(),),
            )
            return cur.rowcount

    def claim(self, now: float | None = None) -> Job | None:
        """Take the oldest queued job that may run now and mark it running."""
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
            cur = conn.execute(
                f"SELECT * FROM jobs WHERE state = 'queued' AND not_before <= ? {extra} "
                "ORDER BY not_before, id LIMIT 1",
                (now, *params),
            )
            names = [d[0] for d in cur.description]
            found = cur.fetchone()
            if found is None:
                return None
            row = dict(zip(names, found, strict=True))
            conn.execute(
                "UPDATE jobs SET state = 'running', updated = ? WHERE id = ?", (now, row["id"])
            )
        row["state"] = "running"
        return job_from_row(row)

    def next_due(self) -> float | None:
        """When the earliest deferred job may run (for the worker's wait)."""
        rows = self.db.query("SELECT MIN(not_before) AS t FROM jobs WHERE state = 'queued'")
        value = rows[0]["t"] if rows else None
        return float(value) if value is not None else None

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
                 md_path: Path | None, txt_path: Path | None,
                 sha256: str | None = None, read_with: str | None = None,
                 retire: str | None = None, retire_reason: str | None = None) -> bool:
        """Replace the job's index rows and mark it done, in one transaction.

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
                "warnings = ?, md_path = ?, txt_path = ?, updated = ?, finished = ?, "
                "read_with = coalesce(?, read_with), retire = ?, retire_reason = ? "
                "WHERE id = ?",
                (
                    len(pages), engine, warnings_json(warnings),
                    encode_path(md_path) if md_path else None,
                    encode_path(txt_path) if txt_path else None,
                    now, now, read_with, retire, retire_reason, job_id,
                ),
            )
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

    def retry(self, paths: list[Path] | None = None) -> int:
        """Queue failed jobs again: the given paths, or every failed one."""
        now = time.time()
        with self.db.transaction() as conn:
            if paths is None:
                cur = conn.execute(
                    "UPDATE jobs SET state = 'queued', reason = NULL, attempts = 0, "
                    "not_before = 0, updated = ? WHERE state = 'failed'",
                    (now,),
                )
                return cur.rowcount
            count = 0
            for path in paths:
                cur = conn.execute(
                    "UPDATE jobs SET state = 'queued', reason = NULL, attempts = 0, "
                    "not_before = 0, updated = ? WHERE path = ? AND state IN ('failed', 'done')",
                    (now, encode_path(path)),
                )
                count += cur.rowcount
            return count

    def read_otherwise(self, read_with: str) -> list[Job]:
        """Files read (done) with another engine or other languages than ``read_with``,
        or before ocrwatch recorded how."""
        rows = self.db.query(
            "SELECT * FROM jobs WHERE state = 'done' AND (read_with IS NULL OR read_with != ?) "
            "ORDER BY id", (read_with,))
        return [job_from_row(r) for r in rows]

    # -- reporting -----------------------------------------------------------------
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
