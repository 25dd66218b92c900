"""`ocrwatch reindex`: from the stored page text, and from the sidecars when the database
is lost; a daemon started afterwards reads nothing again."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import child_env, ocrwatch, save_pdf, text_page, wait_for

from ocrwatch.config import Config
from ocrwatch.daemon import Daemon
from ocrwatch.reindex import split_pages
from ocrwatch.results.sidecar import render_markdown, render_text
from ocrwatch.store.db import Database
from ocrwatch.store.index import Filters, search
from ocrwatch.testing.fake import FakeEngine


def read_inbox(tmp_path: Path, config: Config, engine: FakeEngine) -> list[Path]:
    inbox = config.inbox[0]
    (inbox / "sub").mkdir(parents=True)
    files = [save_pdf(inbox / "report.pdf", [["a"], ["b"], ["c"]]),
             inbox / "sub" / "scan.png", inbox / "sub" / "scan.jpg"]
    text_page(["png"]).save(files[1])
    text_page(["jpg"]).save(files[2], "JPEG")
    with Daemon(config, engine=engine) as d:
        wait_for(lambda: all((j := d.jobs.known(p)) is not None and j.state == "done"
                             for p in files), 30, "files read")
    return files


def hits(db_path: Path, query: str) -> list[tuple[str, int]]:
    db = Database(db_path, readonly=True)
    try:
        return sorted((Path(h.path).name, h.page) for h in search(db, query, limit=100))
    finally:
        db.close()


def test_split_pages_inverts_the_sidecars() -> None:
    from ocrwatch.core.domain import PageText

    pages = [PageText("# One\n\ntext", "one"), PageText("two\n\n---\n\nstill two", "two"),
             PageText("three", "three")]
    again = split_pages(render_text(pages), render_markdown(pages))
    assert [(p.markdown, p.text) for p in again] == [(p.markdown, p.text) for p in pages]
    single = [PageText("only page", "only")]
    again = split_pages(render_text(single), render_markdown(single))
    assert [(p.markdown, p.text) for p in again] == [("only page", "only")]


def test_reindex_from_the_database_and_from_the_sidecars(tmp_path: Path) -> None:
    config = Config(inbox=[tmp_path / "inbox"], database=tmp_path / "index.sqlite3",
                    settle_seconds=0.2, engine="fake", cache_dir=tmp_path / "cache")
    engine = FakeEngine()
    files = read_inbox(tmp_path, config, engine)
    expected = [("report.pdf", 1), ("report.pdf", 2), ("report.pdf", 3), ("scan.jpg", 1),
                ("scan.png", 1)]
    assert hits(config.database, "fake") == expected
    env = child_env(tmp_path / "home")
    args = ["--database", str(config.database)]

    # The word tables emptied (as a damaged index would be): reindex from the stored text.
    db = Database(config.database)
    for table in ("pages_fts", "pages_tri", "jobs_fts"):
        db.conn.execute(f"INSERT INTO {table}({table}) VALUES ('delete-all')")
    db.close()
    assert hits(config.database, "fake") == []
    result = ocrwatch(["reindex", *args], env, check=True)
    assert "5 pages indexed again" in result.stdout
    assert "5/5" in result.stderr  # the progress bar
    assert hits(config.database, "fake") == expected
    db = Database(config.database, readonly=True)
    names = [Path(h.path).name for h in search(db, "", filters=Filters(name="sub"))]
    db.close()
    assert sorted(names) == ["scan.jpg", "scan.png"]

    # The database lost: rebuilt from the sidecars, each page in its place.
    for f in tmp_path.glob("index.sqlite3*"):
        f.unlink()
    config_file = tmp_path / "config.toml"
    config_file.write_text(f'inbox = ["{config.inbox[0]}"]\ndatabase = "{config.database}"\n')
    result = ocrwatch(["reindex", "--from-sidecars", "--config", str(config_file)], env,
                      check=True)
    assert "3 files (5 pages) restored" in result.stdout, result.stdout + result.stderr
    assert hits(config.database, "fake") == expected
    assert hits(config.database, '"scan.jpg page 1"') == [("scan.jpg", 1)]
    offline = ocrwatch(["status", "--json", "--config", str(config_file)], env)
    assert offline.returncode == 5  # no daemon runs; what the index holds is printed all the same
    status = json.loads(offline.stdout)
    assert status["done"] == 3

    # A daemon started on the restored index reads nothing again.
    read = sum(len(b) for b in engine.batches)
    with Daemon(config, engine=engine) as d:
        # A file dropped after the start is read after the startup scan's files settled.
        marker = config.inbox[0] / "marker.png"
        text_page(["new"]).save(marker)
        wait_for(lambda: (j := d.jobs.known(marker)) is not None and j.state == "done", 30,
                 "a new file read")
        assert all((j := d.jobs.known(p)) is not None and j.state == "done" for p in files)
    assert sum(len(b) for b in engine.batches) == read + 1
