"""One rule for what a reading may do with an original (``results/retire.disposal``), on
every path a file is read by: the daemon's watch, ``ocrwatch add``, ``reread`` (through
the daemon and alone), ``retry`` and the tray's retry.

- a file named to ``add`` stays where it is unless that ``add`` asked otherwise, whoever
  reads it again later;
- a file in the archive is never archived again;
- an entry whose original was deleted names its result, which is never read again as an
  original (it failed as "not an image or PDF");
- ``retry`` does what the first reading would have done; ``reread`` moves nothing.

Real ``ocrwatch run`` processes and real CLI commands, real files, a real SQLite index;
the fake engine stands in for the engine only (the tray's retry: its controller, on an
in-process daemon).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ocrwatch import tray
from ocrwatch.config import Config
from ocrwatch.core.domain import Job, State

from .conftest import StartDaemon
from .helpers import (
    DaemonProcess,
    Home,
    connect_ro,
    drop,
    ended,
    image_bytes,
    job,
    ocrwatch_cli,
    pdf_bytes,
    wait_for,
    write,
)


def write_config(home: Home, text: str) -> None:
    path = home.root / "home" / ".config" / "ocrwatch" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def daemons(home: Home) -> Iterator[list[DaemonProcess]]:
    made: list[DaemonProcess] = []
    yield made
    for proc in made:
        proc.close()


def start(home: Home, made: list[DaemonProcess], **env: str) -> DaemonProcess:
    proc = DaemonProcess(home, **env).start()
    made.append(proc)
    proc.wait_ready()
    return proc


def finished_after(home: Home, path: Path, since: float) -> bool:
    row = ended(home.database, path)
    return row is not None and row["finished"] is not None and row["finished"] > since


@pytest.mark.parametrize("mode", ["delete", "archive"])
def test_reread_through_the_daemon_moves_nothing_the_first_reading_left(
        home: Home, daemons: list[DaemonProcess], mode: str) -> None:
    """The issue's case: a file given to ``add`` from outside every inbox, an inbox file
    archived or deleted by the daemon, then ``ocrwatch reread --all`` while it runs."""
    archive = home.root / "archive"
    write_config(home, f'on_success = "{mode}"\narchive_dir = "{archive}"\n'
                       'outputs = ["md", "txt"]\n')
    daemon = start(home, daemons)
    invoice = drop(home.inbox / "invoice.png", image_bytes("invoice 2026"))
    archived = archive / "inbox" / "invoice.png"
    if mode == "archive":
        wait_for(lambda: ended(home.database, archived) is not None, 60, "the archive")
    else:
        wait_for(lambda: not invoice.exists(), 60, "the inbox file to be deleted")
    contract = write(home.root / "MyDocs" / "contract.png", image_bytes("contract text"))
    content = contract.read_bytes()
    added = ocrwatch_cli(home, "add", "--engine", "fake", "--inbox", str(home.inbox),
                         "--database", str(home.database), str(contract))
    assert added.returncode == 0, added.stdout + added.stderr
    assert contract.read_bytes() == content
    before = job(home.database, contract)
    assert before is not None and before["state"] == "done", dict(before or {})
    first = job(home.database, archived)

    again = ocrwatch_cli(home, "reread", "--all")
    assert again.returncode == 0, again.stderr
    # The deleted invoice's entry names its result (invoice.md): never queued as a file.
    assert f"{2 if mode == 'archive' else 1} file" in again.stdout, again.stdout
    wait_for(lambda: finished_after(home, contract, before["finished"]), 60,
             "contract.png to be read again")
    if mode == "archive":
        assert first is not None
        wait_for(lambda: finished_after(home, archived, first["finished"]), 60,
                 "the archived invoice to be read again")
        assert archived.exists(), sorted(archive.rglob("*"))
        assert sorted(p.name for p in archived.parent.iterdir()) == \
            ["invoice.md", "invoice.png", "invoice.txt"], "archived a second time"
    assert contract.read_bytes() == content, "reread moved or deleted a file named to add"
    assert not (archive / "other").exists(), sorted(archive.rglob("*"))
    status = json.loads(ocrwatch_cli(home, "status", "--json").stdout)
    assert status["failed"] == 0, status.get("recent_failures")
    assert f"deleted {contract}" not in daemon.output()


def test_retry_does_what_the_first_reading_would_have_done(
        home: Home, daemons: list[DaemonProcess]) -> None:
    """Failed first (the engine refused them), retried from the CLI: a file added
    without ``--on-success`` stays where it is, an inbox file is deleted as
    ``on_success`` says, a file added with ``--on-success delete`` is deleted."""
    write_config(home, 'on_success = "delete"\noutputs = ["md", "txt"]\n')
    failing = start(home, daemons, OCRWATCH_FAKE_FAIL="broken")
    kept = write(home.root / "MyDocs" / "broken-kept.png", image_bytes("kept one"))
    asked = write(home.root / "MyDocs" / "broken-asked.png", image_bytes("asked one"))
    inbox = drop(home.inbox / "broken-inbox.png", image_bytes("inbox one"))
    for path, extra in ((kept, []), (asked, ["--on-success", "delete"])):
        done = ocrwatch_cli(home, "add", *extra, "--engine", "fake", "--inbox",
                            str(home.inbox), "--database", str(home.database), str(path),
                            OCRWATCH_FAKE_FAIL="broken")
        assert done.returncode == 1, done.stdout + done.stderr
    wait_for(lambda: ended(home.database, inbox, "failed") is not None, 60, "the failure")
    failing.close()
    start(home, daemons)  # the engine reads them now
    retried = ocrwatch_cli(home, "retry", "--all-failed")
    assert retried.returncode == 0, retried.stderr
    wait_for(lambda: not inbox.exists() and not asked.exists(), 60,
             "the inbox file and the file added with --on-success delete to go")
    wait_for(lambda: ended(home.database, kept, "done") is not None, 60, "the kept file")
    assert kept.exists(), "retry deleted a file that add was told to keep"
    assert kept.with_suffix(".txt").read_text().startswith("fake text of broken-kept.png")


def test_the_trays_retry_keeps_a_file_named_to_add(home: Home, run_daemon: StartDaemon,
                                                   tmp_path: Path) -> None:
    """The tray's "Retry failed files" goes through the same rule: an added file read
    again from the tray stays; an inbox file goes as ``on_success`` says."""
    daemon, engine = run_daemon(on_success="delete")
    engine.fail_marker = "broken"
    mine = write(tmp_path / "MyDocs" / "broken-mine.png", image_bytes("mine"))
    inbox = drop(home.inbox / "broken-inbox.png", image_bytes("inbox"))
    daemon.consider(mine, asked="keep")  # as `ocrwatch add` records it
    wait_for(lambda: ended(home.database, mine, "failed") is not None and
             ended(home.database, inbox, "failed") is not None, 60, "both to fail")
    engine.fail_marker = "nothing-fails-now"
    controller = tray.TrayController(daemon, opener=lambda _p: None)
    controller.retry_failed()
    wait_for(lambda: not inbox.exists(), 60, "the inbox file to be deleted")
    wait_for(lambda: ended(home.database, mine, "done") is not None, 60, "the added file")
    assert mine.exists()


def test_the_rule_itself(tmp_path: Path) -> None:
    from ocrwatch.results.retire import disposal

    inbox, archive, failed, out = (tmp_path / n for n in ("in", "archive", "failed", "out"))
    config = Config(inbox=[inbox], database=tmp_path / "db", on_success="delete",
                    archive_dir=archive, failed_dir=failed, output_dir=out)

    def of(path: Path, asked: str | None = None, gone: bool = False) -> str:
        return disposal(config, Job(1, path, None, 0, 0, State.DONE, 0, asked=asked,
                                    original_gone=gone))

    assert of(inbox / "a.png") == "delete"
    assert of(inbox / "sub" / "a.png", asked="keep") == "keep"
    assert of(tmp_path / "docs" / "a.png") == "keep"  # named to add, nothing asked
    assert of(tmp_path / "docs" / "a.png", asked="archive") == "archive"
    for place in (archive / "in", failed, out / "in"):
        assert of(place / "a.png") == "keep"
        assert of(place / "a.png", asked="delete") == "keep"
    assert of(inbox / "a.md", gone=True) == "keep"
    link = tmp_path / "archive-link"
    archive.mkdir()
    link.symlink_to(archive)
    assert of(link / "a.png", asked="archive") == "keep"  # the archive by another name
    config.archive_dir = None
    assert of(tmp_path / "docs" / "a.png", asked="archive") == "keep"


def test_add_with_delete_beside_a_running_daemon_says_what_it_did(
        home: Home, daemons: list[DaemonProcess]) -> None:
    """A second session's ``add --on-success delete`` while a daemon holds the index:
    before, "1 deleted" was printed and the file was still there."""
    start(home, daemons)
    scan = write(home.root / "MyDocs" / "scan.png", image_bytes("scan text"))
    added = ocrwatch_cli(home, "add", "--on-success", "delete", "--engine", "fake",
                         "--inbox", str(home.inbox), "--database", str(home.database),
                         str(scan))
    out = added.stdout + added.stderr
    assert added.returncode == 0, out
    # Said once done: the file is gone when the command returns.
    assert "1 deleted" in out and not scan.exists(), out


@pytest.mark.parametrize("ask", ["delete", "keep"])
def test_add_on_a_file_the_daemon_is_reading_reads_it_once_and_does_what_it_asked(
        home: Home, daemons: list[DaemonProcess], ask: str) -> None:
    """The daemon (``on_success = "keep"``, a slow engine: 0.5 s a page) is reading an
    12-page PDF of the inbox when ``ocrwatch add [--on-success delete]`` names it: the
    command waits for that reading instead of reading the file a second time (one
    reading of 12 pages in the index, one "done" in the daemon's log), then its ask is
    carried out and said: deleted with ``--on-success delete``, kept without (before:
    the ask was dropped for a file being read: "1 deleted" printed, the file still
    there)."""
    proc = start(home, daemons, OCRWATCH_FAKE_DELAY="0.5")
    # 12 pages at 0.5 s: time for the command to start and ask while it is read.
    doc = drop(home.inbox / "doc.pdf", pdf_bytes([f"page {n}" for n in range(12)]))
    wait_for(lambda: (r := job(home.database, doc)) is not None and r["state"] == "running",
             30, "the daemon to start reading it")
    flag = ["--on-success", ask] if ask != "keep" else []
    added = ocrwatch_cli(home, "add", *flag, "--engine", "fake", "--inbox", str(home.inbox),
                         "--database", str(home.database), str(doc))
    out = added.stdout + added.stderr
    assert added.returncode == 0, out
    assert "1 read, 0 failed" in out, out
    if ask == "delete":
        assert "1 deleted" in out and not doc.exists(), out
    else:
        assert doc.exists() and "deleted" not in out, out
    with contextlib.closing(connect_ro(home.database)) as conn:
        readings = conn.execute("SELECT j.id, count(p.job_id) FROM jobs j JOIN pages p "
                                "ON p.job_id = j.id GROUP BY j.id").fetchall()
    assert [n for _, n in readings] == [12], readings
    assert proc.output().count("done: ") == 1, proc.output()
    assert proc.stop() == 0
