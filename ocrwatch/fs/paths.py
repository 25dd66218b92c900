"""Where ocrwatch keeps things, per platform (platformdirs)."""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

import platformdirs

from ocrwatch.core.errors import MachineError

APP = "ocrwatch"


def default_inbox() -> Path:
    return Path.home() / "OCR-Inbox"


def config_dir() -> Path:
    return Path(platformdirs.user_config_dir(APP))


def config_file() -> Path:
    return config_dir() / "config.toml"


def data_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP))


def default_database() -> Path:
    return data_dir() / "ocrwatch.sqlite3"


def cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir(APP))


def log_dir() -> Path:
    return Path(platformdirs.user_log_dir(APP))


def log_file() -> Path:
    """The daemon's log, wherever its config says anything else (``ocrwatch status``
    names it)."""
    return log_dir() / "ocrwatch.log"


def _private(path: Path) -> Path:
    """``path`` as a folder of this user's alone (0700), made if missing; OSError if not."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = path.lstat()
    if info.st_uid != os.getuid() or not stat.S_ISDIR(info.st_mode):
        raise PermissionError(f"{path} is not a folder of your own")
    os.chmod(path, 0o700)
    return path


def runtime_dir() -> Path:
    """A folder only this user can enter, for the control socket and the lock.

    ``$XDG_RUNTIME_DIR/ocrwatch`` in a session. Without one (su, ssh, cron), platformdirs
    offers ``/run/user/UID`` or ``/tmp/runtime-UID``; where another user has taken the
    latter (or made it a symlink), a folder in this user's state folder serves instead,
    so that nobody else can keep ocrwatch from starting.
    """
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base:
        candidates = [Path(base) / APP]
    else:
        candidates = []
        try:
            with warnings.catch_warnings():
                # Without a session's runtime folder platformdirs falls back to /tmp and
                # warns; the 0700 folder keeps the socket private all the same. It refuses
                # a fallback folder that another user owns (PermissionError).
                warnings.simplefilter("ignore")
                candidates.append(Path(platformdirs.user_runtime_dir(APP)))
        except OSError:
            pass
        candidates.append(Path(platformdirs.user_state_dir(APP)) / "run")
    problems = []
    for path in candidates:
        try:
            return _private(path)
        except OSError as exc:
            problems.append(str(exc))
    raise MachineError(
        f"no private runtime folder for the control socket ({'; '.join(problems)}). Set "
        "XDG_RUNTIME_DIR to a folder that only you own (mode 0700), as a desktop session "
        "does, e.g. `export XDG_RUNTIME_DIR=/run/user/$(id -u)`."
    )


def control_socket() -> Path:
    return runtime_dir() / "control.sock"


def lock_file() -> Path:
    return runtime_dir() / "daemon.lock"
