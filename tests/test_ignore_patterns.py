"""The user's `ignore` patterns (globs on file names): never read by the watcher, the
startup scan or `ocrwatch add`, one log line per pattern, taken live on a reload. Real
daemon processes in a private home, real files, the fake engine."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import child_env, ocrwatch, text_page, wait_for
from reliability.helpers import DaemonProcess, Home, ocrwatch_cli, sidecars


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Home]:
    h = Home.make(tmp_path)
    try:
        yield h
    finally:
        h.cleanup()


def test_add_leaves_out_the_files_the_patterns_name(tmp_path: Path) -> None:
    env = child_env(tmp_path / "home")
    folder = tmp_path / "scans"
    folder.mkdir()
    for name in ("letter.png", "Draft-1.png", "draft-2.png", "notes.tiff.png"):
        text_page([name]).save(folder / name)
    config = tmp_path / "config.toml"
    config.write_text('ignore = ["draft-*", "*.tiff.png"]\n')
    result = ocrwatch(["add", "--config", str(config), "--engine", "fake", str(folder)], env,
                      check=True)
    assert "1 read, 0 failed" in result.stdout
    assert (f"3 files left out by the ignore patterns of the file {config} ('draft-*': 2, "
            "'*.tiff.png': 1)") in result.stderr  # case is ignored: Draft-1 too
    assert sidecars(folder / "letter.png")[0].exists()
    assert not list(folder.glob("*raft*.md")) and not (folder / "notes.tiff.md").exists()
    # Named one by one, such a file is still left out, and said.
    named = ocrwatch(["add", "--config", str(config), "--engine", "fake",
                      str(folder / "draft-2.png")], env)
    assert named.returncode == 1
    assert "1 file left out by the ignore patterns" in named.stderr


def test_a_pattern_with_a_folder_is_refused_with_what_to_write(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('ignore = ["drafts/*.png"]\n')
    result = ocrwatch(["doctor", "--config", str(config)], child_env(tmp_path / "home"))
    assert result.returncode == 2
    assert (f"the file {config}: ignore holds 'drafts/*.png': its patterns match file names, "
            "not folders or paths") in result.stderr


def test_the_watcher_and_the_startup_scan_leave_them_and_a_reload_takes_them(
        home: Home) -> None:
    config = home.root / "config.toml"
    config.write_text('ignore = ["tmp_*", "*-draft.png"]\n')
    text_page(["before"]).save(home.inbox / "old-draft.png")  # met by the startup scan
    text_page(["before"]).save(home.inbox / "old.png")
    daemon = DaemonProcess(home, "--config", str(config)).start()
    try:
        daemon.wait_ready()
        wait_for(lambda: sidecars(home.inbox / "old.png")[0].exists(), 60, "old.png read")
        text_page(["new"]).save(home.inbox / "new-draft.png")  # met by the watcher
        text_page(["new"]).save(home.inbox / "tmp_lock.png")
        text_page(["new"]).save(home.inbox / "new.png")
        wait_for(lambda: sidecars(home.inbox / "new.png")[0].exists(), 60, "new.png read")
        log = daemon.output()
        assert log.count("every file matching the ignore pattern '*-draft.png'") == 1, log
        assert "every file matching the ignore pattern 'tmp_*'" in log
        assert not sidecars(home.inbox / "old-draft.png")[0].exists()
        assert not sidecars(home.inbox / "new-draft.png")[0].exists()

        # Saved without the pattern: taken at once; a rescan finds the drafts.
        config.write_text('ignore = ["tmp_*"]\n')
        wait_for(lambda: "ignore now in effect" in daemon.output(), 30, "the reload")
        assert ocrwatch_cli(home, "rescan").returncode == 0
        for name in ("old-draft.png", "new-draft.png"):
            wait_for(lambda n=name: sidecars(home.inbox / n)[0].exists(), 60, f"{name} read")
        assert not sidecars(home.inbox / "tmp_lock.png")[0].exists()
    finally:
        assert daemon.stop() == 0
        daemon.close()


def test_files_that_are_no_image_or_pdf_are_said_once_and_counted_in_status(
        home: Home) -> None:
    """A .docx, a mail and an archive in the inbox are left alone, as before, but no
    longer in silence: one log line per kind with its first file, and status counts them.
    The daemon's own sidecars, a user's notes (.md) and what `ignore` names are not news."""
    config = home.root / "config.toml"
    config.write_text('ignore = ["*.bak"]\n')
    (home.inbox / "minutes.docx").write_bytes(b"PK\x03\x04 a word document")  # startup scan
    (home.inbox / "notes.md").write_text("my own notes beside the scans\n")
    daemon = DaemonProcess(home, "--config", str(config)).start()
    try:
        daemon.wait_ready()
        sub = home.inbox / "2026"
        sub.mkdir()
        (sub / "invoice.eml").write_text("From: a@example.org\n\nthe invoice\n")  # watcher
        (sub / "report.docx").write_bytes(b"PK\x03\x04 another")
        (home.inbox / "photos.zip").write_bytes(b"PK\x03\x04 zip")
        (home.inbox / "old.bak").write_text("ignored by the user's pattern\n")
        text_page(["letter"]).save(home.inbox / "letter.png")
        wait_for(lambda: sidecars(home.inbox / "letter.png")[1].exists(), 60, "letter read")
        (sub / "report.docx").write_bytes(b"PK\x03\x04 saved again")  # one file, counted once

        def counted() -> dict[str, int] | None:
            result = ocrwatch_cli(home, "status", "--json")
            left: dict[str, int] = json.loads(result.stdout).get("left_alone") or {}
            return left if left == {".docx": 2, ".eml": 1, ".zip": 1} else None

        wait_for(counted, 30, "status to count the files left alone")
        log = daemon.output()
        assert log.count("every .docx file in the watched folders") == 1, log
        assert f"not read: {home.inbox / 'minutes.docx'}, and every .docx file" in log
        assert f"not read: {sub / 'invoice.eml'}, and every .eml file" in log
        assert "every .md file" not in log and "every .txt file" not in log
        assert "every .bak file" not in log
        text = ocrwatch_cli(home, "status").stdout
        assert ("left alone: 2 .docx, 1 .eml, 1 .zip (no image or PDF: save or print them "
                "as PDFs into the inbox to have them read)") in text, text
        assert (sub / "report.docx").read_bytes() == b"PK\x03\x04 saved again"  # untouched
    finally:
        assert daemon.stop() == 0
        daemon.close()
