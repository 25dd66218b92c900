"""What becomes of originals after a good read: keep, archive, delete; moves that never
replace a file, across file systems, and a kill -9 between the copy and the removal.

The daemon runs for real (inotify on a real folder, a real SQLite index) around the fake
engine; the cross-file-system move goes to /dev/shm, a tmpfs, from a folder on disk.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import make_config, text_page, wait_for

from ocrwatch.config import Config
from ocrwatch.core.domain import PageText
from ocrwatch.daemon import Daemon
from ocrwatch.results.lifecycle import Lifecycle, retiring_name
from ocrwatch.store.db import Database
from ocrwatch.store.index import search
from ocrwatch.store.jobs import JobQueue, file_sha256
from ocrwatch.testing.fake import FakeEngine


def done(d: Daemon, path: Path) -> bool:
    rows = d.db.query("SELECT state FROM jobs WHERE display LIKE ?", (f"%{path.name}",))
    return bool(rows) and all(r["state"] == "done" for r in rows)


def job_paths(d: Daemon) -> list[str]:
    return sorted(r["display"] for r in d.db.query("SELECT display FROM jobs"))


def drop(inbox: Path, name: str, text: str, lines: int = 1) -> Path:
    inbox.mkdir(parents=True, exist_ok=True)
    path = inbox / name
    text_page([text] * lines).save(path)
    return path


def test_archive_moves_original_with_sidecars_and_never_replaces(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    config = make_config(tmp_path, on_success="archive", archive_dir=archive)
    inbox = config.inbox[0]
    with Daemon(config, engine=FakeEngine()) as d:
        first = drop(inbox / "bills", "scan.png", "first")
        first_bytes = first.read_bytes()
        wait_for(lambda: (archive / "inbox" / "bills" / "scan.png").exists(), 30, "archive")
        # The same name again, other content: archived beside, as scan.2.png.
        second = drop(inbox / "bills", "scan.png", "second", lines=8)
        second_bytes = second.read_bytes()
        wait_for(lambda: (archive / "inbox" / "bills" / "scan.2.png").exists(), 30,
                 "second archive")
        wait_for(lambda: len(d.db.query("SELECT 1 FROM moves")) == 0, 10, "journal emptied")
        folder = archive / "inbox" / "bills"
        assert sorted(p.name for p in folder.iterdir()) == [
            "scan.2.md", "scan.2.png", "scan.2.txt", "scan.md", "scan.png", "scan.txt"]
        assert (folder / "scan.png").read_bytes() == first_bytes
        assert (folder / "scan.2.png").read_bytes() == second_bytes
        # Each original still has its own sidecars (the fake engine names the page size).
        assert "(1540x362)" in (folder / "scan.txt").read_text()
        assert "(1540x362)" not in (folder / "scan.2.txt").read_text()
        assert list((inbox / "bills").iterdir()) == []
        # The index follows the files: both found, at their new places.
        assert job_paths(d) == [str(folder / "scan.2.png"), str(folder / "scan.png")]
        hits = search(d.db, "fake")
        assert sorted(h.path for h in hits) == [str(folder / "scan.2.png"),
                                                str(folder / "scan.png")]
        assert {h.md_path for h in hits} == {str(folder / "scan.md"),
                                             str(folder / "scan.2.md")}


def test_archive_by_month_and_output_dir_by_month(tmp_path: Path) -> None:
    archive, out = tmp_path / "archive", tmp_path / "out"
    config = make_config(tmp_path, on_success="archive", archive_dir=archive,
                         archive_layout="date", output_dir=out, output_layout="date",
                         outputs=["md"])
    month = _dt.date.today().strftime("%Y/%m")
    with Daemon(config, engine=FakeEngine()) as d:
        path = drop(config.inbox[0] / "deep" / "er", "letter.png", "x")
        wait_for(lambda: (archive / month / "letter.png").exists(), 30, "archive")
        wait_for(lambda: done(d, path), 10, "done")
    assert sorted(p.name for p in (out / month).iterdir()) == ["letter.md"]  # md only
    assert sorted(p.name for p in (archive / month).iterdir()) == ["letter.png"]


def test_delete_removes_only_the_original_and_keeps_its_index_entry(tmp_path: Path) -> None:
    config = make_config(tmp_path, on_success="delete")
    inbox = config.inbox[0]
    with Daemon(config, engine=FakeEngine()) as d:
        # Same stem, two originals: deleting one leaves the other and every sidecar.
        png = drop(inbox, "scan.png", "one")
        wait_for(lambda: not png.exists(), 30, "scan.png deleted")
        keep = inbox / "scan.jpg"
        text_page(["two"]).save(keep)
        wait_for(lambda: not keep.exists(), 30, "scan.jpg deleted")
        wait_for(lambda: [r["state"] for r in d.db.query("SELECT state FROM jobs")]
                 == ["done", "done"], 10, "both done")
        # The original leaves its name for a private one (.ocrwatch-retiring-...) for its
        # last check, and that name goes with the deletion, just after "done" is recorded.
        wait_for(lambda: sorted(p.name for p in inbox.iterdir()) == [
            "scan.jpg.md", "scan.jpg.txt", "scan.md", "scan.txt"], 10, "only the sidecars left")
        # The deletion event did not take the entries out of the index, and the rescan
        # will not either: they now name the results (once the deletion is recorded: the
        # original leaves its name just before, for its last check).
        wait_for(lambda: sorted(Path(h.path).name for h in search(d.db, "fake"))
                 == ["scan.jpg.md", "scan.md"], 10, "the entries to name the results")
        assert d.follower.missing() == []
        assert sorted(p.name for p in inbox.iterdir()) == [
            "scan.jpg.md", "scan.jpg.txt", "scan.md", "scan.txt"]


def test_keep_leaves_everything_with_same_name_collisions(tmp_path: Path) -> None:
    config = make_config(tmp_path, outputs=["md", "txt"])
    inbox = config.inbox[0]
    with Daemon(config, engine=FakeEngine()) as d:
        a = drop(inbox, "scan.png", "one")
        wait_for(lambda: done(d, a), 30, "scan.png")
        b = inbox / "scan.tif"
        text_page(["two"]).save(b)
        wait_for(lambda: done(d, b), 30, "scan.tif")
    assert sorted(p.name for p in inbox.iterdir()) == [
        "scan.md", "scan.png", "scan.tif", "scan.tif.md", "scan.tif.txt", "scan.txt"]


def other_file_system(tmp_path: Path) -> Path:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no tmpfs at /dev/shm on another file system than the tests' folder")
    return shm


@pytest.fixture
def tmpfs_archive(tmp_path: Path) -> Path:
    folder = other_file_system(tmp_path) / f"ocrwatch-test-{os.getpid()}-{tmp_path.name}"
    folder.mkdir()
    yield folder
    subprocess.run(["rm", "-rf", str(folder)], check=False)


def test_archive_across_file_systems(tmp_path: Path, tmpfs_archive: Path) -> None:
    config = make_config(tmp_path, on_success="archive", archive_dir=tmpfs_archive)
    with Daemon(config, engine=FakeEngine()) as d:
        path = drop(config.inbox[0], "far.png", "far away")
        original = path.read_bytes()
        target = tmpfs_archive / "inbox" / "far.png"
        wait_for(lambda: target.exists() and not path.exists(), 30, "cross-device archive")
        wait_for(lambda: done(d, target), 10, "done")
    assert os.stat(target).st_dev != os.stat(tmp_path).st_dev
    assert target.read_bytes() == original
    assert sorted(p.name for p in target.parent.iterdir()) == ["far.md", "far.png", "far.txt"]
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")]


CHILD = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from ocrwatch.config import Config
    from ocrwatch.store.db import Database
    from ocrwatch.results.lifecycle import Lifecycle

    inbox, archive, db_path, marker, job_id = sys.argv[1:6]
    original = Path(inbox) / "crash.png"
    real_unlink = Path.unlink

    def unlink(self, missing_ok=False):
        # The original, under its private name while it is archived: the copy is whole
        # and in place, stop right here.
        if self.parent == original.parent and self.name.startswith(".ocrwatch-retiring-"):
            Path(marker).write_text("copied")
            time.sleep(600)
        return real_unlink(self, missing_ok=missing_ok)

    Path.unlink = unlink
    config = Config(inbox=[Path(inbox)], database=Path(db_path), on_success="archive",
                    archive_dir=Path(archive))
    Lifecycle(config, Database(db_path)).finish(int(job_id), original,
                                                {"md": Path(inbox) / "crash.md"}, None, "archive")
""")


def test_kill_9_between_copy_and_removal_loses_nothing_and_doubles_nothing(
        tmp_path: Path, tmpfs_archive: Path) -> None:
    inbox = tmp_path / "inbox"
    original = drop(inbox, "crash.png", "crash test")
    (inbox / "crash.md").write_text("sidecar\n")
    content = original.read_bytes()
    db_path = tmp_path / "index.sqlite3"
    db = Database(db_path)
    jobs = JobQueue(db)
    st = original.stat()
    jobs.offer(original, st.st_size, st.st_mtime_ns, file_sha256(original))
    job = jobs.known(original)
    assert job is not None
    # Read and done, as when on_success runs.
    assert jobs.claim() is not None
    assert jobs.complete(job.id, [PageText("crash test", "crash test")], engine="fake",
                         md_path=inbox / "crash.md", txt_path=None, sha256=job.sha256)
    marker = tmp_path / "copied"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(inbox), str(tmpfs_archive),
                              str(db_path), str(marker), str(job.id)])
    try:
        wait_for(marker.exists, 60, "the copy to be in place")
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    dest = tmpfs_archive / "inbox" / "crash.png"
    held = retiring_name(original, job.id)
    # The moment of the crash: both copies exist, whole (the original under its private
    # name, journalled with the two moves).
    assert held.read_bytes() == content and dest.read_bytes() == content
    assert len(db.query("SELECT 1 FROM moves")) == 3
    config = Config(inbox=[inbox], database=db_path, on_success="archive",
                    archive_dir=tmpfs_archive)
    # The next start finishes the move.
    with Daemon(config, engine=FakeEngine(), watch=False):
        pass
    assert not original.exists() and not held.exists() and dest.read_bytes() == content
    assert (tmpfs_archive / "inbox" / "crash.md").read_text() == "sidecar\n"
    assert not (inbox / "crash.md").exists()
    assert sorted(p.name for p in dest.parent.iterdir()) == ["crash.md", "crash.png"]
    assert db.query("SELECT 1 FROM moves") == []
    moved = jobs.known(dest)
    assert moved is not None and moved.id == job.id and moved.state == "done"
    assert [h.md_path for h in search(db, "crash")] == [
        str(tmpfs_archive / "inbox" / "crash.md")]
    db.close()


def test_recovery_keeps_both_when_the_copy_differs(tmp_path: Path) -> None:
    inbox, archive = tmp_path / "inbox", tmp_path / "archive"
    original = drop(inbox, "a.png", "a")
    (archive / "inbox").mkdir(parents=True)
    (archive / "inbox" / "a.png").write_bytes(b"someone else's file")
    db = Database(tmp_path / "index.sqlite3")
    with db.transaction() as conn:
        conn.execute("INSERT INTO moves(job_id, src, dest) VALUES (1, ?, ?)",
                     (os.fsencode(original), os.fsencode(archive / "inbox" / "a.png")))
    config = Config(inbox=[inbox], database=db.path, on_success="archive",
                    archive_dir=archive)
    Lifecycle(config, db).recover()
    assert original.exists()
    assert (archive / "inbox" / "a.png").read_bytes() == b"someone else's file"
    db.close()


@pytest.mark.parametrize(("toml", "message"), [
    ('on_success = "archive"\n', "needs archive_dir"),
    ('on_success = "archive"\narchive_dir = "{inbox}/old"\n', "overlap"),
    ('on_success = "shred"\n', "is not one of keep, archive, delete"),
    ('outputs = ["md", "docx"]\n', "must list some of md, txt, pdf"),
    ('outputs = []\n', "must list some of md, txt, pdf"),
    ('archive_layout = "weekly"\n', "is not one of mirror, date"),
    ('on_done = ["", "x"]\n', "must start with the program"),
    # A string is one program's name, never a shell line: no program has that name.
    ('on_done = "rm -rf /"\n', "'rm -rf /' is not a program"),
    ('on_done = ["/nonexistent/filer", "{file}"]\n', "is not a program that can be run"),
    ('on_done = ["sh", "-c", "echo $OCRWATCH_FILE"]\n', None),
    ('on_done_timeout = 0\n', "greater than 0"),
])
def test_settings_are_checked(tmp_path: Path, toml: str, message: str | None) -> None:
    from ocrwatch import config as cfg
    from ocrwatch.core.errors import ConfigError

    inbox = tmp_path / "inbox"
    path = tmp_path / "config.toml"
    path.write_text(f'inbox = ["{inbox}"]\ndatabase = "{tmp_path}/db.sqlite3"\n'
                    + toml.replace("{inbox}", str(inbox)))
    if message is None:
        assert cfg.load(path, environ={}).on_done == ["sh", "-c", "echo $OCRWATCH_FILE"]
        return
    with pytest.raises(ConfigError, match=message):
        cfg.load(path, environ={})


@pytest.mark.skipif(shutil.which("pdftotext") is None,
                    reason="poppler-utils is not installed (apt install poppler-utils)")
def test_a_real_ocrwatch_run_archives_with_a_searchable_pdf_and_runs_the_hook(
        tmp_path: Path) -> None:
    """The whole chain through the command and a config file: Tesseract, the PDF, the
    archive, the hook."""
    import json as _json

    from helpers import child_env, ocrwatch

    home = tmp_path / "home"
    inbox, archive = home / "OCR-Inbox", tmp_path / "archive"
    inbox.mkdir(parents=True)
    record = tmp_path / "hook.json"
    hook = tmp_path / "hook.py"
    part = tmp_path / "hook.part"
    hook.write_text("import json, sys, pathlib\n"
                    f"pathlib.Path({str(part)!r}).write_text(json.dumps(sys.argv[1:]))\n"
                    f"pathlib.Path({str(part)!r}).rename({str(record)!r})\n")
    config = tmp_path / "config.toml"
    config.write_text(
        f'inbox = ["{inbox}"]\nengine = "tesseract"\nsettle_seconds = 0.3\n'
        'outputs = ["md", "txt", "pdf"]\npdfa = "never"\n'
        f'on_success = "archive"\narchive_dir = "{archive}"\n'
        f'on_done = ["{sys.executable}", "{hook}", "{{pdf}}"]\n')
    env = child_env(home, {"OCRWATCH_CONFIG": str(config)})
    proc = subprocess.Popen([sys.executable, "-m", "ocrwatch", "run", "--no-tray"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        text_page(["Ledger of the Vienna office"]).save(inbox / "ledger.png", dpi=(200, 200))
        wait_for(record.exists, 120, "the hook after the archive")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    pdf = archive / "OCR-Inbox" / "ledger.ocr.pdf"
    assert _json.loads(record.read_text()) == [str(pdf)]
    assert sorted(p.name for p in pdf.parent.iterdir()) == [
        "ledger.md", "ledger.ocr.pdf", "ledger.png", "ledger.txt"]
    assert list(inbox.iterdir()) == []
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True,
                          check=True).stdout
    assert "Vienna office" in text
    hits = _json.loads(ocrwatch(["search", "Vienna", "--json"], env, check=True).stdout)
    assert [h["path"] for h in hits] == [str(archive / "OCR-Inbox" / "ledger.png")]
