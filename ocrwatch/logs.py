"""Logging for the entry point: a rotating file in the per-user log folder, plus stderr.

Only the entry point calls :func:`setup_logging`; modules log through
``logging.getLogger(__name__)``. Calling it again replaces the handlers it installed
before instead of adding more, so a test or a re-exec never doubles every line.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path

from ocrwatch import paths
from ocrwatch.errors import OcrwatchError

LOG_NAME = "ocrwatch.log"
MAX_BYTES = 5 * 1024 * 1024
BACKUPS = 5
FILE_FORMAT = "%(asctime)s %(levelname)-7s %(threadName)s %(name)s: %(message)s"
STDERR_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
# Libraries that are chatty at INFO and say nothing a user needs.
QUIET = ("PIL", "watchdog", "urllib3", "httpx", "filelock", "asyncio")

_MARK = "_ocrwatch_handler"


def default_log_file() -> Path:
    return paths.log_dir() / LOG_NAME


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
        raise OcrwatchError(
            f"unknown log level {level!r}; use DEBUG, INFO, WARNING or ERROR"
        )
    path = Path(log_file) if log_file is not None else default_log_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        file_handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
        )
    except OSError as exc:
        raise OcrwatchError(
            f"cannot write the log file {path}: {exc.strerror}. Make its folder writable "
            "for your user, or free some disk space."
        ) from exc
    file_handler.setFormatter(logging.Formatter(FILE_FORMAT))

    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _MARK, False)]:
        root.removeHandler(old)
        old.close()
    new: list[logging.Handler] = [file_handler]
    if stderr:
        err = logging.StreamHandler(sys.stderr)
        err.setFormatter(logging.Formatter(STDERR_FORMAT))
        new.append(err)
    for handler in new:
        setattr(handler, _MARK, True)
        root.addHandler(handler)
    root.setLevel(numeric)
    for name in QUIET:
        logging.getLogger(name).setLevel(max(numeric, logging.WARNING))
    logging.captureWarnings(True)
    return path


def current_log_file() -> Path | None:
    """The file :func:`setup_logging` is writing to, if it was called."""
    for handler in logging.getLogger().handlers:
        if getattr(handler, _MARK, False) and isinstance(handler, logging.FileHandler):
            return Path(handler.baseFilename)
    return None
