"""Page text in the full-text index (its rows, written for the queue), and searching it.

Two FTS5 tables index the same page text: ``pages_fts`` (words, accents folded, and
letters such as ß, ø, æ spelled out by :func:`ocrwatch.store.fold.fold` in the pages and
the queries alike; ranked with bm25) for European languages, and ``pages_tri``
(trigrams) for Chinese and Japanese, whose words are not separated by spaces and are
found as substrings.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from ocrwatch.core import layout as layouts
from ocrwatch.core.domain import DOUBT_NOTE, PageText
from ocrwatch.core.errors import SearchError
from ocrwatch.store.db import Database, SqliteProblem, encode_path, sqlite_problem
from ocrwatch.store.fold import fold

# Han, Hiragana, Katakana, Hangul and CJK punctuation/fullwidth forms.
_CJK = re.compile(
    r"[\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]"
)
HIGHLIGHT = ("\x02", "\x03")  # markers the CLI turns into bold or brackets
QUERY_SECONDS = 10.0  # a search running longer is stopped (`a* b* c* ...` can take minutes)
MAX_TERMS = 64  # SQLite refuses expressions deeper than 1000; no one types 64 words
MAX_HITS = 10_000
CHUNK = 2000  # pages per step of the progress bar of a rebuild


@dataclass(frozen=True)
class Hit:
    path: str
    page: int
    pages: int
    snippet: str  # matches between HIGHLIGHT markers
    rank: float
    md_path: str | None
    job_id: int = 0
    mtime: float | None = None  # the file's modification time (seconds since the epoch)
    turned: int = 0  # degrees the page was turned clockwise to read it upright
    sha256: str | None = None  # the file's content (names its thumbnails), not printed
    doubt: str | None = None  # the file was read with doubts: its first doubt
    txt_path: str | None = None  # the plain-text sidecar (the text to open without a .md)

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        del data["sha256"]
        data["snippet"] = self.snippet.replace(HIGHLIGHT[0], "[").replace(HIGHLIGHT[1], "]")
        return data


@dataclass(frozen=True)
class Filters:
    """Narrowing a search: all given conditions hold for every hit."""

    folder: Path | None = None  # in this folder or below it
    name: str | None = None  # words in the file's or its folders' names
    after: float | None = None  # modified at or after (seconds since the epoch)
    before: float | None = None  # modified before
    types: tuple[str, ...] = ()  # file name endings, e.g. (".pdf", ".jpg")

    def sql(self) -> tuple[str, list[object]]:
        """``AND ...`` conditions on the jobs table ``j`` and their parameters."""
        where: list[str] = []
        params: list[object] = []
        if self.folder is not None:
            key = encode_path(self.folder).rstrip(b"/")
            where.append("j.path > ? AND j.path < ?")  # '0' follows '/': the whole subtree
            params += [key + b"/", key + b"0"]
        if self.name and self.name.strip():
            where.append("j.id IN (SELECT rowid FROM jobs_fts WHERE jobs_fts MATCH ?)")
            params.append(_fts_query(self.name.strip()))
        if self.after is not None:
            where.append("j.mtime_ns >= ?")
            params.append(_ns(self.after))
        if self.before is not None:
            where.append("j.mtime_ns < ?")
            params.append(_ns(self.before))
        if self.types:
            where.append("(" + " OR ".join("j.display LIKE ?" for _ in self.types) + ")")
            params += ["%" + t.lower().lstrip("*") for t in self.types]
        return "".join(" AND " + w for w in where), params

    def __bool__(self) -> bool:
        return bool(self.folder or (self.name and self.name.strip()) or self.after is not None
                    or self.before is not None or self.types)


def warnings_json(warnings: list[str]) -> str | None:
    return json.dumps(warnings, ensure_ascii=False) if warnings else None


def folded(text: str) -> str | None:
    """What ``pages.folded`` holds for a page: its folded text, or None (NULL) where
    folding changes nothing, so that most pages cost no second copy."""
    out = fold(text)
    return None if out == text else out


def replace_pages(conn: sqlite3.Connection, job_id: int, pages: list[PageText]) -> None:
    """The job's page rows (and so its FTS rows, kept by triggers), inside the caller's
    transaction: the queue completes a job and indexes its pages at once."""
    conn.execute("DELETE FROM pages WHERE job_id = ?", (job_id,))
    conn.executemany(
        "INSERT INTO pages(job_id, page, text, markdown, warnings, cjk, turned, skew, "
        "blank, nonwords, folded, layout) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(job_id, i, p.text, p.markdown, warnings_json(p.warnings),
          1 if _CJK.search(p.text) else 0, p.turned, p.skew, int(p.blank), int(p.nonwords),
          folded(p.text), layouts.dumps(p.layout) if p.layout is not None else None)
         for i, p in enumerate(pages, 1)],
    )


def drop_pages(conn: sqlite3.Connection, job_id: int) -> list[tuple[str, str]]:
    """Remove the job's page rows (and their FTS rows) inside the caller's transaction;
    returns each page's (markdown, text), by which the job's sidecars are recognised."""
    rows = conn.execute("SELECT markdown, text FROM pages WHERE job_id = ? ORDER BY page",
                        (job_id,)).fetchall()
    conn.execute("DELETE FROM pages WHERE job_id = ?", (job_id,))
    return [(m, t) for m, t in rows]


def pages_of(db: Database, job_id: int) -> list[PageText]:
    """The pages stored for a job, in order."""
    rows = db.query(
        "SELECT text, markdown, warnings, turned, skew, blank, nonwords, layout FROM pages "
        "WHERE job_id = ? ORDER BY page", (job_id,)
    )
    return [PageText(markdown=r["markdown"], text=r["text"],
                     warnings=json.loads(r["warnings"]) if r["warnings"] else [],
                     turned=int(r["turned"]), skew=float(r["skew"]), blank=bool(r["blank"]),
                     nonwords=bool(r["nonwords"]),
                     layout=layouts.loads(r["layout"]) if r["layout"] else None)
            for r in rows]


def keep_layouts(db: Database, job_id: int, pages: list[PageText]) -> int:
    """Store the layouts found since for a job's pages stored without one (``reread
    --outputs`` on an index from before migration 013): found once, not again. Returns
    how many pages got one."""
    rows = [(layouts.dumps(p.layout), job_id, n) for n, p in enumerate(pages, 1)
            if p.layout is not None]
    with db.transaction() as conn:
        before = conn.total_changes
        conn.executemany("UPDATE pages SET layout = ? WHERE job_id = ? AND page = ? "
                         "AND layout IS NULL", rows)
        return conn.total_changes - before


def count_pages(db: Database) -> int:
    return int(db.query("SELECT COUNT(*) AS n FROM pages")[0]["n"])


def rebuild_fts(db: Database, progress: Callable[[int], None] | None = None) -> int:
    """Fill the full-text tables again from ``pages`` and ``jobs`` (``ocrwatch reindex``),
    in one transaction, in chunks so that ``progress`` hears how many more pages are done;
    returns the pages indexed."""
    done = 0
    with db.transaction() as conn:
        # Each table named in full: the test of table owners reads the statements.
        conn.execute("INSERT INTO pages_fts(pages_fts) VALUES ('delete-all')")
        conn.execute("INSERT INTO pages_tri(pages_tri) VALUES ('delete-all')")
        conn.execute("INSERT INTO jobs_fts(jobs_fts) VALUES ('delete-all')")
        conn.execute("INSERT INTO jobs_fts(rowid, display) SELECT id, display FROM jobs")
        (top,) = conn.execute("SELECT COALESCE(MAX(id), 0) FROM pages").fetchone()
        low = 0
        while low < top:
            high = low + CHUNK
            # The folded words, as the index's triggers keep them (migration 012).
            conn.execute("INSERT INTO pages_fts(rowid, text) SELECT id, "
                         "COALESCE(folded, text) FROM pages WHERE id > ? AND id <= ?",
                         (low, high))
            # Trigrams only for pages with CJK text, as the index's triggers keep them.
            conn.execute("INSERT INTO pages_tri(rowid, text) SELECT id, text FROM pages "
                         "WHERE id > ? AND id <= ? AND cjk", (low, high))
            (n,) = conn.execute("SELECT COUNT(*) FROM pages WHERE id > ? AND id <= ?",
                                (low, high)).fetchone()
            done += n
            if progress is not None and n:
                progress(n)
            low = high
        conn.execute("INSERT INTO pages_fts(pages_fts) VALUES ('optimize')")
    return done


def _fts_query(query: str, *, folding: bool = False) -> str:
    """The user's query for the word index: FTS5 syntax, with bare words made safe.

    Words and quoted phrases are kept; AND/OR/NOT/NEAR and a trailing * work as in FTS5.
    Words with punctuation (e-mail, 1,250.00, O'Brien) are quoted so they don't read as
    syntax. ``folding``: the words folded as the pages are (``pages_fts``; file names in
    ``jobs_fts`` are not folded).
    """
    # Letters stay letters: the syntax is read alike in the folded query.
    tokens = re.findall(r'"[^"]*"|\(|\)|[^\s()"]+|"', fold(query) if folding else query)
    out: list[str] = []
    for tok in tokens:
        if tok in ("AND", "OR", "NOT", "(", ")") or tok.startswith("NEAR"):
            out.append(tok)
        elif tok.startswith('"'):
            if len(tok) < 2 or not tok.endswith('"'):
                raise SearchError(
                    f"the query {query!r} has an unclosed quote; close it or remove it"
                )
            out.append(tok)
        elif re.fullmatch(r"\w+\*?", tok):
            out.append(tok)
        else:
            prefix = tok.endswith("*") and len(tok) > 1
            inner = tok[:-1] if prefix else tok
            out.append('"' + inner.replace('"', '""') + '"' + ("*" if prefix else ""))
    return " ".join(out)


def search(db: Database, query: str, *, limit: int = 20, offset: int = 0,
           filters: Filters | None = None,
           time_limit: float | None = QUERY_SECONDS) -> list[Hit]:
    """Ranked hits for ``query``; raises SearchError with a plain message when malformed.

    With an empty query and a ``filters.name``, the files whose names match (first page
    each), ranked by how well the name matches. A query that runs longer than
    ``time_limit`` seconds is stopped (SearchTimeout).
    """
    with db.time_limit(time_limit):
        return _search(db, query, limit=limit, offset=offset, filters=filters)


def _search(db: Database, query: str, *, limit: int, offset: int,
            filters: Filters | None) -> list[Hit]:
    query = query.strip()
    filters = filters or Filters()
    if not query and not (filters.name and filters.name.strip()):
        raise SearchError("the query is empty; give one or more words to look for")
    if not 1 <= limit <= MAX_HITS:
        raise SearchError(f"the number of hits must be between 1 and {MAX_HITS}")
    if len(query.split()) > MAX_TERMS:
        raise SearchError(f"the query has {len(query.split())} words; at most {MAX_TERMS} "
                          "are searched at once, so keep the most telling ones")
    if offset < 0:
        raise SearchError("the offset must not be negative")
    if "\x00" in query or "\x00" in (filters.name or ""):
        # SQLite's FTS5 parses C strings: the rest would be cut off ("unterminated string").
        raise SearchError("the query holds a NUL character; leave it out")
    extra, fparams = filters.sql()
    base = (
        "SELECT j.id AS job_id, j.display AS path, p.page AS page, j.pages AS pages, "
        "j.md_path AS md_path, j.txt_path AS txt_path, j.mtime_ns AS mtime_ns, "
        "p.turned AS turned, "
        "j.sha256 AS sha256, j.warnings AS job_warnings, "
    )
    try:
        if not query:
            sql = (
                base + "substr(p.text, 1, 160) AS snippet, jobs_fts.rank AS score "
                "FROM jobs_fts JOIN jobs j ON j.id = jobs_fts.rowid "
                "JOIN pages p ON p.job_id = j.id AND p.page = 1 "
                f"WHERE jobs_fts MATCH ? {extra} ORDER BY jobs_fts.rank LIMIT ? OFFSET ?"
            )
            assert filters.name is not None
            rows = db.query(sql, (_fts_query(filters.name.strip()), *fparams, limit, offset))
        elif _CJK.search(query):
            terms = query.split()
            if all(len(t) >= 3 for t in terms):
                match = " ".join('"' + t.replace('"', '""') + '"' for t in terms)
                sql = (
                    base + "snippet(pages_tri, 0, ?, ?, '…', 16) AS snippet, "
                    "pages_tri.rank AS score FROM pages_tri "
                    "JOIN pages p ON p.id = pages_tri.rowid JOIN jobs j ON j.id = p.job_id "
                    f"WHERE pages_tri MATCH ? AND NOT p.nonwords {extra} "
                    "ORDER BY pages_tri.rank LIMIT ? OFFSET ?"
                )
                rows = db.query(sql, (*HIGHLIGHT, match, *fparams, limit, offset))
            else:
                # Trigrams need three characters; shorter CJK words are found by scanning
                # the pages that have CJK characters (a partial index), newest first.
                where = " AND ".join("instr(p.text, ?) > 0" for _ in terms)
                sql = (
                    base + "substr(p.text, max(1, instr(p.text, ?) - 20), 60) AS snippet, "
                    f"0.0 AS score FROM pages p JOIN jobs j ON j.id = p.job_id "
                    f"WHERE p.cjk AND NOT p.nonwords AND {where} "
                    f"{extra} ORDER BY p.id DESC LIMIT ? OFFSET ?"
                )
                rows = db.query(sql, (terms[0], *terms, *fparams, limit, offset))
                return [
                    _hit(r, r["snippet"].replace(terms[0],
                                                 HIGHLIGHT[0] + terms[0] + HIGHLIGHT[1]))
                    for r in rows
                ]
        else:
            sql = (
                base + "snippet(pages_fts, 0, ?, ?, '…', 12) AS snippet, "
                "pages_fts.rank AS score FROM pages_fts "
                "JOIN pages p ON p.id = pages_fts.rowid JOIN jobs j ON j.id = p.job_id "
                f"WHERE pages_fts MATCH ? AND NOT p.nonwords {extra} "
                "ORDER BY pages_fts.rank LIMIT ? OFFSET ?"
            )
            rows = db.query(sql, (*HIGHLIGHT, _fts_query(query, folding=_folded(db)),
                                  *fparams, limit, offset))
    except sqlite3.OperationalError as exc:
        if sqlite_problem(exc) is SqliteProblem.QUERY:
            raise SearchError(
                f"could not understand the query {query or filters.name!r}: use words, "
                "\"quoted phrases\", AND, OR, NOT and prefix* "
                "(for example: invoice AND \"March 2024\")"
            ) from None
        raise
    return [_hit(r, r["snippet"]) for r in rows]


def _folded(db: Database) -> bool:
    """Whether the index holds folded words (migration 012). Searches open the index
    read-only and never upgrade it: until the daemon of this version has, a folded query
    would miss the words it holds as written (Straße)."""
    return bool(db.query("SELECT 1 FROM _migrations WHERE name = '012_fold'"))


def _ns(seconds: float) -> int:
    """Seconds as nanoseconds, kept inside SQLite's 64-bit integers."""
    return max(-(2**63), min(2**63 - 1, int(seconds * 1e9)))


def _hit(r: sqlite3.Row, snippet: str) -> Hit:
    mtime = r["mtime_ns"]
    return Hit(r["path"], r["page"], r["pages"] or 0, snippet, float(r["score"]),
               _md(r["md_path"]), int(r["job_id"]), mtime / 1e9 if mtime is not None else None,
               int(r["turned"] or 0), r["sha256"], first_doubt(r["job_warnings"]),
               _md(r["txt_path"]))


def first_doubt(warnings: str | None) -> str | None:
    """A file's first doubt (``page 2: doubtful text: WHY``) among its job's warnings."""
    if not warnings or DOUBT_NOTE not in warnings:
        return None
    with contextlib.suppress(ValueError, TypeError):
        for warning in json.loads(warnings):
            where, _, rest = str(warning).partition(": ")
            if rest.startswith(DOUBT_NOTE):
                return f"{where}: {rest[len(DOUBT_NOTE):]}"
    return None


def _md(raw: bytes | None) -> str | None:
    return None if raw is None else os.fsdecode(raw)
