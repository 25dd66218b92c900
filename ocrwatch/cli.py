"""The command line: parse, configure logging, call the core, map errors to exit codes."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ocrwatch import __version__
from ocrwatch import config as config_mod
from ocrwatch.errors import DaemonNotRunning, DaemonRunning, OcrwatchError, SearchTimeout
from ocrwatch.index import MAX_HITS, QUERY_SECONDS
from ocrwatch.status import EngineStatus, Status, format_status
from ocrwatch.termsafe import safe, safe_lines

log = logging.getLogger("ocrwatch")

# The engines a user may choose; "fake" (for tests of what surrounds an engine) is
# accepted but not offered.
PUBLIC_ENGINES = tuple(e for e in config_mod.ENGINES if e != "fake")
EXIT_BROKEN_PIPE = 141  # what a shell reports for a program ended by SIGPIPE


def echo(text: str = "", *, err: bool = False) -> None:
    """Print a report: control characters from names and page text are shown escaped."""
    print(safe_lines(text), file=sys.stderr if err else sys.stdout)


def _engine(value: str) -> str:
    if value not in config_mod.ENGINES:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an engine; choose {', '.join(PUBLIC_ENGINES)}")
    return value


def _limit(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if not 1 <= number <= MAX_HITS:
        raise argparse.ArgumentTypeError(f"{value} is out of range: use 1 to {MAX_HITS}")
    return number


def _seconds(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not 0.01 <= number <= 3600:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"{value} is out of range: use 0.01 to 3600 seconds")
    return number


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, metavar="FILE",
                   help="config file (default: the platform's config folder, "
                        "or $OCRWATCH_CONFIG)")


def _overrides(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", type=_engine, metavar="ENGINE",
                   help=f"OCR engine: {', '.join(PUBLIC_ENGINES)}")
    p.add_argument("--inbox", action="append", type=Path, metavar="DIR",
                   help="folder to watch (repeat for several; replaces the configured ones)")
    p.add_argument("--output-dir", type=Path, metavar="DIR",
                   help="write sidecars under DIR instead of beside the originals")
    p.add_argument("--database", type=Path, metavar="FILE", help="index and queue file")
    p.add_argument("--languages", metavar="LANGS",
                   help="Tesseract languages, comma-separated, e.g. eng,deu,fra")
    p.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"))


def _sub(sub: Any, name: str, text: str, *examples: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=text, description=text[0].upper() + text[1:] + ".",
        epilog=_examples(*examples), formatter_class=argparse.RawDescriptionHelpFormatter)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ocrwatch",
        description="Watch a folder, read every page of every scan and PDF, write .md and "
                    ".txt beside each, and search them.",
        epilog=_examples("ocrwatch run                     # watch ~/OCR-Inbox",
                         "ocrwatch search invoice 2024     # find pages",
                         "ocrwatch status                  # what it is doing",
                         "ocrwatch COMMAND --help          # more on one command"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"ocrwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = _sub(sub, "run", "run the daemon in the foreground (with a tray icon when there is "
                         "a display)",
             "ocrwatch run", "ocrwatch run --no-tray --inbox ~/Scans --languages eng,deu")
    _common(p)
    _overrides(p)
    p.add_argument("--no-tray", action="store_true", help="never show a tray icon")

    p = _sub(sub, "add", "read files or folders once, with a progress bar, then exit",
             "ocrwatch add ~/Downloads/letter.pdf", "ocrwatch add --engine tesseract ~/Scans")
    _common(p)
    _overrides(p)
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH")

    p = _sub(sub, "reread", "read again, with a progress bar, the files read with other "
                            "languages (or another engine) than now",
             "ocrwatch reread", "ocrwatch reread --languages eng,deu",
             "ocrwatch reread --all")
    _common(p)
    _overrides(p)
    p.add_argument("--all", action="store_true",
                   help="every file read so far, also those read as they would be now")

    p = _sub(sub, "search", "search the text of every page read so far",
             'ocrwatch search invoice "March 2024"',
             "ocrwatch search 'pay* OR remittance NOT draft' --limit 5",
             "ocrwatch search --json -- -42     # after --, a query may begin with -",
             "ocrwatch search --name tax --type pdf --after 2024-01-01 receipt",
             "ocrwatch search --web            # the search page in the browser")
    _common(p)
    p.add_argument("--database", type=Path, metavar="FILE", help="index file")
    p.add_argument("query", nargs="*", help='words, "phrases", AND/OR/NOT, prefix*')
    p.add_argument("--name", metavar="WORDS",
                   help="only files whose file or folder names hold these words (alone: "
                        "list those files)")
    p.add_argument("--folder", type=Path, metavar="DIR", help="only files in DIR or below")
    p.add_argument("--type", action="append", metavar="EXT", dest="types",
                   help="only files ending in .EXT (repeat for several), e.g. pdf")
    p.add_argument("--after", metavar="YYYY-MM-DD", help="only files modified on or after")
    p.add_argument("--before", metavar="YYYY-MM-DD", help="only files modified before")
    p.add_argument("--page", type=int, default=1, metavar="N",
                   help="the Nth page of --limit hits (default 1)")
    p.add_argument("--web", action="store_true",
                   help="open the search page in the browser (from the running daemon, or "
                        "served here until Ctrl-C when none runs)")
    p.add_argument("--no-open", action="store_true",
                   help="with --web: only print the page's address, token included")
    p.add_argument("--limit", type=_limit, default=20, metavar="N",
                   help=f"at most N hits, 1 to {MAX_HITS} (default 20)")
    p.add_argument("--time-limit", type=_seconds, default=QUERY_SECONDS, metavar="SECONDS",
                   help=f"stop a query that takes longer (default {QUERY_SECONDS:g})")
    p.add_argument("--json", action="store_true", help="print hits as JSON")

    p = _sub(sub, "reindex", "rebuild the full-text index from the stored page text, or from "
                             "the sidecars when the database is lost",
             "ocrwatch reindex", "ocrwatch reindex --from-sidecars")
    _common(p)
    p.add_argument("--database", type=Path, metavar="FILE", help="index file")
    p.add_argument("--from-sidecars", action="store_true",
                   help="rebuild the index from the .md/.txt sidecars of the files in the "
                        "watched folders (stop the daemon first)")

    p = _sub(sub, "status", "what the daemon is doing, counts by state, failures",
             "ocrwatch status", "ocrwatch status --json")
    _common(p)
    p.add_argument("--database", type=Path, metavar="FILE", help="index file")
    p.add_argument("--json", action="store_true", help="print as JSON")

    for name, text in (("pause", "stop reading new files (they are still queued)"),
                       ("resume", "read queued files again"),
                       ("stop", "stop the running daemon"),
                       ("rescan", "look through the watched folders for missed files now")):
        _sub(sub, name, text, f"ocrwatch {name}")

    p = _sub(sub, "retry", "read failed files again",
             "ocrwatch retry ~/OCR-Inbox/scan.pdf", "ocrwatch retry --all-failed")
    _common(p)
    p.add_argument("--database", type=Path, metavar="FILE", help="index file")
    p.add_argument("paths", nargs="*", type=Path, metavar="PATH")
    p.add_argument("--all-failed", action="store_true", help="every failed file")

    p = _sub(sub, "doctor", "check what the daemon needs and say how to fix gaps",
             "ocrwatch doctor", "ocrwatch doctor --engine vllm --languages eng,ita")
    _common(p)
    _overrides(p)

    p = _sub(sub, "autostart", "start the daemon at login (or stop doing so)",
             "ocrwatch autostart enable --now", "ocrwatch autostart disable")
    p.add_argument("action", choices=("enable", "disable"))
    p.add_argument("--kind", choices=("systemd", "xdg", "launchd"),
                   help="how to start it (default: what this platform and session use)")
    p.add_argument("--exec", type=Path, metavar="PATH", dest="executable",
                   help="the ocrwatch program to start (default: this one)")
    p.add_argument("--now", action="store_true", help="with enable: also start it now")
    return parser


def _load(args: argparse.Namespace) -> config_mod.Config:
    overrides: dict[str, Any] = {}
    for key in ("engine", "output_dir", "database", "languages", "log_level"):
        value = getattr(args, key, None)
        if value is not None:
            overrides[key] = str(value)
    if getattr(args, "inbox", None):
        overrides["inbox"] = [str(p) for p in args.inbox]
    return config_mod.load(getattr(args, "config", None), overrides=overrides)


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    args, extra = parser.parse_known_args(argv)
    if extra and args.command == "search" and all(re.fullmatch(r"-[^-].*", e) for e in extra):
        # "ocrwatch search -42": words that begin with one "-" are words, not options.
        args.query = [*args.query, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = _parse(parser, argv)
    handler = globals()[f"cmd_{args.command}"]
    try:
        code = int(handler(args) or 0)
        sys.stdout.flush()  # here, so that a closed pipe is met while we can still say so
        return code
    except KeyboardInterrupt:
        echo("ocrwatch: interrupted", err=True)
        return 130
    except BrokenPipeError:
        # `ocrwatch status | head -1`: the reader has gone; the rest is not wanted.
        # Point stdout at /dev/null so that Python's flush at exit does not complain.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    except OcrwatchError as exc:
        echo(f"ocrwatch: {safe(exc)}", err=True)
        return exc.exit_code
    except Exception as exc:  # the last line of defence: a message, the details on request
        if os.environ.get("OCRWATCH_DEBUG"):
            raise
        log.debug("unexpected error in `ocrwatch %s`", args.command, exc_info=True)
        echo(f"ocrwatch: unexpected error in `{args.command}`: {safe(repr(exc))}. Run it "
             "again with OCRWATCH_DEBUG=1 to see where, and report that.", err=True)
        return 1


# -- the daemon ---------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    from ocrwatch.logs import setup_logging
    from ocrwatch.native_stderr import NativeStderr

    config = _load(args)
    log_file = setup_logging(config.log_level)
    native = NativeStderr().start()  # Leptonica, GTK and friends write to fd 2: the log
    try:
        return _run(args, config, log_file)
    finally:
        native.close()


def _run(args: argparse.Namespace, config: config_mod.Config, log_file: Path) -> int:
    from ocrwatch.control import ControlServer, DaemonLocks
    from ocrwatch.daemon import Daemon

    lock = DaemonLocks(config.database)
    lock.acquire()  # raises DaemonRunning naming the other one
    try:
        daemon = Daemon(config, log_file=log_file)
        stop = threading.Event()

        def on_signal(signum: int, _frame: object) -> None:
            log.info("received %s: stopping", signal.Signals(signum).name)
            daemon.request_stop()
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        server = ControlServer(None, daemon)
        try:
            daemon.start()
            server.start()
            threading.Thread(target=_follow, args=(daemon, stop), name="ocrwatch-stop-watch",
                             daemon=True).start()
            shown = False
            if not args.no_tray:
                from ocrwatch.tray import run_tray

                shown = run_tray(daemon, stop)
            if not shown:
                while not stop.wait(0.5):
                    pass
        finally:
            daemon.request_stop()
            server.close()
            daemon.close()
        log.info("stopped")
    finally:
        lock.release()
    if daemon.abandoned:
        # A thread is still inside a native decoder or Tesseract: everything is saved and
        # its job is queued again, so end now instead of waiting for the page.
        logging.shutdown()
        sys.stdout.flush()
        os._exit(0)
    return 0


def _follow(daemon: Any, stop: threading.Event) -> None:
    """Let a stop requested over the socket end the main thread's wait (or the tray)."""
    daemon.wait_stopped()
    stop.set()


def cmd_add(args: argparse.Namespace) -> int:
    from ocrwatch.control import DaemonLocks
    from ocrwatch.daemon import Daemon
    from ocrwatch.logs import setup_logging
    from ocrwatch.watch import walk

    config = _load(args)
    setup_logging(config.log_level if config.log_level != "INFO" else "WARNING")
    files: list[Path] = []
    for path in args.paths:
        path = path.expanduser().absolute()
        if path.is_dir():
            files.extend(sorted(walk([path])))
        elif path.is_file():
            files.append(path)
        elif path.exists():
            raise OcrwatchError(f"{safe(path)} is not a regular file (a pipe, a device or a "
                                "socket); name scans, PDFs or folders")
        else:
            raise OcrwatchError(f"{safe(path)} does not exist")
    if not files:
        echo("ocrwatch: nothing to read: no PNG, JPEG, TIFF, BMP, WebP or PDF files given",
             err=True)
        return 1
    lock = DaemonLocks(config.database)
    try:
        lock.acquire()
        alone = True
    except DaemonRunning:
        # The running daemon may hold some of these files; leave its jobs alone.
        alone = False
    daemon = Daemon(config, watch=False)
    try:
        daemon.start(recover=alone)
        if daemon.paused:
            echo("ocrwatch: the daemon is paused; reading these files all the same "
                 "(`ocrwatch resume` lets the daemon read again)", err=True)
        added = daemon.add(files)
        left = len(files) - len(added)
        if left:
            echo(f"ocrwatch: {_plural(left, 'file')} left alone: sidecars, temporary and "
                 "hidden files are not read", err=True)
        if not added:
            return 1
        _progress(daemon, added, config)
        states = {p: daemon.jobs.known(p) for p in added}
    finally:
        daemon.close()
        if alone:
            lock.release()
    failed = [(p, j.reason) for p, j in states.items() if j is not None and j.state == "failed"]
    done = sum(1 for j in states.values() if j is not None and j.state == "done")
    echo(f"{done} read, {len(failed)} failed")
    for path, reason in failed:
        echo(f"  failed: {safe(path)}: {safe(reason)}")
    if failed:
        echo(f"ocrwatch: {_plural(len(failed), 'file')} could not be read (reasons above); "
             "fix them and run `ocrwatch add` again", err=True)
    return 1 if failed else 0


def cmd_reread(args: argparse.Namespace) -> int:
    """Read again what was read with other languages: after installing a language or
    changing ``languages``. A file already read as it would be now is left alone."""
    from ocrwatch.control import DaemonLocks
    from ocrwatch.daemon import Daemon
    from ocrwatch.logs import setup_logging

    config = _load(args)
    setup_logging(config.log_level if config.log_level != "INFO" else "WARNING")
    lock = DaemonLocks(config.database)
    try:
        lock.acquire()
    except DaemonRunning:
        raise OcrwatchError("the daemon is running: stop it (`ocrwatch stop`), run "
                            "`ocrwatch reread`, then start it again") from None
    daemon = Daemon(config, watch=False)
    try:
        daemon.start()
        stale = (daemon.jobs.read_otherwise("") if args.all
                 else daemon.jobs.read_otherwise(daemon.read_with))
        paths = [j.path for j in stale if j.path.exists()]
        if not paths:
            echo(f"nothing to read again: every file was read with {daemon.read_with}")
            return 0
        echo(f"reading {_plural(len(paths), 'file')} again with {daemon.read_with}",
             err=True)
        daemon.jobs.retry(paths)
        added = daemon.add(paths)
        _progress(daemon, added, config)
        states = {p: daemon.jobs.known(p) for p in added}
    finally:
        daemon.close()
        lock.release()
    failed = [(p, j.reason) for p, j in states.items() if j is not None and j.state == "failed"]
    done = sum(1 for j in states.values() if j is not None and j.state == "done")
    echo(f"{done} read again, {len(failed)} failed")
    for path, reason in failed:
        echo(f"  failed: {safe(path)}: {safe(reason)}")
    return 1 if failed else 0


def _page_counts(paths: list[Path], config: config_mod.Config) -> dict[Path, int]:
    from ocrwatch.pages import count_pages

    counts = {}
    for path in paths:
        try:
            counts[path] = max(1, count_pages(path, config))
        except Exception:  # reading it will say what is wrong; it counts as one page
            counts[path] = 1
    return counts


def _progress(daemon: Any, paths: list[Path], config: config_mod.Config) -> None:
    """A progress bar in pages (tqdm: rate and time left) until every file is finished."""
    from tqdm import tqdm

    counts = _page_counts(paths, config)
    with tqdm(total=sum(counts.values()), unit="page", desc="reading", file=sys.stderr,
              dynamic_ncols=True, mininterval=0.5 if sys.stderr.isatty() else 5.0,
              smoothing=0.1) as bar:
        while True:
            reading = {r.path: r.done for r in daemon.reading()}
            pages = finished = 0
            for path in paths:
                job = daemon.jobs.known(path)
                if job is None or job.state in ("done", "failed"):
                    finished += 1
                    pages += counts[path]
                elif job is not None:
                    pages += min(reading.get(job.display, 0), counts[path])
            if pages != bar.n:
                bar.update(pages - bar.n)
            bar.set_postfix_str(f"{finished}/{len(paths)} files", refresh=False)
            if finished >= len(paths):
                break
            time.sleep(0.2)  # polls the queue; the work happens in the daemon's threads
        bar.refresh()


# -- looking at results -------------------------------------------------------------
def _database(args: argparse.Namespace) -> tuple[Path, str]:
    """The index file the command names, and where that name came from."""
    if getattr(args, "database", None):
        return Path(args.database).expanduser(), "the command-line flag --database"
    config = config_mod.load(getattr(args, "config", None))
    return config.database, config.origin("database")


def cmd_search(args: argparse.Namespace) -> int:
    from ocrwatch.db import Database
    from ocrwatch.index import HIGHLIGHT, search

    if args.web:
        return _search_web(args)
    query = " ".join(args.query).strip()
    filters = _filters(args)
    if not query and not filters.name:
        raise OcrwatchError("give one or more words to look for, e.g. `ocrwatch search invoice`"
                            ", or a file name with --name")
    if args.page < 1:
        raise OcrwatchError("--page must be 1 or more")
    path, origin = _database(args)
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
        snippet = safe(" ".join(hit.snippet.split()))
        # The highlight markers are controls too: turn the escaped forms into colour.
        for marker, shown in zip(HIGHLIGHT, (on, off), strict=True):
            snippet = snippet.replace(safe(marker), shown)
        print(where)
        print("    " + snippet)
    return 0


def _filters(args: argparse.Namespace) -> Any:
    from ocrwatch.index import Filters
    from ocrwatch.web import parse_day

    types = tuple("." + t.lower().lstrip(".") for t in (args.types or []))
    return Filters(folder=args.folder.expanduser().absolute() if args.folder else None,
                   name=args.name, after=parse_day(args.after or ""),
                   before=parse_day(args.before or ""), types=types)


def _search_web(args: argparse.Namespace) -> int:
    """The page from the running daemon, or served by this process until Ctrl-C."""
    import webbrowser

    from ocrwatch.control import request

    try:
        url = str(request("web")["url"])
    except DaemonNotRunning:
        url = ""
    if url:
        echo(url)
        if not args.no_open:
            webbrowser.open(url)
        return 0
    from ocrwatch.thumbs import Thumbnails
    from ocrwatch.web import SearchServer

    config = config_mod.load(getattr(args, "config", None))
    path, _origin = _database(args)
    with SearchServer(path, Thumbnails(config.cache_dir / "thumbnails"),
                      inbox=config.inbox, follow_symlinks=config.follow_symlinks) as server:
        echo(server.url)
        echo("no daemon runs: serving the search page from here; Ctrl-C stops it", err=True)
        if not args.no_open:
            webbrowser.open(server.url)
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

    from ocrwatch.control import DaemonLocks
    from ocrwatch.db import Database
    from ocrwatch.reindex import count_pages, from_sidecars, rebuild_fts
    from ocrwatch.watch import walk

    config = config_mod.load(getattr(args, "config", None))
    path, origin = _database(args)
    config = replace(config, database=path)
    if not args.from_sidecars:
        if not path.exists():
            raise OcrwatchError(f"no index at {safe(path)}: to rebuild it from the sidecars, "
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
        raise OcrwatchError("a daemon is running on this index; stop it (`ocrwatch stop`), "
                            "then run `ocrwatch reindex --from-sidecars` again") from None
    try:
        db = Database(path, origin=origin)
        try:
            with tqdm(total=sum(1 for _ in walk(config.inbox)), unit="file",
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
    from ocrwatch.control import request

    try:
        status = Status.from_dict(request("status"))
        running = True
    except DaemonNotRunning:
        status = _offline_status(args)
        running = False
    if args.json:
        print(json.dumps({**status.to_dict(), "running": running}, indent=2, default=str))
    else:
        echo(format_status(status))
    return 0


def _offline_status(args: argparse.Namespace) -> Status:
    from ocrwatch.db import Database
    from ocrwatch.engines import choose
    from ocrwatch.jobs import JobQueue
    from ocrwatch.languages import locale_note
    from ocrwatch.logs import default_log_file

    config = config_mod.load(getattr(args, "config", None))
    origin = config.origin("database")
    if getattr(args, "database", None):
        config.database = Path(args.database).expanduser()
        origin = "the command-line flag --database"
    choice = choose(config)
    status = Status(state="stopped", engine=EngineStatus(choice.name, choice.why),
                    database=str(config.database), log_file=str(default_log_file()),
                    languages=tuple(config.languages),
                    language_note=locale_note(config.languages)
                    if choice.name == "tesseract" else None)
    if config.database.exists():
        db = Database(config.database, readonly=True, origin=origin)
        try:
            jobs = JobQueue(db)
            counts = jobs.counts()
            status = replace(status, queued=counts["queued"], running=counts["running"],
                             done=counts["done"], failed=counts["failed"],
                             recent_failures=tuple(jobs.failures(10)))
        finally:
            db.close()
    return status


# -- controlling the daemon ---------------------------------------------------------
def _control(cmd: str) -> Any:
    from ocrwatch.control import request

    return request(cmd)


def cmd_pause(args: argparse.Namespace) -> int:
    _control("pause")
    echo("paused: new files are queued but not read until `ocrwatch resume`")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    _control("resume")
    echo("resumed")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from ocrwatch.control import stop_daemon

    pid = stop_daemon()
    echo(f"stopped the daemon (PID {pid})")
    return 0


def cmd_rescan(args: argparse.Namespace) -> int:
    _control("rescan")
    echo("rescanning the watched folders")
    return 0


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def cmd_retry(args: argparse.Namespace) -> int:
    from ocrwatch.control import request

    if not args.paths and not args.all_failed:
        raise OcrwatchError("name the files to retry, or use --all-failed")
    given = [p.expanduser().absolute() for p in args.paths]
    missing = [p for p in given if not p.exists()]
    if missing:
        raise OcrwatchError(f"{safe(missing[0])} does not exist; name a file that failed "
                            "(`ocrwatch status` lists them) or use --all-failed")
    paths = [str(p) for p in given]
    try:
        count = int(request("retry", paths=paths or None, all_failed=args.all_failed))
        where = "the daemon will read {} again"
    except DaemonNotRunning:
        from ocrwatch.db import Database
        from ocrwatch.jobs import JobQueue

        path, origin = _database(args)
        if not path.exists():
            raise OcrwatchError(f"no index at {safe(path)} (set by {origin}): nothing has been "
                                "read there, so there is nothing to retry") from None
        db = Database(path, origin=origin)
        try:
            count = JobQueue(db).retry(None if args.all_failed else given)
        finally:
            db.close()
        where = "{} will be read when the daemon next runs"
    if count == 0:
        if args.all_failed:
            echo("nothing to retry: no file has failed")
            return 0
        raise OcrwatchError(
            f"{'this file has' if len(given) == 1 else 'these files have'} not been read yet, "
            "so there is nothing to retry; the daemon reads files in its inbox by itself, and "
            f"`ocrwatch add {safe(given[0])}` reads one now")
    pronoun = ("it" if count == 1 else "them") if where.startswith("the daemon") else (
        "it" if count == 1 else "they")
    echo(f"{_plural(count, 'file')} queued again; " + where.format(pronoun))
    return 0


# -- set-up ------------------------------------------------------------------------
def cmd_doctor(args: argparse.Namespace) -> int:
    from ocrwatch import doctor

    config = _load(args)
    checks = doctor.run_checks(config)
    echo(doctor.format_report(checks))
    return 0 if all(c.ok for c in checks) else 1


def cmd_autostart(args: argparse.Namespace) -> int:
    from ocrwatch import autostart

    exe = args.executable
    if exe is not None and not (exe.is_file() and os.access(exe, os.X_OK)):
        raise OcrwatchError(f"{safe(exe)} is not a program that can be run; give the path of "
                            "the installed `ocrwatch` with --exec, or leave --exec out")
    if args.action == "enable":
        echo(str(autostart.enable(kind=args.kind, executable=exe, start=args.now)))
    else:
        echo(str(autostart.disable()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
