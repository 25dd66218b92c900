"""One daemon per user and per index: ``flock`` locks that the kernel drops when the
process dies, so a crash never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
from pathlib import Path
from types import TracebackType

from ocrwatch.core.errors import DaemonRunning, IndexUnavailable, MachineError
from ocrwatch.fs import paths

log = logging.getLogger(__name__)



class InstanceLock:
    """One daemon per user: an exclusive ``flock`` on a file holding the daemon's PID.

    ``busy``: the message when another process holds it, with ``{who}`` for its PID.
    """

    def __init__(self, path: Path | str | None = None, *, busy: str | None = None,
                 unwritable: type[MachineError] = MachineError,
                 fix: str = "make its folder writable for your user") -> None:
        self.path = Path(path) if path is not None else paths.lock_file()
        self._fd: int | None = None
        self._fix = fix
        self._unwritable = unwritable
        self._busy = busy or (
            "an ocrwatch daemon is already running for this user ({who}); stop it with "
            "`ocrwatch stop` (or Quit in its tray menu) before starting another")

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:  # a read-only file system, a folder of another user's
            raise self._unwritable(f"cannot write the lock file {self.path}: "
                                   f"{exc.strerror}; {self._fix}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise MachineError(f"cannot lock {self.path}: {exc.strerror}") from exc
            pid = read_pid(self.path)
            who = f"PID {pid}" if pid else "another process"
            raise DaemonRunning(self._busy.format(who=who)) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        """Drop the lock; safe twice. The file stays: removing it would race a newcomer."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def __enter__(self) -> InstanceLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def database_lock(database: Path) -> InstanceLock:
    """The lock beside the index: one daemon per database, whatever its runtime folder.

    The per-user lock lives in ``XDG_RUNTIME_DIR``; two sessions (or a ``sudo -E``) with
    different runtime folders would each get one and both write the same index.
    """
    return InstanceLock(
        database.with_name(database.name + ".lock"),
        unwritable=IndexUnavailable,
        fix=(f"the index's folder must be writable: make {database.parent} writable (or "
             "mount it read-write), or set database to a file in a writable folder"),
        busy=(f"another ocrwatch daemon ({{who}}) already uses the index {database}; stop it "
              "(`ocrwatch stop` in its session, or `kill` its PID) or give this one another "
              "--database"))


class DaemonLocks:
    """Both locks a daemon holds: the per-user one and the one beside its database."""

    def __init__(self, database: Path) -> None:
        self.locks = [InstanceLock(), database_lock(database)]

    def acquire(self) -> None:
        taken: list[InstanceLock] = []
        try:
            for lock in self.locks:
                lock.acquire()
                taken.append(lock)
        except BaseException:
            for lock in taken:
                lock.release()
            raise

    def release(self) -> None:
        for lock in reversed(self.locks):
            lock.release()


def read_pid(path: Path | str | None = None) -> int | None:
    """The PID written in the lock file, or None when there is none."""
    p = Path(path) if path is not None else paths.lock_file()
    try:
        text = p.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None
