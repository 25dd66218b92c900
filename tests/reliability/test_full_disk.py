"""A full disk while writing sidecars or the index: nothing partial, retried, done once.

The error is injected where the write happens (always runs), and produced for real on a
small tmpfs mounted by the test (runs as root; skipped with the reason otherwise).
Transient errors are retried with backoff; permanent ones fail at once with a reason.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from ocrwatch import outcome

from .conftest import StartDaemon
from .helpers import Home, check_fake_sidecars, drop, ended, image_bytes, job, wait_for


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ocrwatch.store.jobs.BACKOFF_BASE", 0.3)


class Switch:
    def __init__(self) -> None:
        self.on = threading.Event()
        self.hits = 0


@pytest.fixture
def full_on_fsync(monkeypatch: pytest.MonkeyPatch) -> Switch:
    """While on, syncing a sidecar fails with ENOSPC (the disk filled mid-write)."""
    switch = Switch()
    real = os.fsync

    def fsync(fd: int) -> None:
        if switch.on.is_set():
            switch.hits += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)  # the one sidecar.py calls
    return switch


def _no_partial_sidecars(folder: Path) -> None:
    names = sorted(p.name for p in folder.iterdir())
    assert not [n for n in names if n.endswith((".md", ".txt")) or n.startswith(".ocrwatch-")], \
        names


def _deferred(home: Home, path: Path, words: str) -> Any:
    def check() -> Any:
        row = job(home.database, path)
        return row if row is not None and row["attempts"] >= 1 else None
    row = wait_for(check, 30, f"{path.name} to be put off")
    assert row["state"] in ("queued", "running"), row["state"]
    assert words in (row["reason"] or ""), row["reason"]
    return row


def test_sidecar_enospc_injected(home: Home, run_daemon: StartDaemon,
                                 full_on_fsync: Switch) -> None:
    full_on_fsync.on.set()
    _daemon, _engine = run_daemon()
    scan = drop(home.inbox / "scan.png", image_bytes("full disk"))
    _deferred(home, scan, "disk is full")
    wait_for(lambda: full_on_fsync.hits >= 2, 30, "a second try (backoff)")
    _no_partial_sidecars(home.inbox.parent / "inbox")
    assert ended(home.database, scan) is None
    full_on_fsync.on.clear()  # space returns
    row = wait_for(lambda: ended(home.database, scan), 30, "the scan to be read")
    assert row["state"] == "done", row["reason"]
    check_fake_sidecars(scan, 1)
    assert row["reason"] is None


class FullIndex:
    """A connection stand-in: while ``full``, writing page text fails like SQLITE_FULL,
    after SQLite has rolled the transaction back on its own (as it may for that error)."""

    def __init__(self, real: sqlite3.Connection,
                 message: str = "database or disk is full") -> None:
        self.real = real
        self.message = message
        self.full = threading.Event()
        self.hits = 0

    def execute(self, sql: str, *args: Any) -> Any:
        self._check(sql)
        return self.real.execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:
        self._check(sql)
        return self.real.executemany(sql, *args)

    def _check(self, sql: str) -> None:
        if self.full.is_set() and sql.lstrip().upper().startswith("INSERT INTO PAGES"):
            self.hits += 1
            self.real.execute("ROLLBACK")
            raise sqlite3.OperationalError(self.message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_index_full_injected(home: Home, run_daemon: StartDaemon) -> None:
    daemon, _engine = run_daemon(watch=False)
    proxy = FullIndex(daemon.db.conn)
    daemon.db.conn = proxy  # type: ignore[assignment]
    proxy.full.set()
    scan = drop(home.inbox / "scan.png", image_bytes("full index"))
    daemon.consider(scan)
    _deferred(home, scan, "disk holding the index is full")
    wait_for(lambda: proxy.hits >= 2, 30, "a second try (backoff)")
    assert ended(home.database, scan) is None
    proxy.full.clear()
    row = wait_for(lambda: ended(home.database, scan), 30, "the scan to be read")
    assert row["state"] == "done", row["reason"]
    check_fake_sidecars(scan, 1)
    conn = sqlite3.connect(home.database)
    try:
        assert conn.execute("SELECT COUNT(*) FROM pages").fetchone()[0] == 1
    finally:
        conn.close()


def test_busy_index_is_retried(home: Home, run_daemon: StartDaemon) -> None:
    """Another process holding the index past the busy timeout: retried, not failed."""
    daemon, _engine = run_daemon(watch=False)
    proxy = FullIndex(daemon.db.conn, "database is locked")
    daemon.db.conn = proxy  # type: ignore[assignment]
    proxy.full.set()
    scan = drop(home.inbox / "scan.png", image_bytes("busy index"))
    daemon.consider(scan)
    _deferred(home, scan, "the index was busy")
    proxy.full.clear()
    row = wait_for(lambda: ended(home.database, scan), 30, "the scan to be read")
    assert row["state"] == "done", row["reason"]


def test_reader_outlives_an_error_while_recording(home: Home, run_daemon: StartDaemon,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Even when recording a file's outcome fails twice over, the next file is read."""
    daemon, _engine = run_daemon(watch=False)
    real_publish, real_defer = outcome.publish, daemon.jobs.defer

    def publish(ctx: Any, job: Any, *args: Any) -> Any:
        if job.path.name == "first.png":
            raise RuntimeError("simulated failure while saving")
        return real_publish(ctx, job, *args)

    def defer(job_id: int, *args: Any) -> bool:
        first_job = daemon.jobs.known(home.inbox / "first.png")
        if first_job is not None and first_job.id == job_id:
            raise RuntimeError("simulated failure while deferring")
        return real_defer(job_id, *args)

    monkeypatch.setattr(outcome, "publish", publish)
    monkeypatch.setattr(daemon.jobs, "defer", defer)
    first = drop(home.inbox / "first.png", image_bytes("first"))
    daemon.consider(first)
    wait_for(lambda: "could not record the outcome" in _log_text(), 30, "the double failure")
    second = drop(home.inbox / "second.png", image_bytes("second"))
    daemon.consider(second)
    row = wait_for(lambda: ended(home.database, second), 30, "the next file")
    assert row["state"] == "done", row["reason"]
    # The first stays running until the next start puts it back in the queue.
    row = job(home.database, first)
    assert row is not None and row["state"] == "running"


_records: list[str] = []


class _Collect(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        _records.append(record.getMessage())


def _log_text() -> str:
    return "\n".join(_records)


@pytest.fixture(autouse=True)
def _collect_logs() -> Iterator[None]:
    handler = _Collect()
    logger = logging.getLogger("ocrwatch")
    logger.addHandler(handler)
    _records.clear()
    yield
    logger.removeHandler(handler)


def test_transient_error_gives_up_after_max_attempts(home: Home, run_daemon: StartDaemon,
                                                     full_on_fsync: Switch) -> None:
    full_on_fsync.on.set()
    _daemon, _engine = run_daemon(max_attempts=3)
    scan = drop(home.inbox / "scan.png", image_bytes("never any space"))
    row = wait_for(lambda: ended(home.database, scan), 30, "the scan to be given up")
    assert row["state"] == "failed"
    assert "disk is full" in row["reason"] and "gave up after 3 tries" in row["reason"]
    assert full_on_fsync.hits == 3
    _no_partial_sidecars(home.inbox)


def test_permanent_write_error_fails_at_once(home: Home, run_daemon: StartDaemon,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.replace

    def read_only(src: Any, dst: Any, **dir_fds: Any) -> None:
        if str(dst).endswith((".md", ".txt")):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        real(src, dst, **dir_fds)

    monkeypatch.setattr(os, "replace", read_only)  # the one sidecar.py calls
    _daemon, _engine = run_daemon()
    scan = drop(home.inbox / "scan.png", image_bytes("read-only"))
    row = wait_for(lambda: ended(home.database, scan), 30, "the scan to fail")
    assert row["state"] == "failed" and row["attempts"] == 0
    assert "Read-only file system" in row["reason"] and "make the folder writable" in \
        row["reason"], row["reason"]
    _no_partial_sidecars(home.inbox)


# -- a real full file system --------------------------------------------------------------
@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "small"
    where.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)],
                              capture_output=True, text=True, timeout=30)
    except OSError as exc:
        pytest.skip(f"cannot run mount: {exc}")
    if done.returncode != 0:
        reason = f"mounting a tmpfs was refused ({done.stderr.strip()}); run as root"
        print(reason)
        pytest.skip(reason)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, timeout=30)


def _fill(folder: Path) -> Path:
    filler = folder / "filler.bin"
    # Unbuffered: a buffered writer would retry its last chunk on close and fail there.
    with filler.open("wb", buffering=0) as fh, contextlib.suppress(OSError):
        while True:
            fh.write(b"\0" * 65536)
    return filler


def test_sidecars_on_a_real_full_tmpfs(home: Home, run_daemon: StartDaemon,
                                       small_tmpfs: Path) -> None:
    out = small_tmpfs / "out"
    _daemon, _engine = run_daemon(output_dir=out)
    out.mkdir(exist_ok=True)
    filler = _fill(small_tmpfs)
    scan = drop(home.inbox / "scan.png", image_bytes("a real full disk"))
    _deferred(home, scan, "disk is full")
    target = out / "inbox"
    if target.exists():
        _no_partial_sidecars(target)
    filler.unlink()  # space returns
    row = wait_for(lambda: ended(home.database, scan), 30, "the scan to be read")
    assert row["state"] == "done", row["reason"]
    md, txt = target / "scan.md", target / "scan.txt"
    assert os.fsdecode(row["md_path"]) == str(md)
    assert txt.read_text().startswith("fake text of scan.png page 1")
    assert [p.name for p in target.iterdir()] in (["scan.md", "scan.txt"],
                                                  ["scan.txt", "scan.md"])


def test_index_on_a_real_full_tmpfs(home: Home, run_daemon: StartDaemon,
                                    small_tmpfs: Path,
                                    caplog: pytest.LogCaptureFixture) -> None:
    """SQLite on a full disk: the daemon keeps running and reads the file once there is
    space again (SQLite reuses its WAL's room, so small writes may even succeed)."""
    home.database = small_tmpfs / "index.sqlite3"
    daemon, _engine = run_daemon(rescan_minutes=60.0)  # no rescan to fall back on
    filler = _fill(small_tmpfs)
    scans = [drop(home.inbox / f"scan{n}.png", image_bytes(f"index full {n}"))
             for n in range(5)]
    # Either SQLite still finds room in its WAL, or recording the files fails: both fine.
    wait_for(lambda: sum(daemon.jobs.counts().values()) == len(scans)
             or "full" in caplog.text, 30, "the daemon to meet the full disk")
    print("full index:", "write failed" if "full" in caplog.text else "WAL had room",
          daemon.jobs.counts())
    filler.unlink()
    for scan in scans:
        row = wait_for(partial(ended, home.database, scan), 60, f"{scan.name} to be read")
        assert row["state"] == "done", row["reason"]
        check_fake_sidecars(scan, 1)
    assert not daemon.stopping
