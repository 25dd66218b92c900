"""Another program holds the index's write lock (a sqlite3 shell in BEGIN EXCLUSIVE):
``status`` and ``pause`` still answer within seconds, from the daemon's memory.

A real ``ocrwatch run`` and a real ``sqlite3`` shell holding ``BEGIN EXCLUSIVE``; a file
dropped meanwhile makes the daemon wait to write (holding its own connection), which is
what kept status waiting for 30 s and more before.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from .helpers import DaemonProcess, Home, drop, image_bytes, ocrwatch_cli, states, wait_for

HOLD = 45  # seconds the shell holds the lock at most (it is ended sooner)


@pytest.fixture
def locked(home: Home) -> Iterator[Callable[[str], subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []

    def lock(how: str) -> subprocess.Popen[str]:
        shell = shutil.which("sqlite3")
        if shell is None:
            pytest.skip("the sqlite3 shell is not installed (apt install sqlite3)")
        proc = subprocess.Popen([shell, str(home.database)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(f".timeout 20000\n{how}\nSELECT 'locked';\n.shell sleep {HOLD}\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "locked"
        procs.append(proc)
        return proc

    yield lock
    for proc in procs:
        proc.kill()
        proc.wait(timeout=30)


def _timed(home: Home, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    try:
        done = ocrwatch_cli(home, *args, timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"`ocrwatch {' '.join(args)}` gave no answer in 30 s") from None
    return done, time.monotonic() - started


def test_status_and_pause_answer_while_another_program_holds_the_lock(
        home: Home, daemon_process: Callable[..., DaemonProcess],
        locked: Callable[[str], subprocess.Popen[str]]) -> None:
    daemon = daemon_process()
    daemon.start()
    daemon.wait_ready()
    drop(home.inbox / "before.png", image_bytes("before"))
    wait_for(lambda: states(home.database).get("done") == 1, 60, "the first file to be read")
    shell = locked("BEGIN EXCLUSIVE;")
    drop(home.inbox / "during.png", image_bytes("during"))  # the daemon now waits to write
    took: dict[str, float] = {}
    for round_ in range(3):  # again and again while the lock is held
        done, took[f"status {round_}"] = _timed(home, "status", "--json")
        assert done.returncode == 0, done.stderr
        facts = json.loads(done.stdout)
        assert facts["done"] == 1  # read on status's own connection, or from memory
    done, took["pause"] = _timed(home, "pause")
    assert done.returncode == 0, done.stderr
    done, took["status paused"] = _timed(home, "status", "--json")
    assert json.loads(done.stdout)["paused"] is True
    assert max(took.values()) < 10, took
    # The lock is let go: the pause was saved, the file is recorded, counts are fresh.
    shell.kill()
    shell.wait(timeout=30)
    wait_for(lambda: states(home.database).get("queued") == 1, 60, "the file to be queued")
    wait_for(lambda: _setting(home, "paused") == "1", 30, "the pause to be saved")
    done, _ = _timed(home, "resume")
    assert done.returncode == 0, done.stderr
    wait_for(lambda: states(home.database).get("done") == 2, 60, "the file to be read")
    done, _ = _timed(home, "status", "--json")
    assert json.loads(done.stdout)["counts_note"] is None
    assert daemon.stop() == 0
    print(f"\nindex locked by a sqlite3 shell: answers in {took}")


def _setting(home: Home, key: str) -> str | None:
    from .helpers import connect_ro

    conn = connect_ro(home.database)
    try:
        row = conn.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])
    finally:
        conn.close()


def test_status_answers_from_memory_when_the_index_cannot_be_read(
        home: Home, locked: Callable[[str], subprocess.Popen[str]]) -> None:
    """An index in rollback-journal mode (as another tool may leave it) held in BEGIN
    EXCLUSIVE by a sqlite3 shell keeps readers out too: the counts come from memory, with
    a note that says so, within the reader's short wait."""
    import sqlite3

    from ocrwatch.store.db import Database
    from ocrwatch.store.status_facts import WAIT_SECONDS, StatusReader

    Database(home.database).close()
    conn = sqlite3.connect(home.database)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    reader = StatusReader(home.database)
    try:
        fresh, note = reader.read(0.0)
        assert note is None and fresh.read_at is not None
        locked("BEGIN EXCLUSIVE; UPDATE settings SET value = value;")
        started = time.monotonic()
        kept, note = reader.read(0.0)
        assert time.monotonic() - started < WAIT_SECONDS * 3 + 1
        assert kept == fresh
        assert note is not None and "lock" in note and "counts as of" in note
    finally:
        reader.close()
