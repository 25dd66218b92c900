"""Commands that look at what was read: ``search``, ``status`` and ``reindex``."""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from ocrwatch import config as config_mod
from ocrwatch.cli.common import database_arg, echo
from ocrwatch.cli.termsafe import safe
from ocrwatch.core.errors import (
    ArgumentError,
    ConfigError,
    DaemonError,
    DaemonNotRunning,
    DaemonRunning,
    IndexUnavailable,
    SearchTimeout,
)
from ocrwatch.core.status import EngineStatus, Status, format_status


def cmd_search(args: argparse.Namespace) -> int:
    from ocrwatch.store.db import Database
    from ocrwatch.store.index import HIGHLIGHT, search

    if args.web:
        return _search_web(args)
    query = " ".join(args.query).strip()
    filters = _filters(args)
    if not query and not filters.name:
        raise ArgumentError("give one or more words to look for, e.g. `ocrwatch search "
                            "invoice`, or a file name with --name")
    if args.page < 1:
        raise ArgumentError("--page must be 1 or more")
    path, origin = database_arg(args)
    db = Database(path, readonly=True, origin=origin)
    try:
        hits = search(db, query, limit=args.limit, offset=(args.page - 1) * args.limit,
                      filters=filters, time_limit=args.time_limit)
    except SearchTimeout as exc:
        raise SearchTimeout(f"{exc}, or allow more time with --time-limit SECONDS") from None
    finally:
        db.close()
    if args.json:
        text = json.dumps([h.as_dict() for h in hits], ensure_ascii=False, indent=2)
        # JSON escapes C0 controls itself; C1 controls and bidi overrides get \u escapes.
        print(re.sub("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]",
                     lambda m: f"\\u{ord(m.group()):04x}", text))
        if not hits:
            echo("no matches", err=True)
        return 0 if hits else 1
    if not hits:
        echo("no matches", err=True)
        return 1
    on, off = ("\033[1;33m", "\033[0m") if sys.stdout.isatty() else ("[", "]")
    for hit in hits:
        where = safe(hit.path) + (f"  (page {hit.page} of {hit.pages})" if hit.pages > 1 else "")
        if hit.turned:
            where += f"  (turned {hit.turned}° to read)"
        snippet = safe(" ".join(hit.snippet.split()))
        # The highlight markers are controls too: turn the escaped forms into colour.
        for marker, shown in zip(HIGHLIGHT, (on, off), strict=True):
            snippet = snippet.replace(safe(marker), shown)
        print(where)
        print("    " + snippet)
    return 0


def _filters(args: argparse.Namespace) -> Any:
    from ocrwatch.store.index import Filters
    from ocrwatch.web.params import parse_day

    types = tuple("." + t.lower().lstrip(".") for t in (args.types or []))
    return Filters(folder=args.folder.expanduser().absolute() if args.folder else None,
                   name=args.name, after=parse_day(args.after or ""),
                   before=parse_day(args.before or ""), types=types)


def _search_web(args: argparse.Namespace) -> int:
    """The page from the running daemon, or served by this process until Ctrl-C."""
    import webbrowser

    from ocrwatch.control.client import request

    try:
        answer = request("web")
        url, launch = str(answer["url"]), str(answer.get("open") or answer["url"])
    except DaemonNotRunning:
        url = launch = ""
    if url:
        # The browser gets a private file with a one-time code, never the token: its
        # command line can be read by every local user.
        if args.no_open:
            echo(url)
        else:
            echo(launch)
            webbrowser.open(launch)
        return 0
    from ocrwatch.pages.thumbs import Thumbnails
    from ocrwatch.web.server import SearchServer

    config = config_mod.load(getattr(args, "config", None))
    path, _origin = database_arg(args)
    with SearchServer(path, Thumbnails(config.cache_dir / "thumbnails"),
                      inbox=config.inbox, follow_symlinks=config.follow_symlinks) as server:
        launch = server.url if args.no_open else server.launch_url()
        echo(launch)
        echo("no daemon runs: serving the search page from here; Ctrl-C stops it", err=True)
        if not args.no_open:
            webbrowser.open(launch)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ocrwatch.control.lock import DaemonLocks
    from ocrwatch.reindex import count_pages, from_sidecars, rebuild_fts, restorable
    from ocrwatch.store.db import Database

    config = config_mod.load(getattr(args, "config", None))
    path, origin = database_arg(args)
    config = replace(config, database=path)
    if not args.from_sidecars:
        if not path.exists():
            raise IndexUnavailable(f"no index at {safe(path)}: to rebuild it from the sidecars, "
                                "run `ocrwatch reindex --from-sidecars`")
        db = Database(path, origin=origin)
        try:
            with tqdm(total=count_pages(db), unit="page", desc="reindexing",
                      file=sys.stderr) as bar:
                pages = rebuild_fts(db, bar.update)
        finally:
            db.close()
        echo(f"{pages} pages indexed again from the stored text")
        return 0
    lock = DaemonLocks(path)
    try:
        lock.acquire()
    except DaemonRunning:
        raise DaemonError("a daemon is running on this index; stop it (`ocrwatch stop`), "
                            "then run `ocrwatch reindex --from-sidecars` again") from None
    try:
        db = Database(path, origin=origin)
        try:
            with tqdm(total=len(restorable(config)), unit="file",
                      desc="from sidecars", file=sys.stderr) as bar:
                restored = from_sidecars(config, db, bar.update)
        finally:
            db.close()
    finally:
        lock.release()
    echo(f"{restored.files} files ({restored.pages} pages) restored from their sidecars; "
         f"{len(restored.without_sidecars)} without sidecars are read when the daemon runs")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from ocrwatch.control.client import request

    try:
        status = Status.from_dict(request("status"))
        running = True
    except DaemonNotRunning:
        status = _offline_status(args, _last_start_failure())
        running = False
    if args.json:
        print(json.dumps({**status.to_dict(), "running": running}, indent=2, default=str))
        if not running:
            echo("ocrwatch: no daemon is running (start one with `ocrwatch run`)", err=True)
    elif running:
        echo(format_status(status))
    else:  # the "no daemon" line on stderr, as for every non-zero status; the index's facts
        first, _, rest = format_status(status).partition("\n")
        echo(first, err=True)
        echo(rest)
    # What the index says is printed all the same; the status says no daemon runs (5),
    # as for every command that asks the daemon.
    return 0 if running else DaemonNotRunning.exit_code


def _last_start_failure() -> str | None:
    from ocrwatch.control import startfail

    failure = startfail.last()
    return failure.line if failure is not None else None


def _offline_status(args: argparse.Namespace, start_failure: str | None = None) -> Status:
    from ocrwatch.cli.logs import default_log_file
    from ocrwatch.engines import registry
    from ocrwatch.store.db import Database
    from ocrwatch.store.jobs import JobQueue
    from ocrwatch.store.status_facts import read_doubts

    try:
        config = config_mod.load(getattr(args, "config", None))
    except ConfigError:
        # Likely what stopped the daemon too: say that first, then the config's own error.
        echo("ocrwatch: no daemon is running"
             + (f"; {start_failure}" if start_failure else ""), err=True)
        echo(f"  log: {default_log_file()}", err=True)
        raise
    origin = config.origin("database")
    if getattr(args, "database", None):
        config.database = Path(args.database).expanduser()
        origin = "the command-line flag --database"
    choice = registry.choose(config)
    status = Status(state="stopped", engine=EngineStatus(choice.name, choice.why),
                    database=str(config.database), log_file=str(default_log_file()),
                    start_failure=start_failure,
                    languages=tuple(config.languages),
                    language_note=registry.note(choice.name, config))
    if config.database.exists():
        db = Database(config.database, readonly=True, origin=origin)
        try:
            jobs = JobQueue(db)
            counts = jobs.counts()
            status = replace(status, queued=counts["queued"], running=counts["running"],
                             done=counts["done"], failed=counts["failed"],
                             recent_failures=tuple(jobs.failures(10)),
                             kept=tuple(jobs.kept(10)))
            doubted, doubts = read_doubts(db)
            status = replace(status, doubted=doubted, doubts=doubts)
        finally:
            db.close()
    return status
