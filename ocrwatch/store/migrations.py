"""The database's schema, as named migrations applied once each, in order.

A migration is never edited once released: a database made by an older version is
brought forward by the steps it has not had yet (:meth:`ocrwatch.store.db.Database.migrate`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import sqlite_utils

from ocrwatch.core.naming import suffixed
from ocrwatch.store.fold import FOLDED_GLOB, fold


def _m001_jobs(db: sqlite_utils.Database) -> None:
    db["jobs"].create(  # type: ignore[union-attr]
        {
            "id": int,
            "path": bytes,  # os.fsencode(path): names need not be UTF-8
            "display": str,  # the path for people, undecodable bytes replaced
            "sha256": str,
            "size": int,
            "mtime_ns": int,
            "state": str,
            "reason": str,
            "attempts": int,
            "not_before": float,
            "pages": int,
            "engine": str,
            "warnings": str,
            "md_path": bytes,
            "txt_path": bytes,
            "created": float,
            "updated": float,
            "finished": float,
        },
        pk="id",
        not_null={"path", "display", "state", "attempts"},
        defaults={"attempts": 0, "not_before": 0.0},
    )
    db.execute("CREATE UNIQUE INDEX jobs_path ON jobs(path)")
    db.execute("CREATE INDEX jobs_state ON jobs(state, not_before, id)")
    db.execute("CREATE INDEX jobs_sha ON jobs(sha256, state)")
    db.execute("CREATE INDEX jobs_md ON jobs(md_path)")


def _m002_pages(db: sqlite_utils.Database) -> None:
    db["pages"].create(  # type: ignore[union-attr]
        {"id": int, "job_id": int, "page": int, "text": str, "markdown": str, "warnings": str},
        pk="id",
        not_null={"job_id", "page", "text", "markdown"},
        foreign_keys=[("job_id", "jobs", "id")],
    )
    db.execute("CREATE UNIQUE INDEX pages_job_page ON pages(job_id, page)")
    # Words, accents folded ("cafe" finds "café"): ranked search.
    db["pages"].enable_fts(  # type: ignore[union-attr]
        ["text"], fts_version="FTS5", tokenize="unicode61 remove_diacritics 2",
        create_triggers=True,
    )
    # Trigrams find substrings, which Chinese and Japanese need (no spaces between words).
    db.execute("CREATE VIRTUAL TABLE pages_tri USING fts5(text, content='pages', "
               "content_rowid='id', tokenize='trigram')")
    _sync_triggers(db, "pages", "pages_tri", "text", prefix="pages_tri")


def _m003_settings(db: sqlite_utils.Database) -> None:
    db["settings"].create({"key": str, "value": str}, pk="key")  # type: ignore[union-attr]


def _m004_moves(db: sqlite_utils.Database) -> None:
    # Journal of originals being archived: a crash mid-move is finished at the next start.
    db["moves"].create(  # type: ignore[union-attr]
        {"id": int, "job_id": int, "src": bytes, "dest": bytes},
        pk="id", not_null={"job_id", "src", "dest"},
    )


def _m005_names(db: sqlite_utils.Database) -> None:
    # Where a file lives on disk, so that a file moved while nothing watched is known
    # again by its inode (with its size and time) instead of being read a second time.
    db.execute("ALTER TABLE jobs ADD COLUMN dev INTEGER")
    db.execute("ALTER TABLE jobs ADD COLUMN inode INTEGER")
    db.execute("CREATE INDEX jobs_inode ON jobs(inode)")
    # File and folder names, searchable on their own: `jobs_fts` (the sqlite-utils
    # naming, so Datasette and sqlite-utils find it). Kept by triggers on the path only,
    # so state changes of a job cost nothing here.
    db["jobs"].enable_fts(  # type: ignore[union-attr]
        ["display"], fts_version="FTS5", tokenize="unicode61 remove_diacritics 2",
        create_triggers=False,
    )
    _sync_triggers(db, "jobs", "jobs_fts", "display", prefix="jobs", update_of="display")


def _m006_read_with(db: sqlite_utils.Database) -> None:
    # What a file was read with: the engine, and for Tesseract its languages
    # ("tesseract eng+deu"), so that after a language change only the files read
    # otherwise are read again (`ocrwatch reread`).
    db.execute("ALTER TABLE jobs ADD COLUMN read_with TEXT")


# Pages with Chinese, Japanese or Korean characters (the same ranges as index._CJK), as a
# GLOB pattern, for pages stored before ``pages.cjk`` existed.
CJK_GLOB = "*[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in (
    (0x3000, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7AF), (0xF900, 0xFAFF),
    (0xFF00, 0xFFEF))) + "]*"


def _m007_cjk_trigrams(db: sqlite_utils.Database) -> None:
    # Trigrams are for text written without spaces; a page in a European language costs
    # as many trigrams as characters for nothing. Only pages with CJK characters keep them:
    # ``pages.cjk``, set by index.replace_pages (a regular expression in Python is much cheaper
    # than a GLOB in a trigger), drives the triggers (the same WHEN on insert and delete,
    # as external content needs) and a partial index for the scan of short CJK words.
    glob = "'" + CJK_GLOB + "'"
    db.executescript(
        f"""
        ALTER TABLE pages ADD COLUMN cjk INTEGER NOT NULL DEFAULT 0;
        UPDATE pages SET cjk = 1 WHERE text GLOB {glob};
        DROP TRIGGER pages_tri_ai;
        DROP TRIGGER pages_tri_ad;
        DROP TRIGGER pages_tri_au;
        INSERT INTO pages_tri(pages_tri) VALUES ('delete-all');
        INSERT INTO pages_tri(rowid, text) SELECT id, text FROM pages WHERE cjk;
        CREATE TRIGGER pages_tri_ai AFTER INSERT ON pages WHEN new.cjk BEGIN
          INSERT INTO pages_tri(rowid, text) VALUES (new.id, new.text);
        END;
        CREATE TRIGGER pages_tri_ad AFTER DELETE ON pages WHEN old.cjk BEGIN
          INSERT INTO pages_tri(pages_tri, rowid, text) VALUES ('delete', old.id, old.text);
        END;
        CREATE TRIGGER pages_tri_aud AFTER UPDATE ON pages WHEN old.cjk BEGIN
          INSERT INTO pages_tri(pages_tri, rowid, text) VALUES ('delete', old.id, old.text);
        END;
        CREATE TRIGGER pages_tri_aui AFTER UPDATE ON pages WHEN new.cjk BEGIN
          INSERT INTO pages_tri(rowid, text) VALUES (new.id, new.text);
        END;
        CREATE INDEX pages_cjk ON pages(id) WHERE cjk;
        """
    )


def _m008_page_scan(db: sqlite_utils.Database) -> None:
    # What preparing a scanned page did: turned upright (degrees clockwise), straightened
    # (degrees counter-clockwise), recorded blank without reading; and whether its
    # reading is mostly not words (then kept out of search).
    db.executescript(
        """
        ALTER TABLE pages ADD COLUMN turned INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE pages ADD COLUMN skew REAL NOT NULL DEFAULT 0;
        ALTER TABLE pages ADD COLUMN blank INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE pages ADD COLUMN nonwords INTEGER NOT NULL DEFAULT 0;
        """
    )


def _m009_retire(db: sqlite_utils.Database) -> None:
    # What on_success still owes a done file, kept in the row that says "done" (one
    # transaction): "pending" (to archive or delete: a crash before it is resumed at
    # start), "kept" (the read was not complete enough to part with the original) or
    # "failed" (archiving or deleting failed, e.g. a full disk); with the reason.
    db.execute("ALTER TABLE jobs ADD COLUMN retire TEXT")
    db.execute("ALTER TABLE jobs ADD COLUMN retire_reason TEXT")


def _m010_crashes(db: sqlite_utils.Database) -> None:
    # How often the daemon died of a fatal signal while the file was being read: from 1
    # it is read alone, at 2 it fails with the reason (ocrwatch/store/jobs.py).
    db.execute("ALTER TABLE jobs ADD COLUMN crashes INTEGER NOT NULL DEFAULT 0")
    db.execute("CREATE INDEX jobs_crashed ON jobs(state, not_before, id) WHERE crashes > 0")


def _m011_asked(db: sqlite_utils.Database) -> None:
    # ``asked``: what the reading of a file named by a command may do with its original
    # ("keep", "archive", "delete": `ocrwatch add --on-success`; "keep" for a reread);
    # NULL: its place decides (:func:`ocrwatch.results.retire.disposal`).
    # ``original_gone``: the original was deleted after its reading and the row names
    # its result, which is never read again as if it were an original.
    db.execute("ALTER TABLE jobs ADD COLUMN asked TEXT")
    db.execute("ALTER TABLE jobs ADD COLUMN original_gone INTEGER NOT NULL DEFAULT 0")
    db.execute("UPDATE jobs SET original_gone = 1 WHERE path = md_path OR path = txt_path")
    # A deleted original's entry named by its searchable PDF (scan.ocr.pdf beside scan.md).
    rows = list(db.execute(
        "SELECT id, path, md_path FROM jobs WHERE md_path IS NOT NULL").fetchall())
    for job_id, path, md in rows:
        if bytes(path).endswith(b".ocr.pdf") and bytes(md)[:-3] == bytes(path)[:-8]:
            db.execute("UPDATE jobs SET original_gone = 1 WHERE id = ?", [job_id])


def _m012_fold(db: sqlite_utils.Database) -> None:
    # ``pages.folded``: the page's text with ß, ø, æ... spelled out (store/fold.py), NULL
    # where that changes nothing; the word index holds its words. pages_fts stays an
    # external-content table on ``pages.text``, so its snippets are cut from the text as
    # read (Straße, not Strasse), and folding keeps each word in its place, so their
    # highlights fall on the words found. A folded copy in pages_fts itself would show
    # folded snippets. (FTS5's 'rebuild' would index the unfolded text: rebuild_fts in
    # store/index.py fills it instead.)
    db.executescript(
        """
        ALTER TABLE pages ADD COLUMN folded TEXT;
        DROP TRIGGER pages_ai;
        DROP TRIGGER pages_ad;
        DROP TRIGGER pages_au;
        CREATE TRIGGER pages_ai AFTER INSERT ON pages BEGIN
          INSERT INTO pages_fts(rowid, text) VALUES (new.id, COALESCE(new.folded, new.text));
        END;
        CREATE TRIGGER pages_ad AFTER DELETE ON pages BEGIN
          INSERT INTO pages_fts(pages_fts, rowid, text)
            VALUES ('delete', old.id, COALESCE(old.folded, old.text));
        END;
        CREATE TRIGGER pages_au AFTER UPDATE OF text, folded ON pages BEGIN
          INSERT INTO pages_fts(pages_fts, rowid, text)
            VALUES ('delete', old.id, COALESCE(old.folded, old.text));
          INSERT INTO pages_fts(rowid, text) VALUES (new.id, COALESCE(new.folded, new.text));
        END;
        """
    )
    # The pages stored before: only those with such letters are indexed again (the
    # update trigger above takes their unfolded words out and puts the folded ones in).
    ids = [r[0] for r in db.execute("SELECT id FROM pages WHERE text GLOB ?", [FOLDED_GLOB])]
    for page_id in ids:
        (text,) = db.execute("SELECT text FROM pages WHERE id = ?", [page_id]).fetchone()
        db.execute("UPDATE pages SET folded = ? WHERE id = ?", [fold(text), page_id])


def _m013_page_layout(db: sqlite_utils.Database) -> None:
    # Where each word of a page is (core/layout.dumps: JSON), kept so that an output
    # needing word boxes (searchable PDF, hOCR, ALTO) is written later without reading the
    # page again. NULL for pages stored before, and for engines that give no boxes.
    db.execute("ALTER TABLE pages ADD COLUMN layout TEXT")


# The outputs named after the ``.md``'s (or ``.txt``'s) stem before 014 recorded them:
# found by these suffixes beside it, as the code of then found them. Frozen here: a
# migration keeps meaning what it meant when released.
_BESIDE_014 = {"pdf": ".ocr.pdf", "hocr": ".hocr", "alto": ".alto.xml"}


def _m014_job_outputs(db: sqlite_utils.Database) -> None:
    # A job's outputs as rows (job, output name, path) instead of a column per format:
    # every format the registry has (results/formats.py) is recorded, moved, archived and
    # removed alike. ``jobs.md_path`` and ``txt_path`` stay, kept in step by store/jobs.py
    # (search hits name the .md, and older readers of the index use them).
    db.execute("CREATE TABLE job_outputs (job_id INTEGER NOT NULL REFERENCES jobs(id), "
               "name TEXT NOT NULL, path BLOB NOT NULL, PRIMARY KEY (job_id, name))")
    db.execute("CREATE INDEX job_outputs_path ON job_outputs(path)")
    db.execute("INSERT INTO job_outputs(job_id, name, path) "
               "SELECT id, 'md', md_path FROM jobs WHERE md_path IS NOT NULL")
    db.execute("INSERT INTO job_outputs(job_id, name, path) "
               "SELECT id, 'txt', txt_path FROM jobs WHERE txt_path IS NOT NULL")
    # The searchable PDF, hOCR and ALTO had no column: they were the files of those names
    # beside the .md (or the .txt) that were there. Those there now are recorded.
    rows = db.execute("SELECT id, md_path, txt_path FROM jobs "
                      "WHERE md_path IS NOT NULL OR txt_path IS NOT NULL").fetchall()
    for job_id, md, txt in rows:
        stem = (bytes(md)[:-len(b".md")] if md is not None
                else bytes(txt)[:-len(b".txt")])
        base = Path(os.fsdecode(stem))
        for name, suffix in _BESIDE_014.items():
            path = suffixed(base, suffix)
            if os.path.lexists(path):
                db.execute("INSERT INTO job_outputs(job_id, name, path) VALUES (?, ?, ?)",
                           [job_id, name, os.fsencode(path)])


MIGRATIONS: list[tuple[str, Callable[[sqlite_utils.Database], None]]] = [
    ("001_jobs", _m001_jobs),
    ("002_pages", _m002_pages),
    ("003_settings", _m003_settings),
    ("004_moves", _m004_moves),
    ("005_names", _m005_names),
    ("006_read_with", _m006_read_with),
    ("007_cjk_trigrams", _m007_cjk_trigrams),
    ("008_page_scan", _m008_page_scan),
    ("009_retire", _m009_retire),
    ("010_crashes", _m010_crashes),
    ("011_asked", _m011_asked),
    ("012_fold", _m012_fold),
    ("013_page_layout", _m013_page_layout),
    ("014_job_outputs", _m014_job_outputs),
]


def _sync_triggers(db: sqlite_utils.Database, table: str, fts: str, column: str, *,
                   prefix: str, update_of: str | None = None) -> None:
    """Triggers that keep an external-content FTS5 table in step with its table."""
    update = f"UPDATE OF {update_of}" if update_of else "UPDATE"
    delete = f"INSERT INTO {fts}({fts}, rowid, {column}) VALUES ('delete', old.id, old.{column});"
    insert = f"INSERT INTO {fts}(rowid, {column}) VALUES (new.id, new.{column});"
    db.executescript(f"""
        CREATE TRIGGER {prefix}_ai AFTER INSERT ON {table} BEGIN {insert} END;
        CREATE TRIGGER {prefix}_ad AFTER DELETE ON {table} BEGIN {delete} END;
        CREATE TRIGGER {prefix}_au AFTER {update} ON {table} BEGIN {delete} {insert} END;
        """)
