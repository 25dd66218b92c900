"""The search page answers a search with a fixed number of SQL statements: what a hit
shows (its thumbnail among it) comes in the hit's row, never from a query per hit."""

from __future__ import annotations

import hashlib
import http.client
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

from PIL import Image

from ocrwatch.core.domain import PageText
from ocrwatch.pages.thumbs import Thumbnails
from ocrwatch.store.db import Database
from ocrwatch.store.jobs import JobQueue
from ocrwatch.web.server import SearchServer


def build_index(database: Path, inbox: Path, thumbs: Thumbnails, files: int) -> set[str]:
    """``files`` one-page files whose page says "invoice", every other one with a
    thumbnail; returns the names of those with one."""
    db = Database(database)
    jobs = JobQueue(db)
    with_thumb: set[str] = set()
    try:
        for n in range(files):
            path = inbox / f"scan {n}.png"
            sha = hashlib.sha256(path.name.encode()).hexdigest()
            jobs.offer(path, 10, 10, sha)
            job = jobs.claim()
            assert job is not None and job.path == path
            assert jobs.complete(job.id, [PageText(markdown=f"invoice {n}", text=f"invoice {n}")],
                                 engine="fake", md_path=None, txt_path=None)
            if n % 2 == 0:
                thumbs.save(sha, 1, Image.new("RGB", (40, 60), "white"))
                with_thumb.add(path.name)
    finally:
        db.close()
    return with_thumb


def search_counting(tmp_path: Path, files: int) -> tuple[int, list[dict[str, Any]], set[str]]:
    """The statements the page's connection ran for one search over ``files`` hits,
    the hits and the names that have a thumbnail."""
    inbox = tmp_path / "inbox"
    thumbs = Thumbnails(tmp_path / "thumbs")
    with_thumb = build_index(tmp_path / "index.sqlite3", inbox, thumbs, files)
    server = SearchServer(tmp_path / "index.sqlite3", thumbs, inbox=[inbox],
                          write_token_file=False)
    statements: list[str] = []
    lock = threading.Lock()

    def traced(sql: str) -> None:
        # SQLite reports the statements FTS5 runs inside a search for each row it ranks
        # or cuts a snippet from with a leading "--": the index's own work, not asked
        # for by the page.
        if not sql.startswith("--"):
            with lock:
                statements.append(sql)

    with server:
        conn: sqlite3.Connection = server.db.conn
        conn.set_trace_callback(traced)
        client = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        try:
            client.request("GET", "/api/search?q=invoice&per=100",
                           headers={"Host": f"127.0.0.1:{server.port}",
                                    "X-Ocrwatch-Token": server.token})
            reply = client.getresponse()
            body = reply.read()
        finally:
            client.close()
        conn.set_trace_callback(None)
    assert reply.status == 200, body
    hits: list[dict[str, Any]] = json.loads(body)["hits"]
    with lock:
        return len(statements), hits, with_thumb


def test_a_search_costs_the_same_statements_for_few_hits_and_many(tmp_path: Path,
                                                                   home: Path) -> None:
    few, few_hits, few_thumbs = search_counting(tmp_path / "few", 2)
    many, many_hits, many_thumbs = search_counting(tmp_path / "many", 40)
    assert len(few_hits) == 2 and len(many_hits) == 40
    assert few >= 1
    assert many == few, f"{few} statements for 2 hits, {many} for 40"
    # What came in the rows is right: a thumbnail exactly where one was made.
    for hits, thumbs in ((few_hits, few_thumbs), (many_hits, many_thumbs)):
        assert {h["name"] for h in hits if h["thumb"]} == thumbs
        assert all(h["thumb"].startswith(f"/thumb/{h['job_id']}/1?v=") for h in hits if h["thumb"])
