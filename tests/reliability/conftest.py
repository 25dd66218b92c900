"""Fixtures of the reliability tests: isolated users, daemons in-process and as processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from ocrwatch.config import Config
from ocrwatch.core.domain import Page, PageText
from ocrwatch.daemon import Daemon
from ocrwatch.testing.fake import FakeEngine
from ocrwatch.web.server import for_daemon

from .helpers import DaemonProcess, Home


class RecordingEngine(FakeEngine):
    """The fake engine, remembering every page it read (file name, page, file bytes then)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.read: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def recognize(self, pages: Sequence[Page]) -> list[PageText]:
        with self.lock:
            self.read += [(p.source.name, p.index) for p in pages]
        return super().recognize(pages)

    def reads_of(self, name: str) -> int:
        with self.lock:
            return sum(1 for n, i in self.read if n == name and i == 0)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Home]:
    h = Home.make(tmp_path)
    yield h
    h.cleanup()


@pytest.fixture
def daemon_process(home: Home) -> Iterator[Callable[..., DaemonProcess]]:
    """Make ``ocrwatch run`` processes; every one is killed at teardown."""
    made: list[DaemonProcess] = []

    def make(*args: str, **env: str) -> DaemonProcess:
        proc = DaemonProcess(home, *args, **env)
        made.append(proc)
        return proc

    yield make
    for proc in made:
        proc.close()


def base_config(home: Home, **overrides: Any) -> Config:
    config = Config(inbox=[home.inbox], database=home.database, engine="fake",
                    settle_seconds=0.3, rescan_minutes=5.0)
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


StartDaemon = Callable[..., tuple[Daemon, RecordingEngine]]  # the run_daemon fixture


@pytest.fixture
def run_daemon(home: Home) -> Iterator[StartDaemon]:
    """Start an in-process daemon with the recording fake engine; closed at teardown."""
    started: list[Daemon] = []

    def start(engine: RecordingEngine | None = None, watch: bool = True,
              **overrides: Any) -> tuple[Daemon, RecordingEngine]:
        engine = engine or RecordingEngine()
        daemon = Daemon(base_config(home, **overrides), engine=engine, watch=watch,
                        search_page=for_daemon)  # as `ocrwatch run` makes it
        started.append(daemon)
        daemon.start()
        return daemon, engine

    before = {t.ident for t in threading.enumerate()}
    yield start
    for daemon in started:
        daemon.close()
    leaked = [t.name for t in threading.enumerate()
              if t.ident not in before and t.is_alive() and t.name.startswith("ocrwatch")]
    assert not leaked, f"threads left running: {leaked}"


# chmod 000 does not stop root: root reads any file through CAP_DAC_OVERRIDE and
# CAP_DAC_READ_SEARCH. The daemon runs without those two capabilities instead, so it meets
# the permission check an ordinary user meets (it stays uid 0 and can still reach the
# Python install, which user nobody often cannot).
NO_DAC = ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
          "--bounding-set=-dac_override,-dac_read_search", "--"]


@pytest.fixture
def without_dac(tmp_path: Path) -> list[str]:
    if os.geteuid() != 0:
        return []  # an ordinary user: chmod 000 stops it as it is
    probe_file = tmp_path / "probe"
    probe_file.write_text("secret")
    probe_file.chmod(0)
    if shutil.which("setpriv") is None:
        reason = "running as root without setpriv: chmod 000 cannot be tested"
        print(reason)
        pytest.skip(reason)
    probe = subprocess.run([*NO_DAC, sys.executable, "-c",
                            f"open({str(probe_file)!r}).read()"],
                           capture_output=True, text=True, timeout=60)
    if "PermissionError" not in probe.stderr:
        reason = f"could not drop root's file capabilities: {probe.stderr[-300:]}"
        print(reason)
        pytest.skip(reason)
    return NO_DAC
