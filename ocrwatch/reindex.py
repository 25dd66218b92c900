"""``ocrwatch reindex``: the full-text tables rebuilt from the stored page text, or the
index rebuilt from the sidecars when the database is lost.

Rebuilding from the database reads no file: the page text is in ``pages``; the word,
trigram and name tables are emptied and filled again in one transaction, in chunks so the
progress bar moves. From the sidecars, each original in the watched folders whose
``.txt`` (and ``.md``) are found where ocrwatch writes them gets its job back as done,
with its pages split at the form feeds (``.txt``) and page markers (``.md``): nothing is
read by the engine again.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ocrwatch.config import Config
from ocrwatch.db import Database
from ocrwatch.domain import PageText
from ocrwatch.errors import OcrwatchError
from ocrwatch.inbox_files import walk
from ocrwatch.jobs import JobQueue, file_sha256
from ocrwatch.lifecycle import output_folder
from ocrwatch.sidecar import fitting, sidecar_paths

log = logging.getLogger(__name__)

CHUNK = 2000  # pages per step of the progress bar
_PAGE_MARK = re.compile(r"^<!-- page (\d+) -->\n\n", re.M)

Progress = Callable[[int], None]  # called with how many more items are done


def count_pages(db: Database) -> int:
    return int(db.query("SELECT COUNT(*) AS n FROM pages")[0]["n"])


def rebuild_fts(db: Database, progress: Progress | None = None) -> int:
    """Fill the full-text tables again from ``pages`` and ``jobs``; returns pages indexed."""
    done = 0
    with db.transaction() as conn:
        for table in ("pages_fts", "pages_tri", "jobs_fts"):
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('delete-all')")
        conn.execute("INSERT INTO jobs_fts(rowid, display) SELECT id, display FROM jobs")
        (top,) = conn.execute("SELECT COALESCE(MAX(id), 0) FROM pages").fetchone()
        low = 0
        while low < top:
            high = low + CHUNK
            conn.execute("INSERT INTO pages_fts(rowid, text) SELECT id, text FROM pages "
                         "WHERE id > ? AND id <= ?", (low, high))
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


@dataclass(frozen=True)
class Restored:
    files: int
    pages: int
    without_sidecars: list[Path]


def split_pages(txt: str, md: str | None) -> list[PageText]:
    """Pages from a ``.txt`` (form feeds between pages) and its ``.md`` (page markers)."""
    texts = [t.strip() for t in txt.split("\f")]
    marks = [] if md is None else list(_PAGE_MARK.finditer(md))
    if md is not None and len(texts) == 1:
        markdowns = [md.strip()]
    elif len(marks) == len(texts):
        markdowns = []
        for i, mark in enumerate(marks):
            end = marks[i + 1].start() if i + 1 < len(marks) else len(md or "")
            body = (md or "")[mark.end():end].strip()
            markdowns.append(body.removesuffix("---").strip())
    else:
        markdowns = texts  # no usable .md: the text stands in for it
    return [PageText(markdown=m, text=t) for m, t in zip(markdowns, texts, strict=True)]


def _sidecars_of(original: Path, config: Config, taken: set[Path]) -> tuple[Path, Path] | None:
    folder = output_folder(config, original)
    for stem in (fitting(original.name), fitting(original.stem)):
        md, txt = sidecar_paths(folder / stem)
        if txt not in taken and txt.is_file():
            return md, txt
    return None


def from_sidecars(config: Config, db: Database, progress: Progress | None = None
                  ) -> Restored:
    """Give every original with sidecars its job and pages back (no engine involved)."""
    if config.output_dir is not None and config.output_layout == "date":
        raise OcrwatchError("sidecars filed by date (output_layout = \"date\") do not say "
                            "which original they belong to; read the files again instead "
                            "(`ocrwatch add` on the inbox)")
    jobs = JobQueue(db)
    originals = sorted(walk(config.inbox))
    # Full-name sidecars first (scan.pdf.md), so that scan.md goes to the file that had it.
    taken: set[Path] = set()
    found: dict[Path, tuple[Path, Path]] = {}
    for exact in (True, False):
        for original in originals:
            if original in found:
                continue
            pair = _sidecars_of(original, config, taken)
            if pair is None or (exact and pair[1].name != fitting(original.name) + ".txt"):
                continue
            found[original] = pair
            taken.add(pair[1])
    files = pages = 0
    missing: list[Path] = []
    for original in originals:
        if original not in found:
            missing.append(original)
        elif jobs.known(original) is None:
            md, txt = found[original]
            try:
                text = txt.read_text(encoding="utf-8")
                markdown = md.read_text(encoding="utf-8") if md.is_file() else None
                st = os.stat(original)
                sha = file_sha256(original)
            except (OSError, UnicodeDecodeError) as exc:
                log.warning("cannot restore %s from its sidecars: %s", original, exc)
                missing.append(original)
                continue
            read = split_pages(text, markdown)
            job_id = jobs.restore(original, st, sha)
            jobs.complete(job_id, read, engine="sidecars",
                          md_path=md if markdown is not None else None, txt_path=txt,
                          sha256=sha)
            files += 1
            pages += len(read)
        if progress is not None:
            progress(1)
    return Restored(files, pages, missing)
