"""Results lost around the index: a copy of a deleted file, and the index itself deleted,
moved, replaced or damaged. Real ``ocrwatch run`` processes, real files, real SQLite."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from helpers import use_home

from .conftest import StartDaemon
from .helpers import (
    DaemonProcess,
    Home,
    check_fake_sidecars,
    drop,
    ended,
    image_bytes,
    job,
    jobs,
    ocrwatch_cli,
    pdf_bytes,
    sidecars,
    wait_for,
)

Start = Callable[..., DaemonProcess]


def _read(home: Home, path: Path, timeout: float = 60) -> None:
    wait_for(lambda: ended(home.database, path, "done") is not None
             and all(p.exists() for p in sidecars(path)), timeout, f"{path.name} read")


def _fake_name(path: Path) -> str:
    """Which file's reading the sidecars hold (the fake engine writes its name)."""
    text = sidecars(path)[1].read_text(encoding="utf-8")
    return text.split("fake text of ", 1)[1].split(" page ", 1)[0]


# -- a copy of a deleted file gets sidecars --------------------------------------------------
@pytest.mark.parametrize("how", ["file", "inbox", "while stopped"])
def test_a_copy_of_a_deleted_file_gets_its_own_sidecars(home: Home, daemon_process: Start,
                                                        how: str) -> None:
    """Delete a file with its sidecars (or the whole inbox), drop the same content under
    another name: it was "followed as a move" whose sidecars were gone, and the new file
    got none. Now it is a copy: sidecars made from the stored text, nothing read again."""
    data = image_bytes("harbour office")
    daemon = daemon_process().start()
    daemon.wait_ready()
    first = drop(home.inbox / "sub" / "letter.png", data)
    _read(home, first)
    if how == "while stopped":
        assert daemon.stop() == 0
    if how == "inbox":
        shutil.rmtree(home.inbox)
        home.inbox.mkdir()
    else:
        for path in (first, *sidecars(first)):
            path.unlink()
    copy = drop(home.inbox / "copy of letter.png", data)
    if how == "while stopped":
        daemon.start()
        daemon.wait_ready()
    _read(home, copy)
    check_fake_sidecars(copy, 1, names={"letter.png"})
    assert _fake_name(copy) == "letter.png", "the copy was read again"
    # The deleted file's row leaves the index, and takes nothing of the copy's with it.
    wait_for(lambda: job(home.database, first) is None, 30, "the deleted file pruned")
    assert all(p.exists() for p in sidecars(copy))
    assert "Traceback" not in daemon.output()
    assert daemon.stop() == 0


# -- the index deleted, moved or replaced while the daemon runs -------------------------------
def _results(home: Home, files: list[Path]) -> dict[Path, tuple[int, int]]:
    """Each sidecar's inode and modification time: written twice, they would change."""
    out = {}
    for f in files:
        for p in sidecars(f):
            st = p.stat()
            out[p] = (st.st_ino, st.st_mtime_ns)
    return out


def _doubles(home: Home) -> list[Path]:
    """A second pair of sidecars (``scan.png.md`` beside ``scan.md``)."""
    return sorted(p for p in home.inbox.rglob("*") if p.suffix in (".md", ".txt")
                  and Path(p.stem).suffix in (".png", ".pdf"))


def _queued(log: str) -> list[str]:
    return [line.split("queued ", 1)[1] for line in log.splitlines() if " queued " in line]


def _drop_three(home: Home) -> list[Path]:
    files = [drop(home.inbox / "a.png", image_bytes("alpha")),
             drop(home.inbox / "sub" / "b.pdf", pdf_bytes(["beta one", "beta two"])),
             drop(home.inbox / "c.png", image_bytes("gamma harbour"))]
    for f in files:
        _read(home, f)
    return files


def _restart_reads_nothing(home: Home, daemon: DaemonProcess, files: list[Path],
                           before: dict[Path, tuple[int, int]]) -> None:
    """Stopped and started again: nothing is queued again, no sidecar is written twice."""
    assert daemon.stop() == 0
    daemon.start()
    daemon.wait_ready()
    marker = drop(home.inbox / "marker.png", image_bytes("marker"))
    _read(home, marker)  # read after the startup scan's files settled
    assert _queued(daemon.logs[-1].read_text()) == [f"{marker} (new)"], daemon.output()
    assert _results(home, files) == before, "a sidecar was written again"
    assert _doubles(home) == []
    assert {p: r["state"] for p, r in jobs(home.database).items()} == {
        str(f): "done" for f in (*files, marker)}


@pytest.mark.parametrize("how", ["deleted", "moved", "replaced"])
def test_the_index_lost_while_running_is_written_back(home: Home, daemon_process: Start,
                                                      how: str) -> None:
    """The index deleted, moved away or replaced while the daemon runs went unnoticed: its
    writes went to the lost file, and the next start read every file again, beside a
    second pair of sidecars (``a.png.md``). Now the open index is written back at once."""
    daemon = daemon_process().start()
    daemon.wait_ready()
    files = _drop_three(home)
    db = home.database
    side = [Path(f"{db}{s}") for s in ("-wal", "-shm")]
    replacement = b""
    if how == "deleted":
        for p in (db, *side):
            p.unlink(missing_ok=True)
    elif how == "moved":
        for p in (db, *side):
            if p.exists():
                p.rename(home.root / p.name.replace("index", "moved"))
    else:
        other = home.root / "other.sqlite3"
        conn = sqlite3.connect(other)
        conn.execute("CREATE TABLE notes(text)")
        conn.execute("INSERT INTO notes VALUES ('the user''s own database')")
        conn.commit()
        conn.close()
        replacement = other.read_bytes()
        os.replace(other, db)
    wait_for(lambda: "written back" in daemon.output(), 30, "the index written back")
    assert {r["state"] for r in jobs(db).values()} == {"done"} and len(jobs(db)) == 3
    kept = sorted(db.parent.glob("index.sqlite3.replaced-*"))
    if how == "replaced":
        assert [p.read_bytes() for p in kept] == [replacement], kept
    else:
        assert kept == []
    if how == "moved":
        assert (home.root / "moved.sqlite3").exists()  # the user's copy stays where it went
    assert db.stat().st_mode & 0o777 == 0o600
    late = drop(home.inbox / "late.png", image_bytes("late"))
    _read(home, late)
    files.append(late)
    status = ocrwatch_cli(home, "status")
    assert f"index file was {'replaced' if how == 'replaced' else 'deleted'}" in status.stdout, \
        status.stdout + status.stderr
    before = _results(home, files)
    _restart_reads_nothing(home, daemon, files, before)
    assert "Traceback" not in daemon.output()


# -- a damaged index ---------------------------------------------------------------------------
def _damage(db: Path) -> bytes:
    """Flip bytes in the first page of every table and index but the schema, as a bad disk
    would."""
    conn = sqlite3.connect(db)
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    roots = [r for (r,) in conn.execute("SELECT rootpage FROM sqlite_master WHERE rootpage > 1")]
    conn.close()
    with db.open("r+b") as fh:
        for page in roots:
            fh.seek((page - 1) * size + 8)
            chunk = fh.read(64)
            fh.seek((page - 1) * size + 8)
            fh.write(bytes(b ^ 0xFF for b in chunk))
    return db.read_bytes()


def test_a_damaged_index_is_set_aside_and_rebuilt_from_the_sidecars(
        home: Home, daemon_process: Start) -> None:
    """Bytes flipped in a table page: `status` failed with a DatabaseError, `search` said
    "unexpected error", a job stayed running for ever. Now each says the index is damaged
    and what to do; the daemon keeps the damaged file aside and rebuilds the index from the
    sidecars it wrote, reading nothing and writing no sidecar again."""
    daemon = daemon_process().start()
    daemon.wait_ready()
    files = _drop_three(home)
    before = _results(home, files)
    assert daemon.stop() == 0
    damaged = _damage(home.database)

    for args in (["status"], ["search", "harbour"]):
        out = ocrwatch_cli(home, *args, "--database", str(home.database))
        text = out.stdout + out.stderr
        assert out.returncode != 0 and "is damaged" in text and "ocrwatch run" in text, text
        assert "Traceback" not in text and "unexpected" not in text, text

    daemon.start()
    daemon.wait_ready()
    kept = sorted(home.database.parent.glob("index.sqlite3.damaged-*"))
    assert [p.read_bytes() for p in kept] == [damaged], kept
    rows = jobs(home.database)
    assert {p: (r["state"], r["engine"]) for p, r in rows.items()} == {
        str(f): ("done", "fake") for f in files}  # the engine, from the mark
    assert "is damaged" in daemon.output() and "rebuilding the index from the sidecars" \
        in daemon.output()
    status = ocrwatch_cli(home, "status")
    assert "the index was damaged" in status.stdout and "3 files, 4 pages" in status.stdout, \
        status.stdout
    found = ocrwatch_cli(home, "search", "fake", "--database", str(home.database))
    assert found.returncode == 0 and "c.png" in found.stdout, found.stdout + found.stderr
    doctor = ocrwatch_cli(home, "doctor", "--database", str(home.database))
    assert "kept aside" in doctor.stdout and kept[0].name in doctor.stdout, doctor.stdout
    _restart_reads_nothing(home, daemon, files, before)
    assert "Traceback" not in daemon.output()


def test_an_index_deleted_while_stopped_is_rebuilt_from_the_marked_sidecars(
        home: Home, daemon_process: Start) -> None:
    """The index deleted while no daemon ran (or just before it was killed): the next start
    read every file again and wrote a second pair of sidecars beside the first. Sidecars
    carry ocrwatch's mark (the content they were written for): the files are restored from
    them, and a file changed meanwhile is read again over its own sidecars."""
    daemon = daemon_process().start()
    daemon.wait_ready()
    files = _drop_three(home)
    assert daemon.stop() == 0
    changed = files[2]
    drop(changed, image_bytes("gamma, second version"))
    # A new file beside a.png with the same stem: a.md is a.png's, never this one's.
    namesake = drop(home.inbox / "a.pdf", pdf_bytes(["a namesake"]))
    before = _results(home, files[:2])
    for p in home.database.parent.glob("index.sqlite3*"):
        p.unlink()

    daemon.start()
    daemon.wait_ready()
    wait_for(lambda: ended(home.database, changed, "done") is not None, 60, "the changed file")
    marker = drop(home.inbox / "marker.png", image_bytes("marker"))
    _read(home, marker)
    wait_for(lambda: ended(home.database, namesake, "done") is not None, 60, "a.pdf read")
    log = daemon.logs[-1].read_text()
    assert sorted(_queued(log)) == sorted([f"{namesake} (new)", f"{marker} (new)"]), log
    assert f"{changed} changed since its sidecars were written: read again over them" in log
    assert _results(home, files[:2]) == before, "a sidecar was written again"
    assert _doubles(home) == [home.inbox / "a.pdf.md", home.inbox / "a.pdf.txt"]
    check_fake_sidecars(files[0], 1)  # a.md still a.png's
    assert "restored from its sidecars (2 pages)" in log
    rows = jobs(home.database)
    assert rows[str(files[1])]["pages"] == 2 and rows[str(files[1])]["engine"] == "fake"
    check_fake_sidecars(changed, 1)
    assert "Traceback" not in daemon.output()
    assert daemon.stop() == 0


def test_damage_found_while_running_is_said_plainly(tmp_path: Path) -> None:
    """A page found damaged after the start (a disk error under the running daemon): the
    error says what to do, and the guard puts it in status and the log once."""
    from ocrwatch.core.errors import IndexDamaged
    from ocrwatch.indexhealth import IndexGuard
    from ocrwatch.store.db import Database
    from ocrwatch.store.jobs import JobQueue

    path = tmp_path / "index.sqlite3"
    db = Database(path)
    JobQueue(db).offer(tmp_path / "a.png", 1, 1, "0" * 64)
    db.close()
    _damage(path)
    db = Database(path, readonly=True)  # opened as a search or status would
    try:
        guard = IndexGuard(db)
        assert guard.check() is False and guard.note is None
        with pytest.raises(IndexDamaged, match=r"is damaged .*ocrwatch run"):
            JobQueue(db).counts()
        guard.check()
        assert guard.note is not None and "stop and start ocrwatch" in guard.note
    finally:
        db.close()


@pytest.mark.parametrize("how", ["damaged", "deleted while stopped"])
def test_archived_files_come_back_from_their_sidecars(home: Home, daemon_process: Start,
                                                      how: str) -> None:
    """With ``on_success = "archive"`` every file read leaves the inbox with its sidecars:
    a rebuild that looked at the inbox alone lost the whole archive from the index."""
    archive = home.root / "archive"
    config = home.root / "config.toml"
    config.write_text(f'on_success = "archive"\narchive_dir = "{archive}"\n')
    daemon = daemon_process("--config", str(config)).start()
    daemon.wait_ready()
    originals = [drop(home.inbox / "a.png", image_bytes("alpha")),
                 drop(home.inbox / "sub" / "b.pdf", pdf_bytes(["beta one", "beta two"]))]
    kept = [archive / "inbox" / "a.png", archive / "inbox" / "sub" / "b.pdf"]
    for path in kept:
        wait_for(lambda p=path: ended(home.database, p, "done") is not None
                 and all(s.exists() for s in sidecars(p)), 60, f"{path.name} archived")
    assert not any(p.exists() for p in originals)
    before = _results(home, kept)
    assert daemon.stop() == 0
    if how == "damaged":
        _damage(home.database)
    else:
        for p in home.database.parent.glob("index.sqlite3*"):
            p.unlink()
    daemon.start()
    daemon.wait_ready()
    wait_for(lambda: {p: r["state"] for p, r in jobs(home.database).items()}
             == {str(p): "done" for p in kept}, 30, "the archive back in the index")
    assert {r["pages"] for r in jobs(home.database).values()} == {1, 2}
    found = ocrwatch_cli(home, "search", "fake", "--database", str(home.database))
    assert "b.pdf" in found.stdout and "a.png" in found.stdout, found.stdout + found.stderr
    assert _results(home, kept) == before
    assert not (archive / "other").exists(), "an archived file was archived again"
    assert "Traceback" not in daemon.output()
    assert daemon.stop() == 0


@pytest.mark.parametrize("how", ["damaged", "deleted while stopped"])
def test_results_of_deleted_originals_come_back_from_their_sidecars(
        home: Home, daemon_process: Start, how: str) -> None:
    """With ``on_success = "delete"`` the sidecars are all that is left of a file read,
    and its index entry names them: a rebuild that looked for originals lost them all."""
    config = home.root / "config.toml"
    config.write_text('on_success = "delete"\n')
    daemon = daemon_process("--config", str(config)).start()
    daemon.wait_ready()
    originals = [drop(home.inbox / "a.png", image_bytes("alpha")),
                 drop(home.inbox / "sub" / "b.pdf", pdf_bytes(["beta one", "beta two"]))]
    results = [sidecars(p)[0] for p in originals]  # the .md stands for the file
    wait_for(lambda: all(ended(home.database, r, "done") is not None for r in results)
             and not any(p.exists() for p in originals), 60, "both read and deleted")
    before = _results(home, originals)
    assert daemon.stop() == 0
    if how == "damaged":
        _damage(home.database)
    else:
        for p in home.database.parent.glob("index.sqlite3*"):
            p.unlink()
    daemon.start()
    daemon.wait_ready()
    wait_for(lambda: {p: r["state"] for p, r in jobs(home.database).items()}
             == {str(r): "done" for r in results}, 30, "the results back in the index")
    assert sorted(r["pages"] for r in jobs(home.database).values()) == [1, 2]
    found = ocrwatch_cli(home, "search", "fake", "--database", str(home.database))
    assert "b.md" in found.stdout and "a.md" in found.stdout, found.stdout + found.stderr
    assert _results(home, originals) == before
    assert "Traceback" not in daemon.output()
    assert daemon.stop() == 0


def test_the_search_page_reads_the_index_written_back(home: Home, run_daemon: StartDaemon,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The search page keeps its own connection: after the index was written back it
    read on from the lost file, and files read since were never found there."""
    use_home(home.root / "user", monkeypatch)
    daemon, _ = run_daemon()
    first = drop(home.inbox / "a.png", image_bytes("alpha"))
    wait_for(lambda: (j := daemon.jobs.known(first)) is not None and j.state == "done", 30,
             "a.png read")
    url = urlsplit(daemon.web_url())
    token = parse_qs(url.query)["token"][0]

    def names() -> set[str]:
        conn = http.client.HTTPConnection("127.0.0.1", url.port, timeout=10)
        try:
            conn.request("GET", "/api/search?q=fake&per=100",
                         headers={"Host": url.netloc, "X-Ocrwatch-Token": token})
            reply = conn.getresponse()
            assert reply.status == 200
            return {h["name"] for h in json.loads(reply.read())["hits"]}
        finally:
            conn.close()

    assert names() == {"a.png"}
    for p in home.database.parent.glob("index.sqlite3*"):
        p.unlink()
    wait_for(lambda: daemon.status().index_note, 30, "the index written back")
    later = drop(home.inbox / "b.png", image_bytes("beta"))
    wait_for(lambda: (j := daemon.jobs.known(later)) is not None and j.state == "done", 30,
             "b.png read")
    assert names() == {"a.png", "b.png"}
