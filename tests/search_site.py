"""A small indexed inbox behind a running search page, for the page's tests."""

from __future__ import annotations

import contextlib
import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import save_pdf, text_page, wait_for

from ocrwatch.config import Config
from ocrwatch.daemon import Daemon
from ocrwatch.pages.thumbs import Thumbnails
from ocrwatch.testing.fake import FakeEngine
from ocrwatch.web.server import SearchServer


@dataclass
class Site:
    server: SearchServer
    opened: list[tuple[Path, int | None]]
    inbox: Path
    files: dict[str, Path]

    def request(self, method: str, path: str, *, token: bool = True, host: str | None = None,
                body: bytes | None = None, headers: dict[str, str] | None = None
                ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=10)
        try:
            hdrs = {"Host": f"127.0.0.1:{self.server.port}" if host is None else host,
                    **(headers or {})}
            if token:
                hdrs["X-Ocrwatch-Token"] = self.server.token
            conn.request(method, path, body=body, headers=hdrs)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def api(self, path: str) -> Any:
        status, _, body = self.request("GET", path)
        assert status == 200, body
        return json.loads(body)


def build_inbox(inbox: Path) -> dict[str, Path]:
    (inbox / "taxes").mkdir(parents=True)
    (inbox / "letters").mkdir()
    files = {
        "receipt": inbox / "taxes" / "receipt 2024.png",
        "report": save_pdf(inbox / "letters" / "harbour report.pdf", [["one"], ["two"], ["x"]]),
        "note": inbox / "letters" / "note.jpg",
    }
    text_page(["receipt"]).save(files["receipt"])
    text_page(["note"]).save(files["note"], "JPEG")
    return files


@contextlib.contextmanager
def indexed(tmp_path: Path) -> Iterator[tuple[Config, dict[str, Path], Daemon]]:
    """A running daemon that has read the small inbox; the inbox's files by short name."""
    config = Config(inbox=[tmp_path / "inbox"], database=tmp_path / "index.sqlite3",
                    settle_seconds=0.2, engine="fake", cache_dir=tmp_path / "cache")
    files = build_inbox(config.inbox[0])
    with Daemon(config, engine=FakeEngine()) as d:
        wait_for(lambda: all((j := d.jobs.known(p)) is not None and j.state == "done"
                             for p in files.values()), 30, "files read")
        yield config, files, d


@contextlib.contextmanager
def serve(config: Config, thumbs: Thumbnails, files: dict[str, Path]) -> Iterator[Site]:
    """The search page over ``config``'s index; files it is asked to open are only noted."""
    opened: list[tuple[Path, int | None]] = []
    server = SearchServer(config.database, thumbs, inbox=config.inbox,
                          opener=lambda path, page: opened.append((path, page)))
    with server:
        yield Site(server, opened, config.inbox[0], files)


@pytest.fixture
def site(tmp_path: Path, home: Path) -> Iterator[Site]:
    with indexed(tmp_path) as (config, files, d), serve(config, d.thumbs, files) as running:
        yield running
