"""The settler records the files that settle together before the preparers claim any
(Scheduler.intake): recording stays at its own speed, not the preparers' (the interpreter's
lock they hold), and no preparer waits longer than INTAKE_HOLD_S for it."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import make_config, text_page, wait_for

from ocrwatch import scheduler
from ocrwatch.daemon import Daemon
from ocrwatch.engines.base import ReadPolicy
from ocrwatch.testing.fake import FakeEngine


def drop(folder: Path, name: str) -> Path:
    path = folder / name
    text_page([f"the file {name}"]).save(path)
    return path


def state(daemon: Daemon, path: Path) -> str | None:
    job = daemon.jobs.known(path)
    return None if job is None else str(job.state.value)


def test_no_file_is_claimed_while_the_settler_records_its_look(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    folder = config.inbox[0]
    folder.mkdir(parents=True)
    engine = FakeEngine(policy=ReadPolicy(concurrency=2, preparers=3))
    with Daemon(config, engine=engine, watch=False) as daemon:
        first = drop(folder, "a.png")
        with daemon.scheduler.intake():
            daemon.consider(first)  # wakes the preparers, as ``ocrwatch add`` does
            # Each woken preparer finds the settler recording and waits at the gate.
            wait_for(lambda: daemon.scheduler._gated >= 1, 10, "a preparer held at the gate")
            assert state(daemon, first) == "queued"
            second = drop(folder, "b.png")
            daemon.consider(second)
            assert state(daemon, second) == "queued"
        wait_for(lambda: state(daemon, first) == state(daemon, second) == "done", 30,
                 "both files read once the look was recorded")


def test_a_long_look_holds_no_preparer_longer_than_the_hold(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduler, "INTAKE_HOLD_S", 0.3)
    config = make_config(tmp_path)
    folder = config.inbox[0]
    folder.mkdir(parents=True)
    with Daemon(config, engine=FakeEngine(), watch=False) as daemon:
        path = drop(folder, "a.png")
        with daemon.scheduler.intake():  # a look that takes long (a large file hashed)
            daemon.consider(path)
            wait_for(lambda: state(daemon, path) == "done", 30,
                     "the file read while the look still ran")
