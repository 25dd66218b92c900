"""Whether the last daemon on an index died without a clean stop, and the trace of a crash.

A reader that aborts (a Tesseract assertion) or a decoder that faults (on a damaged or
crafted file) takes the whole process down, and so does the kernel's out-of-memory killer
when a page takes all the memory: at the next start the files it was reading would be read
again and end it again, at every start, and the files behind them never. So the record
``NAME.crash`` beside the index is made when a daemon starts and removed when it stops
cleanly (SIGTERM, ``ocrwatch stop``); Python's faulthandler writes every thread's stack
into it when the process dies of a fatal signal (SIGSEGV, SIGFPE, SIGABRT, SIGBUS, SIGILL).
At the next start a record still there says the last daemon did not stop cleanly: with
a trace it crashed, empty it was killed (SIGKILL, the out-of-memory killer, a power cut).
Either way the files it was reading count it (:meth:`ocrwatch.store.jobs.JobQueue.recover`):
each is read alone, and one that ends the daemon again, alone, fails with the reason. A
kill that had nothing to do with the file costs it no more than being read alone once.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

log = logging.getLogger(__name__)

MAX_TRACE = 64 * 1024  # bytes of the last crash's trace read back for the log


@dataclass(frozen=True)
class LastEnd:
    """How the last daemon on the index ended, when it did not stop cleanly."""

    trace: str | None  # what a fatal signal wrote; None for a kill or a power cut

    @property
    def crashed(self) -> bool:
        """A fatal signal (a trace), not a kill."""
        return self.trace is not None


class CrashRecord:
    """``NAME.crash`` beside the index ``NAME``: written only by a dying process."""

    def __init__(self, database: Path) -> None:
        self.path = database.with_name(database.name + ".crash")
        self._file: TextIO | None = None

    def arm(self) -> LastEnd | None:
        """Record a crash of this process from now on; returns how the last daemon on
        this index ended when it did not stop cleanly, or None when it did (or never ran)."""
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

    def _previous(self) -> LastEnd | None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None  # none: the last daemon stopped cleanly (or never ran)
        with os.fdopen(fd, "rb") as fh:
            text = fh.read(MAX_TRACE).decode("utf-8", errors="replace").strip()
        return LastEnd(text or None)
