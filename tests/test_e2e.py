"""End to end: a real `ocrwatch run` process, a real inbox, real Tesseract, real SQLite."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import child_env, normalize, ocrwatch, save_pdf, text_page, wait_for

LETTER = ["Dear Madam Schneider,", "the harbour office in Rotterdam", "confirms your booking."]
PDF_PAGES = [["Chapter one: the lighthouse keeper"], ["Chapter two: a storm at night"],
             ["Chapter three: morning calm"]]


class Running:
    def __init__(self, home: Path, args: list[str]) -> None:
        self.home = home
        self.inbox = home / "OCR-Inbox"
        # A short settle time keeps the test quick; a truncated file (no end marker)
        # is still given 15 settle periods to complete before it is read.
        self.env = child_env(home, {"OCRWATCH_SETTLE_SECONDS": "0.5"})
        self.log = (home / "daemon.log").open("w")
        self.proc = subprocess.Popen([sys.executable, "-m", "ocrwatch", "run", *args],
                                     env=self.env, stdout=self.log, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return (self.home / "daemon.log").read_text()

    def status(self) -> dict[str, object] | None:
        result = ocrwatch(["status", "--json"], self.env)
        if result.returncode != 0:
            return None
        data = json.loads(result.stdout)
        return data if data.get("running") else None

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Running]:
    running = Running(tmp_path, ["--no-tray", "--engine", "tesseract"])
    try:
        wait_for(running.status, 60, "the daemon to answer")
        yield running
    finally:
        running.stop()


def test_drop_files_get_sidecars_and_search(daemon: Running) -> None:
    inbox = daemon.inbox
    assert inbox.is_dir()  # created at start
    text_page(LETTER).save(inbox / "letter.png", dpi=(200, 200))
    (inbox / "scans").mkdir()
    save_pdf(inbox / "scans" / "novel.pdf", PDF_PAGES)
    text_page(["Invoice 4711 total 99 euros"]).convert("L").save(inbox / "bill.tif",
                                                                 dpi=(200, 200))
    md = wait_for(lambda: (inbox / "scans" / "novel.md").exists()
                  and (inbox / "letter.txt").exists() and (inbox / "bill.txt").exists(),
                  180, "sidecars of all three files")
    assert md
    letter = normalize((inbox / "letter.txt").read_text())
    assert "harbour office in rotterdam" in letter
    novel_md = (inbox / "scans" / "novel.md").read_text()
    assert novel_md.count("<!-- page") == 3
    novel_txt = (inbox / "scans" / "novel.txt").read_text()
    assert [("lighthouse" in p, "storm" in p, "morning" in p) for p in novel_txt.split("\f")] == [
        (True, False, False), (False, True, False), (False, False, True)]

    found = ocrwatch(["search", "rotterdam"], daemon.env, check=True)
    assert "letter.png" in found.stdout and "[Rotterdam]" in found.stdout
    hits = json.loads(ocrwatch(["search", "storm", "--json"], daemon.env, check=True).stdout)
    assert [(Path(h["path"]).name, h["page"], h["pages"]) for h in hits] == [("novel.pdf", 2, 3)]
    assert len(json.loads(ocrwatch(["search", "chapter", "--json", "--limit", "2"],
                                   daemon.env, check=True).stdout)) == 2
    status = daemon.status()
    assert status is not None and status["done"] == 3 and status["failed"] == 0


def test_bad_inputs_are_failed_with_reasons_and_later_files_read(daemon: Running) -> None:
    inbox = daemon.inbox
    (inbox / "zero.jpg").write_bytes(b"")
    full = inbox / "full.jpg"
    text_page(["x"]).save(full, "JPEG")
    (inbox / "cut.jpg").write_bytes(full.read_bytes()[:2000])
    full.unlink()
    (inbox / "readme.png").write_text("hello, I am text")
    text_page(["After the bad ones"]).save(inbox / "after.png", dpi=(200, 200))
    wait_for(lambda: (inbox / "after.txt").exists(), 120, "the good file after the bad ones")

    def three_failed() -> dict[str, object] | None:
        s = daemon.status()
        return s if s and s["failed"] == 3 else None

    status = wait_for(three_failed, 60, "three failures")
    reasons = {Path(str(f["path"])).name: str(f["reason"])
               for f in status["recent_failures"]}  # type: ignore[attr-defined]
    assert "empty" in reasons["zero.jpg"]
    assert "damaged" in reasons["cut.jpg"]
    assert "not an image or PDF" in reasons["readme.png"]
    text = ocrwatch(["status"], daemon.env, check=True).stdout
    assert "readme.png" in text and "not an image or PDF" in text


def test_malformed_query_gets_plain_message(daemon: Running) -> None:
    result = ocrwatch(["search", '"unclosed'], daemon.env)
    assert result.returncode == 2
    assert "unclosed quote" in result.stderr and "Traceback" not in result.stderr


def test_second_daemon_refuses_and_stop_works(daemon: Running) -> None:
    second = ocrwatch(["run", "--no-tray"], daemon.env, timeout=60)
    assert second.returncode != 0
    assert "already running" in second.stderr
    stopped = ocrwatch(["stop"], daemon.env, check=True)
    assert "stopped" in stopped.stdout
    assert daemon.proc.wait(timeout=60) == 0
    again = ocrwatch(["pause"], daemon.env)
    assert again.returncode != 0 and "no ocrwatch daemon is running" in again.stderr


def test_headless_run_says_so_once(tmp_path: Path) -> None:
    running = Running(tmp_path, ["--engine", "fake"])
    try:
        wait_for(running.status, 60, "the daemon to answer")
        assert running.output().count("no display") == 1
    finally:
        assert running.stop() == 0


def test_add_reads_once_with_progress_and_exits(tmp_path: Path) -> None:
    env = child_env(tmp_path)
    folder = tmp_path / "batch"
    folder.mkdir()
    text_page(["Ledger of the Vienna office"]).save(folder / "ledger.png", dpi=(200, 200))
    save_pdf(folder / "two.pdf", [["first page"], ["second page"]])
    (folder / "bad.png").write_bytes(b"")
    result = ocrwatch(["add", "--engine", "tesseract", str(folder)], env, timeout=300)
    assert result.returncode == 1  # one file failed
    assert "2 read, 1 failed" in result.stdout
    assert "3/3 files" in result.stderr
    assert "vienna" in normalize((folder / "ledger.txt").read_text())
    hits = json.loads(ocrwatch(["search", "Vienna", "--json"], env, check=True).stdout)
    assert [Path(h["path"]).name for h in hits] == ["ledger.png"]


def test_add_that_crashes_on_a_file_fails_it_at_the_second_crash(tmp_path: Path) -> None:
    """`ocrwatch add` with no daemon running reads as the daemon does, crashes included:
    a file that aborts it is read alone the next time, and fails at the second crash."""
    env = {**child_env(tmp_path), "OCRWATCH_FAKE_ABORT": "crash-me"}
    folder = tmp_path / "batch"
    folder.mkdir()
    text_page(["a letter"]).save(folder / "crash-me.png")
    text_page(["another letter"]).save(folder / "letter.png")
    command = ["add", "--engine", "fake", str(folder)]
    codes = [ocrwatch(command, env, timeout=120).returncode for _ in range(2)]
    assert codes == [-signal.SIGABRT] * 2
    # The third run fails it with the reason and ends; so does every run after it: a
    # file failed for crashing is read again only when `ocrwatch retry` names it.
    for _ in range(2):
        after = ocrwatch(command, env, timeout=120)
        assert after.returncode == 1, after.stdout + after.stderr
        assert "crashed twice while reading this file" in after.stdout + after.stderr
    assert (folder / "letter.txt").exists() and not (folder / "crash-me.txt").exists()
