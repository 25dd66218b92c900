"""Opening files beneath a watched folder without following any symbolic link.

A check made when a file is discovered proves nothing at read time: a subfolder can be
replaced by a link to somewhere else in between, and every later ``open(path)`` walks
the link. So reads and sidecar writes start from a handle on the root folder and resolve
each component below it themselves:

- ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`` where the kernel has it (Linux 5.6):
  the kernel refuses any link, ``..`` escape or mount trick in one call;
- else one ``openat(O_NOFOLLOW)`` per component, each relative to the previous folder's
  handle, so nothing is looked up by path twice.

The root itself may be a link (a user's ``~/OCR-Inbox`` pointing to another disk): it is
the user's own choice, made in the config. A root that was a real folder when this
process first opened it is not followed once it has become a link.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ocrwatch.core.errors import InputError

__all__ = ["LinkRefused", "NotRegular", "open_beneath", "open_dir_beneath",
           "open_file_beneath", "original_mode", "remember_roots", "root_of", "source_root"]

_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "riscv64": 437, "ppc64le": 437, "s390x": 437}
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class LinkRefused(InputError):
    """A symbolic link (or an escape) was met below the root: not followed."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


def _load_syscall() -> tuple[object, int] | None:
    number = _SYS_OPENAT2.get(os.uname().machine)
    if number is None:
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        return libc.syscall, number
    except (OSError, AttributeError, TypeError):
        return None


_syscall = _load_syscall()
_have_openat2: bool | None = None if _syscall is not None else False


def _openat2(dirfd: int, rel: str, flags: int, mode: int) -> int | None:
    """The fd, or None when this kernel has no openat2. Raises OSError like os.open."""
    global _have_openat2
    if _have_openat2 is False or _syscall is None:
        return None
    call, number = _syscall
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0,
                   _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS)
    fd = call(ctypes.c_long(number), ctypes.c_int(dirfd),  # type: ignore[operator]
              ctypes.c_char_p(os.fsencode(rel)), ctypes.byref(how),
              ctypes.c_size_t(ctypes.sizeof(how)))
    if fd >= 0:
        _have_openat2 = True
        return int(fd)
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EPERM) and _have_openat2 is None:
        _have_openat2 = False  # no openat2 here (or a seccomp filter refuses it)
        return None
    raise OSError(err, os.strerror(err), rel)


def root_of(path: Path, roots: list[Path]) -> Path | None:
    """The root in ``roots`` that ``path`` lies under (the deepest one), or None."""
    best: Path | None = None
    for root in roots:
        if path.is_relative_to(root) and (best is None or len(root.parts) > len(best.parts)):
            best = root
    return best


def _parts(root: Path, path: Path) -> list[str]:
    rel = path.relative_to(root).parts
    if any(p in ("..", ".") for p in rel):
        raise LinkRefused(f"{path} leaves the folder {root}: not followed")
    return list(rel)


def _refused(root: Path, path: Path) -> LinkRefused:
    return LinkRefused(
        f"a symbolic link below the watched folder {root} leads to {path}: not followed. "
        "Put the file itself in the inbox (or set follow_symlinks = true)"
    )


# Whether each root was a symbolic link when this process first opened it. A link then
# is the user's choice; a real folder swapped for a link later (an output folder pointed
# at another user's or a shared folder mid-run) is not followed.
_ROOT_WAS_LINK: dict[str, bool] = {}


def remember_roots(roots: list[Path]) -> None:
    """Note now, at the daemon's start, whether each existing root is a link: a folder
    swapped for a link before ocrwatch first writes there (an archive folder, which is
    first opened at the first archiving) is then refused as well."""
    for root in roots:
        if os.path.lexists(root):
            _ROOT_WAS_LINK.setdefault(os.fspath(root), os.path.islink(root))


def _open_root(root: Path) -> int:
    key = os.fspath(root)
    if key not in _ROOT_WAS_LINK:
        _ROOT_WAS_LINK[key] = os.path.islink(root)
    flags = _DIR_FLAGS if _ROOT_WAS_LINK[key] else _DIR_FLAGS | os.O_NOFOLLOW
    try:
        return os.open(root, flags)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(root):
            raise LinkRefused(
                f"the folder {root} was replaced by a symbolic link while ocrwatch ran: "
                "not followed. Put the folder back, or start ocrwatch again to take the "
                "link as the folder") from None
        raise


def _walk_open(root: Path, parts: list[str], flags: int, mode: int) -> int:
    """Component by component, each relative to the last folder and O_NOFOLLOW."""
    fd = _open_root(root)
    try:
        for i, name in enumerate(parts):
            if i == len(parts) - 1:
                new = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
            else:
                new = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = new
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_beneath(root: Path, path: Path, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    """A file descriptor for ``path``, which must lie below ``root``, with no link followed.

    Raises LinkRefused when a component below ``root`` is a symbolic link, and OSError
    (FileNotFoundError, PermissionError...) as ``os.open`` does otherwise.
    """
    parts = _parts(root, path)
    if not parts:
        return os.open(root, flags | os.O_CLOEXEC, mode)
    try:
        rootfd = _open_root(root)
        try:
            fd = _openat2(rootfd, os.path.join(*parts), flags, mode)
        finally:
            os.close(rootfd)
        if fd is not None:
            return fd
        return _walk_open(root, parts, flags, mode)
    except OSError as exc:
        # ELOOP: a link met (O_NOFOLLOW, RESOLVE_NO_SYMLINKS); EXDEV: RESOLVE_BENEATH
        # refused an escape; ENOTDIR: a link where a folder was expected (O_DIRECTORY).
        if exc.errno in (errno.ELOOP, errno.EXDEV) or (
                exc.errno == errno.ENOTDIR and _has_link(root, parts)):
            raise _refused(root, path) from None
        raise


def _has_link(root: Path, parts: list[str]) -> bool:
    here = root
    for name in parts:
        here = here / name
        if here.is_symlink():
            return True
    return False


def open_dir_beneath(root: Path, folder: Path, *, create: bool = False) -> int:
    """A handle on ``folder`` (below ``root`` or ``root`` itself), no link followed."""
    if create:
        root.mkdir(parents=True, exist_ok=True)
        return _open_dir_creating(root, folder)
    return open_beneath(root, folder, _DIR_FLAGS)


def _open_dir_creating(root: Path, folder: Path) -> int:
    parts = _parts(root, folder)
    try:
        fd = _open_root(root)
        try:
            for name in parts:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=fd)
                new = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = new
        except BaseException:
            os.close(fd)
            raise
        return fd
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _has_link(root, parts):
            raise _refused(root, folder) from None
        raise


@contextlib.contextmanager
def open_file_beneath(root: Path | None, path: Path) -> Iterator[BinaryIO]:
    """The regular file ``path`` opened for reading, no link followed below ``root``.

    With ``root`` None (a file given to ``ocrwatch add`` outside every inbox, or links
    allowed by ``follow_symlinks``), it is opened as the path says.
    """
    if root is None:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    else:
        fd = open_beneath(root, path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular("not a regular file (a folder, device or pipe): not read")
        os.set_blocking(fd, True)
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with fh:
        yield fh


class NotRegular(InputError):
    """A folder, device or pipe where a file was expected: nothing to read."""


def source_root(path: Path, inboxes: list[Path], follow_symlinks: bool) -> Path | None:
    """The folder below which no link may be followed to reach ``path`` (None: any)."""
    return None if follow_symlinks else root_of(path, inboxes)


def original_mode(path: Path, root: Path | None) -> int | None:
    """The mode of the file ``path`` (reached as :func:`open_file_beneath` does), or None,
    as far as it may pass to a file of ours: the group's bits only when the original's
    group is the one our files get (a hard link to another user's file readable by their
    group must not make its text readable by ours)."""
    try:
        with open_file_beneath(root, path) as fh:
            st = os.fstat(fh.fileno())
    except (OSError, InputError):
        return None
    return st.st_mode if st.st_gid == os.getegid() else st.st_mode & ~0o070
