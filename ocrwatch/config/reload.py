"""A new configuration for a running daemon: which changes take effect now, which wait
for a restart, and the watch on the config file that triggers a reload.

Keys in :data:`LIVE` are read each time they are used (through the one shared
:class:`~ocrwatch.config.Config`), so setting them in place is all it takes. Keys in
:data:`APPLIED` need the daemon to act (a log level, the PDF maker, the settle timer).
Every other key shapes something built once at start (the engine and its languages,
the database, the watched folders): a change is named in the log and in ``ocrwatch
status`` until the daemon is started again.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ocrwatch.config.schema import _INTERNAL, _SECTIONS, Config

log = logging.getLogger(__name__)

LIVE = frozenset({
    "output_dir", "output_layout", "pdf_dpi", "pdf_text", "max_pages", "max_pixels",
    "max_file_mb", "failed_dir", "max_attempts", "pdfa", "on_success", "archive_dir",
    "archive_layout", "on_done", "on_done_timeout", "notify_batch", "delete_sidecars",
})
APPLIED = frozenset({"log_level", "outputs", "settle_seconds", "rescan_minutes",
                     "metrics_address", "ignore"})  # the metrics server closed and opened again

POLL_SECONDS = 1.0  # how often the config file's identity is looked at


@dataclass(frozen=True)
class Changes:
    """What differs between the running configuration and a new one."""

    now: tuple[str, ...] = ()  # taken at once
    restart: tuple[str, ...] = ()  # need the daemon started again

    def __bool__(self) -> bool:
        return bool(self.now or self.restart)


def _flat(config: Config) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        if f.name in _INTERNAL:
            continue
        value = getattr(config, f.name)
        if f.name in _SECTIONS:
            for sf in dataclasses.fields(value):
                out[f"{f.name}.{sf.name}"] = getattr(value, sf.name)
        else:
            out[f.name] = value
    return out


def changes(old: Config, new: Config) -> Changes:
    before, after = _flat(old), _flat(new)
    differ = [key for key in before if before[key] != after[key]]
    return Changes(tuple(k for k in differ if k in LIVE or k in APPLIED),
                   tuple(k for k in differ if k not in LIVE and k not in APPLIED))


def apply(target: Config, new: Config, keys: tuple[str, ...]) -> None:
    """Set ``keys`` (top-level keys only: sections never change live) on ``target``."""
    for key in keys:
        setattr(target, key, getattr(new, key))
        if key in new.origins:
            target.origins[key] = new.origins[key]
        else:
            target.origins.pop(key, None)


class FileWatch(threading.Thread):
    """Calls ``changed()`` when the config file is written, replaced, created or removed.

    It polls the file's identity (device, inode, size, modification time) once a second
    rather than using inotify: editors save by writing, by renaming a new file over the
    old one or through a symlink, and a poll of one ``stat`` sees all of these alike.
    """

    def __init__(self, path: Path, changed: Callable[[], object],
                 interval: float = POLL_SECONDS) -> None:
        super().__init__(name="ocrwatch-config-watch", daemon=True)
        self.path = path
        self._changed = changed
        self._interval = interval
        self._quit = threading.Event()
        self._last = self._identity()

    def _identity(self) -> tuple[int, int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def run(self) -> None:
        while not self._quit.wait(self._interval):
            now = self._identity()
            if now == self._last:
                continue
            self._last = now
            try:
                self._changed()
            except Exception:  # the watch must outlive a failed reload
                log.exception("reloading the configuration failed")

    def close(self) -> None:
        self._quit.set()
        if self.is_alive():
            self.join()
