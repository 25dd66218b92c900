"""A job's outputs as records (``job_outputs``): an index of the schema before them is
brought forward with every output kept; a file whose outputs include the searchable PDF,
hOCR and ALTO has them all follow a rename or a folder move, archived or deleted with the
original, given to on_done, and registered again by ``reindex --from-sidecars``.

A real daemon (inotify, SQLite), the fake engine for the text and Tesseract for the word
boxes the PDF, hOCR and ALTO carry.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from helpers import make_config, text_page, wait_for

from ocrwatch.config import Config
from ocrwatch.core.naming import output_paths
from ocrwatch.daemon import Daemon
from ocrwatch.reindex import from_sidecars
from ocrwatch.store import db as dbmod
from ocrwatch.store.db import Database
from ocrwatch.store.index import search
from ocrwatch.store.jobs import JobQueue
from ocrwatch.store.migrations import MIGRATIONS
from ocrwatch.testing.fake import FakeEngine

ALL = ["md", "txt", "pdf", "hocr", "alto"]
needs_tesseract = pytest.mark.skipif(shutil.which("tesseract") is None,
                                     reason="the PDF, hOCR and ALTO need Tesseract's boxes")


def recorded(database: Path, original: Path) -> dict[str, Path]:
    """The outputs the index records for ``original``'s job, by name."""
    db = Database(database, readonly=True)
    try:
        rows = db.query("SELECT o.name, o.path FROM job_outputs o JOIN jobs j "
                        "ON j.id = o.job_id WHERE j.path = ?", (os.fsencode(original),))
        return {str(r["name"]): Path(os.fsdecode(r["path"])) for r in rows}
    finally:
        db.close()


def files_of(d: Daemon, original: Path) -> dict[str, Path]:
    job = d.jobs.known(original)
    return d.jobs.outputs_of(job.id) if job is not None and job.state == "done" else {}


def all_there(outputs: dict[str, Path], names: list[str]) -> bool:
    return sorted(outputs) == sorted(names) and all(p.is_file() for p in outputs.values())


def drop(folder: Path, name: str, line: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    text_page([line]).save(path)
    return path


# -- migration 014 ---------------------------------------------------------------------
def test_an_index_of_the_schema_before_keeps_every_output(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "index.sqlite3"
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    monkeypatch.setattr(dbmod, "MIGRATIONS", [m for m in MIGRATIONS if m[0] < "014"])
    old = Database(path)
    queue = JobQueue(old)
    for name in ("scan.png", "letter.png", "queued.png"):
        queue.offer(inbox / name, 1, 1, f"sha-{name}")
    known = {name: queue.known(inbox / name) for name in ("scan.png", "letter.png",
                                                          "queued.png")}
    ids = {name: job.id for name, job in known.items() if job is not None}
    old.close()
    # As the version before wrote them: a column for the .md and the .txt, the PDF, hOCR
    # and ALTO found by name beside them. letter.png had outputs = ["txt", "pdf"].
    for name in ("scan.md", "scan.txt", "scan.ocr.pdf", "scan.hocr", "letter.txt",
                 "letter.ocr.pdf"):
        (inbox / name).write_text(name)
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO pages(job_id, page, text, markdown, warnings) "
                     "VALUES (?, 1, 'harbour words', 'harbour words', '[]')", (ids["scan.png"],))
        conn.execute("UPDATE jobs SET state = 'done', md_path = ?, txt_path = ? WHERE id = ?",
                     (os.fsencode(inbox / "scan.md"), os.fsencode(inbox / "scan.txt"),
                      ids["scan.png"]))
        conn.execute("UPDATE jobs SET state = 'done', txt_path = ? WHERE id = ?",
                     (os.fsencode(inbox / "letter.txt"), ids["letter.png"]))
    conn.close()
    monkeypatch.setattr(dbmod, "MIGRATIONS", MIGRATIONS)
    db = Database(path)
    try:
        jobs = JobQueue(db)
        assert jobs.outputs_of(ids["scan.png"]) == {
            "md": inbox / "scan.md", "txt": inbox / "scan.txt", "pdf": inbox / "scan.ocr.pdf",
            "hocr": inbox / "scan.hocr"}  # no scan.alto.xml was there
        assert jobs.outputs_of(ids["letter.png"]) == {
            "txt": inbox / "letter.txt", "pdf": inbox / "letter.ocr.pdf"}
        assert jobs.outputs_of(ids["queued.png"]) == {}
        # What read the columns still reads them; the rows kept.
        (row,) = db.query("SELECT md_path, txt_path FROM jobs WHERE id = ?", (ids["scan.png"],))
        assert (row["md_path"], row["txt_path"]) == (os.fsencode(inbox / "scan.md"),
                                                     os.fsencode(inbox / "scan.txt"))
        assert [(h.path, h.md_path) for h in search(db, "harbour")] == [
            (str(inbox / "scan.png"), str(inbox / "scan.md"))]
        assert jobs.was_done(tmp_path / "elsewhere.png", [inbox / "scan.hocr"])
        # A folder move carries every recorded output's name, columns too.
        moved = jobs.files.move_tree(inbox, tmp_path / "moved")
        assert {m.id: m.outputs for m in moved}[ids["letter.png"]] == {
            "txt": tmp_path / "moved" / "letter.txt",
            "pdf": tmp_path / "moved" / "letter.ocr.pdf"}
        (row,) = db.query("SELECT md_path FROM jobs WHERE id = ?", (ids["scan.png"],))
        assert row["md_path"] == os.fsencode(tmp_path / "moved" / "scan.md")
    finally:
        db.close()


# -- follow ----------------------------------------------------------------------------
@needs_tesseract
@pytest.mark.parametrize("outputs", [ALL, ["txt", "hocr", "alto"]])
def test_every_output_follows_a_rename_and_a_folder_move(tmp_path: Path,
                                                         outputs: list[str]) -> None:
    config = make_config(tmp_path, outputs=outputs)
    inbox = config.inbox[0]
    with Daemon(config, engine=FakeEngine()) as d:
        scan = drop(inbox / "sub", "scan.png", "harbour office")
        first = wait_for(lambda: (f := files_of(d, scan)) and all_there(f, outputs) and f,
                         60, "every output written")
        assert first == output_paths(inbox / "sub" / "scan", outputs)
        renamed = scan.with_name("renamed.png")
        scan.rename(renamed)
        want = output_paths(inbox / "sub" / "renamed", outputs)
        wait_for(lambda: files_of(d, renamed) == want and all_there(want, outputs), 30,
                 "every output renamed with it")
        assert not any(p.exists() for p in first.values())
        (inbox / "sub").rename(inbox / "other")
        want = output_paths(inbox / "other" / "renamed", outputs)
        wait_for(lambda: files_of(d, inbox / "other" / "renamed.png") == want
                 and all_there(want, outputs), 30, "every output's name after the folder")
        hits = search(d.db, "fake")
        assert [h.path for h in hits] == [str(inbox / "other" / "renamed.png")]


@needs_tesseract
def test_a_deleted_original_takes_every_output_ocrwatch_wrote_and_no_other(
        tmp_path: Path) -> None:
    config = make_config(tmp_path, outputs=ALL, delete_sidecars=True)
    inbox = config.inbox[0]
    with Daemon(config, engine=FakeEngine()) as d:
        scan = drop(inbox, "scan.png", "harbour office")
        written = wait_for(lambda: (f := files_of(d, scan)) and all_there(f, ALL) and f,
                           60, "every output written")
        keep = written["hocr"]
        keep.write_text("my corrections", encoding="utf-8")  # changed since: the user's
        os.utime(keep, (os.stat(keep).st_atime, os.stat(keep).st_mtime + 60))
        scan.unlink()
        wait_for(lambda: not any(p.exists() for o, p in written.items() if o != "hocr"), 30,
                 "the outputs ocrwatch wrote removed")
        assert keep.read_text(encoding="utf-8") == "my corrections"


# -- lifecycle -------------------------------------------------------------------------
RECORD = """import json, os, sys
open(os.environ["HOOK_RECORD"], "w").write(json.dumps(
    {"argv": sys.argv[1:], "env": {k: v for k, v in os.environ.items()
                                   if k.startswith("OCRWATCH_")}}))
"""


@needs_tesseract
def test_archive_takes_every_output_and_on_done_is_told_where(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script, record = tmp_path / "hook.py", tmp_path / "record.json"
    script.write_text(RECORD)
    monkeypatch.setenv("HOOK_RECORD", str(record))
    archive = tmp_path / "archive"
    config = make_config(tmp_path, outputs=ALL, on_success="archive", archive_dir=archive,
                         on_done=[sys.executable, str(script), "{file}", "{hocr}", "{alto}",
                                  "{pdf}"])
    inbox = config.inbox[0]
    folder = archive / "inbox"
    with Daemon(config, engine=FakeEngine()) as d:
        scan = drop(inbox, "scan.png", "harbour office")
        wait_for(record.exists, 60, "on_done to run")
        want = output_paths(folder / "scan", ALL)
        assert files_of(d, folder / "scan.png") == want
    assert all_there(want, ALL)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["scan.png", *(p.name for p in want.values())])
    assert not scan.exists() and list(inbox.iterdir()) == []
    told = json.loads(record.read_text())
    assert told["argv"] == [str(folder / "scan.png"), str(want["hocr"]), str(want["alto"]),
                            str(want["pdf"])]
    assert told["env"]["OCRWATCH_ALTO"] == str(want["alto"])


@needs_tesseract
def test_delete_names_the_entry_by_the_searchable_pdf_and_keeps_every_output(
        tmp_path: Path) -> None:
    config = make_config(tmp_path, outputs=ALL, on_success="delete")
    inbox = config.inbox[0]
    want = output_paths(inbox / "scan", ALL)
    with Daemon(config, engine=FakeEngine()) as d:
        scan = drop(inbox, "scan.png", "harbour office")
        wait_for(lambda: not scan.exists() and files_of(d, want["pdf"]) == want, 60,
                 "the original deleted, its entry named by its PDF")
        assert all_there(want, ALL)
        assert [h.path for h in search(d.db, "fake")] == [str(want["pdf"])]


def test_an_archive_owed_at_start_takes_every_recorded_output(tmp_path: Path) -> None:
    # Killed between "done" and archiving, outputs without a .md: resumed at the start.
    archive = tmp_path / "archive"
    config = make_config(tmp_path, outputs=["txt", "hocr", "alto"], on_success="archive",
                         archive_dir=archive)
    inbox = config.inbox[0]
    scan = drop(inbox, "scan.png", "harbour office")
    outputs = output_paths(inbox / "scan", ["txt", "hocr", "alto"])
    for path in outputs.values():
        path.write_text(path.name)
    db = Database(config.database)
    jobs = JobQueue(db)
    st = scan.stat()
    from ocrwatch.core.domain import PageText
    from ocrwatch.store.jobs import file_sha256

    jobs.offer(scan, st.st_size, st.st_mtime_ns, file_sha256(scan))
    job = jobs.claim()
    assert job is not None
    assert jobs.complete(job.id, [PageText("harbour", "harbour")], engine="fake",
                         outputs=outputs, sha256=job.sha256, retire="pending")
    db.close()
    with Daemon(config, engine=FakeEngine()) as d:
        want = output_paths(archive / "inbox" / "scan", ["txt", "hocr", "alto"])
        wait_for(lambda: files_of(d, archive / "inbox" / "scan.png") == want, 30,
                 "archived at start with every output")
    assert all_there(want, ["txt", "hocr", "alto"])
    assert list(inbox.iterdir()) == []


# -- reindex --from-sidecars -----------------------------------------------------------
@needs_tesseract
@pytest.mark.parametrize("on_success", ["keep", "delete"])
def test_reindex_from_sidecars_registers_every_output(tmp_path: Path,
                                                      on_success: str) -> None:
    config = make_config(tmp_path, outputs=ALL, on_success=on_success)
    inbox = config.inbox[0]
    want = output_paths(inbox / "scan", ALL)
    entry = inbox / "scan.png" if on_success == "keep" else want["pdf"]
    with Daemon(config, engine=FakeEngine()) as d:
        drop(inbox, "scan.png", "harbour office")
        wait_for(lambda: files_of(d, entry) == want, 60, "every output written")
    for name in ("index.sqlite3", "index.sqlite3-wal", "index.sqlite3-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    db = Database(config.database)
    try:
        restored = from_sidecars(config, db)
        assert restored.files == 1
    finally:
        db.close()
    assert recorded(config.database, entry) == want
    if on_success == "keep":  # and they follow the file as before the index was lost
        with Daemon(config, engine=FakeEngine()) as d:
            (inbox / "scan.png").rename(inbox / "moved.png")
            moved = output_paths(inbox / "moved", ALL)
            wait_for(lambda: files_of(d, inbox / "moved.png") == moved
                     and all_there(moved, ALL), 30, "every output follows")


def test_the_cli_reindex_from_sidecars_registers_the_outputs_it_finds(
        tmp_path: Path) -> None:
    from helpers import child_env, ocrwatch

    config: Config = make_config(tmp_path, outputs=ALL)
    inbox = config.inbox[0]
    drop(inbox, "scan.png", "harbour office")
    outputs = output_paths(inbox / "scan", ALL)
    for name, path in outputs.items():  # as ocrwatch wrote them; the index was lost
        path.write_text("harbour office\n" if name in ("md", "txt") else name)
    toml = tmp_path / "config.toml"
    toml.write_text(f'inbox = ["{inbox}"]\ndatabase = "{config.database}"\n'
                    f'outputs = {json.dumps(ALL)}\nengine = "fake"\n')
    ocrwatch(["reindex", "--from-sidecars", "--config", str(toml)], child_env(tmp_path),
             check=True)
    assert recorded(config.database, inbox / "scan.png") == outputs


def test_two_files_of_one_stem_named_at_once_get_names_of_their_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``a.JPG`` and ``a.jpg`` finished at the same moment: each chose ``a`` before the
    other had reserved it, and the second one's text replaced the first's sidecar (seen
    as one job's record pointing at nothing). The name is chosen and reserved at once."""
    import contextlib
    import threading

    from ocrwatch.core.naming import choose_stem as real_choose
    from ocrwatch.store import jobs as jobsmod

    db = Database(tmp_path / "index.sqlite3")
    queue = JobQueue(db)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    found = []
    for name in ("a.JPG", "a.jpg"):
        (inbox / name).write_bytes(name.encode())
        queue.offer(inbox / name, 5, 1, name)
        job = queue.known(inbox / name)
        assert job is not None
        found.append(job)
    both_in = threading.Barrier(2, timeout=1.0)

    def slow_choose(*args: object) -> Path:
        stem = real_choose(*args)  # type: ignore[arg-type]
        # Unserialised, both threads meet here with the same stem; serialised, the
        # barrier breaks and the other chooses after this one's reservation.
        with contextlib.suppress(threading.BrokenBarrierError):
            both_in.wait()
        return stem

    monkeypatch.setattr(jobsmod, "choose_stem", slow_choose)
    stems: dict[int, Path] = {}
    threads = [threading.Thread(target=lambda j=j: stems.__setitem__(
        j.id, queue.files.name_sidecars(j, inbox))) for j in found]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert not any(t.is_alive() for t in threads)
        assert len(stems) == 2 and len(set(stems.values())) == 2, stems
        outputs = [queue.outputs_of(j.id) for j in found]
        assert not set(outputs[0].values()) & set(outputs[1].values()), outputs
    finally:
        db.close()
