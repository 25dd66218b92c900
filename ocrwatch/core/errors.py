"""One exception tree for the whole program, and the one place that says what an OS error
or an out-of-memory error means.

Every message says what happened and what the user can do about it. The CLI maps
each class to an exit code (``exit_code``); the daemon records a job's failure reason from
it. Every error also carries a :class:`Kind`, what it means for what happens next:

- ``USAGE``: the user asked for something that cannot be done (a flag, a config value, a
  command given to the wrong daemon): nothing is retried, the message says what to change.
- ``INPUT``: this file cannot be read as pages: the job fails for good, the others go on.
- ``TRANSIENT``: may work later (a full disk, a busy index, descriptors run out): retried.
- ``ENGINE``: the OCR engine failed on a page or a batch.
- ``MACHINE``: this machine lacks something ocrwatch needs (a GPU, a program, a private
  folder, a display, a writable file).
- ``DAEMON``: about the running daemon and the control socket that reaches it.
- ``STATE``: a part was used out of order (closed, stopping, started twice).
- ``DAMAGED``: a file ocrwatch keeps (the index) is damaged.

A class states its kind in its first line (``class InputError(OcrwatchError,
kind=Kind.INPUT)``); a subclass inherits it unless it says otherwise.

:func:`os_reason` maps an ``OSError`` to the error (with its reason) that the program
raises or records; :func:`is_out_of_memory` recognises running out of memory by type.
SQLite's errors are read in one place too, :func:`ocrwatch.store.db.sqlite_problem` (the
store owns SQLite).
"""

from __future__ import annotations

import enum
import errno
from pathlib import Path
from typing import Any, ClassVar


class Kind(enum.Enum):
    """What an error means for what happens next (see the module's docstring)."""

    USAGE = "usage"
    INPUT = "input"
    TRANSIENT = "transient"
    ENGINE = "engine"
    MACHINE = "machine"
    DAEMON = "daemon"
    STATE = "state"
    DAMAGED = "damaged"


class OcrwatchError(Exception):
    """Base of every error ocrwatch raises on purpose; raise a subclass that fits."""

    exit_code = 1
    kind: ClassVar[Kind] = Kind.USAGE

    def __init_subclass__(cls, *, kind: Kind | None = None, **rest: Any) -> None:
        # ``class InputError(OcrwatchError, kind=Kind.INPUT)``: the kind in the class's
        # first line; a subclass that names none keeps its base's.
        super().__init_subclass__(**rest)
        if kind is not None:
            cls.kind = kind


class ConfigError(OcrwatchError):
    """The configuration file, a flag or an environment variable is invalid."""

    exit_code = 2


class UsageError(OcrwatchError):
    """A command was asked for something it cannot do (no file named, a wrong value, a
    file that does not exist)."""


class ArgumentError(UsageError):
    """The command line is wrong in itself: an argument missing, a value out of range, an
    unknown command. Exit status 2, as argparse's own errors, whose form it takes (the
    command's usage, then the message): 1 would read as "no hits" or "failed"."""

    exit_code = 2


class InputError(OcrwatchError, kind=Kind.INPUT):
    """A file cannot be read as pages (corrupt, encrypted, too large...).

    Permanent for that content: the job fails with this message as its reason.
    """


class OverBudget(InputError):
    """Preparing a page took more time or memory than its budget (``prepare_seconds``,
    ``prepare_memory_mb``): the file fails, the others go on."""


class TransientError(OcrwatchError, kind=Kind.TRANSIENT):
    """Something that may work later (disk full, file busy): retried with backoff."""


class EngineError(OcrwatchError, kind=Kind.ENGINE):
    """The OCR engine failed on a batch."""


class EngineUnavailable(EngineError, kind=Kind.MACHINE):
    """The configured engine cannot start on this machine (missing package, no GPU...)."""

    exit_code = 3


class MachineError(OcrwatchError, kind=Kind.MACHINE):
    """This machine lacks something ocrwatch needs: a program, a template, a private
    folder, a display, a file or socket it may write."""


class IndexUnavailable(MachineError):
    """The index file is missing, not a file, or not readable or writable for this user."""


class StateError(OcrwatchError, kind=Kind.STATE):
    """A part was used out of order: closed, stopping, or started twice."""


class DaemonError(OcrwatchError, kind=Kind.DAEMON):
    """The daemon could not be reached, did not answer, or refused a command."""


class WorkerGone(EngineError):
    """The vLLM worker process ended (crash, out of memory, killed) or stopped answering.

    The engine reads its pages again in a fresh worker; the message says how it ended.
    """


class DaemonRunning(DaemonError):
    """Another ocrwatch daemon already runs for this user."""

    exit_code = 4


class DaemonNotRunning(DaemonError):
    """A control command found no running daemon."""

    exit_code = 5


class SearchError(OcrwatchError):
    """A search query could not be understood."""

    exit_code = 2


class SearchTimeout(SearchError, kind=Kind.TRANSIENT):
    """A search ran past its time bound and was stopped."""


class IndexDamaged(OcrwatchError, kind=Kind.DAMAGED):
    """The index file is damaged (SQLite found a malformed page)."""


# -- what an OS error means -------------------------------------------------------------

# Out of descriptors or memory for a moment (another program, a flood of connections):
# the file is not at fault, so it is tried again later, never failed for good.
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS,
                             errno.EAGAIN})
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# Reading a file that fails with these may work later: the file itself is not at fault.
_READ_AGAIN_ERRNOS = RESOURCE_ERRNOS | {errno.ENOSPC, errno.EBUSY, errno.EIO}
_DENIED_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})

DELETED_BEFORE_READ = "the file was deleted before it could be read"
UNREADABLE = ("permission denied: ocrwatch cannot read this file; make it readable "
              "(chmod u+r) and run `ocrwatch retry` on it")


class Doing(enum.Enum):
    """What ocrwatch was doing when an OS error came: it decides the reason's words."""

    OPEN = "open"  # opening a file to read (the inbox's or a named one)
    READ = "read"  # reading a file's bytes to learn its type and pages
    DECODE = "decode"  # a decoder opening or reading the file (``verb``: open, read)
    WRITE = "write"  # writing a sidecar
    MOVE = "move"  # archiving or deleting an original


def resource_shortage(exc: BaseException) -> bool:
    """Whether ``exc`` says descriptors or memory ran out for a moment."""
    return isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS


def is_disk_full_os(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


def os_reason(exc: OSError, doing: Doing, *, name: str = "", path: Path | None = None,
              verb: str = "") -> OcrwatchError:
    """The error, with a reason that says what to do, for ``exc`` met while ``doing``.

    ``name``: the file's name in a reason that names it (OPEN); ``path``: the file written
    (WRITE); ``verb``: what the decoder did (DECODE: "open" or "read"). The class says what
    happens next: TransientError is tried again later, InputError fails the file. For MOVE
    only the reason is used (the caller decides what happens).
    """
    if doing is Doing.WRITE:
        path = path or Path(exc.filename or "the file")
        name = path.name
        if exc.errno in DISK_FULL_ERRNOS:
            return TransientError(
                f"the disk is full: could not write {name}; will retry when there is space")
        if exc.errno in _DENIED_ERRNOS:
            return InputError(
                f"cannot write {path}: {exc.strerror}; make the folder writable or set "
                "output_dir in the config, then `ocrwatch retry`")
        if exc.errno == errno.ENAMETOOLONG:
            return InputError(
                f"the sidecar name for {name[:40]}… is too long for the file system; "
                "set output_dir or shorten the file name")
        return TransientError(f"could not write {name}: {exc.strerror}")
    if doing is Doing.MOVE:
        if exc.errno == errno.ENOSPC:
            return TransientError(
                "the disk is full; free some space: it is tried again at the next start "
                "(`ocrwatch stop`, then `ocrwatch run`)")
        where = f" ({exc.filename})" if exc.filename else ""
        return InputError(f"{exc.strerror or exc}{where}")
    if doing in (Doing.OPEN, Doing.READ):
        if isinstance(exc, FileNotFoundError):
            return InputError(DELETED_BEFORE_READ)
        if isinstance(exc, PermissionError):
            return InputError(UNREADABLE)
        if doing is Doing.OPEN:
            if resource_shortage(exc):
                return TransientError(
                    f"cannot open {name or 'the file'} now: {exc.strerror}; will try again")
            return InputError(f"cannot open the file: {exc.strerror or exc}")
        if isinstance(exc, IsADirectoryError):
            return InputError("this is a folder, not a file")
        verb = "read"
    if exc.errno in _READ_AGAIN_ERRNOS:
        return TransientError(f"could not {verb} the file: {exc.strerror}; will try again")
    return InputError(f"could not {verb} the file: {exc.strerror or exc}")


# -- out of memory ----------------------------------------------------------------------

# torch.cuda.OutOfMemoryError (torch.OutOfMemoryError in newer torch), named rather than
# imported: the code that meets it must not need torch.
_OOM_CLASS_NAMES = frozenset({"OutOfMemoryError"})


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is running out of memory (host or GPU), recognised by its type.

    The text is looked at only for a RuntimeError: CUDA's allocator raised that
    ("CUDA out of memory") before torch gave it a class of its own, and vLLM still passes
    some on so.
    """
    if isinstance(exc, MemoryError):
        return True
    if any(cls.__name__ in _OOM_CLASS_NAMES for cls in type(exc).__mro__):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()
