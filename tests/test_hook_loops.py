"""An on_done that copies its file into the inbox (issue: 262 files after a minute,
nothing logged): the copy is read, its on_done is not run, and the log says why."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from helpers import text_page, wait_for

from ocrwatch.config import Config
from ocrwatch.daemon import Daemon
from ocrwatch.testing.fake import FakeEngine

COPY = 'cp "$OCRWATCH_SOURCE" "$(dirname "$OCRWATCH_SOURCE")/copy-$(date +%N).png"'


def test_an_on_done_that_copies_into_the_inbox_does_not_loop(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    inbox = tmp_path / "inbox"
    config = Config(inbox=[inbox], database=tmp_path / "index.sqlite3", settle_seconds=0.3,
                    engine="fake", on_done=["sh", "-c", COPY])
    caplog.set_level(logging.INFO)
    with Daemon(config, engine=FakeEngine()) as daemon:
        text_page(["a letter"], width=400, size=20).save(inbox / "letter.png")
        wait_for(lambda: "on_done not run for copy-" in caplog.text, 60,
                 "the copy's on_done to be refused")
        copies = sorted(inbox.glob("copy-*.png"))
        assert len(copies) == 1  # the first run's copy, and no copy of the copy
        wait_for(lambda: daemon.is_idle(), 30, "the daemon to be idle")
        for path in (inbox / "letter.png", copies[0]):
            job = daemon.jobs.known(path)
            assert job is not None and job.state.value == "done"  # read and indexed
        assert sorted(inbox.glob("*.png")) == sorted([inbox / "letter.png", *copies])
    assert caplog.text.count("on_done sh for") == 1
