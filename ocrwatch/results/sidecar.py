"""Writing ``NAME.md`` and ``NAME.txt`` beside each original, whole or not at all."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import stat
from collections.abc import Callable, Mapping
from pathlib import Path

from ocrwatch.core.domain import PageText
from ocrwatch.core.errors import Doing, os_reason
from ocrwatch.core.naming import MD_SUFFIX as MD_SUFFIX
from ocrwatch.core.naming import NAME_MAX as NAME_MAX
from ocrwatch.core.naming import PDF_SUFFIX as PDF_SUFFIX
from ocrwatch.core.naming import TXT_SUFFIX as TXT_SUFFIX
from ocrwatch.core.naming import choose_stem as choose_stem
from ocrwatch.core.naming import fitting as fitting
from ocrwatch.core.naming import pdf_path as pdf_path
from ocrwatch.core.naming import sidecar_paths as sidecar_paths
from ocrwatch.fs.fsmove import RETIRING_PREFIX, TEMP_PREFIX, move_no_replace, temp_in
from ocrwatch.fs.private import sidecar_mode
from ocrwatch.fs.safeopen import open_dir_beneath
from ocrwatch.results.formats import OUTPUTS, paths, plain, rendered
from ocrwatch.results.textout import render_markdown as render_markdown
from ocrwatch.results.textout import render_text as render_text

# An extended attribute on each sidecar saying that ocrwatch wrote it, for which content
# and how it was read: an index lost while nothing watched is rebuilt from these, and
# the file is not read again beside a second pair. Where the file system keeps no
# extended attributes, sidecars go unmarked (and are then read again in that case).
MARK_ATTR = "user.ocrwatch"

log = logging.getLogger(__name__)


def sidecar_mark(original: Path, sha256: str, engine: str, read_with: str | None) -> bytes:
    """The mark for the sidecars of ``original``: its name (``scan.png``, not the
    ``scan.pdf`` beside it), its content, and how it was read."""
    return json.dumps({"name": os.fsdecode(original.name), "sha256": sha256,
                       "engine": engine, "read_with": read_with},
                      separators=(",", ":")).encode()


def _marked(mark: bytes, data: bytes) -> bytes:
    """``mark`` for one file, with the SHA-256 of the bytes written (``content``): a file
    whose bytes no longer match was changed by someone else (an edit saved in place keeps
    the extended attribute, so the mark alone cannot tell)."""
    fields = json.loads(mark)
    fields["content"] = hashlib.sha256(data).hexdigest()
    return json.dumps(fields, separators=(",", ":")).encode()


def read_mark(path: Path) -> dict[str, str | None] | None:
    """The mark ocrwatch put on a sidecar it wrote, or None (not ours, or unmarked)."""
    try:
        data = json.loads(os.getxattr(path, MARK_ATTR, follow_symlinks=False))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("sha256"), str):
        return None
    return {k: v if isinstance(v, str) else None for k, v in data.items()}


def _open_folder(folder: Path, root: Path | None) -> int:
    """A handle on ``folder``, made if missing; with ``root``, no link followed below it."""
    if root is None:
        folder.mkdir(parents=True, exist_ok=True)
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    return open_dir_beneath(root, folder, create=True)


def _write_temp(dirfd: int, path: Path, content: str, mode: int,
                mark: bytes | None = None) -> str:
    """``content`` in a synced temporary file in ``dirfd``, ready to be renamed over
    ``path``; returns its name in that folder.

    The temporary name carries our PID, so a later start can tell a crash's leftover
    from a file another ocrwatch process (``ocrwatch add``) is writing right now.
    """
    while True:
        name = f"{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600, dir_fd=dirfd)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(content)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            if mark is not None:
                with contextlib.suppress(OSError):  # no extended attributes there
                    os.setxattr(fh.fileno(), MARK_ATTR,
                                _marked(mark, content.encode("utf-8")))
            os.fsync(fh.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dirfd)
        raise
    return name


def write_atomic(path: Path, content: str, *, root: Path | None = None,
                 mode: int | None = None) -> None:
    """Write to a temporary file in the same folder, fsync, then rename into place.

    A reader sees the old file or the new one, never half of either. On a full disk
    nothing is left behind and a TransientError asks for a retry.
    """
    write_all_atomic([(path, content)], root=root, mode=mode)


def new_temp(path: Path) -> Path:
    """An empty temporary file beside ``path``, for a writer that wants a file name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = temp_in(path.parent)
    os.close(fd)
    return Path(tmp_name)


def write_all_atomic(files: list[tuple[Path, str]],
                     prepared: list[tuple[Path, Path]] | None = None, *,
                     root: Path | None = None, mode: int | None = None,
                     mark: bytes | None = None) -> None:
    """Like :func:`write_atomic` for several files: every one is written before any is
    renamed into place, so a full disk never leaves a new ``.md`` beside an old ``.txt``.
    ``prepared`` holds (temporary file, final path) pairs already written by the caller.

    ``root``: the folder the files must stay under; no symbolic link below it is followed
    (a subfolder swapped for a link to elsewhere gets an InputError, nothing written
    there). ``mode``: the files' mode (default: 0666 masked by the umask). ``mark``: the
    value of :data:`MARK_ATTR` on each of ``files``.
    """
    mode = sidecar_mode(0o666) if mode is None else mode
    temps: list[tuple[int, str, Path]] = []
    folders: dict[Path, int] = {}

    def folder_of(path: Path) -> int:
        if path.parent not in folders:
            folders[path.parent] = _open_folder(path.parent, root)
        return folders[path.parent]

    current = files[0][0] if files else Path()
    try:
        for ready, path in prepared or []:
            current = path
            dirfd = folder_of(path)
            fd = os.open(ready.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
            try:
                os.fchmod(fd, mode)
                if mark is not None:
                    with contextlib.suppress(OSError):
                        os.setxattr(fd, MARK_ATTR, _marked(mark, _read_all(fd)))
                os.fsync(fd)  # on disk before its name is: never an empty PDF after a crash
            finally:
                os.close(fd)
            temps.append((dirfd, ready.name, path))
        for path, content in files:
            current = path
            dirfd = folder_of(path)
            temps.append((dirfd, _write_temp(dirfd, path, content, mode, mark), path))
        for dirfd, name, path in temps:
            current = path
            # Replaces the name itself: a link planted at ``path`` is replaced, not followed.
            os.replace(name, path.name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
        temps.clear()
    except BaseException as exc:
        for dirfd, name, _ in temps:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dirfd)
        for tmp_path, _ in prepared or []:
            with contextlib.suppress(OSError):
                tmp_path.unlink()
        if isinstance(exc, OSError):
            raise os_reason(exc, Doing.WRITE, path=current) from exc
        raise
    finally:
        for fd in folders.values():
            os.close(fd)


def _read_all(fd: int) -> bytes:
    with os.fdopen(os.dup(fd), "rb") as fh:
        return fh.read()


def changed_since_written(path: Path, written: Callable[[], list[PageText]]) -> bool:
    """Whether ``path`` is there and holds something other than what ocrwatch wrote there:
    the user's corrections, saved in place or atomically, or a file of their own.

    ocrwatch's own sidecar carries the SHA-256 of its bytes in its mark; one without
    that mark (written before it existed, or where extended attributes are not kept) is
    compared with what ocrwatch wrote from the stored pages (``written``). A link, a
    folder, or a file that cannot be read at that name is not ocrwatch's either.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return os.path.lexists(path)  # a link (ELOOP) or a file we may not read
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return True
        data = _read_all(fd)
    finally:
        os.close(fd)
    mark = read_mark(path)
    if mark is not None and mark.get("content"):
        return hashlib.sha256(data).hexdigest() != mark["content"]
    if path.name.endswith(MD_SUFFIX) or path.name.endswith(TXT_SUFFIX):
        pages = written()
        if pages:
            render = render_markdown if path.name.endswith(MD_SUFFIX) else render_text
            return data != render(pages).encode("utf-8")
    return False  # nothing to tell it by: taken as ocrwatch's, as it always was


class UserEdits:
    """Which of a file's earlier sidecars someone else changed (:func:`changed_since_written`),
    asked by the queue while it names the new ones (``JobFiles.name_sidecars``); those stay
    as they are, the new reading goes beside them, and :meth:`tell` logs where."""

    def __init__(self, written: Callable[[], list[PageText]]) -> None:
        self._written = written
        self._pages: list[PageText] | None = None
        self.found: list[Path] = []

    def _stored(self) -> list[PageText]:
        if self._pages is None:
            self._pages = self._written()
        return self._pages

    def __call__(self, path: Path) -> bool:
        if changed_since_written(path, self._stored):
            self.found.append(path)
            return True
        return False

    def tell(self, display: str, stem: Path, outputs: tuple[str, ...]) -> None:
        if not self.found:
            return
        new = list(paths(stem, outputs).values())
        for path in self.found:
            log.warning("%s was changed since ocrwatch wrote it: it is kept as it is; the "
                        "new reading of %s goes to %s", path, display,
                        " and ".join(str(p) for p in new))


def write_sidecars(stem: Path, pages: list[PageText], outputs: tuple[str, ...] = ("md", "txt"),
                   prepared: list[tuple[Path, Path]] | None = None, *,
                   root: Path | None = None, original_mode: int | None = None,
                   mark: bytes | None = None, name: str = "") -> tuple[Path | None, Path | None]:
    """Write the outputs rendered from the pages (``STEM.md``, ``STEM.txt``, ``STEM.hocr``,
    ``STEM.alto.xml``: those in ``outputs``, :mod:`ocrwatch.results.formats`) with the
    ``prepared`` files, all or none; returns the paths of the ``.md`` and ``.txt`` written.

    Their mode is at most the original's (``original_mode``), masked by 0666 and the
    umask: the text of a private scan stays private. ``root``, ``mark``: see
    write_all_atomic. ``name``: the original's file name, named in hOCR and ALTO.
    """
    md, txt = sidecar_paths(stem)
    files = rendered(stem, pages, outputs, name)
    write_all_atomic(files, prepared, root=root, mode=sidecar_mode(original_mode), mark=mark)
    return (md if "md" in outputs else None), (txt if "txt" in outputs else None)


def remove_stale_temps(folders: list[Path]) -> int:
    """Delete temporary files (sidecars, copies between file systems: ``.ocrwatch-PID-*.tmp``)
    left by an ocrwatch process that died mid-write.

    Returns how many were removed. Files of live processes are left alone.
    """
    removed = 0
    for root in folders:
        for folder, _dirs, names in os.walk(root):
            for name in names:
                if not (name.startswith(TEMP_PREFIX) and name.endswith(".tmp")):
                    continue
                if name.startswith(RETIRING_PREFIX):
                    continue  # an original (``x.tmp``) being retired: put back, never removed
                pid_text = name[len(TEMP_PREFIX):].split("-", 1)[0]
                if pid_text.isdigit() and _alive(int(pid_text)):
                    continue
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, name))
                    removed += 1
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: not ours to judge
    return True


def remove_if_ours(outputs: Mapping[str, Path], pages: list[PageText]) -> list[Path]:
    """Delete the outputs rendered from the text alone (.md, .txt: :func:`ocrwatch.results.
    formats.plain`) that still hold exactly what ocrwatch wrote; returns those deleted.

    An output the user edited (or replaced with a file of their own) is kept.
    """
    removed: list[Path] = []
    for name, path in outputs.items():
        render = OUTPUTS[name].render if plain(name) else None
        if render is None or not pages:
            continue
        try:
            if path.is_symlink() or path.read_text(encoding="utf-8") != render(pages, ""):
                continue
            path.unlink()
        except (OSError, UnicodeDecodeError):
            continue
        removed.append(path)
    return removed


def move_without_overwriting(src: Path, dest: Path) -> bool:
    """Rename ``src`` to ``dest`` unless ``dest`` exists; False when nothing was moved.

    The kernel refuses to replace (:func:`ocrwatch.fs.fsmove.move_no_replace`), so a file
    appearing at ``dest`` meanwhile is never overwritten, on any file system.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        move_no_replace(src, dest)
    except OSError:  # taken (FileExistsError), gone, or not movable: left where it is
        return False
    return True
    with contextlib.suppress(FileNotFoundError):
        os.unlink(src)
    return True
