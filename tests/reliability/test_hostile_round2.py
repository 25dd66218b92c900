"""Hostile world, second round: each test is one attack that used to lose files, leak text
or hang, run against the real daemon, the real CLI and real files."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw

from ocrwatch.control.client import read_line
from ocrwatch.core.domain import PageText
from ocrwatch.core.errors import InputError
from ocrwatch.fs import fsmove
from ocrwatch.results.sidecar import write_sidecars

from .conftest import RecordingEngine, StartDaemon
from .helpers import (
    DaemonProcess,
    Home,
    check_fake_sidecars,
    drop,
    ended,
    image_bytes,
    job,
    ocrwatch_cli,
    pdf_bytes,
    sidecars,
    wait_for,
    write,
)


# -- 1. failed/ never replaces a file ------------------------------------------------------
def test_add_from_four_inboxes_keeps_every_failed_file(home: Home) -> None:
    """Four inboxes each holding a broken ``bad.pdf``, read by one ``ocrwatch add`` within
    the same second: all four land in failed/, none replaced, each with its own note."""
    failed = home.root / "failed"
    inboxes = [home.root / f"inbox{n}" for n in range(4)]
    bad = [write(box / "bad.pdf", f"%PDF-1.4 broken {n}\n".encode()) for n, box in
           enumerate(inboxes)]
    config = home.root / "config.toml"
    config.write_text(f'failed_dir = "{failed}"\n')
    args = ["--config", str(config), "--engine", "fake", "--database", str(home.database)]
    for box in inboxes:
        args += ["--inbox", str(box)]
    done = ocrwatch_cli(home, "add", *args, *map(str, bad))
    out = done.stdout + done.stderr
    assert "Traceback" not in out, out
    assert done.returncode == 1 and "0 read, 4 failed" in done.stdout, out
    kept = sorted(p for p in failed.iterdir() if p.suffix == ".pdf")
    assert [p.name for p in kept] == ["bad.2.pdf", "bad.3.pdf", "bad.4.pdf", "bad.pdf"], kept
    assert sorted(p.read_bytes() for p in kept) == sorted(
        f"%PDF-1.4 broken {n}\n".encode() for n in range(4))
    for path in kept:
        note = path.with_name(path.name + ".error.txt").read_text()
        assert "failed:" in note, note
    assert not any(p.exists() for p in bad)


def _sources(folder: Path, count: int) -> list[Path]:
    return [write(folder / f"src{n}" / "scan.pdf", f"content {n}".encode())
            for n in range(count)]


def test_same_name_moves_at_the_same_moment_keep_every_file(tmp_path: Path) -> None:
    """Sixteen threads move a ``scan.pdf`` to the same name at once, beside a file already
    there: every content survives, under distinct names."""
    dest = write(tmp_path / "failed" / "scan.pdf", b"was here first")
    sources = _sources(tmp_path, 16)
    start = threading.Barrier(len(sources))
    moved: list[Path] = []
    lock = threading.Lock()

    def move(src: Path) -> None:
        start.wait()
        where = fsmove.move_unique(src, dest)
        with lock:
            moved.append(where)

    threads = [threading.Thread(target=move, args=(s,)) for s in sources]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(set(moved)) == 16 and dest not in moved
    contents = sorted(p.read_bytes() for p in dest.parent.iterdir())
    assert contents == sorted([b"was here first", *(f"content {n}".encode()
                                                     for n in range(16))])


def test_no_replace_refuses_and_keeps_both(tmp_path: Path) -> None:
    src = write(tmp_path / "a" / "x.pdf", b"new")
    dest = write(tmp_path / "b" / "x.pdf", b"old")
    with pytest.raises(FileExistsError):
        fsmove.move_no_replace(src, dest)
    assert src.read_bytes() == b"new" and dest.read_bytes() == b"old"
    # A dangling symlink counts as taken too: it is never replaced nor followed.
    link = tmp_path / "b" / "y.pdf"
    link.symlink_to(tmp_path / "nowhere")
    assert fsmove.move_unique(src, link) == tmp_path / "b" / "y.2.pdf"
    assert link.is_symlink() and not (tmp_path / "nowhere").exists()


@pytest.fixture
def other_fs(tmp_path: Path) -> Iterator[Path]:
    """A folder on another file system than tmp_path (tmpfs in /dev/shm), or skip."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK) or \
            os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        reason = "no writable folder on another file system (/dev/shm)"
        print(reason)
        pytest.skip(reason)
    folder = Path(tempfile.mkdtemp(dir=shm, prefix="ocrwatch-test-"))
    yield folder
    for p in sorted(folder.rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() and not p.is_symlink() else p.unlink()
    folder.rmdir()


def test_move_across_file_systems_copies_then_removes(tmp_path: Path, other_fs: Path) -> None:
    taken = write(other_fs / "scan.pdf", b"already there")
    src = write(tmp_path / "scan.pdf", pdf_bytes(["across"]))
    content = src.read_bytes()
    src.chmod(0o640)
    where = fsmove.move_unique(src, other_fs / "scan.pdf")
    assert where == other_fs / "scan.2.pdf"
    assert where.read_bytes() == content and taken.read_bytes() == b"already there"
    assert not src.exists()
    assert where.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in other_fs.iterdir() if p.name.startswith(".")] == []


_CRASH_MID_COPY = """
import os, sys
from pathlib import Path
from ocrwatch.fs import fsmove
os.link = lambda *a, **k: os._exit(9)  # the power goes out: copied and synced, not placed
fsmove.move_no_replace(Path(sys.argv[1]), Path(sys.argv[2]))
"""


def test_a_crash_mid_copy_leaves_a_temporary_that_the_next_start_removes(
        tmp_path: Path, other_fs: Path) -> None:
    import subprocess
    import sys

    from ocrwatch.config import Config
    from ocrwatch.pipeline import tidy

    src = write(tmp_path / "inbox" / "scan.pdf", pdf_bytes(["kept"]))
    content = src.read_bytes()
    crashed = subprocess.run([sys.executable, "-c", _CRASH_MID_COPY, str(src),
                              str(other_fs / "scan.pdf")], capture_output=True, timeout=60)
    assert crashed.returncode == 9, crashed.stderr
    left = [p for p in other_fs.iterdir() if p.name.startswith(".ocrwatch-")]
    assert len(left) == 1 and left[0].read_bytes() == content  # the copy, not yet placed
    assert src.read_bytes() == content and not (other_fs / "scan.pdf").exists()
    # A live process's temporary is its own: the tidy leaves this process's alone.
    mine = fsmove.temp_in(other_fs)
    os.close(mine[0])
    tidy(Config(inbox=[tmp_path / "inbox"], archive_dir=other_fs))
    assert [p.name for p in other_fs.iterdir()] == [Path(mine[1]).name]
    assert src.read_bytes() == content  # the original never moved
    os.unlink(mine[1])


# -- 3. the control socket serves everyone, whatever one client sends ----------------------
def _control_socket(home: Home) -> Path:
    return home.run / "ocrwatch" / "control.sock"


def _connect(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(path))  # blocking: waits for room in the backlog, as a real client does
    s.settimeout(10)
    return s


def _reply(s: socket.socket) -> dict[str, Any]:
    reply: dict[str, Any] = json.loads(read_line(s))
    return reply


def _timed_status(home: Home) -> float:
    began = time.monotonic()
    done = ocrwatch_cli(home, "status", "--json")
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr, done.stderr
    assert json.loads(done.stdout)["pid"] > 0
    return time.monotonic() - began


def test_control_socket_survives_hostile_clients(
        home: Home, daemon_process: Callable[..., DaemonProcess]) -> None:
    daemon = daemon_process().start()
    daemon.wait_ready()
    sock_path = _control_socket(home)
    wait_for(sock_path.exists, 30, "the control socket")
    base = _timed_status(home)
    hostile: list[socket.socket] = []
    try:
        # 80 clients that connect and say nothing, and one that sends a byte at a time.
        hostile += [_connect(sock_path) for _ in range(80)]
        trickle = _connect(sock_path)
        hostile.append(trickle)
        trickle.sendall(b'{"cm')
        # A deeply nested line (a RecursionError in the JSON parser), and a line too long.
        nested = _connect(sock_path)
        nested.sendall(b"[" * 30000 + b"]" * 30000 + b"\n")
        assert _reply(nested) == {"ok": False, "error": "request is not valid JSON"}
        nested.sendall(b'{"cmd": "ping"}\n')  # the same connection still works
        assert _reply(nested)["ok"] is True
        nested.close()
        huge = _connect(sock_path)
        with contextlib.suppress(OSError):  # the server may close before all is sent
            huge.sendall(b"x" * (1 << 20))
        reply = _reply(huge)
        assert reply["ok"] is False and "too long" in reply["error"], reply
        huge.close()
        trickle.sendall(b'd"')  # still trickling while others ask
        times = [_timed_status(home) for _ in range(3)]
        print(f"`ocrwatch status`: {base:.2f} s alone, {max(times):.2f} s at most beside 81 "
              "idle or trickling clients")
        assert max(times) < base + 3.0, (base, times)
        # The trickle and the silent ones are dropped at their deadline, with a reason.
        trickle_reply = _reply(trickle)
        assert "no complete request within" in trickle_reply["error"], trickle_reply
        assert daemon.running
        assert request_ok(sock_path)
    finally:
        for s in hostile:
            s.close()
    assert daemon.stop() == 0
    assert "Traceback" not in daemon.output(), daemon.output()[-3000:]


def request_ok(path: Path) -> bool:
    with _connect(path) as s:
        s.sendall(b'{"cmd": "status"}\n')
        return _reply(s)["ok"] is True


# -- 4. nothing ocrwatch writes is readable by more users than its original ----------------
def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _read_under_umask(home: Home, daemon: DaemonProcess, umask: int, *files: Path) -> None:
    """Start the daemon under ``umask``, wait for ``files`` to be read, stop it."""
    old = os.umask(umask)
    try:
        daemon.start()
    finally:
        os.umask(old)
    for path in files:
        row = wait_for(lambda p=path: ended(home.database, p), 30, f"{path.name} to be read")
        assert row["state"] == "done", row["reason"]
    assert daemon.stop() == 0


def test_modes_follow_the_original_and_private_files_stay_private(
        home: Home, daemon_process: Callable[..., DaemonProcess]) -> None:
    private = drop(home.inbox / "private.png", image_bytes("medical letter"))
    private.chmod(0o600)
    shared = drop(home.inbox / "shared.png", image_bytes("shop flyer"))
    shared.chmod(0o644)
    daemon = daemon_process()
    # The child inherits umask 077, as from a careful user's shell.
    _read_under_umask(home, daemon, 0o077, private, shared)
    for sidecar in sidecars(private) + sidecars(shared):
        assert _mode(sidecar) == 0o600, (sidecar, oct(_mode(sidecar)))  # 0644 & ~077
    for made in (home.database, *home.database.parent.glob("*-wal"),
                 *(home.state).rglob("*.log")):
        assert _mode(made) == 0o600, (made, oct(_mode(made)))
    logs = list((home.state).rglob("*.log"))
    assert logs, "no log file written"
    for folder in (logs[0].parent, logs[0].parent.parent):  # made by ocrwatch: 0700
        assert _mode(folder) == 0o700, (folder, oct(_mode(folder)))
    # Under the usual umask 022 a readable scan keeps readable sidecars, a private one not.
    again = drop(home.inbox / "flyer2.png", image_bytes("second flyer"))
    again.chmod(0o644)
    secret = drop(home.inbox / "secret2.png", image_bytes("second secret"))
    secret.chmod(0o640)
    _read_under_umask(home, daemon, 0o022, again, secret)
    assert {_mode(s) for s in sidecars(again)} == {0o644}
    assert {_mode(s) for s in sidecars(secret)} == {0o640}
    assert _mode(home.database) == 0o600
    assert "Traceback" not in daemon.output()


# -- 5. no symbolic link below the inbox is followed, at read time too ---------------------
def test_subfolder_swapped_for_a_link_after_queueing_is_not_read(
        home: Home, run_daemon: StartDaemon) -> None:
    daemon, engine = run_daemon(watch=False)
    daemon.pause()
    queued = drop(home.inbox / "sub" / "scan.png", image_bytes("harmless"))
    assert daemon.consider(queued) is not None
    # Between discovery and reading, the subfolder becomes a link to a private folder.
    outside = home.root / "outside"
    write(outside / "scan.png", image_bytes("the neighbour's secret"))
    (home.inbox / "sub").rename(home.root / "moved-away")
    (home.inbox / "sub").symlink_to(outside, target_is_directory=True)
    daemon.resume()
    row = wait_for(lambda: ended(home.database, queued), 30, "the swapped file to end")
    assert row["state"] == "failed"
    assert "symbolic link" in row["reason"] and "not followed" in row["reason"], row["reason"]
    assert engine.reads_of("scan.png") == 0
    assert sorted(p.name for p in outside.iterdir()) == ["scan.png"]  # no sidecars there
    # Discovered through the link: refused at once, with the same reason.
    later = write(outside / "later.png", image_bytes("another secret"))
    assert daemon.consider(home.inbox / "sub" / later.name) is None
    row = wait_for(lambda: ended(home.database, home.inbox / "sub" / later.name), 30,
                   "the linked file to be refused")
    assert row["state"] == "failed" and "symbolic link" in row["reason"], row["reason"]
    assert engine.reads_of("later.png") == 0


def test_sidecar_write_through_a_swapped_folder_is_refused(tmp_path: Path) -> None:
    inbox, outside = tmp_path / "inbox", tmp_path / "outside"
    outside.mkdir()
    inbox.mkdir()
    (inbox / "sub").symlink_to(outside, target_is_directory=True)
    with pytest.raises(InputError, match="symbolic link"):
        write_sidecars(inbox / "sub" / "scan", [PageText("text", "text")], root=inbox)
    assert list(outside.iterdir()) == []
    # A link planted at the sidecar's own name is replaced, not written through.
    (inbox / "real").mkdir()
    (inbox / "real" / "scan.md").symlink_to(outside / "victim.md")
    md, _ = write_sidecars(inbox / "real" / "scan", [PageText("text", "text")], root=inbox)
    assert not md.is_symlink() and md.read_text() == "text\n"
    assert list(outside.iterdir()) == []


# -- 11. the size is checked before the content is hashed ----------------------------------
def test_sixty_gigabyte_sparse_file_does_not_delay_others(
        home: Home, run_daemon: StartDaemon) -> None:
    _daemon, _engine = run_daemon()
    huge = home.inbox / "huge.png"
    with huge.open("wb") as fh:
        fh.truncate(60 * 1024 ** 3)  # sparse: no disk space used, 60 GB to read
    began = time.monotonic()
    good = drop(home.inbox / "after.png", image_bytes("right after"))
    row = wait_for(lambda: ended(home.database, good), 60, "the next file")
    assert row["state"] == "done", row["reason"]
    took = time.monotonic() - began
    print(f"the next file was read {took:.2f} s after it was dropped beside a 60 GB file")
    assert took < 15
    row = wait_for(lambda: ended(home.database, huge), 30, "the huge file to be refused")
    assert row["state"] == "failed"
    assert "61440 MB, over the limit of 2048 MB" in row["reason"], row["reason"]


# -- 6. `ocrwatch add` with the pause flag set reads, and says so ---------------------------
def test_add_while_paused_reads_and_says_how_to_resume(
        home: Home, daemon_process: Callable[..., DaemonProcess]) -> None:
    daemon = daemon_process().start()
    daemon.wait_ready()
    paused = ocrwatch_cli(home, "pause")
    assert paused.returncode == 0, paused.stderr
    scan = write(home.root / "elsewhere" / "letter.png", image_bytes("paused letter"))
    args = ["--engine", "fake", "--database", str(home.database), "--inbox", str(home.inbox)]
    # While the paused daemon runs, and after it stopped with the flag still set.
    for round_ in range(2):
        done = ocrwatch_cli(home, "add", *args, str(scan), timeout=60)
        out = done.stdout + done.stderr
        assert "Traceback" not in out, out
        assert done.returncode == 0 and "1 read, 0 failed" in done.stdout, out
        assert "paused" in done.stderr and "ocrwatch resume" in done.stderr, out
        check_fake_sidecars(scan, 1)
        for sidecar in sidecars(scan):
            sidecar.unlink()
        if round_ == 0:
            assert daemon.stop() == 0
        scan.write_bytes(image_bytes(f"changed {round_}"))
    status = ocrwatch_cli(home, "status", "--database", str(home.database))
    assert "Traceback" not in status.stdout + status.stderr


# -- 7. the watcher re-arms when its folder is deleted and made again ----------------------
def test_inbox_deleted_and_made_again_is_watched_again(
        home: Home, run_daemon: StartDaemon, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ocrwatch")
    _daemon, _engine = run_daemon(rescan_minutes=60.0)  # no rescan to fall back on
    first = drop(home.inbox / "first.png", image_bytes("before"))
    wait_for(lambda: ended(home.database, first, "done"), 30, "the first file")
    # Gone for a while (the daemon notices), then back.
    shutil.rmtree(home.inbox)
    wait_for(lambda: "is gone" in caplog.text, 15, "the daemon to notice the folder is gone")
    home.inbox.mkdir()
    came_with = drop(home.inbox / "came-with-it.png", image_bytes("came with the folder"))
    wait_for(lambda: ended(home.database, came_with, "done"), 30, "a file made with it")
    later = drop(home.inbox / "later.png", image_bytes("after it came back"))
    wait_for(lambda: ended(home.database, later, "done"), 30, "a file dropped later")
    # Deleted and made again at once (maybe with the same inode number).
    shutil.rmtree(home.inbox)
    home.inbox.mkdir()
    quick = drop(home.inbox / "quick.png", image_bytes("right after a quick swap"))
    wait_for(lambda: ended(home.database, quick, "done"), 30, "a file after a quick swap")
    quicker = drop(home.inbox / "sub" / "quicker.png", image_bytes("in a new subfolder"))
    wait_for(lambda: ended(home.database, quicker, "done"), 30, "a file in a new subfolder")
    check_fake_sidecars(quicker, 1)


# -- 13. one daemon per database, whatever its runtime folder ------------------------------
def test_second_daemon_on_the_same_database_is_refused(
        home: Home, daemon_process: Callable[..., DaemonProcess], tmp_path: Path) -> None:
    first = daemon_process().start()
    first.wait_ready()
    other_run = Path(tempfile.mkdtemp(prefix="owr2-"))
    try:
        other_run.chmod(0o700)
        second = daemon_process(XDG_RUNTIME_DIR=str(other_run)).start()
        assert second.proc is not None
        code = second.proc.wait(timeout=60)
        out = second.output()
        assert code == 4, out  # DaemonRunning
        assert "already uses the index" in out and str(home.database) in out, out
        assert "Traceback" not in out, out
        assert first.running
        # `ocrwatch add` from that other session does not take the running daemon's jobs.
        scan = write(home.root / "other" / "a.png", image_bytes("from another session"))
        done = ocrwatch_cli(home, "add", "--engine", "fake", "--database", str(home.database),
                            str(scan), XDG_RUNTIME_DIR=str(other_run))
        assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr, \
            done.stderr
    finally:
        shutil.rmtree(other_run, ignore_errors=True)
    assert first.stop() == 0


# -- 14. stopping abandons a giant page instead of waiting for it --------------------------
def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_sigterm_during_a_giant_page_stops_at_once(
        home: Home, daemon_process: Callable[..., DaemonProcess]) -> None:
    if not Path("/proc/self/stat").exists():
        pytest.skip("needs /proc to see the daemon at work")
    # Random dots: Tesseract takes tens of seconds on a page like this.
    side = 7000
    noise = Image.frombytes("1", (side, side), random.Random(7).randbytes(side // 8 * side))
    # A solid block of ink, so that the page is not taken for a blank back (noise alone
    # averages to an even grey, as paper grain does) and reaches Tesseract.
    ImageDraw.Draw(noise).rectangle((3000, 3000, 4000, 3400), fill=0)
    giant = home.inbox / "giant.png"
    noise.save(giant)
    daemon = daemon_process(engine="tesseract").start()
    assert daemon.proc is not None
    row = wait_for(lambda: (r := job(home.database, giant)) and r["state"] == "running"
                   and r, 60, "the giant page to be taken")
    busy = _cpu_seconds(daemon.proc.pid)
    wait_for(lambda: _cpu_seconds(daemon.proc.pid) > busy + 2.0,  # type: ignore[union-attr]
             60, "the daemon to be well into the page")
    began = time.monotonic()
    code = daemon.stop(timeout=60)
    took = time.monotonic() - began
    out = daemon.output()
    assert code == 0, out[-2000:]
    print(f"SIGTERM to exit: {took:.1f} s")
    assert took < 6.0, f"stopping took {took:.1f} s"
    assert "Traceback" not in out, out[-3000:]
    row = job(home.database, giant)
    assert row is not None and row["state"] in ("queued", "running"), dict(row or {})


def test_a_file_deleted_while_read_is_not_read_to_its_end(
        home: Home, run_daemon: StartDaemon) -> None:
    daemon, engine = run_daemon(engine=RecordingEngine(delay=0.05))
    pages = 120
    doc = drop(home.inbox / "long.pdf", pdf_bytes([f"page {n}" for n in range(pages)]))

    def pages_read() -> int:
        with engine.lock:
            return sum(1 for name, _ in engine.read if name == doc.name)

    wait_for(lambda: pages_read() >= 3, 60, "the first pages to be read")
    doc.unlink()
    wait_for(lambda: job(home.database, doc) is None, 60, "the deleted file to leave the index")
    wait_for(daemon.is_idle, 60, "the daemon to be idle")
    settled = pages_read()
    print(f"{settled} of {pages} pages read before the deletion stopped the reading")
    assert settled < pages // 2, settled
    assert not any(p.exists() for p in sidecars(doc))


def test_an_inotify_overflow_triggers_a_rescan(tmp_path: Path) -> None:
    """Events lost to a full inotify queue: watchdog only logs it, and that is our signal
    to look at the folder again (else a file dropped then waits for the next rescan)."""
    from ocrwatch.intake.settle import Settler
    from ocrwatch.intake.watch import Watcher

    found: list[Path] = []
    first = drop(tmp_path / "first.png", image_bytes("first"))
    watcher = Watcher(Settler([tmp_path], 0.1, found.append, lambda _p: None))
    watcher.start()
    try:
        wait_for(lambda: first in found, 30, "the start-up scan to be over")
        # Dropped without an event reaching us (here: before a watch could see it, as a
        # lost event would be), then the overflow warning watchdog writes.
        watcher.observer.unschedule_all()
        missed = drop(tmp_path / "missed.png", image_bytes("missed"))
        logging.getLogger("watchdog.observers.inotify_c").warning(
            "Inotify queue overflowed; filesystem events were lost")
        wait_for(lambda: missed in found, 30, "the rescan to find the file")
    finally:
        watcher.stop()
