"""When each stage of the pipeline runs, and on which thread: the only code with locks.

- ``policy.preparers`` preparer threads claim queued jobs, one file each, and open its
  pages into a bounded page queue (:mod:`ocrwatch.pagequeue`), so a 500-page PDF never
  sits in memory whole, and a GPU engine is never left waiting on one core's decoding
  (for the vLLM engine each page's preparation runs in a process of its own,
  :mod:`ocrwatch.scan.pool`, while its thread waits).
  One more preparer, the passing lane, takes a file only while all of those are inside
  one: a file dropped behind a long file is read beside it, its pages interleaved.
- ``policy.concurrency`` reader threads take pages from the queue one at a time, read
  each with the engine (which does its own admission), and finish a file once all its
  pages are read.
- Identical content in flight is read once: later copies follow the first.
- Pausing drains the buffer, puts unread jobs back in the queue and releases the
  engine's memory. The release runs outside every lock (vLLM's can take 30 s), so
  ``status`` and the control socket answer meanwhile.

The stages themselves are plain functions in ocrwatch/pipeline.py.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ocrwatch import outcome, pipeline
from ocrwatch.context import Context
from ocrwatch.core import cpus
from ocrwatch.core.domain import Job, Page, PageText
from ocrwatch.core.errors import OcrwatchError, TransientError
from ocrwatch.core.events import OutcomeEnded, OutcomeStarted, PageRead
from ocrwatch.core.status import PageRate, Reading
from ocrwatch.core.threads import Loop, Service
from ocrwatch.engines import Engine
from ocrwatch.pagequeue import PageQueue
from ocrwatch.pages import memory

log = logging.getLogger(__name__)

STOP_GRACE_SECONDS = 3.0  # how long close() waits for the pages in hand
KEEP_OSD_IDLE_S = 10.0  # a model engine's idle preparer keeps its OSD this long (_idle_preparer)
# The longest an idle preparer waits for the settler to record the files that settled
# together before it claims one (Scheduler.intake): a look hashing a large file holds no
# preparer longer than this.
INTAKE_HOLD_S = 0.5


@dataclass(eq=False)
class _Work:
    """A file whose pages are being read."""

    job: Job
    results: dict[int, PageText] = field(default_factory=dict)
    expected: int | None = None  # known once every page was opened
    total: int | None = None  # the file's page count, read first (for status and progress)
    in_flight: int = 0  # pages put in the page queue and not yet read
    error: str | None = None
    transient: str | None = None
    discarded: bool = False
    finished: bool = False
    followers: list[Job] = field(default_factory=list)  # identical copies waiting on it

    def complete(self) -> bool:
        if self.discarded or self.finished:
            return False
        if self.error or self.transient:
            return self.in_flight == 0
        return self.expected is not None and len(self.results) >= self.expected


@dataclass(eq=False)
class _Item:
    work: _Work
    page: Page


class Scheduler:
    """Owns the page buffer and the threads that fill and empty it."""

    def __init__(self, ctx: Context, engine: Engine, *, paused: bool = False) -> None:
        self.ctx = ctx
        self.engine = engine
        policy = engine.policy
        self._cond = threading.Condition()
        # Pages opened and not yet read: enough to keep every reader busy, and no more.
        self._pages: PageQueue[_Item] = PageQueue(max(2, 2 * policy.concurrency), self._cond)
        self._works: dict[int, _Work] = {}
        self._in_engine = 0  # pages in recognize() now: a pause drain waits for them
        # Files whose outcome is being recorded (sidecars, index row, original retired):
        # out of _works already, but not finished for whoever waits on busy().
        self._finishing = 0
        self._preparing = 0  # preparers inside a file: a pause drain waits for them
        self._paused = paused
        self._released = paused  # the engine's memory was given back for this pause
        self._releasing = False  # a release runs (outside the lock): read nothing
        self._only: set[int] | None = None
        self._stopping = False
        self.last_result: Path | None = None
        self.rate = PageRate()
        self.abandoned: list[str] = []  # threads close() left in a page, by name
        self._intake_until = 0.0  # while the settler records a look's files (intake)
        self._gated = 0  # idle preparers waiting for that
        self._regular = max(1, policy.preparers)
        self._in_file = 0  # regular preparers inside a file: the passing lane's cue
        self._preparer = threading.local()  # a preparer's own: its priority lowered yet
        self._threads: list[Service] = [
            *(Loop("ocrwatch-prepare" + (f"-{n}" if n else ""), self._prepare_step, self.wake)
              for n in range(self._regular)),
            # The passing lane: one more preparer, which takes a file only while every
            # other one is inside a file, so that a file dropped behind a long one (2000
            # pages, hours) starts at once, its pages put in the page queue beside the
            # long one's, instead of waiting for all of it.
            Loop("ocrwatch-prepare-lane", lambda: self._prepare_step(lane=True), self.wake),
            *(Loop(f"ocrwatch-read-{n}", self._read_step, self.wake)
              for n in range(policy.concurrency)),
        ]

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Ask every thread to end after the page in hand."""
        with self._cond:
            self._stopping = True
            self._pages.close()  # wakes the readers and preparers waiting on it
        for thread in self._threads:
            thread.stop()

    def close(self) -> None:
        """Stop, wait for the threads, and put unfinished jobs back in the queue.

        A page in hand (a giant one can take Tesseract half a minute, and a decoder
        cannot be interrupted) is abandoned after a short grace: its job goes back to
        the queue and is read again at the next start.
        """
        self.stop()
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.abandoned = [t.name for t in self._threads if t.alive]
        if self.abandoned:
            log.warning("stopping without waiting for the page in hand (%s); it is read "
                        "again at the next start", ", ".join(self.abandoned))
        with self._cond:
            works = list(self._works.values())
            self._works.clear()
        for work in works:
            self._put_back(work)

    # -- control ---------------------------------------------------------------------
    def pause(self) -> None:
        with self._cond:
            self._paused = True
            self._cond.notify_all()

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._released = False
            self._cond.notify_all()
        self.rate.mark_start()  # a pause is no reading time

    @property
    def paused(self) -> bool:
        return self._paused

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    @contextlib.contextmanager
    def intake(self) -> Iterator[None]:
        """While the settler records the files that settled together, idle preparers
        claim none of them: each file's recording is a few database calls and a hash,
        1.2 ms alone, but 28-50 ms a file when 13 preparers, woken by the first file,
        held the interpreter's lock between them, and a drop's last file reached the
        engine seconds after its first."""
        with self._cond:
            self._intake_until = time.monotonic() + INTAKE_HOLD_S
        try:
            yield
        finally:
            with self._cond:
                self._intake_until = 0.0
                if self._gated:
                    self._cond.notify_all()

    def restrict(self, ids: set[int]) -> None:
        """Read only these jobs from now on (``ocrwatch add``)."""
        with self._cond:
            self._only = ids
            self._cond.notify_all()

    def busy(self) -> bool:
        """Whether a file is in hand: being opened, buffered, read or finished."""
        with self._cond:
            return (bool(self._works) or self._in_engine > 0 or self._finishing > 0
                    or len(self._pages) > 0)

    def reading(self) -> tuple[Reading, ...]:
        """The files whose pages are being read now, with pages read and in all."""
        with self._cond:
            return tuple(Reading(w.job.display, len(w.results), w.total)
                         for w in self._works.values() if not w.discarded)

    # -- the preparer ----------------------------------------------------------------
    def _prepare_step(self, lane: bool = False) -> None:
        if not getattr(self._preparer, "niced", False):  # once, on each preparer's thread
            self._preparer.niced = True
            cpus.lower_thread_priority(self.engine.policy.prepare_nice)
        release = False
        with self._cond:
            if self._stopping:
                return
            if lane and (self._paused or self._in_file < self._regular):
                self._cond.wait(1.0)  # the regular preparers drain a pause, and keep up
                return
            if self._paused:
                release = self._drain_for_pause()
                if not release:
                    self._cond.wait(1.0)
                    return
            elif self._pages.full():
                self._cond.wait(1.0)
                return
            elif (hold := self._intake_until - time.monotonic()) > 0:
                self._gated += 1  # the settler is recording files: claim after it
                try:
                    self._cond.wait(hold)
                finally:
                    self._gated -= 1
                return
            else:
                self._preparing += 1  # in the same hold as the pause check: no drain between
        if release:
            self._release_engine()
            return
        job = None
        try:
            job = self._claim()
            if job is not None:
                self._preparer.idle_since = None
                if not lane:
                    with self._cond:
                        self._in_file += 1
                        self._cond.notify_all()
                self._prepare(job)
        finally:
            with self._cond:
                self._preparing -= 1
                if job is not None and not lane:
                    self._in_file -= 1
                self._cond.notify_all()
        if job is None:
            self._idle_preparer()
            due = self.ctx.jobs.next_due()
            wait = 1.0 if due is None else max(0.05, min(1.0, due - time.time()))
            with self._cond:
                if not self._stopping:
                    self._cond.wait(wait)

    def _idle_preparer(self) -> None:
        """A preparer found no file: it gives its OSD back (ScanPrep.idle). For Tesseract at
        once, so that OSD is not held while the readers read a short file's pages (the
        peak of a one-page file); a model engine's preparers keep it until they have found
        nothing for ``KEEP_OSD_IDLE_S``, as a drop's files come one after another and each
        reload costs about 0.1 s of a preparer's time, which a GPU waits for."""
        if self.ctx.scan is None:
            return
        now = time.monotonic()
        since = getattr(self._preparer, "idle_since", None)
        if since is None:
            self._preparer.idle_since = since = now
        if self.engine.max_side is None or now - since >= KEEP_OSD_IDLE_S:
            self.ctx.scan.idle()

    def _claim(self) -> Job | None:
        try:
            if self._only is not None:
                return self.ctx.jobs.claim_among(self._only)
            return self.ctx.jobs.claim()
        except TransientError as exc:
            log.warning("cannot take a job: %s", exc)
            return None

    def _prepare(self, claimed: Job) -> None:
        job = pipeline.identify(self.ctx, claimed)
        if job is None:
            return
        work = _Work(job)
        with self._cond:
            leader = next((w for w in self._works.values()
                           if job.sha256 and w.job.sha256 == job.sha256 and not w.discarded),
                          None)
            if leader is not None:
                leader.followers.append(job)  # identical content: read once
                return
            self._works[job.id] = work
        cached = pipeline.reuse(self.ctx, job)
        if cached is not None:
            pages, engine = cached
            with self._cond:
                work.expected = len(pages)
                work.results = dict(enumerate(pages))
            self._conclude(work, engine=engine)
            return
        count = 0
        try:
            opened = pipeline.open_pages(self.ctx, job, self.engine.max_side)
            prepare = getattr(self.engine, "prepare_page", None)
            with contextlib.closing(opened):  # the file is closed however the loop ends
                for page in opened:
                    work.total = page.count
                    if prepare is not None and page.text is None:
                        page = prepare(page)  # e.g. encoded here, off the request path
                    with self._cond:
                        queued = self._pages.put(_Item(work, page), cancel=lambda: (
                            self._stopping or self._paused or work.discarded
                            or bool(work.transient or work.error)))
                        dropped = self._stopping or self._paused or work.discarded
                        if dropped:
                            work.discarded = True
                            # Put back here, not left to the pause drain: a resume before
                            # the drain ran left the job running, unread, until the next
                            # start. Only while it is still this preparer's to put back.
                            mine = self._works.get(job.id) is work
                            if mine:
                                del self._works[job.id]
                        elif queued:
                            work.in_flight += 1
                    if dropped:
                        if mine:
                            self._put_back(work)
                        return
                    if not queued:
                        break  # the engine gave up on an earlier page: open no more
                    count += 1
            with self._cond:
                work.expected = count
        except Exception as exc:
            error, transient = pipeline.open_error(job, exc)
            with self._cond:
                work.error = work.error or error
                work.transient = work.transient or transient
        if work.complete():  # its last page was read before the file's end was seen
            self._conclude(work)

    def _drain_for_pause(self) -> bool:
        """With the lock held while paused: drop unread pages and put their jobs back.

        Returns True when the engine's memory is to be released now, by the caller and
        outside the lock.
        """
        if self._in_engine or self._preparing:
            return False  # a reader or another preparer is inside a file: wait for it
        works = list(self._works.values())
        self._works.clear()
        for work in works:
            work.discarded = True
            self._put_back(work)
        self._pages.drain()  # their works were put back above
        if self._released:
            return False
        self._released = self._releasing = True
        return True

    def _release_engine(self) -> None:
        self.rate.mark_start()  # its next pages may wait for it to start again
        try:
            self.engine.release()
        except Exception:
            log.exception("the engine could not release its memory")
        finally:
            with self._cond:
                self._releasing = False
                self._cond.notify_all()

    def _put_back(self, work: _Work) -> None:
        for job in [work.job, *work.followers]:
            try:
                self.ctx.jobs.release(job.id)
            except OcrwatchError as exc:
                log.warning("could not put %s back in the queue: %s", job.display, exc)

    # -- the readers -----------------------------------------------------------------
    def _read_step(self) -> None:
        with self._cond:
            item = self._pages.get(timeout=1.0,
                                   ready=lambda: not self._paused and not self._releasing)
            if item is None:
                return  # stopping (the queue is closed), or nothing to read for a second
            self._in_engine += 1
        # In a call of its own, so that no page's pixels stay referenced from this frame
        # while the thread waits for the next page (a big page held its memory for as
        # long as the daemon was idle).
        big = memory.big(item.page.size)
        self._read(item)
        del item
        if big:
            memory.give_back()

    def _read(self, item: _Item) -> None:
        work = item.work
        live = not work.discarded
        warm = self.rate.warm()
        began = time.monotonic()
        results, unavailable = (pipeline.read(self.engine, self.ctx.engine_name, [item.page],
                                              self.ctx.scan, self._thumbnail(work.job))
                                if live else ([], None))
        self.rate.add(sum(1 for r in results if not r.error))
        asked = live and unavailable is None and item.page.text is None and not item.page.blank
        self.ctx.events.publish(PageRead(self.ctx.engine_name,
                                         time.monotonic() - began if asked else None, results))
        complete = False
        with self._cond:
            self._in_engine -= 1
            self._pages.done()
            if live:
                if unavailable is not None:
                    # The engine cannot work at all: the file is not at fault, so it goes
                    # back to the queue with backoff instead of failing.
                    work.transient = unavailable
                (result,) = results
                work.results[item.page.index] = result
                work.in_flight -= 1
                complete = work.complete()
            if work.discarded:
                work.in_flight -= 1
            self._cond.notify_all()
        if complete:
            self._conclude(work)
        if live and unavailable is None:
            # Its result, the file's finishing included when it was the last, paces the
            # rate and the ETA; a page the engine could not take at all says nothing.
            self.rate.took(warm=warm)

    def _thumbnail(self, job: Job) -> Callable[[Page], None]:
        """Draws the thumbnail of ``job``'s page again once its reading turned it."""
        def save(page: Page) -> None:
            if job.sha256:
                self.ctx.thumbs.save(job.sha256, page.index + 1, page.image, again=True)
        return save

    # -- finishing -------------------------------------------------------------------
    def _conclude(self, work: _Work, *, engine: str | None = None) -> None:
        """Finish a file from whichever thread saw its last page: a reader, or a preparer
        whose file's pages were all read before it reached the file's end."""
        try:
            self._finish(work, engine=engine)
        except Exception:
            # A reader or preparer must outlive any one file: if even recording the
            # failure failed, the job stays running until the next start.
            log.exception("could not record the outcome of %s", work.job.display)

    def _finish(self, work: _Work, *, engine: str | None = None) -> None:
        with self._cond:
            if work.finished:
                return
            work.finished = True
            # Only if it is still this read: a file changed while it was read may be
            # read again (a new work for the same job) before this one is finished.
            if self._works.get(work.job.id) is work:
                del self._works[work.job.id]
            jobs = [work.job, *work.followers]
            results, expected = dict(work.results), work.expected
            self._finishing += 1
            # Under the lock, so that no "batch done" comes between this file leaving the
            # works and its outcome being recorded (listeners must be quick).
            self.ctx.events.publish(OutcomeStarted())
        try:
            verdict = pipeline.judge(results, expected, error=work.error,
                                     transient=work.transient)
            md = outcome.finish(self.ctx, jobs, verdict, engine)
            if md is not None:
                with self._cond:
                    self.last_result = md
        finally:
            with self._cond:
                self._finishing -= 1
            self.ctx.events.publish(OutcomeEnded())
            self.wake()
