"""Where ocrwatch keeps things, per platform (platformdirs)."""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

import platformdirs

from ocrwatch.errors import OcrwatchError

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


def runtime_dir() -> Path:
    """A folder only this user can enter, for the control socket and the lock."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    try:
        if base:
            path = Path(base) / APP
        else:
            with warnings.catch_warnings():
                # Without a session's runtime folder platformdirs falls back to /tmp and
                # warns; the 0700 folder below keeps the socket private all the same.
                # It refuses a fallback folder that another user owns (PermissionError).
                warnings.simplefilter("ignore")
                path = Path(platformdirs.user_runtime_dir(APP))
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = path.lstat()
        if info.st_uid != os.getuid() or not stat.S_ISDIR(info.st_mode):
            raise PermissionError(f"{path} is not a folder of your own")
        os.chmod(path, 0o700)
    except OSError as exc:
        raise OcrwatchError(
            f"no private runtime folder for the control socket: {exc}. Set XDG_RUNTIME_DIR "
            "to a folder that only you own (mode 0700), as a desktop session does, e.g. "
            "`export XDG_RUNTIME_DIR=/run/user/$(id -u)`."
        ) from None
    return path


def control_socket() -> Path:
    return runtime_dir() / "control.sock"


def lock_file() -> Path:
    return runtime_dir() / "daemon.lock"
