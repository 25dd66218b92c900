"""What ``status`` needs from the index, without waiting on the index's lock.

The daemon's own connection is shared by its threads under one lock; while another
program holds the index's write lock (a ``sqlite3`` shell in ``BEGIN EXCLUSIVE``,
Datasette), a thread of the daemon waiting to write holds that lock for up to SQLite's
busy timeout (30 s), and a status that asked the same connection waited as long. So
status reads on a read-only connection of its own, waits at most ``WAIT_SECONDS`` for
it, and keeps the last facts it read: when the index cannot be read in time, the answer
comes from those, from memory, with a note that says how old the counts are and why.

The same for the pause flag (:class:`SettingWriter`): ``pause`` and ``resume`` take
effect in memory at once and answer; the flag is written to the index by a thread of its
own, as soon as the index can be written.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ocrwatch.core.domain import DOUBT_NOTE
from ocrwatch.core.errors import OcrwatchError, StateError
from ocrwatch.core.status import Failure
from ocrwatch.store.db import Database, SqliteProblem, file_identity, sqlite_problem
from ocrwatch.store.jobs import JobQueue

log = logging.getLogger(__name__)

WAIT_SECONDS = 1.0  # at most this long for the index before status answers from memory


@dataclass(frozen=True)
class IndexFacts:
    counts: dict[str, int] = field(default_factory=dict)
    pages_today: int = 0
    last_result: Path | None = None
    failures: tuple[Failure, ...] = ()
    prepared: tuple[int, int] = (0, 0)  # pages turned upright, recorded blank, since
    read_at: float | None = None  # time.time() of the read; None: never read
    # For the progress: queued and running files (path, state, not before), the pages
    # per file read so far, and the done files whose original was kept.
    unfinished: tuple[tuple[Path, str, float], ...] = ()
    average_pages: float | None = None
    kept: tuple[Failure, ...] = ()
    # Done files read with doubts (a page that may not be whole), and the newest of them.
    doubted: int = 0
    doubts: tuple[Failure, ...] = ()


def read_facts(jobs: JobQueue, since: float, read_at: float | None) -> IndexFacts:
    """Everything status needs from the index, in one place (the daemon's own connection
    or status's read-only one)."""
    doubted, doubts = read_doubts(jobs.db)
    return IndexFacts(jobs.counts(), jobs.pages_since(since), jobs.last_result(),
                      tuple(jobs.failures(10)), jobs.prepared_since(since), read_at,
                      tuple(jobs.unfinished()), jobs.average_pages(), tuple(jobs.kept(10)),
                      doubted, doubts)


# A page's doubt is kept among its job's warnings as "page N: doubtful text: WHY"
# (ocrwatch/outcome.py), whatever on_success is: that is what marks a file read with doubts.
_DOUBTED = f"state = 'done' AND warnings LIKE '%{DOUBT_NOTE}%'"


def read_doubts(db: Database, limit: int = 10) -> tuple[int, tuple[Failure, ...]]:
    """How many done files were read with doubts, and the newest ``limit`` of them with
    the first doubt of each (``page 2 may not have been read: …``)."""
    (count,) = db.query(f"SELECT COUNT(*) AS n FROM jobs WHERE {_DOUBTED}")
    rows = db.query(f"SELECT display, warnings, pages, finished FROM jobs WHERE {_DOUBTED} "
                    "ORDER BY finished DESC, id DESC LIMIT ?", (limit,))
    return int(count["n"]), tuple(
        Failure(r["display"], doubt_reason(r["warnings"], r["pages"]), r["finished"])
        for r in rows)


def doubt_reason(warnings: str | None, pages: int | None) -> str:
    """The first doubt among a job's warnings, said as the original's keeper says it."""
    try:
        listed = [str(w) for w in json.loads(warnings or "[]")]
    except ValueError:
        listed = []
    for warning in listed:
        where, _, rest = warning.partition(": ")
        if rest.startswith(DOUBT_NOTE):
            place = where if pages != 1 else "the page"
            return f"{place} may not have been read: {rest[len(DOUBT_NOTE):]}"
    return "a page may not have been read whole"


class StatusReader:
    """The index's facts for status, fresh when the index answers within WAIT_SECONDS."""

    def __init__(self, database: Path) -> None:
        self.database = database
        self._db: Database | None = None
        self._last = IndexFacts()
        self._lock = threading.Lock()
        self._closed = False

    def read(self, since: float) -> tuple[IndexFacts, str | None]:
        """The facts, and a note when they come from memory (else None)."""
        if not self._lock.acquire(timeout=WAIT_SECONDS):
            return self._last, self._note("another status is still waiting for it")
        try:
            if self._closed:
                raise StateError("the daemon is stopping")
            jobs = JobQueue(self._connection())
            with jobs.db.time_limit(WAIT_SECONDS * 2):
                facts = read_facts(jobs, since, time.time())
            self._last = facts
            return facts, None
        except (sqlite3.Error, OcrwatchError) as exc:
            log.debug("status answers from memory: %s", exc)
            self._drop()  # a connection caught mid-wait is opened anew next time
            return self._last, self._note(_plain(exc))
        finally:
            self._lock.release()

    def _connection(self) -> Database:
        if self._db is not None and file_identity(self.database) not in (None,
                                                                          self._db.identity):
            self._drop()  # the index was written back under a new inode: read that one
        if self._db is None:
            db = Database(self.database, readonly=True, origin="status")
            db.conn.execute(f"PRAGMA busy_timeout = {int(WAIT_SECONDS * 1000)}")
            self._db = db
        return self._db

    def _note(self, why: str) -> str:
        when = self._last.read_at
        age = (f"counts as of {time.strftime('%H:%M:%S', time.localtime(when))}"
               if when is not None else "no counts yet")
        return (f"the index did not answer within {WAIT_SECONDS:g} s ({why}): {age}; "
                "another program may hold its lock (a sqlite3 shell, a browser of the "
                "database): close it")

    def _drop(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            with contextlib.suppress(Exception):
                db.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._drop()


def _plain(exc: BaseException) -> str:
    # SQLite's own error, or the one it was turned into (a TransientError, an OcrwatchError
    # saying the index cannot be opened).
    for error in (exc, exc.__cause__, exc.__context__):
        if sqlite_problem(error) is SqliteProblem.BUSY:
            return "it is locked"
    return str(exc)


class SettingWriter:
    """Writes the latest value asked for a setting, on a thread of its own, retrying
    until the index takes it (or the daemon stops: then it is logged as not saved)."""

    RETRY_SECONDS = 1.0

    def __init__(self, write: Callable[[str], None], what: str) -> None:
        self._write = write
        self._what = what
        self._cond = threading.Condition()
        self._wanted: str | None = None
        self._thread: threading.Thread | None = None
        self._closing = False

    def set(self, value: str) -> None:
        with self._cond:
            self._wanted = value
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="ocrwatch-settings")
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                value = self._wanted
                if value is None:
                    return
            try:
                self._write(value)
            except Exception as exc:
                with self._cond:
                    if self._closing:
                        log.warning("%s = %s was not saved in the index (%s); it holds "
                                    "until ocrwatch stops", self._what, value, exc)
                        self._wanted = None
                        return
                    self._cond.wait(self.RETRY_SECONDS)
                continue
            with self._cond:
                if self._wanted == value:
                    self._wanted = None
                    return

    def close(self, timeout: float = 35.0) -> None:
        """Wait for a write under way (bounded), then stop."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
