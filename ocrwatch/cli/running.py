"""Commands that read files: the daemon (``run``, and ``start`` for it in the background)
and the one-off ``add`` and ``reread``."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ocrwatch import config as config_mod
from ocrwatch.cli.common import echo, load_config, log, plural
from ocrwatch.cli.termsafe import safe
from ocrwatch.core.errors import (
    ArgumentError,
    ConfigError,
    DaemonRunning,
    OcrwatchError,
    UsageError,
)

if TYPE_CHECKING:  # for the type only: the commands import it when they run
    from ocrwatch.control.crashes import CrashRecord


def cmd_run(args: argparse.Namespace) -> int:
    from ocrwatch.cli.logs import setup_logging
    from ocrwatch.cli.native_stderr import NativeStderr

    up = threading.Event()  # set once the daemon answers: a failure after is no failed start
    try:
        config = load_config(args)
        log_file = setup_logging(config.log_level)
        native = NativeStderr().start()  # Leptonica, GTK and friends write to fd 2: the log
        try:
            return _run(args, config, log_file, up)
        finally:
            native.close()
    except DaemonRunning as exc:
        if not up.is_set():  # the other one runs on: no failure to show
            _logged(log.warning, "not started: %s", exc)
        raise
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        if not up.is_set():
            _failed_to_start(exc)
        raise


def _logged(say: Any, *args: Any, **kwargs: Any) -> None:
    """``say(*args, **kwargs)`` with the log file set up, even when the config did not
    load."""
    from ocrwatch.cli.logs import current_log_file, setup_logging

    if current_log_file() is None:
        with contextlib.suppress(OcrwatchError):  # an unwritable log: the rest still says it
            setup_logging("INFO")
    say(*args, **kwargs)


def _failed_to_start(exc: BaseException) -> None:
    """At login nobody sees stderr: the log, a notification and ``status`` say why."""
    from ocrwatch.cli.logs import FILE_ONLY_MARK
    from ocrwatch.control import startfail

    if isinstance(exc, OcrwatchError):
        reason, code = safe(str(exc)), exc.exit_code
    else:
        reason, code = f"unexpected error: {safe(repr(exc))}", 1
        _logged(log.error, "unexpected error while starting", exc_info=exc,
                extra={FILE_ONLY_MARK: True})
    _logged(startfail.report, reason, code)


def _run(args: argparse.Namespace, config: config_mod.Config, log_file: Path,
         up: threading.Event) -> int:
    from ocrwatch.cli.desktop import config_target
    from ocrwatch.config.reload import FileWatch
    from ocrwatch.control import startfail
    from ocrwatch.control.crashes import CrashRecord
    from ocrwatch.control.lock import DaemonLocks
    from ocrwatch.control.server import ControlServer
    from ocrwatch.daemon import Daemon
    from ocrwatch.web.server import for_daemon

    lock = DaemonLocks(config.database)
    lock.acquire()  # raises DaemonRunning naming the other one
    crash = CrashRecord(config.database)  # after the lock: it is this daemon's now
    try:
        crashed = _arm(crash)
        daemon = Daemon(config, log_file=log_file, reload_from=lambda: load_config(args),
                        search_page=for_daemon)
        stop = threading.Event()

        def on_signal(signum: int, _frame: object) -> None:
            log.info("received %s: stopping", signal.Signals(signum).name)
            daemon.request_stop()
            stop.set()

        def reload_later(why: str) -> None:
            # Off the signal handler's (or the watch's) thread: reload takes locks.
            def run() -> None:
                with contextlib.suppress(OcrwatchError):  # logged by reload itself
                    daemon.reload(why)
            threading.Thread(target=run, name="ocrwatch-reload", daemon=True).start()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGHUP, lambda *_: reload_later("SIGHUP"))
        config_path = config_target(args)
        watch = FileWatch(config_path, lambda: reload_later(f"{config_path} changed"))
        server = ControlServer(None, daemon)
        try:
            daemon.start(crashed=crashed)
            server.start()
            up.set()
            startfail.clear()
            watch.start()
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
            watch.close()
            server.close()
            daemon.close()
        log.info("stopped")
    finally:
        crash.disarm()
        lock.release()
    if daemon.abandoned:
        # A thread is still inside a native decoder or Tesseract: everything is saved and
        # its job is queued again, so end now instead of waiting for the page.
        logging.shutdown()
        sys.stdout.flush()
        os._exit(0)
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    """``ocrwatch run`` in the background, as at login; says whether it came up, and
    why not (the status of the failed ``run``)."""
    from ocrwatch.control import launch

    pid = launch.already_running()
    if pid is not None:
        echo(f"ocrwatch: the daemon already runs (PID {pid}); `ocrwatch status` shows it")
        return 0
    started = launch.start([sys.executable, "-m", "ocrwatch", "run", *_run_options(args)],
                           wait=args.wait)
    if started.failed:
        echo(f"ocrwatch: {started}", err=True)
        return started.exit_code or 1
    echo(f"ocrwatch: {started}")
    return 0


def _run_options(args: argparse.Namespace) -> list[str]:
    """The options given to ``start``, for the ``run`` it starts."""
    out: list[str] = []
    for key in ("config", "engine", "output_dir", "database", "languages", "log_level", "jobs"):
        value = getattr(args, key, None)
        if value is not None:
            out += [f"--{key.replace('_', '-')}", str(value)]
    for folder in getattr(args, "inbox", None) or ():
        out += ["--inbox", str(folder)]
    if getattr(args, "no_tray", False):
        out.append("--no-tray")
    return out


def _arm(crash: CrashRecord) -> bool:
    """Start ``crash``; whether the last process on this index crashed, its trace then
    logged."""
    last = crash.arm()
    if last is not None and last.trace is not None:
        log.error("ocrwatch crashed when it last ran: the files it was reading are read "
                  "again, one at a time, and one that crashes it again fails with the "
                  "reason. What it was doing:\n%s", last.trace)
    elif last is not None:
        log.warning("ocrwatch did not stop cleanly when it last ran (killed: kill -9, the "
                    "out-of-memory killer or a power cut): the files it was reading are "
                    "read again, one at a time, and one that ends it again fails with the "
                    "reason")
    return last is not None


def _follow(daemon: Any, stop: threading.Event) -> None:
    """Let a stop requested over the socket end the main thread's wait (or the tray)."""
    daemon.wait_stopped()
    stop.set()


def cmd_add(args: argparse.Namespace) -> int:
    return _quietly(args, _add)


def _quietly(args: argparse.Namespace, command: Any) -> int:
    """The config, the log (warnings on the console), then ``command(args, config)`` with
    descriptor 2 in the log: Leptonica and friends never write through the progress bar."""
    from ocrwatch.cli.logs import setup_logging
    from ocrwatch.cli.native_stderr import NativeStderr

    config = load_config(args)
    setup_logging(config.log_level if config.log_level != "INFO" else "WARNING")
    native = NativeStderr().start()
    try:
        return int(command(args, config))
    finally:
        native.close()


def _add(args: argparse.Namespace, config: config_mod.Config) -> int:
    from ocrwatch.control.crashes import CrashRecord
    from ocrwatch.control.lock import DaemonLocks
    from ocrwatch.daemon import Daemon
    from ocrwatch.intake.inbox_files import Ignore, walk

    # The files named here are the user's: moved or deleted only when this command
    # line says so, whatever the configured on_success (kept in their job rows, so that
    # a daemon running beside, a retry or a reread does no other).
    if args.on_success == "archive" and config.archive_dir is None:
        raise ArgumentError("--on-success archive needs archive_dir in the config: the "
                            "folder the originals go to")
    files: list[Path] = []
    ignore = Ignore(config.ignore)
    for path in args.paths:
        path = path.expanduser().absolute()
        if path.is_dir():
            files.extend(sorted(walk([path], ignore)))
        elif path.is_file():
            if ignore(path):  # named, but the config says never: said below, not read
                continue
            files.append(path)
        elif path.exists():
            raise UsageError(f"{safe(path)} is not a regular file (a pipe, a device or a "
                                "socket); name scans, PDFs or folders")
        else:
            raise UsageError(f"{safe(path)} does not exist")
    if ignore.counts:
        kept_out = ", ".join(f"{p!r}: {n}" for p, n in ignore.counts.items())
        echo(f"ocrwatch: {plural(sum(ignore.counts.values()), 'file')} left out by the "
             f"ignore patterns of {config.origin('ignore')} ({kept_out})", err=True)
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
    # Alone, this process reads the index's files as the daemon would: its crash counts.
    crash = CrashRecord(config.database) if alone else None
    daemon = Daemon(config, watch=False)
    try:
        daemon.start(recover=alone, crashed=crash is not None and _arm(crash))
        if daemon.paused:
            echo("ocrwatch: the daemon is paused; reading these files all the same "
                 "(`ocrwatch resume` lets the daemon read again)", err=True)
        if args.force:
            # Their jobs queued afresh: read again even if unchanged since their reading.
            daemon.jobs.retry(files, asked=args.on_success)
            already: list[Path] = []
        else:
            already = _read_before(daemon, files)
        added = daemon.add(files, asked=args.on_success)
        if already:
            echo(f"ocrwatch: {plural(len(already), 'file')} already read and unchanged since "
                 "(its index entry stands); `ocrwatch add --force` reads "
                 f"{'it' if len(already) == 1 else 'them'} again", err=True)
        left = len(files) - len(added)
        if left:
            echo(f"ocrwatch: {plural(left, 'file')} left alone: sidecars, temporary and "
                 "hidden files are not read", err=True)
        if not added:
            return 1
        ids = _ids(daemon, added)
        _progress(daemon, ids, config)
        states = {p: daemon.jobs.get(i) for p, i in ids.items()}
    finally:
        daemon.close()
        if crash is not None:
            crash.disarm()
        if alone:
            lock.release()
    failed = _summarise(states, "read", args.on_success)
    if failed:
        echo(f"ocrwatch: {plural(len(failed), 'file')} could not be read (reasons above); "
             "fix them and run `ocrwatch add` again", err=True)
    return 1 if failed else 0


def _read_before(daemon: Any, files: list[Path]) -> list[Path]:
    """The files whose reading is done and that are unchanged since: ``add`` leaves them."""
    out = []
    for path in files:
        job = daemon.jobs.known(path)
        if job is None or job.state != "done":
            continue
        try:
            st = path.stat()
        except OSError:
            continue
        if (st.st_size, st.st_mtime_ns) == (job.size, job.mtime_ns):
            out.append(path)
    return out


def cmd_reread(args: argparse.Namespace) -> int:
    """Read again what was read with other languages: after installing a language or
    changing ``languages``. A file already read as it would be now is left alone."""
    return _quietly(args, _reread)


def _reread(args: argparse.Namespace, config: config_mod.Config) -> int:
    from ocrwatch.control.crashes import CrashRecord
    from ocrwatch.control.lock import DaemonLocks, InstanceLock, database_lock
    from ocrwatch.daemon import Daemon

    # Read again, not handled again: an archived file would be archived a second time.
    config.on_success = "keep"
    lock: DaemonLocks | InstanceLock = DaemonLocks(config.database)
    try:
        lock.acquire()
    except DaemonRunning:
        if _the_daemons_work(args, config):
            if args.outputs:
                from ocrwatch.control.client import request

                return _said_outputs(request("outputs", timeout=3600))
            return _reread_by_the_daemon(args, config)
        # Another index than the running daemon's: done here, on that index alone (its
        # own lock says that no other daemon uses it).
        lock = database_lock(config.database)
        lock.acquire()
    daemon = Daemon(config, watch=False)
    if args.outputs:
        try:  # no start: nothing is read, only written from the index
            return _said_outputs(daemon.write_outputs())
        finally:
            daemon.close()
            lock.release()
    crash = CrashRecord(config.database)
    try:
        daemon.start(crashed=_arm(crash))
        stale = (daemon.jobs.read_otherwise("") if args.all
                 else daemon.jobs.read_otherwise(daemon.read_with))
        paths = [j.path for j in stale if j.path.exists()]
        if not paths:
            echo(f"nothing to read again: every file was read with {daemon.read_with}")
            return 0
        echo(f"reading {plural(len(paths), 'file')} again with {daemon.read_with}",
             err=True)
        daemon.jobs.retry(paths, asked="keep")
        ids = _ids(daemon, daemon.add(paths))
        _progress(daemon, ids, config)
        states = {p: daemon.jobs.get(i) for p, i in ids.items()}
    finally:
        daemon.close()
        crash.disarm()
        lock.release()
    return 1 if _summarise(states, "read again") else 0


def _ids(daemon: Any, paths: list[Path]) -> dict[Path, int]:
    """Each file's job id: followed by id, a file archived or deleted after its read
    is still counted (its job row then names where it went)."""
    out = {}
    for path in paths:
        job = daemon.jobs.known(path)
        if job is not None:
            out[path] = job.id
    return out


def _said_outputs(written: dict[str, int]) -> int:
    files, outputs, skipped, placed = (int(written.get(k, 0))
                                       for k in ("files", "outputs", "skipped", "placed"))
    if files and placed:
        # Said as it is: pages stored without their word boxes were looked at again.
        echo(f"{plural(outputs, 'output')} written for {plural(files, 'file')} from the "
             f"stored text; Tesseract found the word boxes of {plural(placed, 'page')} "
             "again (stored before the index kept them, or read by an engine without "
             "them)")
    elif files:
        echo(f"{plural(outputs, 'output')} written for {plural(files, 'file')} from the "
             "stored pages (no page read again)")
    else:
        echo("nothing to write: every file read has the outputs asked for")
    if skipped:
        echo(f"{plural(skipped, 'file')} left alone: gone, changed since read (read again "
             "by the daemon), or without stored text", err=True)
    return 0


def _the_daemons_work(args: argparse.Namespace, config: config_mod.Config) -> bool:
    """Whether the running daemon should do this reread. Without --config or --database,
    yes: the user means the ocrwatch that runs. Naming another index: no, it is done here
    on that index. Naming the daemon's index with another config file: refused, since the
    daemon reads and writes by its own config."""
    from ocrwatch.control.client import request
    from ocrwatch.core.status import Status

    named = getattr(args, "config", None)
    if named is None and getattr(args, "database", None) is None:
        return True
    running = Status.from_dict(request("status"))
    if running.database and not _same_file(Path(running.database), config.database):
        return False
    if named is not None and not (running.config_file and _same_file(
            Path(running.config_file), Path(named).expanduser())):
        raise ConfigError(
            f"the daemon that runs on the index {config.database} was started with "
            f"{running.config_file or 'no config file'}, not {safe(named)}, and it reads and "
            "writes by its own settings. Put them in its file (it takes them as you save), "
            "or stop it (`ocrwatch stop`) and run this again")
    return True


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return a == b


def _reread_by_the_daemon(args: argparse.Namespace, config: config_mod.Config) -> int:
    """The daemon runs: it queues the files again itself and reads them as it goes."""
    from ocrwatch.control.client import request
    from ocrwatch.core.status import Status

    running = Status.from_dict(request("status"))
    if running.languages and tuple(config.languages) != running.languages:
        # Its engine reads with the languages it started with; a reload does not change them.
        raise DaemonRunning(
            f"the daemon reads with {'+'.join(running.languages)}, not "
            f"{'+'.join(config.languages)}: the languages take effect when it starts again "
            "(`ocrwatch restart`); then run `ocrwatch reread`")
    count = int(request("reread", all=bool(args.all)))
    if count == 0:
        echo("nothing to read again: every file was read as the daemon reads now")
    else:
        echo(f"{plural(count, 'file')} queued again; the daemon reads them now "
             "(`ocrwatch status` shows how far it is)")
    return 0


# How long a saved file's archiving or deletion is waited for before the summary: a
# daemon beside may be stopped or busy; then it finishes the move at its next start.
RETIRE_WAIT = 30.0
PENDING = ("its reading is saved; it is not {} yet: the daemon does it now, or at its "
           "next start if it was stopped")

LATE_ASK = ("the daemon running beside was saving its reading when this command named it, "
            "and kept it by its own rule; it is not {}d: do it yourself, its text is saved")


def _summarise(states: dict[Path, Any], verb: str, on_success: str = "keep") -> list[Path]:
    """Print how many files were read (``verb``), what became of each original that
    was to be archived or deleted, and why each failure failed; returns the failed."""
    failed = [(p, j.reason) for p, j in states.items() if j is not None and j.state == "failed"]
    done = {p: j for p, j in states.items() if j is not None and j.state == "done"}
    lost = [p for p, j in states.items() if j is None]
    line = f"{len(done)} {verb}, {len(failed)} failed"
    kept = {p: j for p, j in done.items() if j.retire in ("kept", "failed", "pending")}
    if on_success != "keep":
        # Named while a daemon beside was saving its reading (its rule had been asked
        # already): the file is where it was, and is said to be so.
        late = {p: replace(j, retire_reason=LATE_ASK.format(on_success))
                for p, j in done.items()
                if j.retire is None and j.path == p and os.path.lexists(p)}
        kept |= late
        gone = len(done) - len(kept)
        line += f", {gone} {'archived' if on_success == 'archive' else 'deleted'}"
        line += f", {len(kept)} kept" if kept else ""
    if lost:
        line += f", {len(lost)} no longer in the index"
    echo(line)
    for path, job in kept.items():
        why = job.retire_reason or PENDING.format(
            {"archive": "archived", "delete": "deleted"}.get(on_success, "archived or deleted"))
        echo(f"  kept: {safe(path)}: {safe(why)}")
    for path, reason in failed:
        echo(f"  failed: {safe(path)}: {safe(reason)}")
    return [p for p, _ in failed]


def _page_counts(paths: list[Path], config: config_mod.Config) -> dict[Path, int]:
    from ocrwatch.pages.decode import count_pages

    counts = {}
    for path in paths:
        try:
            counts[path] = max(1, count_pages(path, config))
        except Exception:  # reading it will say what is wrong; it counts as one page
            counts[path] = 1
    return counts


def _progress(daemon: Any, ids: dict[Path, int], config: config_mod.Config) -> None:
    """A progress bar in pages (tqdm: rate and time left) until every file is finished."""
    from tqdm import tqdm

    paths = list(ids)
    counts = _page_counts(paths, config)
    owed: dict[Path, float] = {}  # when each file was seen saved with its on_success owed
    with tqdm(total=sum(counts.values()), unit="page", desc="reading", file=sys.stderr,
              dynamic_ncols=True, mininterval=0.5 if sys.stderr.isatty() else 5.0,
              smoothing=0.1) as bar:
        while True:
            reading = {r.path: r.done for r in daemon.reading()}
            pages = finished = 0
            now = time.monotonic()
            for path in paths:
                job = daemon.jobs.get(ids[path])
                if job is None or job.state in ("done", "failed"):
                    pages += counts[path]
                    if job is not None and job.retire == "pending":
                        # Saved, its original not yet archived or deleted (by this process
                        # or a daemon beside): the summary says what became of it.
                        since = owed.setdefault(path, now)
                        if now - since < RETIRE_WAIT:
                            continue
                    finished += 1
                elif job is not None:
                    pages += min(reading.get(job.display, 0), counts[path])
            if pages != bar.n:
                bar.update(pages - bar.n)
            bar.set_postfix_str(f"{finished}/{len(paths)} files", refresh=False)
            if finished >= len(paths):
                break
            time.sleep(0.2)  # polls the queue; the work happens in the daemon's threads
        bar.refresh()
