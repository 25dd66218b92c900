"""Moving and creating files without ever replacing one that is already there.

``shutil.move`` and ``os.replace`` overwrite the destination, and "check, then move" is a
race: two files with the same name (from two inboxes, or one after another) both see a
free name and the second replaces the first. Here the kernel refuses to replace instead:

- ``renameat2(RENAME_NOREPLACE)`` where libc and the file system have it (Linux >= 3.15);
- else ``link`` then ``unlink``: ``link`` fails with EEXIST rather than replace;
- across file systems: copy into a hidden temporary file beside the destination, fsync,
  link it into place (no replace), fsync the folder, and only then remove the source.

``move_unique`` and ``create_unique`` pick ``NAME.2.EXT``, ``NAME.3.EXT``... when the name
is taken, retrying on each refusal, so a collision never loses either file.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["RETIRING_PREFIX", "TEMP_PREFIX", "create_unique", "fsync_file", "fsync_folder",
           "move_no_replace", "move_unique", "temp_in", "unique_names"]

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
TEMP_PREFIX = ".ocrwatch-"  # dot-files: the watcher and other tools ignore them
# An original being archived or deleted, under a name of its own while it is checked
# (results.lifecycle): never a leftover temporary file, always put back if left over.
RETIRING_PREFIX = f"{TEMP_PREFIX}retiring-"


def temp_in(folder: Path) -> tuple[int, str]:
    """A new hidden temporary file in ``folder`` (fd, path), named after this process.

    ``.ocrwatch-PID-....tmp``: the daemon's start-up tidy
    (:func:`ocrwatch.results.sidecar.remove_stale_temps`) removes it once this process is gone.
    For a move's copy that never loses anything: until the source is removed, the
    content is also in the source or already at the destination.
    """
    return tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-", suffix=".tmp", dir=folder)


def _load_renameat2() -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError, TypeError):
        return None  # not Linux, or glibc older than 2.28
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                   ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


_renameat2 = _load_renameat2()
# These errors mean "this kernel or file system cannot do it that way": try the next way.
_UNSUPPORTED = {errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM}


def _rename_noreplace(src: Path, dest: Path) -> bool:
    """True when renamed; False when renameat2 cannot be used here. Raises FileExistsError."""
    if _renameat2 is None:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dest),
                  _RENAME_NOREPLACE) == 0:
        return True
    err = ctypes.get_errno()
    if err in _UNSUPPORTED:
        return False
    raise OSError(err, os.strerror(err), str(src), None, str(dest))


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # some file systems cannot open or sync folders
        fsync_folder(folder)


def fsync_folder(folder: Path) -> None:
    """Make ``folder``'s entries (a file created, renamed or removed there) survive a
    power loss. Raises OSError."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """Make the content of the file at ``path`` survive a power loss (no link followed).
    Raises OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy_no_replace(src: Path, dest: Path) -> None:
    """Across file systems: a synced copy linked into place, then the source removed."""
    fd, tmp_name = temp_in(dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            shutil.copyfileobj(inp, out, 1 << 20)
            out.flush()
            shutil.copystat(src, tmp)  # mode and times: no wider than the original
            os.fsync(out.fileno())
        try:
            os.link(tmp, dest)
        except OSError as exc:
            if exc.errno != errno.EEXIST and exc.errno in _UNSUPPORTED:
                # No hard links here (FAT, some FUSE): create the name exclusively and
                # copy again into it; a reader may see it grow, but nothing is replaced.
                _copy_exclusive(tmp, dest)
            else:
                raise
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(dest.parent)
    src.unlink()


def _copy_exclusive(src: Path, dest: Path) -> None:
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            shutil.copyfileobj(inp, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        shutil.copystat(src, dest)
    except BaseException:
        dest.unlink(missing_ok=True)
        raise


def move_no_replace(src: Path, dest: Path) -> None:
    """Move the file ``src`` to ``dest``; raise FileExistsError if ``dest`` exists.

    Never replaces ``dest``, whatever other process writes there at the same moment.
    ``src`` is removed only once ``dest`` holds its content safely.
    """
    if os.path.lexists(dest):  # a cheap early answer; the kernel enforces it below
        raise FileExistsError(errno.EEXIST, "file exists", str(dest))
    try:
        if _rename_noreplace(src, dest):
            _fsync_dir(dest.parent)
            return
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            raise FileExistsError(errno.EEXIST, "file exists", str(dest)) from None
        if exc.errno != errno.EXDEV:
            raise
        _copy_no_replace(src, dest)
        return
    try:
        os.link(src, dest, follow_symlinks=False)
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            raise FileExistsError(errno.EEXIST, "file exists", str(dest)) from None
        if exc.errno == errno.EXDEV or exc.errno in _UNSUPPORTED:
            _copy_no_replace(src, dest)
            return
        raise
    src.unlink()
    _fsync_dir(dest.parent)


def unique_names(dest: Path) -> Iterator[Path]:
    """``dest``, then ``STEM.2.EXT``, ``STEM.3.EXT``... (``a.tar.gz`` -> ``a.tar.2.gz``)."""
    yield dest
    for n in itertools.count(2):
        yield dest.with_name(f"{dest.stem}.{n}{dest.suffix}")


def move_unique(src: Path, dest: Path) -> Path:
    """Move ``src`` to ``dest`` or the first free name after it; return where it went."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    for candidate in unique_names(dest):
        try:
            move_no_replace(src, candidate)
        except FileExistsError:
            continue
        return candidate
    raise AssertionError("unreachable")  # pragma: no cover - unique_names never ends


def create_unique(dest: Path, data: bytes, mode: int = 0o600) -> Path:
    """Write ``data`` whole into a new file at ``dest`` or the first free name after it.

    The content is synced in a temporary file first and then linked into place, so a
    reader sees all of it or nothing, and no existing file is replaced.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = temp_in(dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fchmod(out.fileno(), mode)
            os.fsync(out.fileno())
        return move_unique(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
