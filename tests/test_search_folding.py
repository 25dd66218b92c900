"""Letters that are not a base letter with an accent (ß, ø, æ, œ, ł...) are found as
people type them without the key, in a real index file; snippets show the text as read."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlite_utils

from ocrwatch.core.domain import PageText
from ocrwatch.store.db import Database
from ocrwatch.store.index import rebuild_fts, search
from ocrwatch.store.jobs import JobQueue
from ocrwatch.store.migrations import MIGRATIONS

PAGES = {
    "de.png": "Die Straße nach Hamburg ist lang",
    "dk.png": "Die Brücke über den Øresund verbindet Kopenhagen und Malmö",
    "aero.png": "Die Fähre nach Ærø fährt stündlich",
    "fr.png": "Une Œuvre complète du peintre",
    "pl.png": "Ein Brief aus Łódź kam gestern an",
    "plain.png": "Nothing special on this page",
}
# query -> (the file it finds, the word its snippet highlights, as written on the page)
FOUND = {
    "strasse": ("de.png", "Straße"), "Straße": ("de.png", "Straße"),
    "STRASSE": ("de.png", "Straße"),
    "oresund": ("dk.png", "Øresund"), "Øresund": ("dk.png", "Øresund"),
    "aero": ("aero.png", "Ærø"), "Ærø": ("aero.png", "Ærø"), "aerø": ("aero.png", "Ærø"),
    "oeuvre": ("fr.png", "Œuvre"), "Œuvre": ("fr.png", "Œuvre"),
    "lodz": ("pl.png", "Łódź"), "Łódź": ("pl.png", "Łódź"),
    "malmo": ("dk.png", "Malmö"), "special": ("plain.png", "special"),
    '"nach Hamburg"': ("de.png", "nach Hamburg"), "stras*": ("de.png", "Straße"),
    "lodz AND gestern": ("pl.png", "Łódź"),
}
OLD_SCHEMA = [name for name, _ in MIGRATIONS].index("012_fold")


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(tmp_path / "index.sqlite3")
    yield database
    database.close()


def _add(db: Database, path: Path, text: str, size: int = 1) -> None:
    q = JobQueue(db)
    q.offer(path, size, 1, f"sha-{path.name}-{size}")
    job = q.claim()
    assert job is not None
    assert q.complete(job.id, [PageText(text, text)], engine="fake",
                      md_path=path.with_suffix(".md"), txt_path=path.with_suffix(".txt"))


def _assert_found(db: Database) -> None:
    for query, (name, word) in FOUND.items():
        hits = search(db, query)
        assert [Path(h.path).name for h in hits] == [name], query
        assert f"\x02{word}\x03" in hits[0].snippet, (query, hits[0].snippet)
        assert hits[0].snippet.replace("\x02", "").replace("\x03", "") == PAGES[name]
    assert search(db, "strase") == [] and search(db, "lodzz") == []


def test_folded_letters_are_found_and_snippets_show_the_page_as_read(
        db: Database, tmp_path: Path) -> None:
    for name, text in PAGES.items():
        _add(db, tmp_path / name, text)
    _assert_found(db)
    # `ocrwatch reindex` fills the word index as the triggers do.
    assert rebuild_fts(db) == len(PAGES)
    _assert_found(db)
    # Pages without such letters keep no second copy of their text.
    assert db.query("SELECT COUNT(*) AS n FROM pages WHERE folded IS NOT NULL")[0]["n"] == 5
    # Replacing and dropping pages keeps the index in step (the 'delete' takes the
    # folded words out: a stale word would be found still).
    _add(db, tmp_path / "de.png", "Ganz andere Wörter", size=2)
    assert search(db, "strasse") == [] and search(db, "worter")
    assert JobQueue(db).files.forget(tmp_path / "pl.png")
    assert search(db, "lodz") == [] and search(db, "Łódź") == []
    db.conn.execute("INSERT INTO pages_fts(pages_fts) VALUES ('integrity-check')")


def _old_index(path: Path) -> None:
    """An index as the version before folding made and filled it."""
    conn = sqlite3.connect(path)
    old = sqlite_utils.Database(conn)
    conn.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied REAL)")
    for name, step in MIGRATIONS[:OLD_SCHEMA]:
        step(old)
        conn.execute("INSERT INTO _migrations VALUES (?, 0)", (name,))
    for n, (name, text) in enumerate(PAGES.items(), 1):
        conn.execute("INSERT INTO jobs(id, path, display, state, attempts, pages) "
                     "VALUES (?, ?, ?, 'done', 0, 1)", (n, os.fsencode(f"/in/{name}"),
                                                       f"/in/{name}"))
        conn.execute("INSERT INTO pages(job_id, page, text, markdown) VALUES (?, 1, ?, ?)",
                     (n, text, text))
    conn.commit()
    conn.close()


def test_an_index_made_before_folding_is_folded_once(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    _old_index(path)
    # Read (a search never upgrades the index), it is found as written, as before.
    before = Database(path, readonly=True)
    assert search(before, "Straße") and search(before, "Øresund")
    assert not search(before, "strasse")
    before.close()
    db = Database(path)
    try:
        _assert_found(db)
        assert db.migrate() == []
        db.conn.execute("INSERT INTO pages_fts(pages_fts) VALUES ('integrity-check')")
    finally:
        db.close()
