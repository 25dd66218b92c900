"""Loops: the daemon never reads its own output, and refuses layouts that would feed back."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from .conftest import StartDaemon
from .helpers import Home, drop, ended, image_bytes, jobs, ocrwatch_cli, wait_for


def _layouts(home: Home) -> dict[str, tuple[list[str], str, str]]:
    """name: (extra arguments, config file text, what the refusal must say)."""
    inbox = home.inbox
    link = home.root / "looks-outside"
    if not link.exists():
        os.symlink(inbox / "sub", link)
    return {
        "output-inside-inbox": (["--output-dir", str(inbox / "out")], "",
                                "output_dir .* is inside the watched folder"),
        "output-is-inbox": (["--output-dir", str(inbox)], "",
                            "output_dir .* is inside the watched folder"),
        "output-via-symlink": (["--output-dir", str(link / "out")], "",
                               "output_dir .* is inside the watched folder"),
        "inbox-inside-output": (["--output-dir", str(home.root)], "",
                                "is inside output_dir|output_dir .* inside the watched"),
        "database-inside-inbox": (["--database", str(inbox / "index.sqlite3")], "",
                                  "database .* is inside the watched folder"),
        "failed-inside-inbox": ([], f'failed_dir = "{inbox / "failed"}"\n',
                                "failed_dir .* is inside the watched folder"),
    }


@pytest.mark.parametrize("layout", ["output-inside-inbox", "output-is-inbox",
                                    "output-via-symlink", "inbox-inside-output",
                                    "database-inside-inbox", "failed-inside-inbox"])
def test_looping_layout_is_refused_at_start(home: Home, layout: str) -> None:
    extra, config_text, says = _layouts(home)[layout]
    config = home.root / "config.toml"
    config.write_text(config_text)
    args = ["run", "--no-tray", "--engine", "fake", "--config", str(config),
            "--inbox", str(home.inbox)]
    if "--database" not in extra:
        args += ["--database", str(home.database)]
    done = ocrwatch_cli(home, *args, *extra, timeout=60)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert re.search(says, done.stderr), done.stderr
    assert "ocrwatch:" in done.stderr and "Traceback" not in done.stderr
    assert not any(p.suffix in (".md", ".txt") for p in home.inbox.rglob("*"))


def test_own_output_is_never_read_back(home: Home, run_daemon: StartDaemon) -> None:
    daemon, engine = run_daemon()
    first = drop(home.inbox / "letter.png", image_bytes("a letter"))
    wait_for(lambda: ended(home.database, first, "done"), 30, "the letter")
    # Sidecars and temporary files are in the inbox now; a rescan and a new event for
    # each must not turn them into jobs. The sentinel, queued after them, proves the
    # watcher has looked at them by the time it is read.
    daemon.rescan()
    for path in list(home.inbox.iterdir()):
        os.utime(path)
    sentinel = drop(home.inbox / "sentinel.png", image_bytes("sentinel"))
    wait_for(lambda: ended(home.database, sentinel, "done"), 30, "the sentinel")
    assert sorted(Path(p).name for p in jobs(home.database)) == ["letter.png", "sentinel.png"]
    assert engine.reads_of("letter.png") == 1


def test_output_dir_outside_is_not_watched_back(home: Home, run_daemon: StartDaemon) -> None:
    out = home.root / "out"
    _daemon, engine = run_daemon(output_dir=out)
    scan = drop(home.inbox / "a" / "scan.png", image_bytes("elsewhere"))
    wait_for(lambda: ended(home.database, scan, "done"), 30, "the scan")
    assert (out / "inbox" / "a" / "scan.md").exists()
    assert not any(p.suffix in (".md", ".txt") for p in home.inbox.rglob("*"))
    assert len(jobs(home.database)) == 1 and engine.reads_of("scan.png") == 1
