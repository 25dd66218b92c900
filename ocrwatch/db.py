"""The SQLite file that is both the durable job queue and the full-text index.

One connection per :class:`Database`, guarded by a lock so the daemon's threads can
share it; WAL mode so ``ocrwatch search`` and ``status`` read while the daemon writes.
Schema changes are named migrations, each applied once and recorded.
"""

from __future__ import annotations

import contextlib
import errno
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

from ocrwatch import paths
from ocrwatch.errors import ConfigError, OcrwatchError, SearchTimeout, TransientError
from ocrwatch.private import private_dir, private_file

log = logging.getLogger(__name__)


def _m001_jobs(db: sqlite_utils.Database) -> None:
    db["jobs"].create(  # type: ignore[union-attr]
        {
            "id": int,
            "path": bytes,  # os.fsencode(path): names need not be UTF-8
            "display": str,  # the path for people, undecodable bytes replaced
            "sha256": str,
            "size": int,
            "mtime_ns": int,
            "state": str,
            "reason": str,
            "attempts": int,
            "not_before": float,
            "pages": int,
            "engine": str,
            "warnings": str,
            "md_path": bytes,
            "txt_path": bytes,
            "created": float,
            "updated": float,
            "finished": float,
        },
        pk="id",
        not_null={"path", "display", "state", "attempts"},
        defaults={"attempts": 0, "not_before": 0.0},
    )
    db.execute("CREATE UNIQUE INDEX jobs_path ON jobs(path)")
    db.execute("CREATE INDEX jobs_state ON jobs(state, not_before, id)")
    db.execute("CREATE INDEX jobs_sha ON jobs(sha256, state)")
    db.execute("CREATE INDEX jobs_md ON jobs(md_path)")


def _m002_pages(db: sqlite_utils.Database) -> None:
    db["pages"].create(  # type: ignore[union-attr]
        {"id": int, "job_id": int, "page": int, "text": str, "markdown": str, "warnings": str},
        pk="id",
        not_null={"job_id", "page", "text", "markdown"},
        foreign_keys=[("job_id", "jobs", "id")],
    )
    db.execute("CREATE UNIQUE INDEX pages_job_page ON pages(job_id, page)")
    # Words, accents folded ("cafe" finds "café"): ranked search.
    db["pages"].enable_fts(  # type: ignore[union-attr]
        ["text"], fts_version="FTS5", tokenize="unicode61 remove_diacritics 2",
        create_triggers=True,
    )
    # Trigrams find substrings, which Chinese and Japanese need (no spaces between words).
    db.executescript(
        """
        CREATE VIRTUAL TABLE pages_tri USING fts5(text, content='pages', content_rowid='id',
                                                  tokenize='trigram');
        CREATE TRIGGER pages_tri_ai AFTER INSERT ON pages BEGIN
          INSERT INTO pages_tri(rowid, text) VALUES (new.id, new.text);
        END;
        CREATE TRIGGER pages_tri_ad AFTER DELETE ON pages BEGIN
          INSERT INTO pages_tri(pages_tri, rowid, text) VALUES ('delete', old.id, old.text);
        END;
        CREATE TRIGGER pages_tri_au AFTER UPDATE ON pages BEGIN
          INSERT INTO pages_tri(pages_tri, rowid, text) VALUES ('delete', old.id, old.text);
          INSERT INTO pages_tri(rowid, text) VALUES (new.id, new.text);
        END;
        """
    )


def _m003_settings(db: sqlite_utils.Database) -> None:
    db["settings"].create({"key": str, "value": str}, pk="key")  # type: ignore[union-attr]


def _m004_moves(db: sqlite_utils.Database) -> None:
    # Journal of originals being archived: a crash mid-move is finished at the next start.
    db["moves"].create(  # type: ignore[union-attr]
        {"id": int, "job_id": int, "src": bytes, "dest": bytes},
        pk="id", not_null={"job_id", "src", "dest"},
    )


def _m005_names(db: sqlite_utils.Database) -> None:
    # Where a file lives on disk, so that a file moved while nothing watched is known
    # again by its inode (with its size and time) instead of being read a second time.
    db.execute("ALTER TABLE jobs ADD COLUMN dev INTEGER")
    db.execute("ALTER TABLE jobs ADD COLUMN inode INTEGER")
    db.execute("CREATE INDEX jobs_inode ON jobs(inode)")
    # File and folder names, searchable on their own: `jobs_fts` (the sqlite-utils
    # naming, so Datasette and sqlite-utils find it). Kept by triggers on the path only,
    # so state changes of a job cost nothing here.
    db["jobs"].enable_fts(  # type: ignore[union-attr]
        ["display"], fts_version="FTS5", tokenize="unicode61 remove_diacritics 2",
        create_triggers=False,
    )
    db.executescript(
        """
        CREATE TRIGGER jobs_ai AFTER INSERT ON jobs BEGIN
          INSERT INTO jobs_fts(rowid, display) VALUES (new.id, new.display);
        END;
        CREATE TRIGGER jobs_ad AFTER DELETE ON jobs BEGIN
          INSERT INTO jobs_fts(jobs_fts, rowid, display) VALUES ('delete', old.id, old.display);
        END;
        CREATE TRIGGER jobs_au AFTER UPDATE OF display ON jobs BEGIN
          INSERT INTO jobs_fts(jobs_fts, rowid, display) VALUES ('delete', old.id, old.display);
          INSERT INTO jobs_fts(rowid, display) VALUES (new.id, new.display);
        END;
        """
    )


def _m006_read_with(db: sqlite_utils.Database) -> None:
    # What a file was read with: the engine, and for Tesseract its languages
    # ("tesseract eng+deu"), so that after a language change only the files read
    # otherwise are read again (`ocrwatch reread`).
    db.execute("ALTER TABLE jobs ADD COLUMN read_with TEXT")


# Pages with Chinese, Japanese or Korean characters (the same ranges as index._CJK), as a
# GLOB pattern, for pages stored before ``pages.cjk`` existed.
CJK_GLOB = "*[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in (
    (0x3000, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7AF), (0xF900, 0xFAFF),
    (0xFF00, 0xFFEF))) + "]*"


def _m007_cjk_trigrams(db: sqlite_utils.Database) -> None:
    # Trigrams are for text written without spaces; a page in a European language costs
    # as many trigrams as characters for nothing. Only pages with CJK characters keep them:
    # ``pages.cjk``, set by index.replace_pages (a regular expression in Python is much cheaper
    # than a GLOB in a trigger), drives the triggers (the same WHEN on insert and delete,
    # as external content needs) and a partial index for the scan of short CJK words.
    glob = "'" + CJK_GLOB + "'"
    db.executescript(
        f"""
        ALTER TABLE pages ADD COLUMN cjk INTEGER NOT NULL DEFAULT 0;
        UPDATE pages SET cjk = 1 WHERE text GLOB {glob};
        DROP TRIGGER pages_tri_ai;
        DROP TRIGGER pages_tri_ad;
        DROP TRIGGER pages_tri_au;
        INSERT INTO pages_tri(pages_tri) VALUES ('delete-all');
        INSERT INTO pages_tri(rowid, text) SELECT id, text FROM pages WHERE cjk;
        CREATE TRIGGER pages_tri_ai AFTER INSERT ON pages WHEN new.cjk BEGIN
          INSERT INTO pages_tri(rowid, text) VALUES (new.id, new.text);
        END;
        CREATE TRIGGER pages_tri_ad AFTER DELETE ON pages WHEN old.cjk BEGIN
          INSERT INTO pages_tri(pages_tri, rowid, text) VALUES ('delete', old.id, old.text);
        END;
        CREATE TRIGGER pages_tri_aud AFTER UPDATE ON pages WHEN old.cjk BEGIN
          INSERT INTO pages_tri(pages_tri, rowid, text) VALUES ('delete', old.id, old.text);
        END;
        CREATE TRIGGER pages_tri_aui AFTER UPDATE ON pages WHEN new.cjk BEGIN
          INSERT INTO pages_tri(rowid, text) VALUES (new.id, new.text);
        END;
        CREATE INDEX pages_cjk ON pages(id) WHERE cjk;
        """
    )


MIGRATIONS: list[tuple[str, Callable[[sqlite_utils.Database], None]]] = [
    ("001_jobs", _m001_jobs),
    ("002_pages", _m002_pages),
    ("003_settings", _m003_settings),
    ("004_moves", _m004_moves),
    ("005_names", _m005_names),
    ("006_read_with", _m006_read_with),
    ("007_cjk_trigrams", _m007_cjk_trigrams),
]


def is_disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return isinstance(exc, sqlite3.OperationalError) and "disk is full" in str(exc)


def _transient(exc: BaseException) -> TransientError | None:
    """The error as a TransientError when waiting may cure it (full disk, busy index)."""
    if is_disk_full(exc):
        return TransientError("the disk holding the index is full")
    if isinstance(exc, sqlite3.OperationalError) and "database is locked" in str(exc):
        return TransientError("the index was busy (another ocrwatch process was writing it); "
                              "will try again")
    return None


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

    def __init__(self, path: Path | str, *, readonly: bool = False, origin: str = "") -> None:
        """Open (and with ``readonly`` False, create or upgrade) the index at ``path``.

        ``origin`` says where the path came from (a flag, a variable, a config file) so
        that a message about a bad file names the place to change it.
        """
        self.path = Path(path) if str(path) != ":memory:" else Path(":memory:")
        named = f" (set by {origin})" if origin else ""
        if str(path) != ":memory:":
            if readonly and not self.path.exists():
                raise OcrwatchError(
                    f"no index at {self.path}{named} yet: start the daemon with "
                    "`ocrwatch run` or read files with `ocrwatch add`"
                )
            if self.path.is_dir():
                raise OcrwatchError(f"the index {self.path}{named} is a folder; name a file")
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
            if "not a database" in str(exc) or "malformed" in str(exc):
                raise ConfigError(
                    f"{path}{named} is not an ocrwatch index (SQLite: {exc}). Name the index "
                    "file, or move this file away so that a new index is made there."
                ) from None
            if "readonly" in str(exc) or "read-only" in str(exc):
                raise OcrwatchError(
                    f"the index {path}{named} is read-only for your user; make it and its "
                    "folder writable, or name another file"
                ) from None
            raise OcrwatchError(f"cannot open the index {path}{named}: {exc}") from None
        self._lock = threading.RLock()
        self.conn = conn
        self.db = sqlite_utils.Database(conn)
        self._closed = False
        if not readonly:
            try:
                self.migrate()
            except sqlite3.OperationalError as exc:
                conn.close()
                raise OcrwatchError(
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
                raise OcrwatchError("the index is closed")
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if (transient := _transient(exc)) is not None:
                    raise transient from exc
                raise
            try:
                yield self.conn
            except BaseException as exc:
                self._rollback()
                if (transient := _transient(exc)) is not None:
                    raise transient from exc
                raise
            else:
                try:
                    self.conn.execute("COMMIT")
                except sqlite3.OperationalError as exc:
                    self._rollback()
                    if (transient := _transient(exc)) is not None:
                        raise transient from exc
                    raise

    def _rollback(self) -> None:
        # On a full disk or an I/O error SQLite may have rolled back already; a second
        # ROLLBACK would raise and hide the error that tells the user what happened.
        if self.conn.in_transaction:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error as exc:
                log.warning("could not roll back a transaction: %s", exc)

    def query(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            cur = self.conn.execute(sql, params)
            cur.row_factory = sqlite3.Row
            return list(cur.fetchall())

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
                if "interrupt" in str(exc) and time.monotonic() > deadline:
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
            conn.execute(
                "INSERT INTO settings(key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("PRAGMA optimize")
            self.conn.close()


def encode_path(path: Path) -> bytes:
    return os.fsencode(path)


def decode_path(raw: bytes) -> Path:
    return Path(os.fsdecode(raw))


def display_path(path: Path) -> str:
    return os.fsencode(path).decode("utf-8", errors="replace")
