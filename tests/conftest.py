from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

# The fake engine (ocrwatch/testing/) for this process and every ocrwatch process the
# tests start: set before ocrwatch is imported, so that its engine registry loads it.
os.environ["OCRWATCH_TESTING"] = "1"

from helpers import home_env, use_home
from hermetic import pytest_configure, pytest_sessionfinish  # noqa: F401  (the run's checks)

import ocrwatch.testing  # noqa: F401  (registers the fake engine)

# Variables of the user's own set-up that would reach past the private home.
USER_VARIABLES = ("OCRWATCH_CONFIG", "OCRWATCH_REMOTE_API_KEY")


@pytest.fixture
def long_lived_threads() -> tuple[str, ...]:
    """Names of threads a folder's fixtures keep across tests on purpose (none here)."""
    return ()


@pytest.fixture(autouse=True)
def _no_leaked_threads(long_lived_threads: tuple[str, ...]) -> Iterator[None]:
    """Every test must stop the threads it started (watchdog's own included)."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 10
    while True:
        leaked = [t for t in threading.enumerate()
                  if t not in before and t.is_alive() and t.name not in long_lived_threads]
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not leaked, f"threads left running: {[t.name for t in leaked]}"


@pytest.fixture(autouse=True)
def _private_home(tmp_path_factory: pytest.TempPathFactory,
                  monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test runs with a HOME, cache and XDG folders of its own (``home`` below gives
    a test one it names; either way nothing reaches the real home)."""
    private = tmp_path_factory.mktemp("private-home")
    for key in USER_VARIABLES:
        monkeypatch.delenv(key, raising=False)
    for key, value in home_env(private).items():
        monkeypatch.setenv(key, value)
    return private


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private HOME with its own XDG folders, for this process and its children."""
    return use_home(tmp_path / "home", monkeypatch)


@pytest.fixture
def session_bus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A D-Bus session bus of the test's own (its address also in this process's
    DBUS_SESSION_BUS_ADDRESS); NotificationService in helpers answers on it."""
    if shutil.which("dbus-daemon") is None:
        pytest.skip("dbus-daemon is not installed (apt install dbus-daemon)")
    pytest.importorskip("jeepney")
    socket = tmp_path / "bus"
    proc = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--print-address=1",
                             f"--address=unix:path={socket}"], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        address = proc.stdout.readline().strip()
        monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", address)
        yield address
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
