"""Preparing pages in worker processes, for an engine that reads on a GPU.

A page's preparation (:meth:`ScanPrep.prepare`: ink, faint marks, skew, orientation) is
Python between calls into Pillow, numpy and Tesseract's OSD. The daemon's preparer
threads share one interpreter lock, so past a few threads they wait on each other and on
the daemon's own threads (the settler recording a drop's files took 50 ms a file beside 13
preparers, 1.2 ms alone), and a GPU reads faster than they hand it pages.
:class:`PooledScanPrep` sends each page to one of ``workers`` processes of its own
(``concurrent.futures``' process pool), each with a :class:`ScanPrep` made from the same
settings. The preparer threads still open the files, decode and scale their pages (C code
that lets go of the lock) and wait for the process's answer.

The processes start when the first page needs them (``spawn``: a fresh interpreter, never
a copy of the daemon's threads), run at the preparers' lower priority, and are ended once
no page has come for ``IDLE_S`` (their memory given back, as the engine's is). A process
that dies preparing a page (a crash in native code) takes down the pool: the pool is made
again, and each page it held is tried again alone, in a process of its own; a page that
ends that one too fails its file with that reason, and no other page fails with it. What
a worker logs is logged here, in the daemon's log, after its page.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Generator, Iterable
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ocrwatch.config import Config
from ocrwatch.core.domain import Page
from ocrwatch.core.errors import InputError, TransientError
from ocrwatch.scan.prepare import ScanPrep

log = logging.getLogger(__name__)

# Seconds without a page before the processes are ended (each holds 60-100 MB).
IDLE_S = 120.0

# Pages of one file in the processes beyond the one its preparer waits for, while there
# is a free process: a long PDF is prepared on several cores (4 pages at once), its pages
# still handed on in order.
AHEAD = 3

# How often a worker looks whether the daemon is still there (_end_with).
PARENT_CHECK_S = 1.0

# In a worker: its ScanPrep, made once by _start_worker.
_WORKER: ScanPrep | None = None


class _Collect(logging.Handler):
    """A worker's log records for the page at hand, sent back with it."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        record.msg, record.args = record.getMessage(), None  # formatted here: picklable
        record.exc_info = record.exc_text = None
        self.records.append(record)


_COLLECT = _Collect()


def _start_worker(config: Config, options: dict[str, Any], nice: int, daemon: int) -> None:
    global _WORKER
    # Ctrl-C in the daemon's terminal reaches the whole process group: the daemon stops
    # its preparers in order, and their processes with them.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_end_with, args=(daemon,), name="ocrwatch-prep-parent",
                     daemon=True).start()
    os.environ.setdefault("OMP_THREAD_LIMIT", "1")  # one core a process: they run beside
    if nice > 0:
        with contextlib.suppress(OSError):  # not allowed: it runs at the daemon's priority
            os.nice(nice)
    root = logging.getLogger()
    root.handlers[:] = [_COLLECT]
    root.setLevel(logging.INFO)
    _WORKER = ScanPrep(config, **options)


def _end_with(parent: int) -> None:
    """In a worker: end once the daemon is gone. A worker waits for pages on a pipe whose
    writing end it holds too, so a daemon killed outright (the out-of-memory killer)
    would leave it waiting for ever."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_S)
    os._exit(0)


_Prepared = tuple[Page, list[logging.LogRecord]]  # a page and what was logged preparing it
# A page of a file on its way: sent to a process, or (None) needing no preparation.
_Waiting = tuple[Page, "Future[_Prepared] | None", "ProcessPoolExecutor | None"]


def _prepare_in_worker(page: Page) -> _Prepared:
    assert _WORKER is not None, "the worker was not started by _start_worker"
    _COLLECT.records = []
    try:
        return _WORKER.prepare(page), _COLLECT.records
    finally:
        _COLLECT.records = []


def _noop() -> None:
    """Sent to start the processes ahead of the first page (PooledScanPrep.warm)."""


class PooledScanPrep(ScanPrep):
    """A :class:`ScanPrep` whose :meth:`prepare` runs in ``workers`` processes; its other
    methods (the Tesseract engine's checks) run here as ScanPrep's do."""

    def __init__(self, config: Config, workers: int, *, nice: int = 0,
                 **options: Any) -> None:
        super().__init__(config, **options)
        self.workers = max(1, workers)
        # The daemon's pid from here: a worker that starts after the daemon was killed
        # would see its new parent as its own.
        self._start_args = (config, options, nice, os.getpid())
        self._pool: ProcessPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._in_flight = 0
        self._last_used = time.monotonic()
        self._closed = False
        self._said: set[str] = set()  # warnings each process gives once: logged once here

    # -- the pool ------------------------------------------------------------------
    def _executor(self) -> ProcessPoolExecutor:
        with self._pool_lock:
            if self._closed:
                raise TransientError("ocrwatch is stopping: the page is read at its next start")
            if self._pool is None:
                self._pool = self._new_pool(self.workers)
                log.info("page preparation in %d processes", self.workers)
            self._in_flight += 1
            self._last_used = time.monotonic()
            return self._pool

    def _new_pool(self, workers: int) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_start_worker, initargs=self._start_args)

    def _done(self) -> None:
        with self._pool_lock:
            self._in_flight -= 1
            self._last_used = time.monotonic()

    def _broken(self, pool: ProcessPoolExecutor) -> None:
        """``pool`` lost a process: it is replaced, once, by whichever page saw it first."""
        with self._pool_lock:
            if self._pool is not pool:
                return
            self._pool = None
        log.warning("a page preparation process ended unexpectedly; starting them again")
        pool.shutdown(wait=False, cancel_futures=True)

    # -- ScanPrep ------------------------------------------------------------------
    def prepare(self, page: Page) -> Page:
        if page.text is not None:
            return page  # nothing to prepare: blank already, or the PDF's own text
        return self._result(page, *self._submit(page))

    def prepare_all(self, pages: Iterable[Page]) -> Generator[Page, None, None]:
        """A file's pages prepared in order, up to ``AHEAD`` more of them in the processes
        while the first waits, as long as a process is free for them: one long PDF is
        prepared on several cores, and a drop of many files keeps a page a file (and as
        little memory)."""
        waiting: collections.deque[_Waiting] = collections.deque()
        opened = iter(pages)
        try:
            while True:
                while waiting and (len(waiting) > AHEAD or self._in_flight >= self.workers):
                    yield self._next(waiting)
                page = next(opened, None)
                if page is None:
                    break
                waiting.append((page, *self._submit(page)) if page.text is None
                               else (page, None, None))
            while waiting:
                yield self._next(waiting)
        finally:
            for _page, future, _pool in waiting:  # left early: the rest are let go of
                if future is not None:
                    future.cancel()  # one already in a process ends there, unread
                    self._done()
            if isinstance(opened, Generator):
                opened.close()  # the file's decoder, now rather than when collected

    def _next(self, waiting: collections.deque[_Waiting]) -> Page:
        page, future, pool = waiting.popleft()
        if future is None or pool is None:
            return page
        return self._result(page, future, pool)

    def _submit(self, page: Page) -> tuple[Future[_Prepared], ProcessPoolExecutor]:
        """The page sent to a process; :meth:`_result` waits for it and counts it done. A
        pool a page beside it broke (or shut down for that) refuses it: the refusal is
        its future's, so that :meth:`_result` tries the page again alone, as for a pool
        that breaks while the page is in it."""
        pool = self._executor()
        try:
            return pool.submit(_prepare_in_worker, page), pool
        except (BrokenProcessPool, RuntimeError) as exc:
            refused: Future[_Prepared] = Future()
            refused.set_exception(BrokenProcessPool(str(exc)))
            return refused, pool
        except BaseException:
            self._done()
            raise

    def _result(self, page: Page, future: Future[_Prepared],
                pool: ProcessPoolExecutor) -> Page:
        try:
            prepared, records = future.result()
        except CancelledError:  # close() ended the pool before the page's turn
            raise TransientError("ocrwatch is stopping: the page is read at its next "
                                 "start") from None
        except BrokenProcessPool:
            # This page, or another in flight beside it, ended a process: each is tried
            # again alone, so that only the one that does it again fails.
            self._broken(pool)
            prepared, records = self._alone(page)
        finally:
            self._done()
        self._replay(records)
        return prepared

    def _alone(self, page: Page) -> tuple[Page, list[logging.LogRecord]]:
        with self._new_pool(1) as alone:
            try:
                return alone.submit(_prepare_in_worker, page).result()
            except BrokenProcessPool:
                raise InputError(
                    f"page {page.index + 1} ended the process that prepared it, twice (a "
                    "crash in an image library or in Tesseract); the file is kept as it "
                    "is") from None

    def _replay(self, records: list[logging.LogRecord]) -> None:
        for record in records:
            if record.levelno >= logging.WARNING:
                if record.msg in self._said:
                    continue
                self._said.add(str(record.msg))
            logging.getLogger(record.name).handle(record)

    def warm(self) -> None:
        """Start the processes now (a file is arriving), not with its first page."""
        if self._closed:
            return
        pool = self._executor()
        try:
            for _ in range(self.workers):
                pool.submit(_noop)
        except (BrokenProcessPool, RuntimeError):
            self._broken(pool)
        finally:
            self._done()

    def idle(self) -> None:
        """A preparer found no file: the processes end once none has had a page for
        ``IDLE_S``."""
        super().idle()
        with self._pool_lock:
            pool = self._pool
            if (pool is None or self._in_flight
                    or time.monotonic() - self._last_used < IDLE_S):
                return
            self._pool = None
        pool.shutdown(wait=True)

    def close(self) -> None:
        with self._pool_lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        super().close()
