"""A small Python API for scripts: read a file's pages, search what the daemon has read.

    >>> import ocrwatch
    >>> pages = ocrwatch.read("letter.pdf")            # one PageText per page
    >>> pages[0].text
    >>> for hit in ocrwatch.search("harbour office"):   # the daemon's index
    ...     print(hit.path, hit.page, hit.snippet)

Both take the configuration as the daemon does (the config file, ``OCRWATCH_*``), or a
:class:`~ocrwatch.config.Config` given. ``read`` writes nothing: no sidecar, no index
entry; errors are from :mod:`ocrwatch.core.errors` (``InputError`` for a file that cannot be
read, ``EngineUnavailable`` when the engine cannot start).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ocrwatch.config import Config
    from ocrwatch.core.domain import Page, PageText
    from ocrwatch.engines.base import Engine
    from ocrwatch.store.index import Hit

BATCH = 8  # pages in memory at once: a 500-page PDF is read a few pages at a time


def _config(config: Config | None, engine: str | None) -> Config:
    from ocrwatch import config as config_mod

    if config is None:
        config = config_mod.load(overrides={"engine": engine} if engine else None)
    elif engine:
        from dataclasses import replace

        config = replace(config, engine=engine)
    return config


def read(path: str | os.PathLike[str], *, config: Config | None = None,
         engine: str | None = None) -> list[PageText]:
    """Read every page of a scan or PDF with the configured engine (or ``engine``).

    Returns one :class:`~ocrwatch.core.domain.PageText` per page (``markdown``, ``text``,
    ``warnings``); a page the engine could not read has ``error`` set. A PDF page with
    a real text layer gives that text, as in the daemon (``pdf_text``)."""
    from ocrwatch.core.errors import InputError
    from ocrwatch.engines import registry
    from ocrwatch.pages.decode import iter_pages

    source = Path(path).expanduser()
    if not source.is_file():
        raise InputError(f"{source} is not a file; name a scan or a PDF")
    config = _config(config, engine)
    name = registry.choose(config).name
    eng = registry.create(config, name)
    results: list[PageText] = []
    try:
        batch: list[Page] = []
        pages = iter_pages(source, config, eng.max_side, text_layer=True)
        with contextlib.closing(pages):  # type: ignore[type-var]  # a generator: has close
            for page in pages:
                batch.append(page)
                if len(batch) == BATCH:
                    results += _read(eng, name, batch)
                    batch = []
            if batch:
                results += _read(eng, name, batch)
    finally:
        eng.close()
    if not results:
        raise InputError(f"{source} has no pages")
    return results


def _read(eng: Engine, name: str, batch: list[Page]) -> list[PageText]:
    from ocrwatch import pipeline
    from ocrwatch.core.errors import EngineUnavailable

    answers, unavailable = pipeline.read(eng, name, batch)
    if unavailable is not None:
        raise EngineUnavailable(unavailable)
    return answers


def search(query: str, *, limit: int = 20, database: str | os.PathLike[str] | None = None,
           config: Config | None = None) -> list[Hit]:
    """Pages of files read so far that match ``query`` (words, "phrases", AND/OR/NOT,
    prefix*), best first: each :class:`~ocrwatch.store.index.Hit` has ``path``, ``page``,
    ``pages``, ``snippet`` and ``md_path``. The daemon may be running meanwhile."""
    from ocrwatch import config as config_mod
    from ocrwatch.core.errors import IndexUnavailable
    from ocrwatch.store.db import Database
    from ocrwatch.store.index import search as index_search

    where = (Path(database).expanduser() if database is not None
             else (config or config_mod.load()).database)
    if not where.exists():
        raise IndexUnavailable(f"no index at {where}: nothing has been read there yet")
    db = Database(where, readonly=True)
    try:
        return index_search(db, query, limit=limit)
    finally:
        db.close()
