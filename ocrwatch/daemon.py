"""The daemon: the wiring of watcher, queue, scheduler and engine.

- the watcher (ocrwatch/watch.py) turns events into finished files, which
  :func:`ocrwatch.pipeline.consider` records as queued jobs;
- the scheduler (ocrwatch/scheduler.py) runs the pipeline's stages on its threads;
- the SQLite queue (ocrwatch/jobs.py) is the only state that matters: a crash loses
  nothing.
docs/architecture.md draws the whole.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ocrwatch import __version__, pipeline
from ocrwatch.config import Config
from ocrwatch.db import encode_path
from ocrwatch.engines import Choice, Engine, choose, create
from ocrwatch.errors import OcrwatchError
from ocrwatch.follow import Follower
from ocrwatch.hooks import AfterDone
from ocrwatch.indexhealth import IndexGuard, open_index
from ocrwatch.jobfiles import Seen
from ocrwatch.jobs import JobQueue
from ocrwatch.languages import locale_note
from ocrwatch.lifecycle import Lifecycle
from ocrwatch.outputs import PdfMaker
from ocrwatch.pipeline import Context
from ocrwatch.scheduler import Scheduler
from ocrwatch.settle import Settler
from ocrwatch.status import EngineStatus, Reading, Status
from ocrwatch.status_facts import IndexFacts, SettingWriter, StatusReader
from ocrwatch.thumbs import Thumbnails
from ocrwatch.watch import Watcher

log = logging.getLogger(__name__)


class Daemon:
    """Owns the database, the engine, the scheduler and the watcher. Start once, close once."""

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
        # Checked and, when damaged, set aside and rebuilt from the sidecars by the daemon
        # proper (``ocrwatch run`` holds the index's lock); watched while it runs.
        self.db, self.index_note = open_index(config, repair=watch)
        self.index_guard = IndexGuard(self.db)
        self.jobs = JobQueue(self.db)
        self.thumbs = Thumbnails(config.cache_dir / "thumbnails")
        self.follower = Follower(self.jobs, config, self.thumbs)
        self._web: Any = None  # the search page's server, started on first use
        self._web_lock = threading.Lock()
        # Status and pause answer from memory while the index is locked (status_facts).
        self._facts = (StatusReader(config.database)
                       if str(config.database) != ":memory:" else None)
        self._paused_flag = SettingWriter(lambda v: self.db.set_setting("paused", v),
                                          "paused")
        if engine is None:
            self.choice = choose(config)
            self.engine: Engine = create(config, self.choice.name)
        else:
            self.choice = Choice(engine.name, "given by the caller")
            self.engine = engine
        # What a page is read with: a language change makes earlier pages stale.
        self.read_with = (f"{self.engine.name} {'+'.join(config.languages)}"
                          if self.engine.name == "tesseract" else self.engine.name)
        self.ctx = Context(
            config, self.jobs, self.choice.name, self.read_with,
            # What happens around the sidecars: the PDF, the original's fate, hooks.
            pdf=PdfMaker(config) if "pdf" in config.outputs else None,
            lifecycle=Lifecycle(config, self.db),
            after=AfterDone(config, self.is_idle),
            follower=self.follower, thumbs=self.thumbs,
        )
        self.scheduler = Scheduler(self.ctx, self.engine,
                                   paused=self.db.get_setting("paused") == "1")
        self._stopping = threading.Event()
        self._watcher: Watcher | None = None
        self._watch = watch
        self._started = False
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------
    def start(self, *, recover: bool = True) -> None:
        """Start the threads. ``recover=False`` when another daemon may own running jobs."""
        if self._started:
            raise OcrwatchError("the daemon was started already")
        self._started = True
        # qpdf (pikepdf) counts every PDF's pages a second time: loaded once here, not
        # inside the first PDF's reading (25-80 ms).
        import pikepdf  # noqa: F401
        if self._watch:
            for folder in self.config.inbox:
                folder.mkdir(parents=True, exist_ok=True)
            pipeline.tidy(self.config)
        if recover:
            self.ctx.lifecycle.recover()
            if self._watch:  # the daemon itself (`add` names its own on_success)
                self.ctx.lifecycle.resume()
        recovered = self.jobs.recover() if recover else 0
        if recovered:
            log.info("%d files were being read when ocrwatch last stopped: reading them again",
                     recovered)
        self.ctx.after.was_done = self._was_done
        self.ctx.after.start()
        self.scheduler.start()
        if self._watch:
            self.index_guard.start()
            settler = Settler(self.config.inbox, self.config.settle_seconds, self.consider,
                              lambda path: pipeline.gone(self.ctx, path),
                              rescan_seconds=self.config.rescan_minutes * 60,
                              follow=self.follower)
            self._watcher = Watcher(settler, observer=self.config.observer)
            self._watcher.start()
        from ocrwatch.secrets_check import exposed_secrets

        for warning in exposed_secrets(self.config):
            log.warning("%s", warning)
        log.info("ocrwatch %s watching %s with the %s engine (%s)%s", __version__,
                 ", ".join(str(p) for p in self.config.inbox), self.choice.name,
                 self.choice.why, "; paused" if self.paused else "")

    def request_stop(self) -> None:
        self._stopping.set()
        self.scheduler.stop()

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
        with self._web_lock:
            web, self._web = self._web, None
        if web is not None:
            web.close()
        if self._watcher is not None:
            self._watcher.stop()
        self.index_guard.close(timeout=10)
        self.scheduler.close()
        self.ctx.after.close()
        self._paused_flag.close()
        if self._facts is not None:
            self._facts.close()
        if self.ctx.pdf is not None:
            self.ctx.pdf.close()
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
        self.scheduler.pause()
        self._paused_flag.set("1")  # saved for the next start as soon as the index can be
        log.info("paused: files are still queued, none is read until resume")

    def resume(self) -> None:
        self.scheduler.resume()
        self._paused_flag.set("0")
        log.info("resumed")

    @property
    def paused(self) -> bool:
        return self.scheduler.paused

    def web_url(self) -> str:
        """The search page's address with its token; the server starts on first use."""
        return str(self._search_server().url)

    def web_launch(self) -> str:
        """What a browser is given to open the page: a private file with a one-time code
        (a command line is readable by every local user, the token must not be on it)."""
        return str(self._search_server().launch_url())

    def _search_server(self) -> Any:
        from ocrwatch.web import SearchServer

        with self._web_lock:
            if self._closed:
                raise OcrwatchError("the daemon is stopping")
            if self._web is None:
                server = SearchServer(self.config.database, self.thumbs,
                                      inbox=self.config.inbox,
                                      follow_symlinks=self.config.follow_symlinks)
                server.start()
                self._web = server
            return self._web

    @property
    def abandoned(self) -> list[str]:
        """Threads close() left in a page, by name."""
        return self.scheduler.abandoned

    def rescan(self) -> None:
        if self._watcher is not None:
            self._watcher.rescan()

    def retry(self, paths: list[str] | None = None, all_failed: bool = False) -> int:
        count = self.jobs.retry(None if all_failed or not paths else
                                [Path(p).expanduser().absolute() for p in paths])
        self.scheduler.wake()
        return count

    # -- discovery (called from the watcher thread and by `ocrwatch add`) -------------
    def consider(self, path: Path) -> Seen | None:
        """A finished file: record it as a job unless its content is already known."""
        seen = pipeline.consider(self.ctx, path)
        if seen is not None and seen is not Seen.UNCHANGED:
            self.scheduler.wake()
        return seen

    def add(self, paths: Iterable[Path]) -> list[Path]:
        """Queue these files (no settle wait) and restrict the readers to them.

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
        self.scheduler.restrict(ids)
        self.scheduler.resume()
        return added

    # -- reporting ---------------------------------------------------------------------
    def reading(self) -> tuple[Reading, ...]:
        """The files whose pages are being read now (``ocrwatch add`` shows progress)."""
        return self.scheduler.reading()

    def _was_done(self, source: Path, md: Path | None) -> bool:
        """Whether the index holds ``source`` (or its Markdown, moved with it) as done."""
        keys = [encode_path(source)] + ([encode_path(md)] if md is not None else [])
        marks = ", ".join("?" * len(keys))
        return bool(self.db.query(
            f"SELECT 1 FROM jobs WHERE state = 'done' AND (path IN ({marks}) "
            f"OR md_path IN ({marks})) LIMIT 1", (*keys, *keys)))

    def is_idle(self) -> bool:
        """Nothing in hand and nothing queued (the batch notification waits for this)."""
        if self.scheduler.busy():
            return False
        counts = self.jobs.counts()
        return counts["queued"] == 0 and counts["running"] == 0

    def status(self) -> Status:
        midnight = _dt.datetime.combine(_dt.date.today(), _dt.time()).timestamp()
        if self._facts is not None:
            facts, counts_note = self._facts.read(midnight)
        else:
            facts, counts_note = IndexFacts(self.jobs.counts(), self.jobs.pages_since(midnight),
                                           self.jobs.last_result(),
                                           tuple(self.jobs.failures(10)),
                                           self.jobs.prepared_since(midnight)), None
        counts = {"queued": 0, "running": 0, "done": 0, "failed": 0, **facts.counts}
        prepared = facts.prepared
        busy = self.scheduler.busy()
        if self.stopping:
            state = "stopping"
        elif self.paused:
            state = "paused"
        elif busy or counts["running"]:
            state = "working"
        else:
            state = "idle"
        try:
            engine_facts = dict(self.engine.describe())
        except Exception as exc:  # status must answer even when the engine is sick
            engine_facts = {"state": f"error: {exc}"}
        last_result = self.scheduler.last_result or facts.last_result
        return Status(
            state=state, paused=self.paused,
            queued=counts["queued"], running=counts["running"], done=counts["done"],
            failed=counts["failed"], pages_today=facts.pages_today,
            turned_today=prepared[0], blank_today=prepared[1],
            engine=EngineStatus.from_dict(
                {**engine_facts, "name": self.choice.name, "why": self.choice.why}),
            last_result=str(last_result) if last_result else None,
            recent_failures=facts.failures, counts_note=counts_note,
            inbox=tuple(str(p) for p in self.config.inbox),
            database=str(self.config.database),
            log_file=str(self.log_file) if self.log_file else None,
            pid=os.getpid(), version=__version__,
            language_note=locale_note(self.config.languages)
            if self.choice.name == "tesseract" else None,
            reading=self.reading(), languages=tuple(self.config.languages),
            index_note=self.index_guard.note or self.index_note,
            pages_per_second=self.scheduler.rate.per_second(),
            kept=tuple(self.jobs.kept(10)),
        )
