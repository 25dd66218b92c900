"""Originals are archived or deleted only after a complete, verified read, and never lost.

- ``ocrwatch add`` never moves or deletes the files it is given unless its command line
  says so, and its summary counts what happened to them;
- a read that is incomplete (a PDF page tree that lies about its count, a searchable PDF
  that could not be made, an empty answer for a page that is not blank) keeps the
  original, and says why in the job row and in ``ocrwatch status``;
- a page with a real text layer and a scan pasted on it has the scan's words read;
- an archive onto a real full file system keeps the results and records the failure; a
  failed archive leaves no move record that could archive the next, unread version;
- ``ocrwatch run`` SIGKILLed between "done" and archiving archives at its next start
  (a kill loop, ``OCRWATCH_RETIRE_KILLS`` rounds, 20 in CI).

Real files, a real SQLite index, real inotify, real processes and a real tmpfs (mounted
by the test as root; skipped with the reason otherwise). The fake engine stands in for
the engine only.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pikepdf
import pytest

from ocrwatch.config import Config
from ocrwatch.core.domain import PageText
from ocrwatch.core.status import format_status
from ocrwatch.pages.pdftext import decide
from ocrwatch.results import pdfout
from ocrwatch.results.lifecycle import Lifecycle
from ocrwatch.results.retire import why_keep
from ocrwatch.store.db import Database
from ocrwatch.store.jobs import JobQueue, file_sha256

from .conftest import RecordingEngine, StartDaemon
from .helpers import (
    Home,
    check_fake_sidecars,
    drop,
    ended,
    image_bytes,
    job,
    ocrwatch_cli,
    page_image,
    pdf_bytes,
    states,
    wait_for,
    write,
)

KILLS = int(os.environ.get("OCRWATCH_RETIRE_KILLS", "20"))
SEED = int(os.environ.get("OCRWATCH_RETIRE_SEED", str(random.randrange(1 << 30))))


# -- files --------------------------------------------------------------------------------
def lying_pdf(texts: list[str], count: int) -> bytes:
    """A PDF of ``len(texts)`` drawn pages whose page tree's ``/Count`` says ``count``:
    PDFium believes the count, qpdf (and Ghostscript) walk the tree and find them all."""
    with pikepdf.open(io.BytesIO(pdf_bytes(texts))) as pdf:
        out = io.BytesIO()
        pdf.save(out, qdf=True, object_stream_mode=pikepdf.ObjectStreamMode.disable)
    data = out.getvalue()
    real = f"/Count {len(texts)}".encode()
    assert data.count(real) == 1
    # The same length: the cross-reference table stays right.
    return data.replace(real, f"/Count {count}".encode().ljust(len(real)))


def text_layer_with_a_scan(path: Path, scan_words: str) -> Path:
    """A born-digital page (real Helvetica text) with a scan of ``scan_words`` pasted
    over a third of it, as when a signed page or a receipt is put into a report."""
    from fpdf import FPDF

    pdf = FPDF(unit="pt", format="A4")
    pdf.add_page()
    pdf.set_font("Helvetica", size=11)
    body = ("The quarterly report lists every payment made by the office in the period "
            "under review, with the supplier, the amount and the date of each one. ") * 6
    pdf.multi_cell(0, 14, body)
    scan = page_image(scan_words, (1200, 420)).convert("L")
    buf = io.BytesIO()
    scan.save(buf, "PNG")
    buf.seek(0)
    # 595 x 275 pt on a 595 x 842 pt page: a third of it.
    pdf.image(buf, x=0, y=540, w=595, h=275)
    pdf.output(str(path))
    return path


# -- 1. `ocrwatch add` ---------------------------------------------------------------------
@pytest.mark.parametrize("on_success", ["delete", "archive"])
def test_add_never_moves_or_deletes_the_files_it_is_given(home: Home, on_success: str) -> None:
    """``on_success`` is the inbox's; ``ocrwatch add ~/Documents/letter.jpg`` leaves the
    letter where it is, and says "1 read"."""
    archive = home.root / "archive"
    config = home.root / "config.toml"
    config.write_text(f'on_success = "{on_success}"\narchive_dir = "{archive}"\n')
    letter = write(home.root / "Documents" / "letter.jpg", image_bytes("dear sir", "JPEG"))
    content = letter.read_bytes()
    done = ocrwatch_cli(home, "add", "--config", str(config), "--engine", "fake",
                        "--inbox", str(home.inbox), "--database", str(home.database),
                        str(letter))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert letter.read_bytes() == content, "the file named to add was moved or deleted"
    assert not archive.exists() or not any(archive.rglob("letter*")), list(archive.rglob("*"))
    assert "1 read, 0 failed" in done.stdout, out
    check_fake_sidecars(letter, 1)


def test_add_applies_on_success_only_when_its_command_line_asks(home: Home) -> None:
    letter = write(home.root / "Documents" / "letter.png", image_bytes("delete me"))
    done = ocrwatch_cli(home, "add", "--engine", "fake", "--inbox", str(home.inbox),
                        "--database", str(home.database), "--on-success", "delete",
                        str(letter))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert not letter.exists()
    assert "1 read, 0 failed, 1 deleted" in done.stdout, out
    txt = letter.with_suffix(".txt")
    assert txt.read_text().startswith("fake text of letter.png page 1"), out


def test_reread_reads_archived_files_again_where_they_are(home: Home,
                                                          run_daemon: StartDaemon) -> None:
    """``ocrwatch reread --all`` after archiving: read again, not archived a second time
    (into ``archive/other``)."""
    archive = home.root / "archive"
    daemon, _engine = run_daemon(on_success="archive", archive_dir=archive)
    path = drop(home.inbox / "scan.png", image_bytes("archived once"))
    moved = archive / "inbox" / "scan.png"
    wait_for(lambda: job(home.database, moved) is not None and not daemon.db.query(
        "SELECT 1 FROM moves"), 30, "the archive")
    daemon.close()
    config = home.root / "config.toml"
    config.write_text(f'on_success = "archive"\narchive_dir = "{archive}"\n')
    done = ocrwatch_cli(home, "reread", "--all", "--config", str(config), "--engine", "fake",
                        "--inbox", str(home.inbox), "--database", str(home.database))
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "1 read again, 0 failed" in done.stdout, out
    assert moved.exists() and not path.exists(), sorted(archive.rglob("*"))
    assert not (archive / "other").exists(), sorted(archive.rglob("*"))


# -- 2. only a complete, verified read parts with the original ----------------------------
def test_a_pdf_whose_page_tree_lies_is_read_whole_before_it_is_deleted(
        home: Home, run_daemon: StartDaemon) -> None:
    """``/Count 1`` for two pages: PDFium alone reads one; qpdf's count is read too, the
    larger wins, both pages are read, and only then is the original deleted."""
    _daemon, engine = run_daemon(on_success="delete")
    data = lying_pdf(["alpha page one", "beta page two"], count=1)
    path = home.inbox / "lying.pdf"
    drop(path, data)
    row = wait_for(lambda: ended(home.database, home.inbox / "lying.md") or
                   ended(home.database, path), 30, "the PDF to be read")
    assert row["state"] == "done", row["reason"]
    assert row["pages"] == 2, "a page the page tree does not count was not read"
    assert engine.read.count(("lying.pdf", 1)) == 1
    check_fake_sidecars(path, 2)
    # The deletion follows the job's "done" (its retire owed until it is carried out).
    wait_for(lambda: not path.exists(), 30, "the original to be deleted once read whole")


def test_the_page_count_is_checked_by_a_second_reader(tmp_path: Path) -> None:
    """Two pages read of a PDF whose tree says 1: fine; one page read: kept, with both
    readers' counts in the reason."""
    inbox = tmp_path / "inbox"
    path = write(inbox / "lying.pdf", lying_pdf(["one", "two"], count=1))
    config = Config(inbox=[inbox], database=tmp_path / "db.sqlite3", outputs=["md"])
    md = tmp_path / "lying.md"
    page = PageText("# one", "one\n")
    md.write_text("# one\n")
    reason = why_keep(config, path, [page], {"md": md})
    assert reason is not None and "PDFium counts 1, qpdf 2" in reason, reason
    two = [PageText("# one", "one\n"), PageText("# two", "two\n")]
    md.write_text("<!-- page 1 -->\n\n# one\n\n---\n\n<!-- page 2 -->\n\n# two\n")
    assert why_keep(config, path, two, {"md": md}) is None


def test_no_searchable_pdf_keeps_the_original(home: Home, run_daemon: StartDaemon,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``outputs = ["pdf"]``, and the PDF cannot be made: nothing was written, so the
    original stays, and the job row and ``status`` say why."""
    def broken(*_args: Any, **_kwargs: Any) -> list[str]:
        raise RuntimeError("the PDF writer broke")

    monkeypatch.setattr(pdfout, "write", broken)
    daemon, _engine = run_daemon(on_success="delete", outputs=["pdf"], pdfa="never")
    path = drop(home.inbox / "scan.png", image_bytes("pdf only"))
    row = wait_for(lambda: ended(home.database, path), 60, "the scan to be read")
    assert row["state"] == "done", row["reason"]
    assert path.exists(), "deleted with no output written"
    assert row["retire"] == "kept"
    assert "no searchable PDF was written: the PDF writer broke" in row["retire_reason"]
    kept = daemon.status().kept
    assert [k.path for k in kept] == [str(path)] and "no searchable PDF" in kept[0].reason
    shown = format_status(daemon.status())
    assert "originals kept, not archived or deleted:" in shown, shown
    assert f"{path}: no searchable PDF was written" in shown, shown


class EmptyAnswers(RecordingEngine):
    """Answers nothing at all for the pages of files named ``*silent*``, as a model
    server does when it sends ``"content": ""``."""

    def recognize(self, pages: Any) -> list[PageText]:
        out = super().recognize(pages)
        return [PageText("", "") if "silent" in p.source.name else r
                for p, r in zip(pages, out, strict=True)]


@pytest.mark.parametrize("on_success", ["delete", "archive"])
def test_an_empty_answer_for_a_page_that_is_not_blank_keeps_the_original(
        home: Home, run_daemon: StartDaemon, on_success: str) -> None:
    daemon, _engine = run_daemon(EmptyAnswers(), on_success=on_success,
                                 archive_dir=home.root / "archive")
    data = pdf_bytes(["first page", "second page"])
    path = drop(home.inbox / "silent.pdf", data)
    wait_for(lambda: daemon.jobs.counts()["done"] == 1 and daemon.is_idle(), 30,
             "the PDF to be read")
    assert path.read_bytes() == data, "parted with after an empty answer"
    row = job(home.database, path)
    assert row is not None and row["state"] == "done", row
    assert row["retire"] == "kept"
    assert "page 1 may not have been read: the engine's answer was empty" in \
        row["retire_reason"], row["retire_reason"]
    assert "doubtful text" in row["warnings"], row["warnings"]
    # The control socket's answer carries it too.
    status = daemon.status().to_dict()
    assert status["kept"][0]["path"] == str(path), status["kept"]
    # A copy of it reuses the pages read: it is kept for the same reason.
    copy = drop(home.inbox / "copy.pdf", data)
    row = wait_for(lambda: ended(home.database, copy), 30, "the copy")
    assert copy.exists() and row["retire"] == "kept", dict(row)


@pytest.mark.parametrize("content", ["", None, {"text": "an object"}],
                         ids=["empty", "null", "object"])
def test_a_remote_answer_that_is_no_text_keeps_the_original(tmp_path: Path,
                                                            content: Any) -> None:
    """The remote engine over real HTTP on 127.0.0.1, ``on_success = "delete"``: an
    answer of ``""``, ``null`` or an object is never taken for a blank page whose
    original may go."""
    from fake_openai import FakeServer

    from ocrwatch.daemon import Daemon

    inbox = tmp_path / "inbox"
    path = write(inbox / "letter.png", image_bytes("a letter", size=(800, 600)))
    data = path.read_bytes()
    config = Config(inbox=[inbox], database=tmp_path / "index.sqlite3", settle_seconds=0.3,
                    engine="remote", on_success="delete")
    with FakeServer(mode="content") as server:
        server.content = content
        config.remote.urls = [server.url]
        with Daemon(config) as daemon:
            wait_for(lambda: daemon.jobs.counts()["done"] + daemon.jobs.counts()["failed"]
                     == 1 and daemon.is_idle(), 60, "the letter to be read")
            rows = daemon.db.query("SELECT * FROM jobs")
    assert path.read_bytes() == data, f"the original went: {dict(rows[0])}"
    (row,) = rows
    assert row["state"] == "failed" or (row["state"] == "done" and row["retire"] == "kept"), \
        dict(row)


def test_a_text_layer_with_a_scan_over_a_third_of_the_page_is_read_with_ocr(
        tmp_path: Path) -> None:
    import pypdfium2 as pdfium

    path = text_layer_with_a_scan(tmp_path / "report.pdf", "SIGNED RECEIPT 4471")
    doc = pdfium.PdfDocument(str(path))
    try:
        decision = decide(doc[0], "auto")
    finally:
        doc.close()
    assert decision.text is None, "the scan's words would never be read"
    assert "an image covers 33% of the page" in decision.reason, decision.reason


@pytest.mark.skipif(shutil.which("tesseract") is None,
                    reason="Tesseract is not installed (apt install tesseract-ocr)")
def test_the_scan_beside_a_text_layer_is_read_by_the_real_engine(
        home: Home, tmp_path: Path) -> None:
    """The whole way with Tesseract: the scan's words and the layer's words both reach
    the sidecar."""
    from ocrwatch.daemon import Daemon

    from .conftest import base_config

    path = text_layer_with_a_scan(home.inbox / "report.pdf", "SIGNED RECEIPT 4471")
    config = base_config(home, engine="tesseract", languages=["eng"])
    with Daemon(config, watch=False) as daemon:
        daemon.consider(path)
        row = wait_for(lambda: ended(home.database, path), 120, "the PDF to be read")
    assert row["state"] == "done", row["reason"]
    text = path.with_suffix(".txt").read_text()
    assert "RECEIPT 4471" in text, text
    assert "quarterly report" in text, text


# -- 3 and 4. a real full disk --------------------------------------------------------------
@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "small"
    where.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
                              capture_output=True, text=True, timeout=30)
    except OSError as exc:
        pytest.skip(f"cannot run mount: {exc}")
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs was refused ({done.stderr.strip()}); run as root")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, timeout=30)


def fill(folder: Path, leave: int = 0) -> Path:
    """Fill the file system of ``folder``, then give back ``leave`` bytes (whole pages)."""
    filler = folder / "filler.bin"
    with filler.open("wb", buffering=0) as fh, contextlib.suppress(OSError):
        while True:
            fh.write(b"\0" * 4096)
    if leave:
        size = filler.stat().st_size
        os.truncate(filler, max(0, size - -(-leave // 4096) * 4096))
    return filler


def settled(daemon: Any, home: Home, caplog: pytest.LogCaptureFixture) -> None:
    """Until the watcher has seen what happened so far: a rescan, then a file dropped
    after it is read and archived (or not)."""
    daemon.rescan()
    marker = drop(home.inbox / f"marker-{time.monotonic_ns()}.png", image_bytes("marker"))
    wait_for(lambda: not marker.exists() or f"{marker} is done but could not be" in
             caplog.text, 30, "a file dropped after it")


def test_archive_onto_a_full_disk_keeps_the_results_and_says_so(
        home: Home, run_daemon: StartDaemon, small_tmpfs: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """Room for the original but not for its sidecars: the original comes back, the
    sidecars and the index entry stay, the job says "failed" and why; once there is
    room, the next start archives it."""
    archive = small_tmpfs / "archive"
    archive.mkdir()
    daemon, _engine = run_daemon(on_success="archive", archive_dir=archive,
                                 rescan_minutes=60.0)
    data = image_bytes("full disk", size=(900, 700))
    filler = fill(small_tmpfs, leave=len(data))
    path = drop(home.inbox / "scan.png", data)
    wait_for(lambda: f"{path} is done but could not be archived" in caplog.text, 30,
             "the archive to fail")
    settled(daemon, home, caplog)
    row = job(home.database, path)
    assert row is not None and row["state"] == "done", "the index entry was dropped"
    assert path.read_bytes() == data
    check_fake_sidecars(path, 1)
    assert row["retire"] == "failed"
    assert "the disk is full" in row["retire_reason"], row["retire_reason"]
    assert not list(archive.rglob("scan*")), list(archive.rglob("*"))
    kept = {k.path: k.reason for k in daemon.status().kept}
    assert "could not be archived: the disk is full" in kept[str(path)], kept
    daemon.close()
    filler.unlink()
    run_daemon(on_success="archive", archive_dir=archive)
    moved = archive / "inbox" / "scan.png"
    # Tried again at start, before the watcher starts.
    assert moved.read_bytes() == data and not path.exists()
    check_fake_sidecars(moved, 1)
    row = job(home.database, moved)
    assert row is not None and row["retire"] is None and row["state"] == "done"


def test_an_archive_the_full_index_cannot_record_is_no_deletion(
        home: Home, run_daemon: StartDaemon, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The files are in the archive, but the index's disk is full when it should say so
    (SQLite's error, injected at the transaction that records it): the original's "gone"
    event, and the rescan after it, find the move in the journal and finish recording it;
    the entry and the sidecars are never dropped as if the user had deleted the file."""
    archive = home.root / "archive"
    real_settle = Lifecycle._settle
    calls = {"n": 0}

    def settle(self: Lifecycle, job_id: int, moves: Any, *args: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            with self.db.transaction():
                raise sqlite3.OperationalError("database or disk is full")
        real_settle(self, job_id, moves, *args, **kwargs)

    monkeypatch.setattr(Lifecycle, "_settle", settle)
    daemon, _engine = run_daemon(on_success="archive", archive_dir=archive)
    path = drop(home.inbox / "scan.png", image_bytes("index full"))
    moved = archive / "inbox" / "scan.png"
    wait_for(lambda: f"{path} is done but could not be archived" in caplog.text, 30,
             "the archive to go unrecorded")

    def recorded() -> Any:
        daemon.rescan()  # finds the original gone, a few settle periods later
        return job(home.database, moved)

    row = wait_for(recorded, 30, "the archive to be recorded")
    assert row["state"] == "done" and row["retire"] is None, dict(row)
    assert not [r for r in daemon.db.query("SELECT path FROM jobs")
                if os.fsdecode(r["path"]) != str(moved)]
    check_fake_sidecars(moved, 1)
    assert daemon.db.query("SELECT 1 FROM moves") == []
    assert os.fsdecode(row["md_path"]) == str(moved.with_suffix(".md"))


def test_a_failed_archive_never_archives_the_next_unread_version(
        home: Home, daemon_process: Any, small_tmpfs: Path) -> None:
    """No room at all in the archive; a new version is saved over the original; room
    again and a new start: the new version is read before it is archived, with its own
    sidecars, never the old ones."""
    archive = small_tmpfs / "archive"
    archive.mkdir()
    config = home.root / "config.toml"
    config.write_text(f'on_success = "archive"\narchive_dir = "{archive}"\n')
    proc = daemon_process("--config", str(config)).start()
    proc.wait_ready()
    filler = fill(small_tmpfs)
    path = drop(home.inbox / "scan.png", image_bytes("old version", size=(600, 400)))
    wait_for(lambda: f"{path} is done but could not be archived" in proc.output(), 30,
             "the archive to fail")
    assert proc.stop() == 0
    new = image_bytes("new version", size=(800, 300))
    drop(path, new)
    filler.unlink()
    proc.start()
    moved = archive / "inbox" / "scan.png"
    wait_for(lambda: moved.exists() and moved.with_suffix(".txt").exists() and
             (r := job(home.database, moved)) is not None and r["state"] == "done", 60,
             "the new version to be archived")
    assert moved.read_bytes() == new
    # Its own sidecars: the fake engine names the page's size.
    txt = moved.with_suffix(".txt").read_text()
    assert "(1540x578)" in txt, f"archived beside another version's text: {txt!r}"
    assert proc.stop() == 0


def test_a_stale_move_record_moves_nothing_that_was_not_read(tmp_path: Path) -> None:
    """A move record left by a crash, and a new version at the original's name: the next
    start leaves the new version in place, for its own reading."""
    inbox, archive = tmp_path / "inbox", tmp_path / "archive"
    original = write(inbox / "a.png", image_bytes("old"))
    archive.mkdir()
    db = Database(tmp_path / "index.sqlite3")
    jobs = JobQueue(db)
    st = original.stat()
    jobs.offer(original, st.st_size, st.st_mtime_ns, file_sha256(original))
    claimed = jobs.claim()
    assert claimed is not None
    assert jobs.complete(claimed.id, [PageText("old", "old")], engine="fake", md_path=None,
                         txt_path=None, sha256=claimed.sha256)
    with db.transaction() as conn:
        conn.execute("INSERT INTO moves(job_id, src, dest) VALUES (?, ?, ?)",
                     (claimed.id, os.fsencode(original), os.fsencode(archive / "a.png")))
    write(original, image_bytes("new, unread"))
    config = Config(inbox=[inbox], database=db.path, on_success="archive",
                    archive_dir=archive)
    Lifecycle(config, db).recover()
    assert original.read_bytes() == image_bytes("new, unread")
    assert not (archive / "a.png").exists()
    assert db.query("SELECT 1 FROM moves") == []
    db.close()


# -- 5. SIGKILL between "done" and archiving -------------------------------------------------
def _done_line(log: Path, path: Path) -> bool:
    try:
        return f"done: {path} (" in log.read_text(errors="replace")
    except FileNotFoundError:
        return False


def _wait_retired(home: Home, proc: Any, path: Path, where: Path,
                  retired: Callable[[], bool]) -> None:
    """Wait for ``path`` to be archived or deleted (``retired``); on a timeout, say what
    the index and every daemon's log said of it, for the next reader."""
    try:
        wait_for(retired, 60, f"{path.name} to be archived or deleted")
    except AssertionError as exc:
        row = job(home.database, path) or job(home.database, where)
        lines = [f"daemon {n}: {line}" for n, log in enumerate(proc.logs)
                 for line in log.read_text(errors="replace").splitlines()
                 if path.name in line or path.stem in line]
        raise AssertionError(f"{exc}; exists: {path.exists()}; its job: "
                             f"{dict(row) if row else None}; the daemons' lines of it: "
                             f"{lines[-30:]}") from None


@pytest.mark.parametrize("on_success", ["archive", "delete"])
def test_sigkill_between_done_and_archive_is_resumed_at_start(
        home: Home, daemon_process: Any, on_success: str) -> None:
    """A real daemon SIGKILLed at randomised moments around each file's "done" (the
    instant it is logged, or up to 40 ms after, or at a random time after the drop),
    restarted each time: every file ends archived (or deleted) once, with its sidecars,
    its index entry at the archive (or at its .md), the inbox holding no original;
    nothing lost, nothing left twice, nothing owed."""
    rng = random.Random(SEED)
    print(f"OCRWATCH_RETIRE_SEED={SEED} OCRWATCH_RETIRE_KILLS={KILLS}")
    archive = home.root / "archive"
    config = home.root / "config.toml"
    config.write_text(f'on_success = "{on_success}"\narchive_dir = "{archive}"\n')
    proc = daemon_process("--config", str(config))
    proc.start().wait_ready()
    files: list[tuple[Path, bytes]] = []
    in_window = 0
    n = 0
    # A window that random kills can miss under load: further rounds (up to three times
    # KILLS) until one has landed in it, so that the test always tests something.
    while n < KILLS or (in_window == 0 and n < 3 * KILLS):
        # Each earlier file read first: a kill at a random time then lands on this file's
        # reading alone. Two kills during one file's readings fail it as a file that
        # kills its reader (the crash guard, as the out-of-memory killer would); that
        # is not what this test is about (seed 874931491 did it to scan008).
        wait_for(lambda: set(states(home.database)) <= {"done", "failed"}, 60,
                 "the earlier files to be read")
        data = image_bytes(f"file {n}", "TIFF", size=(rng.randrange(1500, 2500), 1800))
        path = home.inbox / f"scan{n:03d}.tif"
        n += 1
        files.append((path, data))
        log = proc.logs[-1]
        drop(path, data)
        how = rng.random()
        if how < 0.8:
            wait_for(lambda p=path, lg=log: _done_line(lg, p), 60, f"{path.name} done",
                     interval=0.0005)
            if how >= 0.4:
                time.sleep(rng.uniform(0, 0.04))
        else:
            time.sleep(rng.uniform(0, 1.0))
        proc.kill()
        if path.exists() and (r := job(home.database, path)) is not None \
                and r["state"] == "done":
            in_window += 1  # done, not archived: the moment this test is about
        proc.start().wait_ready()
    for path, data in files:
        if on_success == "archive":
            where = archive / "inbox" / path.name
            _wait_retired(home, proc, path, where, lambda m=where: (
                r := job(home.database, m)) is not None and r["state"] == "done")
            assert where.read_bytes() == data
            check_fake_sidecars(where, 1)
        else:
            where = path.with_suffix(".md")
            _wait_retired(home, proc, path, where, lambda m=where, p=path: (
                r := job(home.database, m)) is not None and r["state"] == "done"
                and not p.exists())
            check_fake_sidecars(path, 1)
        assert not path.exists()
    assert proc.stop() == 0
    left = sorted(p.name for p in home.inbox.iterdir())
    if on_success == "archive":
        assert left == []
        names = sorted(p.name for p in (archive / "inbox").iterdir())
        assert names == sorted(f"{p.stem}{s}" for p, _ in files
                               for s in (".md", ".tif", ".txt"))
    else:
        assert left == sorted(f"{p.stem}{s}" for p, _ in files for s in (".md", ".txt"))
    conn = sqlite3.connect(home.database)
    try:
        assert conn.execute("SELECT COUNT(*) FROM moves").fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == len(files)
        assert conn.execute("SELECT COUNT(*) FROM jobs WHERE retire IS NOT NULL"
                            ).fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM pages").fetchone()[0] == len(files)
    finally:
        conn.close()
    print(f"{on_success}: {n} kills, {in_window} between done and {on_success}")
    assert in_window >= 1, "no kill landed between done and archiving: nothing was tested"
