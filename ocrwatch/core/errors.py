"""One exception tree for the whole program.

Every message says what happened and what the user can do about it. The CLI maps
each class to an exit code; the daemon records a job's failure reason from it.
"""

from __future__ import annotations


class OcrwatchError(Exception):
    """Base of every error ocrwatch raises on purpose."""

    exit_code = 1


class ConfigError(OcrwatchError):
    """The configuration file, a flag or an environment variable is invalid."""

    exit_code = 2


class InputError(OcrwatchError):
    """A file cannot be read as pages (corrupt, encrypted, too large...).

    Permanent for that content: the job fails with this message as its reason.
    """


class OverBudget(InputError):
    """Preparing a page took more time or memory than its budget (``prepare_seconds``,
    ``prepare_memory_mb``): the file fails, the others go on."""


class TransientError(OcrwatchError):
    """Something that may work later (disk full, file busy): retried with backoff."""


class EngineError(OcrwatchError):
    """The OCR engine failed on a batch."""


class EngineUnavailable(EngineError):
    """The configured engine cannot start on this machine (missing package, no GPU...)."""

    exit_code = 3


class WorkerGone(EngineError):
    """The vLLM worker process ended (crash, out of memory, killed) or stopped answering.

    The engine reads its pages again in a fresh worker; the message says how it ended.
    """


class DaemonRunning(OcrwatchError):
    """Another ocrwatch daemon already runs for this user."""

    exit_code = 4


class DaemonNotRunning(OcrwatchError):
    """A control command found no running daemon."""

    exit_code = 5


class SearchError(OcrwatchError):
    """A search query could not be understood."""

    exit_code = 2


class SearchTimeout(SearchError):
    """A search ran past its time bound and was stopped."""


class IndexDamaged(OcrwatchError):
    """The index file is damaged (SQLite found a malformed page)."""
