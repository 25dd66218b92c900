"""A reading that may not be whole keeps its original, says why, and shows it.

Every engine and every input ends in one verdict per file: read whole, or read with
doubts. A doubt keeps the original whatever ``on_success`` says (``retire_reason``
names it), is counted and listed by ``ocrwatch status``, and the file's pages stay
searchable. Real HTTP on 127.0.0.1 for the remote engine (``tests/fake_openai.py``),
real Tesseract, a real SQLite index, a real inbox.
"""

from __future__ import annotations


from pathlib import Path
from typing import Any

import pytest

from ocrwatch.config import Config
from ocrwatch.core.status import format_status

from .helpers import wait_for



from fake_openai import FakeServer
from test_remote_daemon import coloured_page, hexa

# (what the server answers, its finish_reason): none of them is a whole reading.
NOT_WHOLE: dict[str, tuple[str, str]] = {
    "cut_off": ("# Invoice 4711\n\nItem one, item two, item thr", "length"),
    "filtered": ("# Invoice 4711\n\nDear", "content_filter"),
    "zero_width": ("\u200b\u200b\u2060\ufeff\u200b", "stop"),
    "image_only": ("![image](image_1.png)", "stop"),
    "empty_fence": ("```\n```", "stop"),
    "rule": ("---", "stop"),
    "comment": ("<!-- page -->", "stop"),
    "lone_dot": (".", "stop"),
    "refusal": ("I'm sorry, but I can't help with that.", "stop"),
}
WHY = {
    "cut_off": "ran out of tokens",
    "filtered": "content filter",
    "zero_width": "answer for this page was empty",
    "image_only": "only markup",
    "empty_fence": "only markup",
    "rule": "only markup",
    "comment": "only markup",
    "lone_dot": "no words",
    "refusal": "declined to read the page",
}


@pytest.mark.parametrize("on_success", ["delete", "archive"])
def test_remote_answers_that_are_not_a_whole_reading_keep_the_original(
        tmp_path: Path, on_success: str) -> None:
    """The remote engine against a real OpenAI-compatible server on 127.0.0.1: a page cut
    off at max_tokens, withheld by a content filter, only zero-width characters, only
    markup, a lone ``.``, a refusal: each file is done (its text indexed) but read with
    doubts: the original stays, the reason is recorded and ``status`` lists it. A good
    page beside them still goes."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    archive = tmp_path / "archive"
    config = Config(inbox=[inbox], database=tmp_path / "index.sqlite3", settle_seconds=0.3,
                    engine="remote", on_success=on_success, archive_dir=archive)
    from ocrwatch.daemon import Daemon

    with FakeServer() as server:
        config.remote.urls = [server.url]
        files: dict[str, Path] = {}
        for k, name in enumerate([*NOT_WHOLE, "good"]):
            c = (30, 90, k)
            if name in NOT_WHOLE:
                server.scripted[hexa(c)] = NOT_WHOLE[name]
            files[name] = inbox / f"{name}.png"
            coloured_page(c).save(files[name])
        data = {name: path.read_bytes() for name, path in files.items()}
        with Daemon(config) as daemon:
            wait_for(lambda: daemon.jobs.counts()["done"] == len(files) and daemon.is_idle(),
                     90, "every file read")
            rows = {Path(r["display"]).stem: dict(r)
                    for r in daemon.db.query("SELECT * FROM jobs")}
            status = daemon.status()
    for name in NOT_WHOLE:
        row = rows[name]
        assert files[name].read_bytes() == data[name], f"{name}: the original went: {row}"
        assert row["state"] == "done" and row["retire"] == "kept", row
        assert WHY[name] in row["retire_reason"], (name, row["retire_reason"])
    assert not files["good"].exists(), "a whole reading's original stays"
    assert rows["good"]["retire"] is None, rows["good"]
    # Status counts and lists the files read with doubts, with their reasons.
    assert status.doubted == len(NOT_WHOLE), status
    text = format_status(status)
    assert f"{len(files)} done ({len(NOT_WHOLE)} read with doubts)" in text, text
    listed = {Path(d.path).stem for d in status.doubts}
    assert listed <= set(NOT_WHOLE) and len(listed) == min(len(NOT_WHOLE), 10), listed
    as_json: Any = status.to_dict()
    assert as_json["doubted"] == len(NOT_WHOLE)
    assert all(WHY[Path(d["path"]).stem] in d["reason"] for d in as_json["doubts"])
