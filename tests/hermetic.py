"""The test run keeps its hands off the real home.

At start-up (before any fixture, session-scoped ones included) HOME and the XDG folders
point at a throwaway folder for the whole run, and every test gets its own on top of that
(see ``conftest.py``). At the end the folders of the real home that a desktop program or a
browser writes to are listed again; any difference fails the run, naming what changed.

Loaded by ``tests/conftest.py``; ``pytest -p hermetic`` loads it alone (its own test does).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Where a desktop program leaves things: the top of the home, the XDG folders' first
# level, and everything under ocrwatch's own folders and its autostart entries.
XDG = {"XDG_CONFIG_HOME": ".config", "XDG_CACHE_HOME": ".cache",
       "XDG_DATA_HOME": ".local/share", "XDG_STATE_HOME": ".local/state"}
LISTED = [".config", ".cache", ".local", ".local/share", ".local/state", ".local/bin",
          ".config/autostart", ".config/systemd/user"]
WALKED_NAMES = ("ocrwatch",)
WALK_LIMIT = 20_000  # entries per walked folder: enough to see a change, never a long walk

Snapshot = dict[str, tuple[int, int] | None]  # path -> (size, mtime_ns); None for a folder

_state: dict[str, object] = {}


def _entry(path: Path) -> tuple[int, int] | None:
    st = path.lstat()
    return None if path.is_dir() and not path.is_symlink() else (st.st_size, st.st_mtime_ns)


def _folders(home: Path, environ: dict[str, str]) -> list[Path]:
    folders = [home, *(home / name for name in LISTED)]
    folders += [Path(environ[key]) for key in XDG if environ.get(key)]
    return folders


def snapshot(home: Path, environ: dict[str, str]) -> Snapshot:
    """What matters in the real home: listings, and ocrwatch's folders in full."""
    seen: Snapshot = {}
    walk: list[Path] = []
    for folder in _folders(home, environ):
        try:
            children = list(folder.iterdir())
        except OSError:
            continue
        for child in children:
            try:
                seen[str(child)] = _entry(child)
            except OSError:
                continue
            if child.name in WALKED_NAMES and child.is_dir() and not child.is_symlink():
                walk.append(child)
    for top in walk:
        for count, path in enumerate(top.rglob("*")):
            if count >= WALK_LIMIT:
                break
            try:
                seen[str(path)] = _entry(path)
            except OSError:
                continue
    return seen


def differences(before: Snapshot, after: Snapshot) -> list[str]:
    lines = [f"created {p}" for p in sorted(after.keys() - before.keys())]
    lines += [f"removed {p}" for p in sorted(before.keys() - after.keys())]
    # A change counts inside ocrwatch's folders only: a shell's history file changes anyway.
    lines += [f"changed {p}" for p in sorted(before.keys() & after.keys())
              if before[p] != after[p] and before[p] is not None
              and any(part in WALKED_NAMES for part in Path(p).parts)]
    return lines


def private_env(home: Path) -> dict[str, str]:
    run = home / "run"
    run.mkdir(parents=True, exist_ok=True, mode=0o700)
    env = {"HOME": str(home), "XDG_RUNTIME_DIR": str(run)}
    env.update({key: str(home / sub) for key, sub in XDG.items()})
    return env


def pytest_configure(config: pytest.Config) -> None:
    real = Path(os.environ.get("HOME") or Path.home())
    _state["real_home"] = real
    _state["before"] = snapshot(real, dict(os.environ))
    _state["saved"] = {key: os.environ.get(key)
                       for key in ("HOME", "XDG_RUNTIME_DIR", *XDG)}
    session_home = Path(tempfile.mkdtemp(prefix="ocrwatch-test-home-"))
    _state["session_home"] = session_home
    os.environ.update(private_env(session_home))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    saved = _state.get("saved")
    if not isinstance(saved, dict):
        return
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    real = _state["real_home"]
    before = _state["before"]
    assert isinstance(real, Path) and isinstance(before, dict)
    changed = differences(before, snapshot(real, dict(os.environ)))
    session_home = _state["session_home"]
    assert isinstance(session_home, Path)
    shutil.rmtree(session_home, ignore_errors=True)
    if changed:
        shown = "\n  ".join(changed[:40])
        more = f"\n  ... and {len(changed) - 40} more" if len(changed) > 40 else ""
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = f"the tests changed the real home {real}:\n  {shown}{more}"
        if reporter is not None:
            reporter.write_line("ERROR: " + message, red=True)
        else:
            print("ERROR: " + message)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
