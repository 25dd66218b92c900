"""The daemon: files in, pages through the engine, sidecars and index out.

Threads, each with one job:
- the watcher (watchdog observer + settler) turns events into finished files and
  records them as queued jobs;
- the preparer claims queued jobs and decodes their pages into the batcher, keeping
  only a bounded number of decoded pages in memory;
- ``policy.concurrency`` recognizer threads take batches from the batcher, run the
  engine, and finish a job (sidecars, index, done) once all its pages are read.
The SQLite queue is the only state that matters: a crash loses nothing.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

from ocrwatch import __version__, memory
from ocrwatch.batching import Batcher
from ocrwatch.config import Config
from ocrwatch.db import Database, is_disk_full
from ocrwatch.domain import Job, Page, PageText
from ocrwatch.engines import Choice, Engine, choose, create
from ocrwatch.errors import EngineUnavailable, InputError, OcrwatchError, TransientError
from ocrwatch.follow import Follower
from ocrwatch.hooks import AfterDone, Finished
from ocrwatch.index import cached_result, store_result
from ocrwatch.jobs import JobQueue, Seen, file_sha256
from ocrwatch.languages import locale_note
from ocrwatch.lifecycle import Lifecycle, output_folder
from ocrwatch.outputs import PdfMaker
from ocrwatch.pages import Limits, check_size, iter_pages
from ocrwatch.safeopen import (
    NotRegular,
    open_failure,
    open_file_beneath,
    original_mode,
    source_root,
)
from ocrwatch.sidecar import (
    choose_stem,
    pdf_path,
    remove_stale_temps,
    sidecar_paths,
    write_sidecars,
)
from ocrwatch.status import EngineStatus, PageRate, Reading, Status
from ocrwatch.textutil import text_to_markdown
from ocrwatch.thumbs import Thumbnails
from ocrwatch.watch import Watcher

log = logging.getLogger(__name__)

STOP_GRACE_SECONDS = 3.0  # how long close() waits for the pages in hand


def _still_there(fh: BinaryIO, path: Path) -> os.stat_result:
    """The open file's status; raises if its name no longer leads to it."""
    st = os.fstat(fh.fileno())
    if st.st_nlink == 0:
        if os.path.lexists(path):  # replaced by another file: that one is read later
            raise TransientError("the file was replaced while it was being read")
        raise InputError("the file was deleted while it was being read")
    return st


@dataclass(eq=False)
class _Work:
    """A job whose pages are being read."""

    job: Job
    results: dict[int, PageText] = field(default_factory=dict)
    expected: int | None = None  # known once every page was prepared
    total: int | None = None  # the file's page count, read first (for status and progress)
    in_flight: int = 0  # pages handed to the batcher and not yet read
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


def _valid_text(page: PageText) -> PageText:
    """The page with lone surrogates replaced: neither UTF-8 files nor SQLite take them.

    (A JSON reply may carry them as escapes; so may a file name in the text.)
    """

    def fix(text: str) -> str:
        return text.encode("utf-8", "replace").decode("utf-8")

    if fix(page.markdown) == page.markdown and fix(page.text) == page.text:
        return page
    return replace(page, markdown=fix(page.markdown), text=fix(page.text))


class Daemon:
    """Owns the database, the engine and the worker threads. Start once, close once."""

    def __init__(
        self,
        config: Config,
        *,
        engine: Engine | None = None,
        watch: bool = True,
        log_file: Path | None = None,
    ) -> None:
        self.config = config
        self.log_file = log_file
        self.db = Database(config.database, origin=config.origin("database"))
        self.jobs = JobQueue(self.db)
        self.thumbs = Thumbnails(config.cache_dir / "thumbnails")
        self.follower = Follower(self.jobs, config, self.thumbs)
        self._web: Any = None  # the search page's server, started on first use
        if engine is None:
            self.choice = choose(config)
            self.engine: Engine = create(config, self.choice.name)
        else:
            self.choice = Choice(engine.name, "given by the caller")
            self.engine = engine
        # What a page is read with: a language change makes earlier pages stale.
        self.read_with = (f"{self.engine.name} {'+'.join(config.languages)}"
                          if self.engine.name == "tesseract" else self.engine.name)
        policy = self.engine.policy
        self._batcher: Batcher[_Item] = Batcher(
            policy, tokens=lambda item: 0 if item.page.text is not None  # read by no engine
            else policy.cost(*item.page.size)
        )
        # Enough decoded pages to keep every batch slot busy, and no more: a 500-page
        # PDF must not sit in memory whole.
        self._max_waiting = max(2, 2 * policy.max_pages * policy.concurrency)
        self._cond = threading.Condition()
        self._works: dict[int, _Work] = {}
        self._waiting = 0  # pages decoded and not yet read
        self._batches_running = 0
        self._paused = self.db.get_setting("paused") == "1"
        self._released = self._paused
        self._stopping = threading.Event()
        self._only: set[int] | None = None
        self._threads: list[threading.Thread] = []
        self.abandoned: list[str] = []  # threads close() left in a page, by name
        self._watcher: Watcher | None = None
        self._watch = watch
        self._started = False
        self._closed = False
        self.pages_done = 0
        self.rate = PageRate()
        self.last_result: Path | None = None
        # What happens around the sidecars: the PDF, the original's fate, hooks.
        self._pdf = PdfMaker(config) if "pdf" in config.outputs else None
        self._lifecycle = Lifecycle(config, self.db)
        self._after = AfterDone(config, self.is_idle)
        self._retired: set[Path] = set()  # originals moved or deleted on purpose

    # -- lifecycle -------------------------------------------------------------------
    def start(self, *, recover: bool = True) -> None:
        """Start the threads. ``recover=False`` when another daemon may own running jobs."""
        if self._started:
            raise OcrwatchError("the daemon was started already")
        self._started = True
        if self._watch:
            for folder in self.config.inbox:
                folder.mkdir(parents=True, exist_ok=True)
            self._remove_stale_temps()
        if recover:
            self._lifecycle.recover()
        recovered = self.jobs.recover() if recover else 0
        if recovered:
            log.info("%d files were being read when ocrwatch last stopped: reading them again",
                     recovered)
        self._after.start()
        self._spawn("ocrwatch-prepare", self._prepare_loop)
        for n in range(self.engine.policy.concurrency):
            self._spawn(f"ocrwatch-read-{n}", self._recognize_loop)
        if self._watch:
            self._watcher = Watcher(
                self.config.inbox, self.config.settle_seconds, self.consider, self._gone,
                observer=self.config.observer,
                rescan_seconds=self.config.rescan_minutes * 60,
                gone_tree=self.follower.gone_tree, moved=self.follower.moved,
                moved_tree=self.follower.moved_tree, prune=self.follower.missing,
            )
            self._watcher.start()
        log.info("ocrwatch %s watching %s with the %s engine (%s)%s", __version__,
                 ", ".join(str(p) for p in self.config.inbox), self.choice.name,
                 self.choice.why, "; paused" if self._paused else "")

    def _remove_stale_temps(self) -> None:
        """Half-written sidecars of a process killed mid-write: never shown, now removed."""
        folders = [*self.config.inbox, self.config.output_dir, self.config.failed_dir,
                   self.config.archive_dir]
        try:
            removed = remove_stale_temps([f for f in folders if f is not None and f.is_dir()])
        except OSError as exc:
            log.warning("could not look for leftover temporary files: %s", exc)
            return
        if removed:
            log.info("removed %d temporary files left by an earlier crash", removed)

    def _spawn(self, name: str, target: Any) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def request_stop(self) -> None:
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def wait_stopped(self, timeout: float | None = None) -> bool:
        return self._stopping.wait(timeout)

    def close(self) -> None:
        """Stop the threads, put unfinished jobs back in the queue, free the engine."""
        if self._closed:
            return
        self._closed = True
        self.request_stop()
        with self._cond:
            web, self._web = self._web, None
        if web is not None:
            web.close()
        if self._watcher is not None:
            self._watcher.stop()
        # A page in hand (a giant one can take Tesseract half a minute, and a decoder
        # cannot be interrupted) is abandoned after a short grace: its job goes back to
        # the queue and is read again at the next start.
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self.abandoned = [t.name for t in self._threads if t.is_alive()]
        if self.abandoned:
            log.warning("stopping without waiting for the page in hand (%s); it is read "
                        "again at the next start", ", ".join(self.abandoned))
        with self._cond:
            works = list(self._works.values())
            self._works.clear()
        for work in works:
            self._put_back(work)
        self._after.close()
        if self._pdf is not None:
            self._pdf.close()
        self.engine.close()
        self.db.close()

    def __enter__(self) -> Daemon:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- control ---------------------------------------------------------------------
    def pause(self) -> None:
        """Finish the batch in flight, then read nothing more; keep watching and queueing."""
        self.db.set_setting("paused", "1")
        with self._cond:
            self._paused = True
            self._cond.notify_all()
        log.info("paused: files are still queued, none is read until resume")

    def resume(self) -> None:
        self.db.set_setting("paused", "0")
        with self._cond:
            self._paused = False
            self._released = False
            self._cond.notify_all()
        log.info("resumed")

    @property
    def paused(self) -> bool:
        return self._paused

    def web_url(self) -> str:
        """The search page's address with its token; the server starts on first use."""
        from ocrwatch.web import SearchServer

        with self._cond:
            if self._closed:
                raise OcrwatchError("the daemon is stopping")
            if self._web is None:
                server = SearchServer(self.config.database, self.thumbs,
                                      inbox=self.config.inbox)
                server.start()
                self._web = server
            return str(self._web.url)

    def rescan(self) -> None:
        if self._watcher is not None:
            self._watcher.rescan()

    def retry(self, paths: list[str] | None = None, all_failed: bool = False) -> int:
        count = self.jobs.retry(None if all_failed or not paths else
                                [Path(p).expanduser().absolute() for p in paths])
        self._wake()
        return count

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # -- discovery (called from the watcher thread and by `ocrwatch add`) -------------
    def consider(self, path: Path) -> Seen | None:
        """A finished file: record it as a job unless its content is already known."""
        path = path.absolute()
        if path.is_symlink() and not self.config.follow_symlinks:
            self._link(path)
            return None
        try:
            # Opened once, no link followed below the inbox; stat, size check and hash all
            # go through this one handle.
            with self._open(path) as fh:
                st = os.fstat(fh.fileno())
                if self.jobs.is_current(path, st.st_size, st.st_mtime_ns):
                    return Seen.UNCHANGED
                new = self.jobs.known(path) is None
                if new and self.follower.relocated(path, st):
                    return Seen.UNCHANGED  # the same inode, moved while nothing watched
                check_size(st.st_size, Limits.from_config(self.config))  # before hashing
                sha = file_sha256(fh)
                if new and self.follower.relocated(path, st, sha):
                    return Seen.UNCHANGED  # the same content, moved while nothing watched
        except (FileNotFoundError, NotRegular):
            return None  # gone again before we looked, or not a file: nothing to do
        except OSError as exc:
            self.jobs.reject(path, open_failure(exc))
            return None
        except InputError as exc:  # a link below the inbox, a file over max_file_mb
            self.jobs.reject(path, str(exc))
            return None
        try:
            seen = self.jobs.offer(path, st.st_size, st.st_mtime_ns, sha, dev=st.st_dev,
                                   inode=st.st_ino)
        except TransientError as exc:
            # Raised on: the watcher keeps the file and offers it again a little later,
            # instead of forgetting it until the next rescan.
            log.warning("could not record %s: %s; will try again", path, exc)
            raise
        if seen is not Seen.UNCHANGED:
            log.info("queued %s (%s)", path, seen.value)
            self._wake()
        return seen

    def _open(self, path: Path) -> contextlib.AbstractContextManager[BinaryIO]:
        return open_file_beneath(
            source_root(path, self.config.inbox, self.config.follow_symlinks), path)

    def _link(self, path: Path) -> None:
        try:
            target = path.resolve(strict=True)
        except (OSError, RuntimeError):
            self.jobs.reject(path, "a symbolic link that loops or points to nothing; "
                                   "remove it or fix its target")
            return
        if any(target.is_relative_to(root.resolve()) for root in self.config.inbox):
            return  # the target is watched itself and read on its own
        self.jobs.reject(path, f"a symbolic link to {target}, outside the watched folders: "
                               "not followed (set follow_symlinks = true to read such links)")

    def _gone(self, path: Path) -> None:
        with self._cond:
            if path.absolute() in self._retired:
                self._retired.discard(path.absolute())
                return  # archived or deleted after reading: its index entry stays
        self.follower.gone(path)

    # -- preparing pages ---------------------------------------------------------------
    def _prepare_loop(self) -> None:
        while not self.stopping:
            try:
                with self._cond:
                    if self._paused:
                        self._drain_for_pause()
                        self._cond.wait(1.0)
                        continue
                    if self._waiting >= self._max_waiting:
                        self._cond.wait(1.0)
                        continue
                job = self._claim()
                if job is None:
                    due = self.jobs.next_due()
                    wait = 1.0 if due is None else max(0.05, min(1.0, due - time.time()))
                    with self._cond:
                        self._cond.wait(wait)
                    continue
                self._prepare(job)
            except Exception:
                # The loop must survive anything; the job itself was handled in _prepare.
                log.exception("unexpected error while preparing pages")
                self._stopping.wait(1.0)

    def _claim(self) -> Job | None:
        try:
            if self._only is not None:
                return self.jobs.claim_among(self._only)
            return self.jobs.claim()
        except TransientError as exc:
            log.warning("cannot take a job: %s", exc)
            return None

    def _prepare(self, job: Job) -> None:
        if job.sha256 is None:
            known = self._identify(job)
            if known is None:
                return
            job = known
        work = _Work(job)
        with self._cond:
            leader = next((w for w in self._works.values()
                           if job.sha256 and w.job.sha256 == job.sha256 and not w.discarded),
                          None)
            if leader is not None:
                leader.followers.append(job)  # identical content: read once
                return
            self._works[job.id] = work
        if job.sha256:
            cached = cached_result(self.db, job.sha256, job.id, self.read_with)
            if cached is not None:
                pages, engine = cached
                with self._cond:
                    work.expected = len(pages)
                    work.results = dict(enumerate(pages))
                self._finish(work, engine=engine)
                return
        count = 0
        try:
            with self._open(job.path) as fh:
                for page in iter_pages(job.path, self.config, self.engine.max_side, fh,
                                       text_layer=True):
                    _still_there(fh, job.path)  # a deleted file is not read to its end
                    work.total = page.count
                    if job.sha256:
                        self.thumbs.save(job.sha256, page.index + 1, page.image)
                    with self._cond:
                        while (self._waiting >= self._max_waiting and not self.stopping
                               and not self._paused):
                            self._cond.wait(0.5)
                        if self.stopping or self._paused or work.discarded:
                            work.discarded = True
                            return  # put back by pause or close
                        if work.transient or work.error:
                            break  # the engine gave up on an earlier page: no use reading more
                        self._batcher.add(_Item(work, page), time.monotonic())
                        work.in_flight += 1
                        self._waiting += 1
                        self._cond.notify_all()
                    count += 1
                st = _still_there(fh, job.path)
                if (st.st_size, st.st_mtime_ns) != (job.size, job.mtime_ns):
                    raise TransientError("the file changed while it was being read")
                with self._cond:
                    work.expected = count
        except InputError as exc:
            with self._cond:
                work.error = str(exc)
        except TransientError as exc:
            with self._cond:
                work.transient = str(exc)
        except MemoryError:
            with self._cond:
                work.error = "not enough memory to decode this file; lower max_pixels"
        except OSError as exc:  # opening it: gone, unreadable
            with self._cond:
                work.error = open_failure(exc)
        except Exception as exc:
            log.exception("cannot read %s", job.display)
            with self._cond:
                work.error = f"unexpected error while decoding: {exc.__class__.__name__}: {exc}"
        if work.complete():
            self._finish(work)

    def _identify(self, job: Job) -> Job | None:
        """Hash a retried job that was refused before it was ever hashed (unreadable then).

        Without its size and time on record, the check that the file did not change
        while it was read would fail every time.
        """
        try:
            with self._open(job.path) as fh:
                st = os.fstat(fh.fileno())
                check_size(st.st_size, Limits.from_config(self.config))  # before hashing
                sha = file_sha256(fh)
            self.jobs.refresh(job.id, st.st_size, st.st_mtime_ns, sha)
        except TransientError as exc:
            self.jobs.defer(job.id, str(exc), self.config.max_attempts, job.sha256)
            return None
        except OSError as exc:
            self._fail(job, open_failure(exc))
            return None
        except InputError as exc:
            self._fail(job, str(exc))
            return None
        return replace(job, sha256=sha, size=st.st_size, mtime_ns=st.st_mtime_ns)

    def _drain_for_pause(self) -> None:
        """Called with the lock held while paused: put unread jobs back, free the GPU."""
        if self._batches_running:
            return
        for work in list(self._works.values()):
            work.discarded = True
            del self._works[work.job.id]
            self._put_back(work)
        while (batch := self._batcher.take(time.monotonic(), flush=True)) is not None:
            self._waiting -= len(batch)
        if not self._released:
            self._released = True
            try:
                self.engine.release()
            except Exception:
                log.exception("the engine could not release its memory")

    def _put_back(self, work: _Work) -> None:
        for job in [work.job, *work.followers]:
            try:
                self.jobs.release(job.id)
            except OcrwatchError as exc:
                log.warning("could not put %s back in the queue: %s", job.display, exc)

    # -- reading pages -----------------------------------------------------------------
    def _recognize_loop(self) -> None:
        while True:
            with self._cond:
                batch = None
                while batch is None:
                    if self.stopping:
                        return
                    if not self._paused:
                        batch = self._batcher.take(time.monotonic())
                        if batch is not None:
                            break
                    deadline = self._batcher.next_deadline()
                    wait = 1.0 if deadline is None else deadline - time.monotonic()
                    self._cond.wait(max(0.01, min(1.0, wait)))
                self._batches_running += 1
            # In a call of its own, so that no page's pixels stay referenced from this
            # frame while the thread waits for the next batch (a big page held its
            # memory for as long as the daemon was idle).
            big = any(memory.big(i.page.size) for i in batch)
            self._run_batch(batch)
            del batch
            if big:
                memory.give_back()

    def _run_batch(self, batch: list[_Item]) -> None:
        items = [i for i in batch if not i.work.discarded]
        results, unavailable = self._read(items) if items else ([], None)
        self.rate.add(sum(1 for r in results if not r.error))
        done: list[_Work] = []
        with self._cond:
            self._batches_running -= 1
            self._waiting -= len(batch)
            if unavailable is not None:
                # The engine cannot work at all: the files are not at fault, so they
                # go back to the queue with backoff instead of failing.
                for item in items:
                    item.work.transient = unavailable
            for item, result in zip(items, results, strict=True):
                item.work.results[item.page.index] = result
                item.work.in_flight -= 1
                if item.work.complete() and item.work not in done:
                    done.append(item.work)
            for item in batch:
                if item.work.discarded:
                    item.work.in_flight -= 1
            self._cond.notify_all()
        for work in done:
            try:
                self._finish(work)
            except Exception:
                # A reader thread must outlive any one file: if even recording the
                # failure failed, the job stays running until the next start.
                log.exception("could not record the outcome of %s", work.job.display)

    def _read(self, items: list[_Item]) -> tuple[list[PageText], str | None]:
        """Every page's result; pages that need no engine (blank, or taken from a PDF's
        own text layer) are answered here, the rest by the engine."""
        given = {n: PageText(markdown=text_to_markdown(i.page.text) if i.page.text else "",
                             text=i.page.text.strip() + "\n" if i.page.text else "")
                 for n, i in enumerate(items) if i.page.text is not None}
        rest = [i for n, i in enumerate(items) if n not in given]
        read, unavailable = self._recognize(rest) if rest else ([], None)
        answers = iter(read)
        return [given[n] if n in given else next(answers) for n in range(len(items))], \
            unavailable

    def _recognize(self, items: list[_Item]) -> tuple[list[PageText], str | None]:
        """The engine's results, and the reason when the engine cannot work at all."""
        try:
            results = self.engine.recognize([i.page for i in items])
            if len(results) != len(items):
                raise OcrwatchError(f"the engine returned {len(results)} results for "
                                    f"{len(items)} pages")
            return results, None
        except EngineUnavailable as exc:
            log.error("the %s engine cannot read: %s", self.choice.name, exc)
            reason = f"the {self.choice.name} engine is unavailable: {exc}"
            return [PageText("", "", error=reason) for _ in items], reason
        except Exception as exc:
            log.exception("the %s engine failed on a batch", self.choice.name)
            reason = str(exc) if isinstance(exc, OcrwatchError) else f"engine error: {exc}"
            return [PageText("", "", error=reason) for _ in items], None

    # -- finishing ---------------------------------------------------------------------
    def _finish(self, work: _Work, *, engine: str | None = None) -> None:
        with self._cond:
            if work.finished:
                return
            work.finished = True
            # Only if it is still this read: a file changed while it was read may be
            # read again (a new work for the same job) before this one is finished.
            if self._works.get(work.job.id) is work:
                del self._works[work.job.id]
            followers = list(work.followers)
            self._after.hold()  # no "batch done" while this outcome is being recorded
        jobs = [work.job, *followers]
        try:
            if work.transient:
                for job in jobs:
                    again = self.jobs.defer(job.id, work.transient, self.config.max_attempts,
                                            job.sha256)
                    log.warning("%s: %s (%s)", job.display, work.transient,
                                "will retry" if again else "giving up")
                return
            if work.error:
                for job in jobs:
                    self._fail(job, work.error)
                return
            assert work.expected is not None
            pages = [work.results[i] for i in range(work.expected)]
            bad = [(i, p.error) for i, p in enumerate(pages, 1) if p.error]
            if bad:
                i, reason = bad[0]
                where = f"page {i} of {len(pages)}" if len(pages) > 1 else "the page"
                for job in jobs:
                    self._fail(job, f"{where} could not be read: {reason}")
                return
            for job in jobs:
                self._publish(job, pages, engine or self.choice.name)
        except Exception as exc:
            log.exception("could not finish %s", work.job.display)
            # Retried with backoff and given up after max_attempts: putting it straight
            # back would read it again at once, forever, if the error is not passing.
            reason = f"unexpected error while saving the result: {exc.__class__.__name__}: {exc}"
            for job in jobs:
                try:
                    self.jobs.defer(job.id, reason, self.config.max_attempts, job.sha256)
                except OcrwatchError as again:
                    log.warning("could not put %s back in the queue: %s", job.display, again)
        finally:
            self._after.release()
            self._wake()

    def _fail(self, job: Job, reason: str) -> None:
        log.warning("failed: %s: %s", job.display, reason)
        if not self.jobs.fail(job.id, reason, job.sha256):
            return  # the file changed or went away meanwhile: this failure is moot
        self._after.failed(job.path, reason)
        if self.config.failed_dir is not None:
            from ocrwatch.failed import move_failed

            move_failed(job.path, reason, self.config)

    def _publish(self, job: Job, pages: list[PageText], engine: str) -> None:
        folder = output_folder(self.config, job.path)
        pages = [_valid_text(p) for p in pages]
        pdf: Path | None = None
        try:
            stem = choose_stem(job.path, folder, self.jobs.sidecars_of_others(job.id),
                               self.jobs.own_sidecars(job.id))
            self.jobs.reserve_sidecars(job.id, *sidecar_paths(stem))
            prepared = []
            if self._pdf is not None:
                pdf = pdf_path(stem)
                pages, tmp = self._pdf.make(job.path, pages, pdf)
                if tmp is None:
                    pdf = None  # could not be made: said in the page's warnings
                else:
                    prepared.append((tmp, pdf))
            source = source_root(job.path, self.config.inbox, self.config.follow_symlinks)
            md, txt = write_sidecars(stem, pages, tuple(self.config.outputs), prepared,
                                     root=self.config.output_dir or source,
                                     original_mode=original_mode(job.path, source))
            stored = store_result(self.db, job.id, pages, engine=engine, md_path=md,
                                  txt_path=txt, sha256=job.sha256, read_with=self.read_with)
            if not stored:
                # The content changed (it is queued again) or the file is gone: then
                # these sidecars belong to nothing.
                if not self.db.query("SELECT 1 FROM jobs WHERE id = ?", (job.id,)):
                    for path in (md, txt, pdf):
                        if path is not None:
                            path.unlink(missing_ok=True)
                log.info("%s changed or went away while it was read: result dropped",
                         job.display)
                return
        except TransientError as exc:
            again = self.jobs.defer(job.id, str(exc), self.config.max_attempts, job.sha256)
            log.warning("%s: %s (%s)", job.display, exc, "will retry" if again else "giving up")
            return
        except InputError as exc:
            self._fail(job, str(exc))
            return
        except OSError as exc:
            if is_disk_full(exc):
                self.jobs.defer(job.id, "the disk is full", self.config.max_attempts,
                                job.sha256)
                return
            raise
        result = md or txt or pdf
        with self._cond:
            self.pages_done += len(pages)
            self.last_result = result
        log.info("done: %s (%d page%s) -> %s", job.display, len(pages),
                 "" if len(pages) == 1 else "s", result.name if result else "")
        self._after_success(job, md, txt, pdf, len(pages))

    def _after_success(self, job: Job, md: Path | None, txt: Path | None, pdf: Path | None,
                       pages: int) -> None:
        """on_success (keep, archive, delete), then on_done and the batch count."""
        original: Path | None = job.path
        if self.config.on_success != "keep":
            with self._cond:
                self._retired.add(job.path)
            try:
                # The order tells "delete" which result stands for the file: PDF, .md, .txt.
                outcome = self._lifecycle.finish(job.id, job.path,
                                                 [p for p in (txt, md, pdf) if p is not None])
            except (OSError, OcrwatchError) as exc:
                # The result is safe; the original stays where it is and is not read again.
                log.warning("%s is done but could not be %s: %s", job.display,
                            "archived" if self.config.on_success == "archive" else "deleted",
                            exc)
                outcome = None
            if outcome is not None:
                original = outcome.original
                md, txt, pdf = (outcome.sidecars.get(p, p) if p else None for p in (md, txt, pdf))
                with self._cond:
                    if md is not None:
                        self.last_result = md
        self._after.done(Finished(job.path, original, md, txt, pdf, pages))

    # -- one-shot use (`ocrwatch add`) -------------------------------------------------
    def add(self, paths: Iterable[Path]) -> list[Path]:
        """Queue these files (no settle wait) and restrict the workers to them.

        They are read even when the pause flag is set: ``ocrwatch add`` is an explicit
        request, and waiting for a resume would hang it. The flag itself stays set.
        """
        added: list[Path] = []
        ids: set[int] = set()
        for path in paths:
            seen = self.consider(path)
            job = self.jobs.known(path.absolute())
            if job is not None:
                if seen is Seen.UNCHANGED and job.state == "failed":
                    self.jobs.retry([job.path])
                ids.add(job.id)
                added.append(job.path)
        with self._cond:
            self._only = ids
            self._paused = self._released = False
            self._cond.notify_all()
        return added

    def is_idle(self) -> bool:
        with self._cond:
            busy = bool(self._works) or self._batches_running > 0 or len(self._batcher) > 0
        if busy:
            return False
        counts = self.jobs.counts()
        return counts["queued"] == 0 and counts["running"] == 0

    # -- reporting ---------------------------------------------------------------------
    def status(self) -> Status:
        counts = self.jobs.counts()
        midnight = _dt.datetime.combine(_dt.date.today(), _dt.time()).timestamp()
        with self._cond:
            busy = bool(self._works) or self._batches_running > 0
            last = self.last_result
        if self.stopping:
            state = "stopping"
        elif self._paused:
            state = "paused"
        elif busy or counts["running"]:
            state = "working"
        else:
            state = "idle"
        try:
            engine_facts = dict(self.engine.describe())
        except Exception as exc:  # status must answer even when the engine is sick
            engine_facts = {"state": f"error: {exc}"}
        last_result = last or self.jobs.last_result()
        return Status(
            state=state, paused=self._paused,
            queued=counts["queued"], running=counts["running"], done=counts["done"],
            failed=counts["failed"], pages_today=self.jobs.pages_since(midnight),
            engine=EngineStatus.from_dict(
                {**engine_facts, "name": self.choice.name, "why": self.choice.why}),
            last_result=str(last_result) if last_result else None,
            recent_failures=tuple(self.jobs.failures(10)),
            inbox=tuple(str(p) for p in self.config.inbox),
            database=str(self.config.database),
            log_file=str(self.log_file) if self.log_file else None,
            pid=os.getpid(), version=__version__,
            reading=self.reading(), languages=tuple(self.config.languages),
            language_note=locale_note(self.config.languages)
            if self.choice.name == "tesseract" else None,
            pages_per_second=self.rate.per_second(),
        )

    def reading(self) -> tuple[Reading, ...]:
        """The files whose pages are being read now, with pages read and in all."""
        with self._cond:
            return tuple(Reading(w.job.display, len(w.results), w.total)
                         for w in self._works.values() if not w.discarded)
