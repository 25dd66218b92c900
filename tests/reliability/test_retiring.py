"""The moment an original is archived or deleted: only the file that was read goes, and
only once its results are on disk.

- a new version saved over the original (renamed over its name, as editors and scanner
  apps save) exactly between the last check and the act is never deleted or archived
  unread: it is read in its turn;
- a crash while the original is under its private name puts it back at the next start,
  and it is retired then, checked again;
- the order of the system calls (traced with strace): every sidecar (``.md``, ``.txt``,
  the searchable PDF), its folder and the index's WAL are synced to disk before the
  original leaves its name, with the sidecars on the same file system or another one.

Real daemons, real files, a real SQLite index, real inotify, real processes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

from ocrwatch.config import Config
from ocrwatch.core.domain import PageText
from ocrwatch.daemon import Daemon
from ocrwatch.results.lifecycle import Lifecycle, retiring_name
from ocrwatch.results.sidecar import pdf_path, sidecar_paths
from ocrwatch.store.db import Database
from ocrwatch.store.jobs import JobQueue, file_sha256
from ocrwatch.testing.fake import FakeEngine

from .conftest import StartDaemon
from .helpers import (
    Home,
    connect_ro,
    drop,
    image_bytes,
    job,
    ocrwatch_cli,
    pdf_bytes,
    wait_for,
    write,
)


# -- 1. a new version saved between the check and the act ---------------------------------
@pytest.mark.parametrize("mode", ["delete", "archive"])
def test_a_new_version_saved_between_the_check_and_the_act_is_never_retired_unread(
        home: Home, run_daemon: StartDaemon, monkeypatch: pytest.MonkeyPatch,
        mode: str) -> None:
    """The last check (the hash of what is about to go) passes; the user's scanner app
    then renames a new version over the name; the act follows. Deleting or moving by
    name would take the new version, unread; the act is on the file that was checked."""
    archive = home.root / "archive"
    scan = home.inbox / "scan.png"
    first = image_bytes("the first version", size=(600, 400))
    second = image_bytes("the second version", size=(800, 300))
    real_check = Lifecycle._still_read
    saved: list[bool] = []

    def save_after_check(path: Path, sha256: str) -> bool:
        verdict = real_check(path, sha256)
        if not saved:  # once: the user saves one new version
            saved.append(True)
            tmp = scan.with_name(".scan.png.part")
            tmp.write_bytes(second)
            os.replace(tmp, scan)
        return verdict

    monkeypatch.setattr(Lifecycle, "_still_read", staticmethod(save_after_check))
    daemon, _engine = run_daemon(on_success=mode, archive_dir=archive)
    drop(scan, first)
    wait_for(lambda: bool(saved), 30, "the first version's check")

    def sizes() -> set[str]:
        return {m for r in daemon.db.query("SELECT text FROM pages")
                for m in re.findall(r"\((\d+x\d+)\)", r["text"])}

    # Both versions read, each with its own size; then the second one retired too.
    wait_for(lambda: len(sizes()) == 2, 30, "the new version to be read in its turn")
    wait_for(lambda: not scan.exists() and not list(home.inbox.glob(".ocrwatch-retiring-*"))
             and daemon.db.query("SELECT 1 FROM jobs WHERE retire IS NOT NULL") == []
             and daemon.db.query("SELECT 1 FROM moves") == [],
             30, "the new version to be retired after its read")
    if mode == "archive":
        kept = sorted(p.read_bytes() for p in archive.rglob("scan*.png"))
        assert kept == sorted([first, second]), "a version was not archived whole"


def test_an_archive_folder_swapped_for_a_link_between_the_check_and_the_moves_is_undone(
        home: Home, run_daemon: StartDaemon, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """The archive's folder passes its check (no link), then is swapped for a link to
    another folder just before the moves, which go by name: the files that went through
    the link are moved back, the original is in the inbox with its sidecars, and the job
    says why (before: the scan and its text in the other folder)."""
    archive, elsewhere = home.root / "archive", tmp_path / "elsewhere"
    elsewhere.mkdir()
    real_plan = Lifecycle._plan
    swapped: list[Path] = []

    def swap_after_check(self: Lifecycle, original: Path, sidecars: list[Path],
                         folder: Path) -> list[tuple[Path, Path]]:
        moves = real_plan(self, original, sidecars, folder)
        if not swapped:
            folder.rename(folder.with_name("kept-aside"))
            folder.symlink_to(elsewhere)
            swapped.append(folder)
        return moves

    monkeypatch.setattr(Lifecycle, "_plan", swap_after_check)
    daemon, _engine = run_daemon(on_success="archive", archive_dir=archive)
    scan = drop(home.inbox / "scan.png", image_bytes("a private letter"))
    wait_for(lambda: daemon.db.query("SELECT 1 FROM jobs WHERE state = 'done' AND "
                                     "(retire IS NULL OR retire = 'failed')"), 30,
             "the archiving to be settled")
    assert swapped and list(elsewhere.iterdir()) == [], sorted(elsewhere.rglob("*"))
    assert scan.exists() and (home.inbox / "scan.md").exists()
    row = daemon.db.query("SELECT retire_reason FROM jobs")[0]
    assert "replaced by a symbolic link" in row["retire_reason"], row["retire_reason"]
    assert daemon.db.query("SELECT 1 FROM moves") == []


# -- 2. a crash while the original is under its private name ------------------------------
CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from ocrwatch.config import Config
    from ocrwatch.store.db import Database
    from ocrwatch.results.lifecycle import Lifecycle

    inbox, archive, db_path, marker, job_id, sha, mode = sys.argv[1:8]
    original = Path(inbox) / "crash.png"

    def held(path, sha256):  # under its private name: killed right here
        Path(marker).write_text(str(path))
        time.sleep(600)

    Lifecycle._still_read = staticmethod(held)
    config = Config(inbox=[Path(inbox)], database=Path(db_path), on_success=mode,
                    archive_dir=Path(archive))
    Lifecycle(config, Database(db_path)).finish(
        int(job_id), original, {"md": Path(inbox) / "crash.md"}, sha, mode)
""")


@pytest.mark.parametrize("mode", ["delete", "archive"])
def test_a_crash_during_the_last_check_puts_the_original_back(tmp_path: Path,
                                                              mode: str) -> None:
    """SIGKILL while the original is under its private name: the next start puts it
    back, checks it again, and then deletes or archives it; nothing is left behind."""
    inbox, archive = tmp_path / "inbox", tmp_path / "archive"
    original = write(inbox / "crash.png", image_bytes("crash test"))
    (inbox / "crash.md").write_text("sidecar\n")
    content = original.read_bytes()
    db_path = tmp_path / "index.sqlite3"
    db = Database(db_path)
    jobs = JobQueue(db)
    st = original.stat()
    jobs.offer(original, st.st_size, st.st_mtime_ns, file_sha256(original))
    job = jobs.known(original)
    assert job is not None and job.sha256 is not None and jobs.claim() is not None
    assert jobs.complete(job.id, [PageText("crash test", "crash test")], engine="fake",
                         md_path=inbox / "crash.md", txt_path=None, sha256=job.sha256,
                         retire="pending")
    marker = tmp_path / "held"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(inbox), str(archive),
                              str(db_path), str(marker), str(job.id), job.sha256, mode])
    try:
        wait_for(marker.exists, 60, "the original to be under its private name")
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    held = retiring_name(original, job.id)
    assert marker.read_text() == str(held)
    assert not original.exists() and held.read_bytes() == content
    config = Config(inbox=[inbox], database=db_path, on_success=mode, archive_dir=archive)
    with Daemon(config, engine=FakeEngine()):  # recover, then resume, at its start
        pass
    assert not held.exists()
    assert db.query("SELECT 1 FROM moves") == []
    if mode == "archive":
        moved = archive / "inbox" / "crash.png"
        assert not original.exists() and moved.read_bytes() == content
        assert (moved.parent / "crash.md").read_text() == "sidecar\n"
    else:
        assert not original.exists() and (inbox / "crash.md").read_text() == "sidecar\n"
    row = db.query("SELECT state, retire FROM jobs WHERE id = ?", (job.id,))[0]
    assert row["state"] == "done" and row["retire"] is None, dict(row)
    db.close()


def test_a_crash_before_the_act_never_loses_a_new_version_saved_meanwhile(
        tmp_path: Path) -> None:
    """Killed under the private name; a new version is saved at the name before the next
    start: both are kept (the old one beside, ``crash.2.png``), neither deleted unread."""
    inbox = tmp_path / "inbox"
    original = write(inbox / "crash.png", image_bytes("old"))
    db_path = tmp_path / "index.sqlite3"
    db = Database(db_path)
    jobs = JobQueue(db)
    st = original.stat()
    jobs.offer(original, st.st_size, st.st_mtime_ns, file_sha256(original))
    job = jobs.known(original)
    assert job is not None and job.sha256 is not None and jobs.claim() is not None
    assert jobs.complete(job.id, [PageText("old", "old")], engine="fake", md_path=None,
                         txt_path=None, sha256=job.sha256, retire="pending")
    # The state a kill under the private name leaves (journal row, then the rename).
    held = retiring_name(original, job.id)
    jobs.journal_moves(job.id, [(original, held)])
    original.rename(held)
    new = image_bytes("new", size=(800, 300))
    write(original, new)
    config = Config(inbox=[inbox], database=db_path, on_success="delete")
    with Daemon(config, engine=FakeEngine()):  # recover, then resume, at its start
        pass
    assert not held.exists()
    assert original.read_bytes() == new, "the new version was lost"
    # The old version was read: it may go; the new one never goes unread.
    assert sorted(p.name for p in inbox.iterdir() if p.name.endswith(".png")) in (
        ["crash.png"], ["crash.2.png", "crash.png"])
    db.close()


# -- 3. the order of the system calls -----------------------------------------------------
STRACE = shutil.which("strace")
CALL = re.compile(r"^(?P<pid>\d+)\s+(?P<name>\w+)\((?P<args>.*)")
RESUMED = re.compile(r"^(?P<pid>\d+)\s+<\.\.\. (?P<name>\w+) resumed>(?P<args>.*)")


def trace_events(text: str) -> list[tuple[str, str]]:
    """(call, arguments) in the order the calls returned (a call cut by another
    thread's is placed where it resumed)."""
    events: list[tuple[str, str]] = []
    pending: dict[str, str] = {}
    for line in text.splitlines():
        if m := RESUMED.match(line):
            events.append((m["name"], pending.pop(m["pid"], "") + m["args"]))
        elif m := CALL.match(line):
            if "<unfinished ...>" in line:
                pending[m["pid"]] = m["args"]
            elif "= -1" not in line.rsplit(")", 1)[-1]:
                events.append((m["name"], m["args"]))
    return events


PATH_ARG = re.compile(r'(?:(?P<dir>\d+)<(?P<dirpath>[^>]*)>, |AT_FDCWD[^,]*, |\()'
                      r'"(?P<name>[^"]*)"')


def paths(args: str) -> list[Path]:
    """The paths a call names, in order (``dirfd, "name"`` or ``"/abs/name"``)."""
    return [Path(m["dirpath"] or "/") / m["name"] if m["dir"] else Path(m["name"])
            for m in PATH_ARG.finditer(args)]


def synced(events: list[tuple[str, str]], path: Path) -> list[int]:
    """Where ``path`` (a file or a folder) was fsynced through a handle on it."""
    return [i for i, (name, args) in enumerate(events)
            if name in ("fsync", "fdatasync") and re.match(rf"\d+<{re.escape(str(path))}>",
                                                          args)]


def leaves(events: list[tuple[str, str]], path: Path) -> int:
    """The first call that takes ``path``'s name away (renamed or unlinked)."""
    return next(i for i, (name, args) in enumerate(events)
                if name.startswith(("rename", "unlink")) and paths(f"({args}")[:1] == [path])


def arrives(events: list[tuple[str, str]], path: Path) -> int:
    """The last rename onto ``path`` (a sidecar's temporary file put in place)."""
    return max(i for i, (name, args) in enumerate(events)
               if name.startswith("rename") and paths(f"({args}")[1:] == [path])


@pytest.mark.skipif(STRACE is None, reason="strace is not installed (.ci/apt-packages.txt)")
@pytest.mark.parametrize(("mode", "elsewhere"), [("delete", False), ("archive", False),
                                                 ("delete", True)])
def test_results_and_index_are_on_disk_before_the_original_goes(
        home: Home, mode: str, elsewhere: bool) -> None:
    """``ocrwatch add --on-success MODE`` under strace: each sidecar's own handle and its
    folder fsynced, and the index's WAL synced after its row was written, all before the
    original is renamed or unlinked. With ``output_dir`` on another file system
    (/dev/shm, a tmpfs), its folder is synced before the original's unlink too."""
    assert STRACE is not None
    if elsewhere and not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm here")
    out_root = Path(tempfile.mkdtemp(prefix="ocrwatch-test-", dir="/dev/shm")) \
        if elsewhere else None
    try:
        archive = home.root / "archive"
        config = home.root / "config.toml"
        config.write_text(f'archive_dir = "{archive}"\noutputs = ["md", "txt", "pdf"]\n')
        letter = write(home.inbox / "letter.png", image_bytes("dear sir"))
        trace = home.root / "trace.txt"
        args = ["add", "--config", str(config), "--engine", "fake", "--inbox", str(home.inbox),
                "--database", str(home.database), "--on-success", mode]
        if out_root is not None:
            args += ["--output-dir", str(out_root)]
        done = subprocess.run(
            [STRACE, "-f", "-y", "-qq", "-e", "signal=none", "-o", str(trace), "-e",
             "trace=fsync,fdatasync,unlink,unlinkat,rename,renameat,renameat2",
             sys.executable, "-m", "ocrwatch", *args, str(letter)],
            env=home.env(), cwd=home.root, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr
        assert not letter.exists()
        folder = (out_root / "inbox") if out_root is not None else home.inbox
        sidecars = [*sidecar_paths(folder / "letter"), pdf_path(folder / "letter")]
        events = trace_events(trace.read_text())
        gone = leaves(events, letter)
        for sidecar in sidecars:
            assert [i for i in synced(events, sidecar) if i < gone], \
                f"{sidecar.name} not fsynced before the original left:\n{events}"
        assert [i for i in synced(events, folder) if i < gone], \
            f"the sidecars' folder not fsynced before the original left:\n{events}"
        # The row that records the reading is written after the sidecars are in place;
        # the WAL synced after that, still before the original goes.
        placed = max(arrives(events, s) for s in sidecars)
        wal = Path(f"{home.database}-wal")
        assert [i for i in synced(events, wal) if placed < i < gone], \
            f"the index's WAL not synced between the results and the original's " \
            f"removal:\n{events}"
        if mode == "archive":
            assert (archive / "inbox" / "letter.png").exists()
    finally:
        if out_root is not None:
            shutil.rmtree(out_root, ignore_errors=True)


def test_an_original_left_under_its_private_name_without_a_journal_row_is_put_back(
        home: Home, run_daemon: StartDaemon) -> None:
    """The index replaced since the crash (no journal row names the private name): the
    next start still puts the original back at its name, and reads it."""
    data = image_bytes("left behind")
    held = write(home.inbox / "sub" / ".ocrwatch-retiring-7-letter.png", data)
    daemon, _engine = run_daemon()
    letter = home.inbox / "sub" / "letter.png"
    assert not held.exists() and letter.read_bytes() == data
    wait_for(lambda: daemon.db.query("SELECT 1 FROM jobs WHERE state = 'done'"), 30,
             "the original to be read")


# -- 4. a file appended to or truncated while it is read ----------------------------------
@pytest.mark.parametrize("change", ["append", "truncate"])
def test_a_file_changed_in_place_while_it_is_read_keeps_text_and_content_together(
        home: Home, daemon_process: Any, change: str) -> None:
    """``ocrwatch run`` with a slow engine (0.5 s a page) and ``on_success = "delete"``;
    while a 4-page PDF is read, it is written in place: bytes appended after its end, or
    truncated to a 1-page PDF. Every reading recorded holds the pages of the very content
    its SHA-256 names, and the file is deleted only after its last content was read."""
    config = home.root / "config.toml"
    config.write_text('on_success = "delete"\n')
    proc = daemon_process("--config", str(config), OCRWATCH_FAKE_DELAY="0.5").start()
    proc.wait_ready()
    doc = home.inbox / "doc.pdf"
    before = pdf_bytes(["one", "two", "three", "four"])
    after = before + b"\n% appended by the scanner\n" * 100 if change == "append" \
        else pdf_bytes(["only"])
    pages_of = {hashlib.sha256(before).hexdigest(): 4,
                hashlib.sha256(after).hexdigest(): 4 if change == "append" else 1}
    drop(doc, before)
    wait_for(lambda: (r := job(home.database, doc)) is not None and r["state"] == "running",
             30, "the read to start")
    with open(doc, "r+b") as fh:  # in place: the same file, no new name
        if change == "append":
            fh.seek(0, os.SEEK_END)
            fh.write(after[len(before):])
        else:
            fh.write(after)
            fh.truncate()

    def readings() -> dict[str, int]:
        with contextlib.closing(connect_ro(home.database)) as conn:
            return {r["sha256"]: r["pages"] for r in conn.execute(
                "SELECT j.sha256, (SELECT count(*) FROM pages p WHERE p.job_id = j.id) AS pages"
                " FROM jobs j WHERE j.state = 'done'")}

    wait_for(lambda: not doc.exists(), 60, "the last content to be read, then deleted")
    done = readings()
    assert hashlib.sha256(after).hexdigest() in done, f"deleted unread: {done}"
    for sha, pages in done.items():
        assert sha in pages_of and pages == pages_of[sha], \
            f"{pages} pages recorded against content of {pages_of.get(sha)} pages"
    assert proc.stop() == 0


@pytest.mark.parametrize("mode", ["delete", "archive"])
def test_a_file_still_open_for_writing_is_retired_only_after_what_it_adds_is_read(
        home: Home, daemon_process: Any, tmp_path: Path, mode: str) -> None:
    """An app keeps a 2-page PDF open for writing (as an editor saving in place does):
    the file is whole, so it is read, but neither deleted nor archived while it is open
    (the job says why); the app then adds a page in place and closes it: the 3-page
    content is read, and only then deleted or archived (before: retired while still
    open, and the page added afterwards was lost with the deleted file, or archived
    unread)."""
    archive = tmp_path / "archive"
    config = home.root / "config.toml"
    config.write_text(f'on_success = "{mode}"\narchive_dir = "{archive}"\n')
    proc = daemon_process("--config", str(config)).start()
    proc.wait_ready()
    doc = home.inbox / "doc.pdf"
    final = pdf_bytes(["one", "two", "three"])
    with open(doc, "wb") as app:
        app.write(pdf_bytes(["one", "two"]))
        app.flush()
        wait_for(lambda: re.search(r"open for writing|deleted .*doc|archived .*doc",
                                   proc.output()), 60, "the file read, then kept or retired")
        assert doc.exists(), f"retired while open for writing:\n{proc.output()[-3000:]}"
        assert "open for writing" in job(home.database, doc)["retire_reason"], proc.output()
        app.seek(0)
        app.write(final)
        app.truncate()
    gone = (lambda: not doc.exists()) if mode == "delete" else \
        (lambda: [p.read_bytes() for p in archive.rglob("doc.pdf")] == [final])
    with contextlib.suppress(AssertionError):
        wait_for(gone, 60, f"the file {mode}d once its last content was read")
    assert gone(), proc.output()[-3000:]
    with contextlib.closing(connect_ro(home.database)) as conn:
        pages = conn.execute(
            "SELECT count(*) FROM pages p JOIN jobs j ON p.job_id = j.id "
            "WHERE j.state = 'done' AND j.sha256 = ?",
            (hashlib.sha256(final).hexdigest(),)).fetchone()[0]
    assert pages == 3, f"{pages} pages read of the content that was {mode}d"
    assert proc.stop() == 0


def test_a_file_rewritten_in_place_with_its_size_and_time_kept_is_read_as_what_it_holds(
        home: Home, daemon_process: Any) -> None:
    """While the file waits in the queue (hashed; reading paused), it is rewritten in
    place with another image of the same length and its modification time put back (as
    ``cp -p`` does): the size and time check sees nothing. The text is never recorded
    against the first content's SHA-256; the file is read as what it holds, then
    deleted."""
    config = home.root / "config.toml"
    config.write_text('on_success = "delete"\n')
    proc = daemon_process("--config", str(config), OCRWATCH_FAKE_DELAY="0.2").start()
    proc.wait_ready()
    first, second = image_bytes("first", size=(600, 400)), image_bytes("second", size=(800, 300))
    length = max(len(first), len(second)) + 64
    first, second = (data + b"\0" * (length - len(data)) for data in (first, second))
    shape = {hashlib.sha256(first).hexdigest(): 600 / 400,
             hashlib.sha256(second).hexdigest(): 800 / 300}
    assert ocrwatch_cli(home, "pause").returncode == 0  # queued and hashed, not read
    doc = drop(home.inbox / "doc.png", first)
    wait_for(lambda: (r := job(home.database, doc)) is not None and r["sha256"] is not None,
             30, "the file to be hashed and queued")
    st = doc.stat()
    with open(doc, "r+b") as fh:
        fh.write(second)
    os.utime(doc, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert ocrwatch_cli(home, "resume").returncode == 0

    doc_id = job(home.database, doc)["id"]

    def readings() -> list[tuple[str, str]]:
        with contextlib.closing(connect_ro(home.database)) as conn:
            return [(r["sha256"], r["text"]) for r in conn.execute(
                "SELECT j.sha256, p.text FROM jobs j JOIN pages p ON p.job_id = j.id "
                "WHERE j.state = 'done' AND j.id = ?", (doc_id,))]

    wait_for(readings, 60, "the file to be read")
    for sha, text in readings():
        m = re.search(r"\((\d+)x(\d+)\)", text)
        assert m is not None, text
        assert abs(int(m[1]) / int(m[2]) - shape[sha]) < 0.05, \
            f"{text!r} recorded against the content of shape {shape[sha]:.2f}"
    wait_for(lambda: not doc.exists(), 60, "the file to be deleted after its reading")
    assert proc.stop() == 0
