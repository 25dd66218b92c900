"""The SQLite file that is both the durable job queue and the full-text index.

One connection per :class:`Database`, guarded by a lock so the daemon's threads can
share it; WAL mode so ``ocrwatch search`` and ``status`` read while the daemon writes.
Schema changes are the named migrations of :mod:`ocrwatch.store.migrations`, each applied once
and recorded.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils

from ocrwatch.core.domain import display_path as display_path  # re-exported for the store
from ocrwatch.core.errors import (
    ConfigError,
    IndexDamaged,
    IndexUnavailable,
    SearchTimeout,
    StateError,
    TransientError,
    is_disk_full_os,
)
from ocrwatch.fs import paths
from ocrwatch.fs.fsmove import move_no_replace
from ocrwatch.fs.private import private_dir, private_file
from ocrwatch.store.migrations import MIGRATIONS

log = logging.getLogger(__name__)


class SqliteProblem(enum.Enum):
    """What a SQLite error means for ocrwatch (see :func:`sqlite_problem`)."""

    FULL = "full"  # the disk (or quota) is full: may work later
    BUSY = "busy"  # another connection holds the lock: may work later
    DAMAGED = "damaged"  # a malformed page, or not a database at all
    READONLY = "readonly"  # the file (or its folder) cannot be written by this user
    INTERRUPTED = "interrupted"  # a progress handler stopped the statement (time_limit)
    QUERY = "query"  # the FTS5 query cannot be parsed
    OTHER = "other"


_BY_CODE = {
    sqlite3.SQLITE_FULL: SqliteProblem.FULL,
    sqlite3.SQLITE_BUSY: SqliteProblem.BUSY,
    sqlite3.SQLITE_LOCKED: SqliteProblem.BUSY,  # a table locked by another connection
    sqlite3.SQLITE_CORRUPT: SqliteProblem.DAMAGED,
    sqlite3.SQLITE_NOTADB: SqliteProblem.DAMAGED,
    sqlite3.SQLITE_READONLY: SqliteProblem.READONLY,
    sqlite3.SQLITE_INTERRUPT: SqliteProblem.INTERRUPTED,
}
# SQLite's own words for the same, for an error that carries no code (one made by hand,
# as a wrapper or a test does): the first match wins.
_BY_TEXT = (
    ("disk is full", SqliteProblem.FULL),
    ("database is locked", SqliteProblem.BUSY),
    ("malformed", SqliteProblem.DAMAGED),
    ("not a database", SqliteProblem.DAMAGED),
    ("readonly", SqliteProblem.READONLY),
    ("read-only", SqliteProblem.READONLY),
    ("interrupt", SqliteProblem.INTERRUPTED),
)
# A query FTS5 cannot parse has only the generic SQLITE_ERROR code: its text tells.
_QUERY_WORDS = ("fts5", "syntax", "no such column")


def sqlite_problem(exc: BaseException | None) -> SqliteProblem | None:
    """What SQLite's error ``exc`` means, from its result code (``sqlite_errorcode``,
    primary part) where it has one; None when ``exc`` is no SQLite error."""
    if not isinstance(exc, sqlite3.Error):
        return None
    text = str(exc)
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        found = _BY_CODE.get(code & 0xFF)
        if found is not None:
            return found
        if code & 0xFF != sqlite3.SQLITE_ERROR:
            return SqliteProblem.OTHER
    else:
        for words, problem in _BY_TEXT:
            if words in text:
                return problem
    if any(words in text for words in _QUERY_WORDS):
        return SqliteProblem.QUERY
    return SqliteProblem.OTHER


def is_disk_full(exc: BaseException) -> bool:
    return is_disk_full_os(exc) or (isinstance(exc, sqlite3.OperationalError)
                                    and sqlite_problem(exc) is SqliteProblem.FULL)


def _transient(exc: BaseException) -> TransientError | None:
    """The error as a TransientError when waiting may cure it (full disk, busy index)."""
    if is_disk_full(exc):
        return TransientError("the disk holding the index is full")
    if (isinstance(exc, sqlite3.OperationalError)
            and sqlite_problem(exc) is SqliteProblem.BUSY):
        return TransientError("the index was busy (another ocrwatch process was writing it); "
                              "will try again")
    return None


def is_damage(exc: BaseException) -> bool:
    """Whether SQLite says the file is damaged (a malformed page) or no database at all."""
    return (isinstance(exc, sqlite3.DatabaseError)
            and sqlite_problem(exc) is SqliteProblem.DAMAGED)


def damaged_message(path: Path, detail: str) -> str:
    return (f"the index {path} is damaged (SQLite: {detail}). Start the daemon "
            "(`ocrwatch run`): it keeps the damaged file aside and rebuilds the index from "
            "the sidecars; `ocrwatch doctor` checks it")


def integrity_problem(conn: sqlite3.Connection) -> str | None:
    """What ``PRAGMA quick_check`` finds wrong (every page is visited; its cost:
    benchmarks/index_check.py), or None when the file is sound."""
    try:
        rows = conn.execute("PRAGMA quick_check(5)").fetchall()
    except sqlite3.DatabaseError as exc:
        if not is_damage(exc):
            raise  # busy, unreadable...: not a verdict on the file's pages
        return str(exc)
    found = [str(r[0]) for r in rows]
    return None if found == ["ok"] else "; ".join(found)


PROGRESS_STEPS = 10_000  # SQLite steps between two looks at the clock (well under 1 ms)
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
SQLITE_HEADER = b"SQLite format 3\x00"


def _make_private(path: Path) -> None:
    """Create the index 0600, or make an existing index (and its side files) 0600.

    A file that is not SQLite is left as it is: opening it fails with a message next.
    """
    with contextlib.suppress(OSError):
        if path.exists():
            with path.open("rb") as fh:
                if fh.read(len(SQLITE_HEADER)) not in (SQLITE_HEADER, b""):
                    return
        for file in (path, *(Path(f"{path}{s}") for s in SQLITE_SIDE_FILES)):
            if file == path or file.exists():
                private_file(file)


class Database:
    """A thread-safe handle on the ocrwatch SQLite file."""

    damaged: str | None = None  # what SQLite said when it last found the file damaged

    def __init__(self, path: Path | str, *, readonly: bool = False, origin: str = "",
                 check: bool = False) -> None:
        """Open (and with ``readonly`` False, create or upgrade) the index at ``path``.

        ``origin`` says where the path came from (a flag, a variable, a config file) so
        that a message about a bad file names the place to change it. ``check``: run
        SQLite's integrity check first; a damaged SQLite file raises IndexDamaged.
        """
        self.path = Path(path) if str(path) != ":memory:" else Path(":memory:")
        named = f" (set by {origin})" if origin else ""
        if str(path) != ":memory:":
            if readonly and not self.path.exists():
                raise IndexUnavailable(
                    f"no index at {self.path}{named} yet: start the daemon with "
                    "`ocrwatch run` or read files with `ocrwatch add`"
                )
            if self.path.is_dir():
                raise IndexUnavailable(f"the index {self.path}{named} is a folder; name a file")
            if self.path.exists() and not self.path.is_file():
                # A pipe would block the open for ever; a device is nobody's index.
                raise ConfigError(f"the index {self.path}{named} is not a regular file (a "
                                  "pipe, a device or a socket); name a file")
            if not readonly:
                # The index holds every page's text: 0600 (its WAL and shared-memory files
                # take the database file's mode), in a 0700 folder when ocrwatch makes it.
                private_dir(self.path.parent, ours=self.path.parent == paths.data_dir())
                _make_private(self.path)
        try:
            try:
                conn = self._connect(path, readonly)
            except sqlite3.OperationalError:
                if not readonly:
                    raise
                # A WAL index in a folder this user cannot write (a read-only mount, another
                # user's folder) cannot get its shared-memory file: read it as immutable.
                conn = self._connect(path, readonly, immutable=True)
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA busy_timeout = 30000")
            if check and (problem := integrity_problem(conn)) is not None:
                conn.close()
                raise IndexDamaged(damaged_message(self.path, problem))
            if readonly and not conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE name = '_migrations'").fetchone():
                conn.close()
                raise ConfigError(f"{path}{named} is not an ocrwatch index (it holds no "
                                  "ocrwatch tables); name the index file")
            if str(path) != ":memory:" and not readonly:
                # A reader never changes the journal mode: the file may be read-only to it.
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.DatabaseError as exc:
            if check and is_damage(exc) and is_sqlite(self.path):
                raise IndexDamaged(damaged_message(self.path, str(exc))) from None
            meaning = sqlite_problem(exc)
            if meaning is SqliteProblem.DAMAGED:
                raise ConfigError(
                    f"{path}{named} is not an ocrwatch index (SQLite: {exc}). Name the index "
                    "file, or move this file away so that a new index is made there."
                ) from None
            if meaning is SqliteProblem.READONLY:
                raise IndexUnavailable(
                    f"the index {path}{named} is read-only for your user; make it and its "
                    "folder writable, or name another file"
                ) from None
            raise IndexUnavailable(f"cannot open the index {path}{named}: {exc}") from None
        self._lock = threading.RLock()
        self.conn = conn
        self.db = sqlite_utils.Database(conn)
        self._closed = False
        self.readonly = readonly
        self.identity = file_identity(self.path)
        if not readonly:
            try:
                self.migrate()
            except IndexDamaged:
                conn.close()
                raise
            except sqlite3.OperationalError as exc:
                conn.close()
                raise IndexUnavailable(
                    f"cannot write the index {path}{named}: {exc}. Make it and its folder "
                    "writable for your user, or name another file."
                ) from None

    @staticmethod
    def _connect(path: Path | str, readonly: bool, *, immutable: bool = False
                 ) -> sqlite3.Connection:
        if readonly and str(path) != ":memory:":
            # mode=ro: a search or status never writes, so a read-only index still answers.
            uri = Path(path).absolute().as_uri() + "?mode=ro" + ("&immutable=1" if immutable
                                                                 else "")
            conn = sqlite3.connect(uri, uri=True, check_same_thread=False,
                                   isolation_level=None, timeout=30)
        else:
            conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None,
                                   timeout=30)
        try:
            # Reading the schema is the first thing that fails on a file that is not SQLite,
            # or on a WAL file whose folder cannot be written.
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.Error:
            conn.close()
            raise
        return conn

    def migrate(self) -> list[str]:
        """Apply the named migrations not yet applied; returns their names."""
        applied: list[str] = []
        with self.transaction():
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied REAL)"
            )
            done = {r[0] for r in self.conn.execute("SELECT name FROM _migrations")}
            for name, step in MIGRATIONS:
                if name in done:
                    continue
                step(self.db)
                self.conn.execute(
                    "INSERT INTO _migrations VALUES (?, strftime('%s','now'))", (name,)
                )
                applied.append(name)
        if applied:
            log.debug("applied migrations %s to %s", applied, self.path)
        return applied

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT under the lock; rolls back on any error.

        A full disk or a busy index becomes a TransientError so the job is retried later.
        """
        with self._lock:
            if self._closed:
                raise StateError("the index is closed")
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.DatabaseError as exc:
                if (mapped := self._mapped(exc)) is None:
                    raise
                raise mapped from exc
            try:
                yield self.conn
            except BaseException as exc:
                self._rollback()
                if (mapped := self._mapped(exc)) is None:
                    raise
                raise mapped from exc
            else:
                try:
                    self.conn.execute("COMMIT")
                except sqlite3.DatabaseError as exc:
                    self._rollback()
                    if (mapped := self._mapped(exc)) is None:
                        raise
                    raise mapped from exc

    @contextmanager
    def durable(self) -> Iterator[None]:
        """Transactions committed in this block are on disk when the commit returns.

        ``synchronous = NORMAL`` leaves a WAL commit in the page cache (a power loss may
        undo it); ``FULL`` syncs the WAL at commit, with every commit before it. For the
        commit that precedes an act nothing can undo (an original deleted).
        """
        with self._lock:
            if self.readonly or str(self.path) == ":memory:":
                yield
                return
            self.conn.execute("PRAGMA synchronous = FULL")
            try:
                yield
            finally:
                if not self._closed:
                    self.conn.execute("PRAGMA synchronous = NORMAL")

    def _rollback(self) -> None:
        # On a full disk or an I/O error SQLite may have rolled back already; a second
        # ROLLBACK would raise and hide the error that tells the user what happened.
        if self.conn.in_transaction:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error as exc:
                log.warning("could not roll back a transaction: %s", exc)

    def _mapped(self, exc: BaseException) -> TransientError | IndexDamaged | None:
        """What a transaction raises instead of ``exc``: a full disk or a busy index as
        TransientError (retried later), a damaged file as IndexDamaged; None: ``exc``."""
        return _transient(exc) or self._damage(exc)

    def _damage(self, exc: BaseException) -> IndexDamaged | None:
        """The error as IndexDamaged when SQLite says the file is damaged; remembered in
        :attr:`damaged` so that the daemon sets the file aside and rebuilds the index."""
        if not is_damage(exc):
            return None
        self.damaged = str(exc)
        return IndexDamaged(damaged_message(self.path, str(exc)))

    def query(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                cur = self.conn.execute(sql, params)
                cur.row_factory = sqlite3.Row
                return list(cur.fetchall())
            except sqlite3.DatabaseError as exc:
                if (damage := self._damage(exc)) is not None:
                    raise damage from None
                raise

    @contextmanager
    def time_limit(self, seconds: float | None) -> Iterator[None]:
        """Stop any statement run inside that takes longer than ``seconds`` in all.

        SQLite calls a progress handler every few thousand virtual-machine steps; when the
        time is up it returns non-zero and SQLite interrupts the statement, which then
        raises SearchTimeout. The connection stays usable.
        """
        if seconds is None:
            yield
            return
        deadline = time.monotonic() + seconds

        def over() -> int:
            return 1 if time.monotonic() > deadline else 0

        with self._lock:
            self.conn.set_progress_handler(over, PROGRESS_STEPS)
            try:
                yield
            except sqlite3.OperationalError as exc:
                if (sqlite_problem(exc) is SqliteProblem.INTERRUPTED
                        and time.monotonic() > deadline):
                    raise SearchTimeout(
                        f"the search was stopped after {seconds:g} s; narrow the query "
                        "(fewer or longer prefix* words, a phrase in quotes)") from None
                raise
            finally:
                self.conn.set_progress_handler(None, 0)

    def get_setting(self, key: str, default: str | None = None) -> str | None:
        rows = self.query("SELECT value FROM settings WHERE key = ?", (key,))
        return str(rows[0]["value"]) if rows else default

    def set_setting(self, key: str, value: str) -> None:
        with self.transaction() as conn:
            put_setting(conn, key, value)

    def query_only(self) -> None:
        """Refuse every write on this connection from now on, whatever is asked of it."""
        with self._lock:
            self.conn.execute("PRAGMA query_only = ON")

    def write_back(self, clear: Callable[[], None]) -> None:
        """Write the open database to its path again and carry on with that file: the file
        there was deleted, moved or replaced while open, and this connection still holds
        every row. ``clear`` frees the path (sets aside what is there, never deleting it)
        once the copy is made and before it is put in place."""
        with self._lock:
            if self._closed or self.readonly:
                raise StateError("the index is closed")
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.restoring")
            private_dir(self.path.parent, ours=self.path.parent == paths.data_dir())
            tmp.unlink(missing_ok=True)
            try:
                copy = sqlite3.connect(str(tmp))
                try:
                    self.conn.backup(copy)  # SQLite's online backup: a consistent copy
                finally:
                    copy.close()
                private_file(tmp)
                fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                clear()
                move_no_replace(tmp, self.path)
            except BaseException:
                tmp.unlink(missing_ok=True)  # this connection still holds everything
                raise
            # Closing checkpoints into the old file and removes its -wal and -shm by
            # name; ``clear`` left only this connection's own side files at the path.
            with contextlib.suppress(sqlite3.Error):
                self.conn.close()
            conn = self._connect(self.path, False)
            for pragma in ("foreign_keys = ON", "busy_timeout = 30000",
                           "journal_mode = WAL", "synchronous = NORMAL"):
                conn.execute(f"PRAGMA {pragma}")
            self.conn = conn
            self.db = sqlite_utils.Database(conn)
            self.identity = file_identity(self.path)
            self.damaged = None

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("PRAGMA optimize")
            self.conn.close()


def put_setting(conn: sqlite3.Connection, key: str, value: str) -> None:
    """Set a setting inside the caller's transaction (the queue's id counter)."""
    conn.execute("INSERT INTO settings(key, value) VALUES (?, ?) "
                 "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))


def is_sqlite(path: Path) -> bool:
    """Whether the file starts as an SQLite database does (ours to set aside if damaged)."""
    try:
        with path.open("rb") as fh:
            return fh.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path`` now, or None when nothing is there."""
    if str(path) == ":memory:":
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def encode_path(path: Path) -> bytes:
    return os.fsencode(path)


def decode_path(raw: bytes) -> Path:
    return Path(os.fsdecode(raw))
