"""``ocrwatch retry`` (with and without a running daemon), the ``failed/`` folder, and an
unreadable file that becomes readable."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from .conftest import StartDaemon
from .helpers import (
    DaemonProcess,
    Home,
    check_fake_sidecars,
    drop,
    ended,
    image_bytes,
    job,
    ocrwatch_cli,
    wait_for,
)

FAIL = "fake-engine-fail"  # the fake engine fails pages of files so named


def _failed(home: Home, path: Path) -> None:
    row = wait_for(lambda: ended(home.database, path), 30, f"{path.name} to end")
    assert row["state"] == "failed", row["state"]
    assert "could not be read" in row["reason"], row["reason"]


def test_retry_all_failed_while_stopped(home: Home,
                                        daemon_process: Callable[..., DaemonProcess]) -> None:
    bad = [drop(home.inbox / f"{FAIL}-{n}.png", image_bytes(f"bad {n}")) for n in range(2)]
    daemon = daemon_process()
    daemon.start()
    for path in bad:
        _failed(home, path)
    assert daemon.stop() == 0
    done = ocrwatch_cli(home, "retry", "--database", str(home.database), "--all-failed")
    assert done.returncode == 0, done.stderr
    assert "2 files queued again; they will be read when the daemon next runs" in done.stdout
    daemon.start(OCRWATCH_FAKE_FAIL="nothing-fails-now")
    for path in bad:
        row = wait_for(partial(ended, home.database, path), 30, "the retried file")
        assert row["state"] == "done", row["reason"]
        check_fake_sidecars(path, 1)
    assert daemon.stop() == 0


def test_retry_one_path_through_the_running_daemon(
        home: Home, daemon_process: Callable[..., DaemonProcess]) -> None:
    first, second = (drop(home.inbox / f"{FAIL}-{n}.png", image_bytes(str(n))) for n in (1, 2))
    daemon = daemon_process(OCRWATCH_FAKE_FAIL=f"{FAIL}-1")
    daemon.start()
    daemon.wait_ready()
    _failed(home, first)
    wait_for(lambda: ended(home.database, second, "done"), 30, "the good file")
    nothing = ocrwatch_cli(home, "retry", str(second))  # done, not failed: still re-read
    assert nothing.returncode == 0, nothing.stderr
    again = ocrwatch_cli(home, "retry", str(first))
    assert again.returncode == 0, again.stderr
    assert "1 file queued again; the daemon will read it again" in again.stdout
    # Still failing (the engine still fails it): failed again, with its reason, not stuck.
    wait_for(lambda: (r := job(home.database, first)) and r["state"] == "failed"
             and r["updated"] > r["created"], 30, "the retried file to fail again")
    usage = ocrwatch_cli(home, "retry")
    assert usage.returncode != 0 and "--all-failed" in usage.stderr
    assert daemon.stop() == 0


def test_retry_of_a_file_refused_before_reading(home: Home, run_daemon: StartDaemon) -> None:
    """A file rejected before it was hashed (unreadable, a bad link) reads fine once fixed."""
    daemon, engine = run_daemon(watch=False)
    scan = drop(home.inbox / "was-unreadable.png", image_bytes("fixed now"))
    daemon.jobs.files.reject(scan.absolute(), "permission denied (as it was then)")
    assert daemon.retry([str(scan)]) == 1
    row = wait_for(lambda: ended(home.database, scan), 30, "the retried file to end")
    assert row["state"] == "done", row["reason"]
    assert row["attempts"] == 0 and row["sha256"]
    assert engine.reads_of(scan.name) == 1
    check_fake_sidecars(scan, 1)


def test_failed_folder_gets_the_file_and_a_note(home: Home, run_daemon: StartDaemon) -> None:
    failed_dir = home.root / "failed"
    _daemon, _engine = run_daemon(failed_dir=failed_dir)
    bad = drop(home.inbox / "2024" / "receipts" / "torn.jpg", b"not really a JPEG at all\n")
    moved = failed_dir / "2024" / "receipts" / "torn.jpg"
    note_file = failed_dir / "2024" / "receipts" / "torn.jpg.error.txt"
    wait_for(note_file.exists, 30, "the file to be moved to failed/ with its note")
    assert moved.exists() and not bad.exists()
    note = note_file.read_text()
    assert "not an image or PDF" in note and "drop it into the inbox again" in note, note
    assert len(note.splitlines()) <= 6  # short
    good = drop(home.inbox / "fine.png", image_bytes("still working"))
    row = wait_for(lambda: ended(home.database, good), 30, "the next file")
    assert row["state"] == "done", row["reason"]
    # Moving it back into the inbox, fixed, reads it.
    drop(bad, image_bytes("fixed receipt", "JPEG"))
    row = wait_for(lambda: ended(home.database, bad, "done"), 30, "the fixed file")
    check_fake_sidecars(bad, 1)


# -- an unreadable file ------------------------------------------------------------------
def test_unreadable_file_fails_then_reads_after_chmod_and_retry(
        home: Home, without_dac: list[str]) -> None:
    locked = drop(home.inbox / "locked.png", image_bytes("private"))
    locked.chmod(0)
    daemon = DaemonProcess(home)
    daemon.prefix = without_dac
    try:
        daemon.start()
        row = wait_for(lambda: ended(home.database, locked), 30, "the unreadable file")
        assert row["state"] == "failed"
        assert "permission denied" in row["reason"] and "chmod u+r" in row["reason"], \
            row["reason"]
        good = drop(home.inbox / "next.png", image_bytes("next"))
        wait_for(lambda: ended(home.database, good, "done"), 30, "the next file")
        # The user fixes the permission and asks for a retry through the running daemon.
        locked.chmod(0o644)
        done = ocrwatch_cli(home, "retry", str(locked))
        assert done.returncode == 0, done.stderr
        row = wait_for(lambda: ended(home.database, locked, "done"), 30, "the fixed file")
        assert row["attempts"] == 0
        check_fake_sidecars(locked, 1)
        assert daemon.stop() == 0
    finally:
        daemon.close()
