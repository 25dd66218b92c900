"""A small stand-in for the daemon, implementing ``ocrwatch.control.Controllable``.

Used by the control, tray and icon tests to exercise those modules without the real
daemon's threads, database and engine.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ocrwatch.core.status import Status


class StandInDaemon:
    def __init__(self, **status: Any) -> None:
        self.lock = threading.Lock()
        self.calls: list[str] = []
        self.stop_requested = threading.Event()
        self._status: dict[str, Any] = {
            "state": "idle",
            "paused": False,
            "queued": 0,
            "running": 0,
            "done": 0,
            "failed": 0,
            "pages_today": 0,
            "engine": {"name": "fake", "why": "chosen in the test", "state": "ready"},
            "last_result": None,
            "recent_failures": [],
            "inbox": ["/tmp/OCR-Inbox"],
            "log_file": "/tmp/ocrwatch.log",
            "pid": os.getpid(),
            "version": "0.1.0",
        }
        self._status.update(status)

    def set(self, **changes: Any) -> None:
        with self.lock:
            self._status.update(changes)

    def status(self) -> Status:
        with self.lock:
            self.calls.append("status")
            return Status.from_dict(self._status)

    def pause(self) -> None:
        with self.lock:
            self.calls.append("pause")
            self._status.update(paused=True, state="paused")

    def resume(self) -> None:
        with self.lock:
            self.calls.append("resume")
            self._status.update(paused=False, state="idle")

    def request_stop(self) -> None:
        with self.lock:
            self.calls.append("request_stop")
            self._status.update(state="stopping")
        self.stop_requested.set()

    def rescan(self) -> None:
        with self.lock:
            self.calls.append("rescan")

    def retry(self, paths: list[str] | None, all_failed: bool) -> int:
        with self.lock:
            self.calls.append(f"retry {paths} {all_failed}")
            return len(paths or []) if not all_failed else int(self._status["failed"])
