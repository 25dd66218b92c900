"""After a file is done: the user's ``on_done`` program, and a notification per batch.

``on_done`` is an argv list, never a shell string, so no file name can inject a command.
The paths of the finished file are passed in the environment (``OCRWATCH_FILE``...) and
as arguments: ``{file}``, ``{source}`` and one placeholder per output (``{md}``, ``{txt}``,
``{pdf}``, ``{hocr}``, ``{alto}``: core/naming.OUTPUT_NAMES) in an argument are replaced;
with none of them, the original's path is appended as the last argument. A value is
never code: a placeholder in a shell's command string or an interpreter's code
(``["/bin/sh", "-c", "notify {file}"]``) is refused (:mod:`ocrwatch.core.hookshell`).
The program runs in its own session with a timeout, after which it is ended with
everything it started (its session, its descendants, and what carries its environment
marker: a ``setsid`` child too); a program that exits counts as finished even when a
child it started in the background still runs (that child is its own business, as after
a shell's ``&``); its failure is logged and the file still counts as done. Hooks run one
at a time on a thread of their own, so a slow hook never holds up reading, and their
queue is kept on disk (:mod:`ocrwatch.hooks.queue`) so that a kill loses none.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import psutil

from ocrwatch.config import Config
from ocrwatch.core import events as ev
from ocrwatch.core.hookshell import PLACEHOLDERS, HookRefused, shell_safe
from ocrwatch.core.naming import OUTPUT_NAMES
from ocrwatch.core.threads import Service
from ocrwatch.hooks.loops import HookLoops
from ocrwatch.hooks.notify import BatchNotice
from ocrwatch.hooks.queue import Entry, HookJournal, folder_for, trace_for

log = logging.getLogger(__name__)

_MARKER = "OCRWATCH_HOOK_RUN"
OUTPUT_LIMIT = 4000  # characters of the program's output kept for the log
_TRIM_AT = 1 << 20  # bytes of output after which the file is emptied (its end kept)


@dataclass(frozen=True)
class Finished:
    """A file that was read: where it was read, where it and its results are now."""

    source: Path
    original: Path | None  # None when on_success deleted it
    # Its outputs by name ("md", "txt", "pdf", "hocr"...), where written.
    outputs: Mapping[str, Path | None] = field(default_factory=dict)
    pages: int = 0
    sha256: str | None = None  # its content: a copy on_done made of it is told apart

    def named(self) -> dict[str, Path | None]:
        """Each output a file may get (core/naming.OUTPUT_NAMES) and where it is (None:
        not written)."""
        return {o: self.outputs.get(o) for o in OUTPUT_NAMES}


def hook_argv(argv: list[str], item: Finished) -> list[str]:
    values = {"{file}": item.original, "{source}": item.source,
              **{f"{{{o}}}": p for o, p in item.named().items()}}
    if not any(p in arg for arg in argv for p in PLACEHOLDERS):
        # The path goes last: checked as a placeholder there is (sh -c, perl -e).
        argv = [*argv, "{file}" if item.original else "{source}"]

    def value(placeholder: str) -> str:
        found = values[placeholder]
        return "" if found is None else str(found)

    # A value is only ever an argument; forms that would read it as code are refused.
    return shell_safe(argv, value)


def hook_env(item: Finished) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "OCRWATCH_FILE": str(item.original) if item.original else "",
        "OCRWATCH_SOURCE": str(item.source),
        # OCRWATCH_MD, _TXT, _PDF, _HOCR, _ALTO: "" for one not written.
        **{f"OCRWATCH_{o.upper()}": str(p) if p else "" for o, p in item.named().items()},
        "OCRWATCH_PAGES": str(item.pages),
        "OCRWATCH_DELETED": "1" if item.original is None else "0",
        _MARKER: uuid.uuid4().hex,  # finds what the hook left running, at its timeout
    })
    return env


def run_hook(argv: list[str], item: Finished, timeout: float,
             trace: Path | None = None) -> int | None:
    """Run ``on_done`` for ``item``; its exit status, or None when it did not finish.

    ``trace``: a file the hook's process writes a byte to just before it becomes the
    program (through ``/bin/sh``'s ``exec``), so that a restart after a kill can tell
    whether the program had started (hookqueue)."""
    try:
        args = hook_argv(argv, item)
    except HookRefused as exc:  # the config check refuses these forms before a start
        log.warning("on_done was not run for %s: %s", item.source.name, exc)
        return None
    env = hook_env(item)
    try:
        # Output goes to an unnamed file, not a pipe: a hook still running when ocrwatch
        # is killed is not killed in turn by SIGPIPE at its next line of output.
        out = tempfile.TemporaryFile()  # noqa: SIM115 (closed by the with below)
    except OSError as exc:
        log.warning("on_done was not run for %s: no temporary file for its output (%s)",
                    item.source.name, exc.strerror or exc)
        return None
    with out:
        fd = out.fileno()
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
        try:
            proc = _start(args, env, out, trace)
        except OSError as exc:
            log.warning("on_done could not start %s: %s; fix on_done in the config",
                        args[0], exc.strerror or exc)
            return None
        output = _wait(proc, fd, timeout)
    if output is None:
        _end_tree(proc, env[_MARKER])
        log.warning("on_done %s ran over %g s for %s and was stopped; raise on_done_timeout "
                    "if it needs longer", args[0], timeout, item.source.name)
        return None
    text = output.decode("utf-8", "replace").strip()[-OUTPUT_LIMIT:]
    if proc.returncode != 0:
        log.warning("on_done %s exited with status %d for %s (the file is done all the "
                    "same)%s", args[0], proc.returncode, item.source.name,
                    f": {text}" if text else "")
    else:
        log.info("on_done %s for %s: ok%s", args[0], item.source.name,
                 f": {text}" if text else "")
    return proc.returncode


def _start(args: list[str], env: dict[str, str], out: IO[bytes],
           trace: Path | None) -> subprocess.Popen[bytes]:
    if trace is None or not os.path.exists("/bin/sh"):
        return subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    if shutil.which(args[0], path=env.get("PATH")) is None:
        raise FileNotFoundError(errno.ENOENT, "no such program", args[0])
    # The byte is written by the hook's own process, after the fork: whenever ocrwatch
    # dies, "started" is on disk exactly when the program runs. ($0 is the trace's path.)
    shim = ["/bin/sh", "-c", 'printf . >> "$0" && exec "$@"', str(trace), *args]
    return subprocess.Popen(shim, env=env, stdin=subprocess.DEVNULL, stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)


def _wait(proc: subprocess.Popen[bytes], fd: int, timeout: float) -> bytes | None:
    """The end of the program's output once the program itself has exited, or None when
    it runs past ``timeout``. Waits for the program, not for the end of its output: a
    child it left running in the background may write on. Only the last bytes are kept,
    and the file is emptied as it grows (it is opened for appending, so the program's
    next writes start again at its start): a program that writes without end costs
    neither memory nor disk."""
    deadline = time.monotonic() + timeout
    tail = bytearray()
    while True:
        try:
            proc.wait(timeout=max(0.0, min(0.2, deadline - time.monotonic())))
            break
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                return None
            _take(fd, tail, _TRIM_AT)
    _take(fd, tail, 0)
    return bytes(tail)


def _take(fd: int, tail: bytearray, over: int) -> None:
    """Move the end of the output file into ``tail`` once it holds more than ``over``
    bytes, and empty the file."""
    size = os.fstat(fd).st_size
    if size <= over or size == 0:
        return
    keep = OUTPUT_LIMIT * 4
    tail.extend(os.pread(fd, min(size, keep), max(0, size - keep)))
    del tail[:-keep]
    os.ftruncate(fd, 0)


def _end_tree(proc: subprocess.Popen[bytes], marker: str) -> None:
    """TERM the hook, its session and every process it started, then KILL what is left
    after 5 s. A child that called setsid() has left the session (killpg misses it) but
    is still a descendant, or, when its parent has exited, still carries the hook's
    marker in its environment: both are looked for, with psutil."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        tree = _hook_tree(proc.pid, marker)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        for member in tree:
            with contextlib.suppress(psutil.Error):
                member.send_signal(sig)
        deadline = time.monotonic() + wait
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait)
        _gone, alive = psutil.wait_procs(tree, timeout=max(0.0, deadline - time.monotonic()))
        if proc.poll() is not None and not alive and not _hook_tree(proc.pid, marker):
            return


def _hook_tree(pid: int, marker: str) -> list[psutil.Process]:
    """The hook's descendants, and this user's processes that carry its marker."""
    found: dict[int, psutil.Process] = {}
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(pid).children(recursive=True):
            found[child.pid] = child
    me = os.getuid()
    for other in psutil.process_iter(["uids"]):
        if other.pid in found or other.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            uids = other.info["uids"]
            if uids is not None and uids.real == me \
                    and other.environ().get(_MARKER) == marker:
                found[other.pid] = other
    return [p for p in found.values() if p.pid != pid]


# At stop, hooks still queued may start within this many seconds (each then has its own
# on_done_timeout), so a stop waits at most on_done_timeout + 15 s for hooks, as systemd's
# TimeoutStopSec allows; those that cannot start are logged as not run, by file name.
STOP_GRACE_SECONDS = 4.0
_KILL_SECONDS = 10.0  # what ending a hook's process group may take (TERM, then KILL)


class AfterDone(Service):
    """The thread that runs hooks and, when a batch is over, the batch notification's
    check (:class:`~ocrwatch.hooks.notify.BatchNotice`)."""

    def __init__(self, config: Config, is_idle: Callable[[], bool],
                 notify: Callable[[str, str], object] | None = None) -> None:
        super().__init__("ocrwatch-after")
        self.config = config
        self.notice = BatchNotice(config, is_idle, notify)
        self._queue: queue.Queue[tuple[str, object]] = queue.Queue()
        # Hooks queued on disk as well, so a kill loses none (hookqueue).
        self.journal = (HookJournal(folder_for(config.database))
                        if str(config.database) != ":memory:" else None)
        self._pending: dict[Path, Path] = {}  # source -> its .pending record
        # Whether the index says a pending record's file is done (set by the daemon).
        self.was_done: Callable[[Path, list[Path | None]], bool] | None = None
        self._lock = threading.Lock()
        self._started = False
        self._closed = False  # the thread ended: a hook queued now would never run
        self._last_start = 0.0  # when hooks stop being started, once a stop is asked for
        self.loops = HookLoops()  # copies on_done makes into the inbox start no new run

    @property
    def needed(self) -> bool:
        return bool(self.config.on_done) or self.config.notify_batch

    def start(self) -> None:
        if self._started:
            return
        recovered = self._recover()
        if self.needed:
            self._started = True
            for entry in recovered:
                self._queue.put(("recovered", entry))
            super().start()

    def _recover(self) -> list[Entry]:
        """Hooks the last run left queued on disk; those that had started are named."""
        if self.journal is None:
            return []
        was_done = self.was_done

        def done_in_index(entry: Entry) -> bool:
            source = entry.values.get("source")
            return (was_done is not None and source is not None
                    and was_done(source, [entry.values.get(o) for o in OUTPUT_NAMES]))

        waiting, cut = self.journal.recover(done_in_index)
        for entry in cut:
            log.warning("on_done for %s had started when ocrwatch last stopped (queued %s); "
                        "it is not run again: see that it finished",
                        _name(entry), time.strftime("%Y-%m-%d %H:%M:%S",
                                                    time.localtime(entry.queued)))
        if waiting and not self.config.on_done:
            for entry in waiting:
                log.warning("on_done for %s was queued when ocrwatch last stopped, but "
                            "on_done is no longer set: not run", _name(entry))
                self.journal.finished(entry.path)
            return []
        for entry in waiting:
            log.info("on_done for %s was queued when ocrwatch last stopped: it runs now",
                     _name(entry))
        return waiting

    def stop(self) -> None:
        self._last_start = time.monotonic() + STOP_GRACE_SECONDS
        super().stop()

    def wake(self) -> None:
        self._queue.put(("wake", None))

    def close(self, timeout: float | None = None) -> bool:
        """Run the hooks queued so far, each within its timeout, those that can start
        within STOP_GRACE_SECONDS; then stop. Each one not run is logged by file name."""
        if not self._started:
            return True
        if timeout is None:
            timeout = STOP_GRACE_SECONDS + self.config.on_done_timeout + _KILL_SECONDS + 1
        if not super().close(timeout):
            return False
        with self._lock:
            self._closed = True
        self._drop_queued()  # what came after the thread's last look
        return True

    def listen(self, events: ev.Events) -> Callable[[], None]:
        """Follow a daemon's event stream: the batch notice counts its files, and hooks
        come from its events (the journal's record before a commit, the hook after it);
        the end of an outcome's recording has the notice checked. Returns what stops it."""
        stops = [
            self.notice.listen(events),  # first: it counts before the check is asked for
            events.subscribe(ev.OutcomeEnded, lambda _e: self._check()),
            events.subscribe(ev.FileCommitting, lambda e: self.expect(
                e.source, e.outputs, e.pages)),
            events.subscribe(ev.FileNotCommitted, lambda e: self.forget(e.source)),
            events.subscribe(ev.FileDone, lambda e: self.done(Finished(
                e.job.path, e.original, dict(e.outputs), len(e.pages), e.job.sha256))),
        ]

        def stop() -> None:
            for unsubscribe in stops:
                unsubscribe()

        return stop

    def _check(self) -> None:
        """An outcome was recorded: the batch may be over."""
        if self._started:
            self._queue.put(("check", None))

    def expect(self, source: Path, outputs: Mapping[str, Path | None], pages: int) -> None:
        """``source`` is about to be marked done: its hook is recorded first, so that a
        kill between the index's commit and :meth:`done` loses none. ``outputs``: its
        outputs by name (Finished.outputs)."""
        if self._started and self.config.on_done and self.journal is not None:
            item = Finished(source, source, dict(outputs), pages)
            record = self.journal.add(_values(item), pages, pending=True)
            if record is not None:
                with self._lock:
                    self._pending[source] = record

    def forget(self, source: Path) -> None:
        """``source`` was not marked done after all: no hook is due."""
        with self._lock:
            record = self._pending.pop(source, None)
        if record is not None and self.journal is not None:
            self.journal.finished(record)

    def done(self, item: Finished) -> None:
        with self._lock:
            pending = self._pending.pop(item.source, None)
        if not self._started:
            return
        record = None
        if self.config.on_done and self.journal is not None:
            record = self.journal.add(_values(item), item.pages, replaces=pending)
        with self._lock:
            if not self._closed:
                self._queue.put(("done", (item, record)))
                return
        if self.config.on_done:
            _log_not_run(item.source.name, record)  # a page that outlived the stop

    def run(self) -> None:
        while True:
            try:
                kind, value = self._queue.get(timeout=1.0)
            except queue.Empty:
                if self.stopping:
                    return
                self.notice.check()
                continue
            try:
                self._handle(kind, value)
                if self._queue.empty():
                    if self.stopping:
                        return
                    self.notice.check()
            except Exception:
                log.exception("after-read step failed")

    def _handle(self, kind: str, value: object) -> None:
        if kind in ("done", "recovered"):
            item, record = _queued(kind, value)
            if not self.config.on_done:
                return
            if self.stopping and time.monotonic() > self._last_start:
                _log_not_run(item.source.name, record)
                return
            if item.sha256 and self.loops.made_by_hook(item.sha256,
                                                       item.original or item.source):
                log.warning("on_done not run for %s: it is a copy of a file made while "
                            "on_done ran for that file (the same content, written then); "
                            "run again for each copy, on_done would copy for ever. Read "
                            "and indexed all the same", item.source.name)
                if record is not None and self.journal is not None:
                    self.journal.finished(record)
                return
            trace = None
            if record is not None and self.journal is not None:
                record = self.journal.started(record)
                trace = trace_for(record) if record.suffix == ".run" else None
            if item.sha256:
                self.loops.started(item.sha256)
            try:
                run_hook(self.config.on_done, item, self.config.on_done_timeout, trace)
            finally:
                if item.sha256:
                    self.loops.ended(item.sha256)
                if record is not None and self.journal is not None:
                    self.journal.finished(record)

    def _drop_queued(self) -> None:
        while True:
            try:
                kind, value = self._queue.get_nowait()
            except queue.Empty:
                return
            if kind in ("done", "recovered") and self.config.on_done:
                item, record = _queued(kind, value)
                _log_not_run(item.source.name, record)


def _log_not_run(name: str, record: Path | None) -> None:
    if record is not None:
        log.warning("on_done was not run for %s: ocrwatch stopped before its turn; it is "
                    "kept in %s and runs at the next start", name, record.parent)
    else:
        log.warning("on_done was not run for %s: ocrwatch stopped before its turn (the "
                    "file is read and done; run the program for it by hand if it is "
                    "needed)", name)


def _values(item: Finished) -> dict[str, Path | None]:
    return {"source": item.source, "original": item.original, **item.named()}


def _queued(kind: str, value: object) -> tuple[Finished, Path | None]:
    """A queued hook's file and its record on disk (None: in memory only)."""
    if kind == "recovered":
        assert isinstance(value, Entry)
        v = value.values
        source = v["source"] or Path()
        return Finished(source, v["original"], {o: v.get(o) for o in OUTPUT_NAMES},
                        value.pages), value.path
    assert isinstance(value, tuple)
    item, record = value
    assert isinstance(item, Finished) and (record is None or isinstance(record, Path))
    return item, record


def _name(entry: Entry) -> str:
    source = entry.values.get("source")
    return source.name if source is not None else entry.path.name
