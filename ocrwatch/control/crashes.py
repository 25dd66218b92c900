"""Whether the last daemon on an index died of a crash, and the trace of this one's.

A reader that aborts (a Tesseract assertion) or a decoder that faults (on a damaged or
crafted file) takes the whole process down, and at the next start the files it was
reading would be read again and crash it again, at every start. Python's faulthandler
writes every thread's stack to a file beside the index when the process dies of a fatal
signal (SIGSEGV, SIGFPE, SIGABRT, SIGBUS, SIGILL); a kill (SIGKILL, the kernel's
out-of-memory killer) or a power cut writes nothing. So a file there that is not empty
at the next start says that the last daemon crashed: the files it was reading count it
(:meth:`ocrwatch.store.jobs.JobQueue.recover`), and its trace goes to the log.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
from pathlib import Path
from typing import TextIO

log = logging.getLogger(__name__)

MAX_TRACE = 64 * 1024  # bytes of the last crash's trace read back for the log


class CrashRecord:
    """``NAME.crash`` beside the index ``NAME``: written only by a dying process."""

    def __init__(self, database: Path) -> None:
        self.path = database.with_name(database.name + ".crash")
        self._file: TextIO | None = None

    def arm(self) -> str | None:
        """Record a crash of this process from now on; returns the trace of the last
        daemon's crash on this index, or None when it stopped otherwise."""
        previous = self._previous()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
            os.fchmod(fd, 0o600)  # stacks name the user's files: theirs alone
        except OSError as exc:
            # Not worth refusing to start over: the daemon runs as before this record.
            log.warning("cannot keep a crash record at %s (%s): a file that crashes ocrwatch "
                        "will be read again at every start", self.path, exc.strerror)
            return previous
        self._file = os.fdopen(fd, "w", encoding="utf-8")
        faulthandler.enable(self._file, all_threads=True)
        return previous

    def disarm(self) -> None:
        """A clean stop: nothing to report at the next start. Safe twice."""
        if self._file is None:
            return
        faulthandler.disable()
        self._file.close()
        self._file = None
        with contextlib.suppress(OSError):
            self.path.unlink()

    def _previous(self) -> str | None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None  # none: the last daemon stopped cleanly (or never ran)
        with os.fdopen(fd, "rb") as fh:
            text = fh.read(MAX_TRACE).decode("utf-8", errors="replace").strip()
        return text or None
