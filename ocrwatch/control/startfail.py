"""When the daemon does not start: a line in its log, a desktop notification, and a record
that ``ocrwatch status`` shows while no daemon runs.

At login nobody reads the terminal an autostart runs in (an XDG entry's output goes
nowhere), so a typo in the config would stop the daemon without a word. The reason goes
where a person meets it: the log that ``ocrwatch status`` names, a notification when a
notification server answers, and ``status`` itself. The record is ``last-start-failed.json``
in the log folder, not beside the index: the config that names the index may be what
failed. A daemon that starts removes it.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ocrwatch.fs import paths

log = logging.getLogger(__name__)

RECORD_NAME = "last-start-failed.json"
TITLE = "ocrwatch did not start"


@dataclass(frozen=True)
class StartFailure:
    """Why the last ``ocrwatch run`` ended before its daemon was up."""

    when: float
    reason: str
    exit_code: int

    @property
    def when_text(self) -> str:
        return _dt.datetime.fromtimestamp(self.when).isoformat(sep=" ", timespec="seconds")

    @property
    def line(self) -> str:
        return f"the last start failed ({self.when_text}, status {self.exit_code}): {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> StartFailure | None:
        if not isinstance(data, dict):
            return None
        try:
            return cls(float(data["when"]), str(data["reason"]), int(data["exit_code"]))
        except (KeyError, TypeError, ValueError):
            return None


def record_path() -> Path:
    return paths.log_dir() / RECORD_NAME


def report(reason: str, exit_code: int,
           notify: Callable[[str, str], object] | None = None) -> StartFailure:
    """Say that the daemon did not start, and why: the log (the caller has set it up), the
    record for ``status``, and a notification where one can be shown."""
    failure = StartFailure(time.time(), reason, exit_code)
    log.error("%s: %s", TITLE, reason)
    try:
        _write(failure)
    except OSError as exc:  # the log line and the notification still say it
        log.warning("cannot keep the record of this failed start at %s: %s",
                    record_path(), exc.strerror)
    if notify is None:
        from ocrwatch.hooks.notify import send

        notify = send
    notify(TITLE, f"{reason}\nFix it, then start it again: `ocrwatch start`.")
    return failure


def _write(failure: StartFailure) -> None:
    path = record_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)  # the reason may name the user's files
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(failure.to_dict(), out)
    os.replace(tmp, path)


def last() -> StartFailure | None:
    """The last failed start, unless a daemon has started since."""
    try:
        fd = os.open(record_path(), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "r", encoding="utf-8") as fh:
            data = json.loads(fh.read(64 * 1024))
    except (OSError, ValueError):
        return None
    return StartFailure.from_dict(data)


def clear() -> None:
    """A daemon is up: the last failure is history."""
    with contextlib.suppress(OSError):
        record_path().unlink()
