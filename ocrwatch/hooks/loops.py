"""An ``on_done`` that copies its file into a watched folder would loop for ever.

The copy has the content of a file just read, so it is not read again (its pages are
reused by SHA-256), but it is a new file, done in its turn: ``on_done`` runs for it and
makes another copy, and so on (262 files in a minute). A copy made while ``on_done`` ran
for the same content is recognised by its change time (``st_ctime``, set by the kernel
when the file is created or written, whatever the hook does to its mtime) falling inside
that run: it is read and indexed as any file, but ``on_done`` is not run for it, and the
log says why. These are wall-clock times on purpose: ``st_ctime`` is one.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

SLACK_SECONDS = 1.0  # a file system's timestamps may lag the clock a little
KEEP_SECONDS = 600.0  # a run this old can no longer have made a file still arriving


class HookLoops:
    """When ``on_done`` last ran for each content, to know the copies it made."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, tuple[float, float | None]] = {}  # sha256 -> start, end

    def started(self, sha256: str) -> None:
        now = time.time()
        with self._lock:
            self._runs = {k: v for k, v in self._runs.items()
                          if v[1] is None or now - v[1] < KEEP_SECONDS}
            self._runs[sha256] = (now, None)

    def ended(self, sha256: str) -> None:
        with self._lock:
            start, _ = self._runs.get(sha256, (time.time(), None))
            self._runs[sha256] = (start, time.time())

    def made_by_hook(self, sha256: str, path: Path) -> bool:
        """Whether ``path`` (holding ``sha256``) appeared while ``on_done`` ran for the
        same content."""
        with self._lock:
            run = self._runs.get(sha256)
        if run is None:
            return False
        start, end = run
        try:
            changed = os.lstat(path).st_ctime
        except OSError:
            return False
        return start - SLACK_SECONDS <= changed <= (end or time.time()) + SLACK_SECONDS
