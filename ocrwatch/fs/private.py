"""File modes: nothing ocrwatch writes is readable by a user who could not read the original.

- A sidecar holds the text of its original, so its mode is at most the original's, masked
  by 0666 and the process umask (a 0600 scan under umask 077 gets 0600 sidecars).
- The database (every page's text), its WAL and journal files, and the log (file names,
  reasons) are 0600; the folders ocrwatch makes for them are 0700.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700

_umask_lock = threading.Lock()


def current_umask() -> int:
    """The process umask, read without changing it where the kernel tells it (Linux 4.7+)."""
    with contextlib.suppress(OSError, ValueError), \
            open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    # Elsewhere the only way is to set it and set it back; the lock keeps our own threads
    # from creating files in between with a wrong mask.
    with _umask_lock:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def sidecar_mode(original_mode: int | None) -> int:
    """The mode for a file derived from an original of ``original_mode`` (None: unknown)."""
    base = 0o600 if original_mode is None else original_mode
    return base & 0o666 & ~current_umask()


def private_dir(path: Path, *, ours: bool = False) -> Path:
    """Create ``path`` (and missing parents) as 0700 folders.

    ``ours``: the folder is ocrwatch's own (``~/.local/share/ocrwatch``...), so an
    existing one is made 0700 too. A folder the user chose keeps its mode.
    """
    missing: list[Path] = []
    here = path
    while not here.exists() and here != here.parent:
        missing.append(here)
        here = here.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=PRIVATE_DIR)
        with contextlib.suppress(OSError):
            os.chmod(folder, PRIVATE_DIR)  # mkdir's mode is masked by the umask
    if ours:
        with contextlib.suppress(OSError):
            os.chmod(path, PRIVATE_DIR)
    return path


def private_file(path: Path) -> Path:
    """Create ``path`` empty as 0600 if it is missing, and make an existing one 0600."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, PRIVATE_FILE)
    try:
        with contextlib.suppress(PermissionError):  # another user's file: not ours to change
            os.fchmod(fd, PRIVATE_FILE)
    finally:
        os.close(fd)
    return path
