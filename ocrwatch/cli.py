"""The command line: parse, configure logging, call the core, map errors to exit codes."""

from __future__ import annotations

import argparse
import json
import logging
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
from ocrwatch.errors import DaemonNotRunning, DaemonRunning, OcrwatchError
from ocrwatch.status import EngineStatus, Status, format_status

log = logging.getLogger("ocrwatch")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, metavar="FILE",
                   help="config file (default: the platform's config folder, "
                        "or $OCRWATCH_CONFIG)")


def _overrides(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=config_mod.ENGINES, help="OCR engine to use")
    p.add_argument("--inbox", action="append", type=Path, metavar="DIR",
                   help="folder to watch (repeat for several; replaces the configured ones)")
    p.add_argument("--output-dir", type=Path, metavar="DIR",
                   help="write sidecars under DIR instead of beside the originals")
    p.add_argument("--database", type=Path, metavar="FILE", help="index and queue file")
    p.add_argument("--languages", metavar="LANGS",
                   help="Tesseract languages, comma-separated, e.g. eng,deu,fra")
    p.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ocrwatch",
        description="Watch a folder, read every page of every scan and PDF, write .md and "
                    ".txt beside each, and search them.",
    )
    parser.add_argument("--version", action="version", version=f"ocrwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("run", help="run the daemon in the foreground (with a tray icon when "
                                   "there is a display)")
    _common(p)
    _overrides(p)
    p.add_argument("--no-tray", action="store_true", help="never show a tray icon")

    p = sub.add_parser("add", help="read files or folders once, with a progress bar, then exit")
    _common(p)
    _overrides(p)
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH")

    p = sub.add_parser("search", help="search the text of every page read so far")
    _common(p)
    p.add_argument("--database", type=Path, metavar="FILE", help="index file")
    p.add_argument("query", nargs="+", help='words, "phrases", AND/OR/NOT, prefix*')
    p.add_argument("--limit", type=int, default=20, help="at most this many hits (default 20)")
    p.add_argument("--json", action="store_true", help="print hits as JSON")

    p = sub.add_parser("status", help="what the daemon is doing, counts by state, failures")
    _common(p)
    p.add_argument("--database", type=Path, metavar="FILE", help="index file")
    p.add_argument("--json", action="store_true", help="print as JSON")

    for name, text in (("pause", "stop reading new files (they are still queued)"),
                       ("resume", "read queued files again"),
                       ("stop", "stop the running daemon"),
                       ("rescan", "look through the watched folders for missed files now")):
        p = sub.add_parser(name, help=text)

    p = sub.add_parser("retry", help="read failed files again")
    _common(p)
    p.add_argument("--database", type=Path, metavar="FILE", help="index file")
    p.add_argument("paths", nargs="*", type=Path, metavar="PATH")
    p.add_argument("--all-failed", action="store_true", help="every failed file")

    p = sub.add_parser("doctor", help="check what the daemon needs and say how to fix gaps")
    _common(p)
    _overrides(p)

    p = sub.add_parser("autostart", help="start the daemon at login (or stop doing so)")
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = globals()[f"cmd_{args.command}"]
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        return 130
    except OcrwatchError as exc:
        print(f"ocrwatch: {exc}", file=sys.stderr)
        return exc.exit_code


# -- the daemon ---------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    from ocrwatch.control import ControlServer, InstanceLock
    from ocrwatch.daemon import Daemon
    from ocrwatch.logs import setup_logging

    config = _load(args)
    log_file = setup_logging(config.log_level)
    lock = InstanceLock()
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
    return 0


def _follow(daemon: Any, stop: threading.Event) -> None:
    """Let a stop requested over the socket end the main thread's wait (or the tray)."""
    daemon.wait_stopped()
    stop.set()


def cmd_add(args: argparse.Namespace) -> int:
    from ocrwatch.control import InstanceLock
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
        elif path.exists():
            files.append(path)
        else:
            raise OcrwatchError(f"{path} does not exist")
    if not files:
        print("nothing to read: no PNG, JPEG, TIFF, BMP, WebP or PDF files given",
              file=sys.stderr)
        return 1
    lock = InstanceLock()
    try:
        lock.acquire()
        alone = True
    except DaemonRunning:
        # The running daemon may hold some of these files; leave its jobs alone.
        alone = False
    daemon = Daemon(config, watch=False)
    try:
        daemon.start(recover=alone)
        added = daemon.add(files)
        _progress(daemon, added)
        states = {p: daemon.jobs.known(p) for p in added}
    finally:
        daemon.close()
        if alone:
            lock.release()
    failed = [(p, j.reason) for p, j in states.items() if j is not None and j.state == "failed"]
    done = sum(1 for j in states.values() if j is not None and j.state == "done")
    print(f"{done} read, {len(failed)} failed")
    for path, reason in failed:
        print(f"  failed: {path}: {reason}")
    return 1 if failed else 0


def _progress(daemon: Any, paths: list[Path]) -> None:
    """A progress bar on stderr until every given file is done or failed."""
    total = len(paths)
    tty = sys.stderr.isatty()
    last = -1
    while True:
        finished = 0
        for p in paths:
            job = daemon.jobs.known(p)
            if job is None or job.state in ("done", "failed"):
                finished += 1
        if finished != last:
            width = 30
            filled = int(width * finished / max(1, total))
            line = f"[{'#' * filled}{'.' * (width - filled)}] {finished}/{total} files"
            if tty:
                print("\r" + line, end="", file=sys.stderr, flush=True)
            else:
                print(line, file=sys.stderr, flush=True)
            last = finished
        if finished >= total:
            break
        time.sleep(0.2)  # polls the queue; the work happens in the daemon's threads
    if tty:
        print(file=sys.stderr)


# -- looking at results -------------------------------------------------------------
def _database(args: argparse.Namespace) -> Path:
    if getattr(args, "database", None):
        return Path(args.database).expanduser()
    return config_mod.load(getattr(args, "config", None)).database


def cmd_search(args: argparse.Namespace) -> int:
    from ocrwatch.db import Database
    from ocrwatch.index import HIGHLIGHT, search

    db = Database(_database(args), readonly=True)
    try:
        hits = search(db, " ".join(args.query), limit=args.limit)
    finally:
        db.close()
    if args.json:
        print(json.dumps([h.as_dict() for h in hits], ensure_ascii=False, indent=2))
        return 0 if hits else 1
    if not hits:
        print("no matches", file=sys.stderr)
        return 1
    on, off = ("\033[1;33m", "\033[0m") if sys.stdout.isatty() else ("[", "]")
    for hit in hits:
        where = f"{hit.path}" + (f"  (page {hit.page} of {hit.pages})" if hit.pages > 1 else "")
        snippet = " ".join(hit.snippet.split())
        print(where)
        print("    " + snippet.replace(HIGHLIGHT[0], on).replace(HIGHLIGHT[1], off))
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
        print(format_status(status))
    return 0


def _offline_status(args: argparse.Namespace) -> Status:
    from ocrwatch.db import Database
    from ocrwatch.engines import choose
    from ocrwatch.jobs import JobQueue
    from ocrwatch.logs import default_log_file

    config = config_mod.load(getattr(args, "config", None))
    if getattr(args, "database", None):
        config.database = Path(args.database).expanduser()
    choice = choose(config)
    status = Status(state="stopped", engine=EngineStatus(choice.name, choice.why),
                    database=str(config.database), log_file=str(default_log_file()))
    if config.database.exists():
        db = Database(config.database, readonly=True)
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
    print("paused: new files are queued but not read until `ocrwatch resume`")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    _control("resume")
    print("resumed")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from ocrwatch.control import stop_daemon

    pid = stop_daemon()
    print(f"stopped the daemon (PID {pid})")
    return 0


def cmd_rescan(args: argparse.Namespace) -> int:
    _control("rescan")
    print("rescanning the watched folders")
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    from ocrwatch.control import request

    if not args.paths and not args.all_failed:
        raise OcrwatchError("name the files to retry, or use --all-failed")
    paths = [str(p.expanduser().absolute()) for p in args.paths]
    try:
        count = int(request("retry", paths=paths or None, all_failed=args.all_failed))
        where = "the daemon will read them again"
    except DaemonNotRunning:
        from ocrwatch.db import Database
        from ocrwatch.jobs import JobQueue

        db = Database(_database(args))
        try:
            count = JobQueue(db).retry(None if args.all_failed else [Path(p) for p in paths])
        finally:
            db.close()
        where = "they are read when the daemon next runs"
    print(f"{count} file{'s' if count != 1 else ''} queued again; {where}")
    return 0 if count else 1


# -- set-up ------------------------------------------------------------------------
def cmd_doctor(args: argparse.Namespace) -> int:
    from ocrwatch import doctor

    config = _load(args)
    checks = doctor.run_checks(config)
    print(doctor.format_report(checks))
    return 0 if all(c.ok for c in checks) else 1


def cmd_autostart(args: argparse.Namespace) -> int:
    from ocrwatch import autostart

    if args.action == "enable":
        print(autostart.enable(kind=args.kind, executable=args.executable, start=args.now))
    else:
        print(autostart.disable())
    return 0


if __name__ == "__main__":
    sys.exit(main())
