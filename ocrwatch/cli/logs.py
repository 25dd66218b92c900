"""Logging for the entry point: a rotating file in the per-user log folder, plus stderr.

Only the entry point calls :func:`setup_logging`; modules log through
``logging.getLogger(__name__)``. Calling it again replaces the handlers it installed
before instead of adding more, so a test or a re-exec never doubles every line.
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import os
import re
import sys
import threading
import time
import typing
from pathlib import Path
from typing import Any

from ocrwatch.cli.native_stderr import is_native
from ocrwatch.cli.termsafe import safe_lines
from ocrwatch.core.errors import MachineError, UsageError
from ocrwatch.fs import paths
from ocrwatch.fs.private import PRIVATE_FILE, private_dir

MAX_BYTES = 5 * 1024 * 1024
BACKUPS = 5
FILE_FORMAT = "%(asctime)s %(levelname)-7s %(threadName)s %(name)s: %(message)s"
STDERR_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
# Libraries that are chatty at INFO and say nothing a user needs.
QUIET = ("PIL", "watchdog", "urllib3", "httpx", "filelock", "asyncio")
# Libraries whose warnings ocrwatch handles itself and says in one line of its own (img2pdf's
# three lines on a 16-bit transparent PNG: the page is then embedded losslessly as read).
FILE_ONLY = ("img2pdf",)
# A record with this attribute true goes to the file alone (a trace the console must not
# show: its errors are one line each).
FILE_ONLY_MARK = "file_only"

_MARK = "_ocrwatch_handler"

# Repeated warnings: at most BURST alike in WINDOW seconds, then one line saying the rest
# are held back, and a count when they may show again. A 120-deep folder tree made
# watchdog warn about every folder, each warning 200 KB long: megabytes in a second.
BURST = 5
WINDOW = 60.0
PREFIX = 120  # characters of a message that tell one kind of message from another
MAX_MESSAGE = 8192  # characters of one record's message; the rest is cut


class RateLimit(logging.Filter):
    """Let through at most ``burst`` alike WARNING-or-worse records per ``window`` seconds.

    A logging.Filter of our own: the standard library has none, and the PyPI packages
    that do this are small and unmaintained.

    Records are alike when they come from the same logger and the first PREFIX
    characters of their messages are the same once numbers are blanked (ids, counts and
    line numbers vary between repeats): two different files failing are two kinds, a
    library's warning about each of 120 nested folders is one. One instance is shared by
    the file and stderr handlers and decides once per record.
    """

    def __init__(self, burst: int = BURST, window: float = WINDOW,
                 clock: typing.Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.burst, self.window, self.clock = burst, window, clock
        self._seen: dict[tuple[str, int, str], list[float]] = {}  # key -> [start, count]
        self._lock = threading.Lock()

    @staticmethod
    def key(record: logging.LogRecord) -> tuple[str, int, str]:
        return record.name, record.levelno, re.sub(r"\d+", "#", record.getMessage()[:PREFIX])

    def filter(self, record: logging.LogRecord) -> bool:
        decided = getattr(record, "_ocrwatch_pass", None)
        if decided is not None:
            return bool(decided)
        try:
            verdict = self._decide(record) if record.levelno >= logging.WARNING else True
            _shorten(record)
        except Exception:  # a record whose arguments do not fit: let logging report it
            verdict = True
        record._ocrwatch_pass = verdict
        return verdict

    def _decide(self, record: logging.LogRecord) -> bool:
        now = self.clock()
        key = self.key(record)
        with self._lock:
            slot = self._seen.get(key)
            if slot is None or now - slot[0] >= self.window:
                held = int(slot[1]) - self.burst if slot is not None else 0
                self._seen[key] = [now, 1.0]
                if len(self._seen) > 1000:  # forget the oldest kinds; they are long gone
                    for old in sorted(self._seen, key=lambda k: self._seen[k][0])[:500]:
                        del self._seen[old]
                if held > 0:
                    record.msg = f"{record.getMessage()} ({held} alike held back before)"
                    record.args = None
                return True
            slot[1] += 1
            if slot[1] <= self.burst:
                if slot[1] == self.burst:
                    record.msg = (f"{record.getMessage()} (alike messages are held back for "
                                  f"{self.window - (now - slot[0]):.0f} s)")
                    record.args = None
                return True
            return False


class SafeFormatter(logging.Formatter):
    """Log lines with control characters escaped: file names may hold terminal escape
    sequences, and the log is read on a terminal (stderr, `tail -f`)."""

    def format(self, record: logging.LogRecord) -> str:
        return safe_lines(super().format(record))


def _shorten(record: logging.LogRecord) -> None:
    message = record.getMessage()
    if len(message) > MAX_MESSAGE:
        record.msg = f"{message[:MAX_MESSAGE]}… ({len(message) - MAX_MESSAGE} characters cut)"
        record.args = None


class _PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """Log files (this one and each rotated one) are 0600: they name the user's files."""

    def _open(self) -> Any:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                     PRIVATE_FILE)
        with contextlib.suppress(OSError):
            os.fchmod(fd, PRIVATE_FILE)  # a log made by an older version was 0644
        return open(fd, self.mode, encoding=self.encoding, errors=self.errors)


def default_log_file() -> Path:
    return paths.log_file()


def setup_logging(
    level: str = "INFO",
    *,
    log_file: Path | None = None,
    stderr: bool = True,
    max_bytes: int = MAX_BYTES,
    backups: int = BACKUPS,
) -> Path:
    """Send every log record to a rotating file (and stderr); return the file's path.

    The file is ``ocrwatch.log`` in the platform's log folder unless ``log_file`` says
    otherwise; it rotates at ``max_bytes`` keeping ``backups`` old files.
    """
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise UsageError(
            f"unknown log level {level!r}; use DEBUG, INFO, WARNING or ERROR"
        )
    path = Path(log_file) if log_file is not None else default_log_file()
    try:
        private_dir(path.parent, ours=path.parent == paths.log_dir())
        file_handler = _PrivateRotatingFileHandler(
            path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
        )
    except OSError as exc:
        raise MachineError(
            f"cannot write the log file {path}: {exc.strerror}. Make its folder writable "
            "for your user, or free some disk space."
        ) from exc
    file_handler.setFormatter(SafeFormatter(FILE_FORMAT))

    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _MARK, False)]:
        root.removeHandler(old)
        old.close()
    new: list[logging.Handler] = [file_handler]
    if stderr:
        err = logging.StreamHandler(sys.stderr)
        err.setFormatter(SafeFormatter(STDERR_FORMAT))
        err.addFilter(lambda record: not is_native(record)  # native chatter: file only
                      and not record.name.startswith(FILE_ONLY)
                      and not getattr(record, FILE_ONLY_MARK, False))
        new.append(err)
    limit = RateLimit()
    for handler in new:
        setattr(handler, _MARK, True)
        handler.addFilter(limit)
        root.addHandler(handler)
    root.setLevel(numeric)
    for name in QUIET:
        logging.getLogger(name).setLevel(max(numeric, logging.WARNING))
    # Native libraries' lines reach the file whatever the level: the console never shows
    # them, and `add` (which logs warnings only) would otherwise lose them.
    logging.getLogger("ocrwatch.native").setLevel(min(numeric, logging.INFO))
    logging.captureWarnings(True)
    return path


def current_log_file() -> Path | None:
    """The file :func:`setup_logging` is writing to, if it was called."""
    for handler in logging.getLogger().handlers:
        if getattr(handler, _MARK, False) and isinstance(handler, logging.FileHandler):
            return Path(handler.baseFilename)
    return None
