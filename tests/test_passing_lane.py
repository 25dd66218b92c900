"""A file dropped behind a long one starts at once (the scheduler's passing lane): a
2000-page PDF kept the only preparer for hours while a page dropped after it waited."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import text_page, wait_for

from ocrwatch.config import Config
from ocrwatch.daemon import Daemon
from ocrwatch.testing.fake import FakeEngine

PAGES = 60
DELAY = 0.25  # seconds a page: the long file takes 15 s


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    config = Config(inbox=[tmp_path / "inbox"], database=tmp_path / "index.sqlite3",
                    settle_seconds=0.3, engine="fake")
    with Daemon(config, engine=FakeEngine(delay=DELAY)) as d:  # one reader, one preparer
        yield d


def _state(d: Daemon, path: Path) -> str | None:
    job = d.jobs.known(path)
    return job.state.value if job else None


def test_a_page_dropped_behind_a_long_file_is_read_before_it_ends(
        daemon: Daemon, tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    page = text_page(["a long report"], width=400, size=20)
    long = inbox / "long.pdf"
    page.save(long, save_all=True, append_images=[page] * (PAGES - 1))
    wait_for(lambda: _state(daemon, long) == "running", 30, "the long file to be read")
    wait_for(lambda: daemon.reading() and daemon.reading()[0].done >= 2, 30,
             "its first pages")
    short = inbox / "short.png"
    text_page(["a single page"], width=400, size=20).save(short)
    dropped = time.monotonic()
    wait_for(lambda: _state(daemon, short) == "done", PAGES * DELAY, "the short file")
    waited = time.monotonic() - dropped
    # Read beside the long one: its page goes in the page queue among the long one's.
    assert _state(daemon, long) == "running", f"the short file waited {waited:.1f} s"
    assert waited < PAGES * DELAY / 2, waited
    wait_for(lambda: _state(daemon, long) == "done", 60, "the long file")
