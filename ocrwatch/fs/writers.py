"""Whether another program still has a file open for writing.

An editor or scanner app that keeps a file open may add to it after ocrwatch read it (a
PDF saved incrementally appends after its end). Deleting or archiving it then would lose
what is added: the writes go to a file no name leads to, or into the archive unread.

Linux tells it without looking at other processes: a read lease (``F_SETLEASE``,
``F_RDLCK``) is refused with EAGAIN while any process has the file open for writing, and
readers do not count. Asked once the file is under its private name, the answer holds:
no program can open it by its name from then on.
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
from pathlib import Path

__all__ = ["open_for_writing"]

_F_SETLEASE = getattr(fcntl, "F_SETLEASE", None)
_F_SETSIG = getattr(fcntl, "F_SETSIG", None)


def open_for_writing(path: Path) -> bool:
    """True when some process has the file ``path`` (no link followed) open for writing
    now; False when none has, or when this cannot be told here (not Linux, a file system
    without leases, a file of another user's)."""
    if _F_SETLEASE is None or _F_SETSIG is None:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        # A lease broken while it is held (a program opening the file for writing in
        # those microseconds) is told by a signal; SIGIO's default ends the process,
        # SIGURG's is to ignore it.
        fcntl.fcntl(fd, _F_SETSIG, signal.SIGURG)
        try:
            fcntl.fcntl(fd, _F_SETLEASE, fcntl.F_RDLCK)
        except OSError as exc:
            return exc.errno == errno.EAGAIN
        fcntl.fcntl(fd, _F_SETLEASE, fcntl.F_UNLCK)
        return False
    except OSError:
        return False
    finally:
        os.close(fd)
