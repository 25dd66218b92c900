"""The daemon: the wiring of watcher, queue, scheduler and engine.

- the watcher (ocrwatch/intake/watch.py) turns events into finished files, which
  :func:`ocrwatch.pipeline.consider` records as queued jobs;
- the scheduler (ocrwatch/scheduler.py) runs the pipeline's stages on its threads;
- the SQLite queue (ocrwatch/store/jobs.py) is the only state that matters: a crash loses
  nothing.
docs/architecture.md draws the whole.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from ocrwatch import outcome, pipeline
from ocrwatch.config import Config
from ocrwatch.config import reload as reloading
from ocrwatch.context import Context, scan_for
from ocrwatch.core.errors import DaemonError, OcrwatchError, StateError
from ocrwatch.core.events import Events
from ocrwatch.core.progress import PageCounts, Progress, Waiting, estimate
from ocrwatch.core.status import EngineStatus, Reading, Status
from ocrwatch.core.version import __version__
from ocrwatch.engines import Engine, registry
from ocrwatch.engines.registry import Choice, choose, create
from ocrwatch.engines.vllm.messages import VllmFigures
from ocrwatch.fs.safeopen import remember_roots
from ocrwatch.hooks.runner import AfterDone
from ocrwatch.indexhealth import IndexGuard, open_index
from ocrwatch.intake.follow import Follower
from ocrwatch.intake.inbox_files import Ignore
from ocrwatch.intake.settle import Settler
from ocrwatch.intake.watch import Watcher
from ocrwatch.metrics.collector import DaemonCollector
from ocrwatch.metrics.server import MetricsServer
from ocrwatch.metrics.vllm import VllmCollector
from ocrwatch.pages.thumbs import Thumbnails
from ocrwatch.results.formats import needs_boxes
from ocrwatch.results.lifecycle import Lifecycle
from ocrwatch.results.outputs import PdfMaker, WordBoxes
from ocrwatch.scheduler import Scheduler
from ocrwatch.store.db import display_path
from ocrwatch.store.jobfiles import Seen
from ocrwatch.store.jobs import CRASH_LIMIT, CRASHED_REASON, JobQueue, Recovered
from ocrwatch.store.status_facts import IndexFacts, SettingWriter, StatusReader, read_facts

log = logging.getLogger(__name__)


def word_boxes(config: Config) -> WordBoxes:
    """What finds the words' boxes for the searchable PDF on pages read without them: the
    Tesseract engine, handed to the results from here (they do not import the engines)."""
    from ocrwatch.engines.tesseract import TesseractEngine

    return TesseractEngine(config)


class SearchPage(Protocol):
    """The search page's server as the daemon uses it (:class:`ocrwatch.web.server.
    SearchServer` is one). The front end that starts the daemon passes in what makes it
    (``search_page``): the daemon stays below web/ in the layers."""

    @property
    def url(self) -> str: ...

    def start(self) -> None: ...

    def launch_url(self) -> str: ...

    def close(self) -> None: ...


class Daemon:
    """Owns the database, the engine, the scheduler and the watcher. Start once, close once."""

    def __init__(
        self,
        config: Config,
        *,
        engine: Engine | None = None,
        watch: bool = True,
        log_file: Path | None = None,
        reload_from: Callable[[], Config] | None = None,
        search_page: Callable[[Config, Thumbnails], SearchPage] | None = None,
    ) -> None:
        self.config = config
        # How the configuration was loaded (file, environment, flags): `reload` does it again.
        self._reload_from = reload_from
        self._reload_lock = threading.Lock()
        self.restart_needed: tuple[str, ...] = ()  # keys changed that wait for a restart
        self.config_note: str | None = None  # why the saved config was not reloaded
        self.log_file = log_file
        # Checked and, when damaged, set aside and rebuilt from the sidecars by the daemon
        # proper (``ocrwatch run`` holds the index's lock); watched while it runs.
        self.db, self.index_note = open_index(config, repair=watch)
        self.index_guard = IndexGuard(self.db)
        self.jobs = JobQueue(self.db)
        self.thumbs = Thumbnails(config.cache_dir / "thumbnails")
        self.follower = Follower(self.jobs, config, self.thumbs)
        # The search page's server, made by ``search_page`` and started on first use.
        self._search_page = search_page
        self._web: SearchPage | None = None
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
        self.read_with = registry.read_with(self.engine.name, config)
        policy = self.engine.policy
        self.ctx = Context(
            config, self.jobs, self.choice.name, self.read_with,
            scan=scan_for(config, self.choice.name,
                          policy.preparers if policy.prepare_processes else 0,
                          policy.prepare_nice),
            # What happens around the sidecars: the PDF, the original's fate, hooks.
            pdf=PdfMaker(config, word_boxes) if needs_boxes(config.outputs) else None,
            lifecycle=Lifecycle(config, self.db),
            after=AfterDone(config, self.is_idle),
            follower=self.follower, thumbs=self.thumbs,
        )
        # Once for the daemon: a context replaced later (``outputs`` reloaded) keeps them.
        self.ctx.after.listen(self.ctx.events)
        self.ctx.metrics.listen(self.ctx.events)
        self.scheduler = Scheduler(self.ctx, self.engine,
                                   paused=self.db.get_setting("paused") == "1")
        self._stopping = threading.Event()
        self._page_counts = PageCounts(self._count_pages)
        self._batch_base = 0  # the rate's page total when this stretch of work began
        self._watcher: Watcher | None = None
        self._settler: Settler | None = None
        self._watch = watch
        self._started = False
        self._closed = False
        # Read at each scrape from status(); served only while metrics_address is set.
        self.ctx.metrics.registry.register(DaemonCollector(self.status))
        if hasattr(self.engine, "vllm_figures"):  # vLLM's own figures, from its worker
            self.ctx.metrics.registry.register(VllmCollector(self._vllm_figures))
        server_figures = getattr(self.engine, "server_figures", None)
        if callable(server_figures):  # the remote engine's requests by server
            # Imported here: it brings httpx (about 18 MB) to a daemon that reads locally.
            from ocrwatch.metrics.remote import RemoteCollector

            self.ctx.metrics.registry.register(RemoteCollector(server_figures))
        self._metrics: MetricsServer | None = None
        self._metrics_lock = threading.Lock()

    def _vllm_figures(self) -> VllmFigures | None:
        figures = getattr(self.engine, "vllm_figures", None)
        return figures if isinstance(figures, VllmFigures) else None

    # -- lifecycle -------------------------------------------------------------------
    def start(self, *, recover: bool = True, crashed: bool = False) -> None:
        """Start the threads. ``recover=False`` when another daemon may own running jobs;
        ``crashed``: the last daemon did not stop cleanly (ocrwatch/control/crashes.py)."""
        if self._started:
            raise StateError("the daemon was started already")
        self._started = True
        # qpdf (pikepdf) counts every PDF's pages a second time: loaded once here, not
        # inside the first PDF's reading (25-80 ms).
        import pikepdf  # noqa: F401
        if self._watch:
            for folder in self.config.inbox:
                folder.mkdir(parents=True, exist_ok=True)
            pipeline.tidy(self.config)
            remember_roots([p for p in (*self.config.inbox, self.config.output_dir,
                                        self.config.archive_dir, self.config.failed_dir)
                            if p is not None])
        if recover:
            self.ctx.lifecycle.recover()
            if self._watch:  # the daemon itself (`add` names its own on_success)
                self.ctx.lifecycle.resume()
        recovered = self.jobs.recover(crashed=crashed) if recover else Recovered(0, [])
        if recovered.queued:
            log.info("%d files were being read when ocrwatch last stopped: reading them again",
                     recovered.queued)
        self.ctx.after.was_done = self._was_done
        self.ctx.after.start()
        for job in recovered.crashers:  # once `after` runs: the batch notice counts it
            outcome.fail(self.ctx, job, CRASHED_REASON)
        self.scheduler.start()
        stand_by = getattr(self.engine, "stand_by", None)
        if stand_by is not None and self._watch and not self.paused:
            stand_by()  # the vLLM worker's imports begin now, not at the first file
        if self._watch:
            self._start_watching()
        self._serve_metrics()
        from ocrwatch.config.secrets_check import exposed_secrets

        for warning in exposed_secrets(self.config):
            log.warning("%s", warning)
        log.info("ocrwatch %s watching %s with the %s engine (%s)%s", __version__,
                 ", ".join(str(p) for p in self.config.inbox), self.choice.name,
                 self.choice.why, "; paused" if self.paused else "")

    def _start_watching(self) -> None:
        """The index guard, and the inbox watched: files that settle are recorded, and
        the preparers woken once for each look's files (Settler's ``settled``)."""
        self.index_guard.start()
        settler = Settler(self.config.inbox, self.config.settle_seconds,
                          lambda path: self.consider(path, wake=False),
                          lambda path: pipeline.gone(self.ctx, path),
                          rescan_seconds=self.config.rescan_minutes * 60,
                          follow=self.follower, arriving=self._arriving,
                          ignore=Ignore(self.config.ignore), settled=self.scheduler.wake,
                          intake=self.scheduler.intake)
        self._settler = settler
        self._watcher = Watcher(settler, observer=self.config.observer)
        self._watcher.start()

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
        self._close_metrics()
        if self._watcher is not None:
            self._watcher.stop()
        self.index_guard.close(timeout=10)
        self.scheduler.close()
        if self.ctx.scan is not None:
            self.ctx.scan.close()  # OSD's instances, and the preparing processes
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
    def events(self) -> Events:
        """What happens to each file, for listeners in this process (the tray)."""
        return self.ctx.events

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

    def _search_server(self) -> SearchPage:
        with self._web_lock:
            if self._closed:
                raise StateError("the daemon is stopping")
            if self._search_page is None:
                raise DaemonError("this daemon has no search page")
            if self._web is None:
                server = self._search_page(self.config, self.thumbs)
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

    def reload(self, why: str = "asked") -> dict[str, list[str]]:
        """Load the configuration again and take what can change live; name the rest.

        A configuration that does not load (a typo mid-edit) changes nothing: the
        ConfigError is logged and raised to the caller."""
        if self._reload_from is None:
            raise DaemonError("this daemon was not started from a configuration it can "
                                "load again")
        with self._reload_lock:
            try:
                new = self._reload_from()
            except OcrwatchError as exc:
                log.error("configuration not reloaded (%s): %s; the daemon keeps running "
                          "with the one it has", why, exc)
                self.config_note = (f"the saved config is not valid, so not taken (the "
                                    f"daemon runs with the one it had): {exc}")
                raise
            self.config_note = None
            diff = reloading.changes(self.config, new)
            reloading.apply(self.config, new, diff.now)
            self._apply_live(diff.now)
            self.restart_needed = tuple(sorted({*self.restart_needed, *diff.restart}))
        if diff.now:
            log.info("configuration reloaded (%s): %s now in effect", why, ", ".join(diff.now))
        if "outputs" in diff.now:
            log.info("files read before have the outputs asked for then; `ocrwatch reread "
                     "--outputs` writes the new ones from the stored pages (no page read "
                     "again where the index holds their word boxes)")
        if diff.restart:
            log.warning("configuration reloaded (%s): %s changed but take effect only when "
                        "the daemon starts again (`ocrwatch restart`)",
                        why, ", ".join(diff.restart))
        if not diff:
            log.info("configuration reloaded (%s): nothing changed", why)
        return {"applied": list(diff.now), "restart_needed": list(self.restart_needed)}

    def _apply_live(self, keys: tuple[str, ...]) -> None:
        if "log_level" in keys:
            logging.getLogger().setLevel(self.config.log_level.upper())
        if "outputs" in keys:
            wants_pdf = needs_boxes(self.config.outputs)
            if wants_pdf != (self.ctx.pdf is not None):
                old = self.ctx.pdf
                # The context is frozen: files already in hand finish with the one they got.
                self.ctx = replace(self.ctx, pdf=PdfMaker(self.config, word_boxes)
                                                   if wants_pdf else None)
                self.scheduler.ctx = self.ctx
                if old is not None:
                    old.close()
        if "metrics_address" in keys:
            self._close_metrics()
            self._serve_metrics()
        if self._settler is not None:
            self._settler.settle = self.config.settle_seconds
            if self._settler.ignore is not None:
                self._settler.ignore.patterns = tuple(self.config.ignore)
            self._settler.rescan_seconds = self.config.rescan_minutes * 60
        if keys and self.ctx.after.needed:
            self.ctx.after.start()  # hooks or the batch notice just turned on

    @property
    def metrics_url(self) -> str | None:
        """Where the metrics are served now, or None (off, or the port was taken)."""
        server = self._metrics
        return server.url if server is not None else None

    def _serve_metrics(self) -> None:
        """Serve the metrics at metrics_address; a port taken is logged, not fatal: the
        daemon reads files without its metrics rather than not at all."""
        address = self.config.metrics_address.strip()
        with self._metrics_lock:
            if not address or self._closed or self._metrics is not None:
                return
            try:
                server = MetricsServer(address, self.ctx.metrics.registry)
            except OcrwatchError as exc:
                log.error("%s", exc)
                return
            server.start()
            self._metrics = server

    def _close_metrics(self) -> None:
        with self._metrics_lock:
            server, self._metrics = self._metrics, None
        if server is not None:
            server.close()

    def write_outputs(self) -> dict[str, int]:
        """Outputs asked for since files were read, from the stored text (no page read)."""
        from ocrwatch.rewrite import missing_outputs

        pdf = self.ctx.pdf
        made = (PdfMaker(self.config, word_boxes)
                if pdf is None and needs_boxes(self.config.outputs) else None)
        try:
            written = missing_outputs(self.ctx, pdf or made)
        finally:
            if made is not None:
                made.close()
        return {"files": written.files, "outputs": written.outputs,
                "skipped": written.skipped, "placed": written.placed}

    def reread(self, all_files: bool = False) -> int:
        """Queue again the files read otherwise than now (``all_files``: every file read)."""
        stale = self.jobs.read_otherwise("" if all_files else (self.read_with or ""))
        paths = [j.path for j in stale if j.path.exists()]
        # Read again, not handled again: nothing moves that the first reading left.
        count = self.jobs.retry(paths, asked="keep") if paths else 0
        self.scheduler.wake()
        return count

    # -- discovery (called from the watcher thread and by `ocrwatch add`) -------------
    def _arriving(self, path: Path) -> None:
        """A file is being written or moved into the inbox: an engine that starts slowly
        (the vLLM worker) starts now, while the file settles and its pages are prepared."""
        warm = getattr(self.engine, "warm", None)
        if warm is not None and not self.paused:
            warm()
            if self.ctx.scan is not None:
                self.ctx.scan.warm()  # preparing processes (scan/pool.py) start beside it

    def consider(self, path: Path, asked: str | None = None, *,
                 wake: bool = True) -> Seen | None:
        """A finished file: record it as a job unless its content is already known
        (``asked``: what a command asks for its original, :meth:`add`). ``wake``: tell
        the preparers now (the settler tells them once for all the files it hands on)."""
        idle = not self.scheduler.busy()
        seen = pipeline.consider(self.ctx, path, asked)
        if seen is not None and seen is not Seen.UNCHANGED:
            if idle:  # a new stretch of work: its pages done (and its rate) count from here
                self._batch_base = self.scheduler.rate.total
                self.scheduler.rate.mark_start()
            if wake:
                self.scheduler.wake()
        return seen

    def add(self, paths: Iterable[Path], asked: str | None = None) -> list[Path]:
        """Queue these files (no settle wait) and restrict the readers to them.

        They are read even when the pause flag is set: ``ocrwatch add`` is an explicit
        request, and waiting for a resume would hang it. The flag itself stays set.
        ``asked``: what their reading may do with them (``--on-success``), in their job
        rows, whichever daemon reads them.
        """
        added: list[Path] = []
        ids: set[int] = set()
        for path in paths:
            seen = self.consider(path, asked)
            job = self.jobs.known(path.absolute())
            if job is not None:
                # A file being read now (by a daemon beside this `add`) is asked too:
                # that reading reads its job row's ask before it retires the original.
                if asked is not None and job.state in ("queued", "failed", "running"):
                    self.jobs.ask(job.id, asked)
                # A file that crashed the daemon twice is read again only when asked by
                # `ocrwatch retry`: added again, it would crash this run too.
                if (seen is Seen.UNCHANGED and job.state == "failed"
                        and job.crashes < CRASH_LIMIT):
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

    def _was_done(self, source: Path, outputs: list[Path | None]) -> bool:
        """Whether the index holds ``source`` (or one of its outputs, moved with it) as
        done."""
        return self.jobs.was_done(source, outputs)

    def is_idle(self) -> bool:
        """Nothing in hand and nothing queued (the batch notification waits for this)."""
        if self.scheduler.busy():
            return False
        counts = self.jobs.counts()
        return counts["queued"] == 0 and counts["running"] == 0

    def _count_pages(self, path: Path) -> int:
        from ocrwatch.pages.decode import count_pages

        return count_pages(path, self.config)

    def progress(self, engine_state: str, facts: IndexFacts,
                 gpu_busy: str | None = None) -> Progress:
        """Pages done and left, the rate, the ETA, and what waits and why (the index's part
        from ``facts``: status never waits on the index's lock)."""
        reading = self.reading()
        in_hand = {r.path for r in reading}
        others = [(p, state, not_before) for p, state, not_before in facts.unfinished
                  if display_path(p) not in in_hand]
        now = _dt.datetime.now().timestamp()
        waiting: list[Waiting] = []
        if self._settler is not None:
            settling, incomplete = self._settler.waiting()
            if settling:
                waiting.append(Waiting("settling", settling, "still being written or just "
                                       f"arrived; read once unchanged for "
                                       f"{self.config.settle_seconds:g} s"))
            if incomplete:
                waiting.append(Waiting("incomplete", incomplete, "the file has no end yet "
                                       "(a scan being written?); waited for up to "
                                       f"{self.config.settle_seconds * 15:g} s, then read"))
        queued = [p for p, state, _ in others if state == "queued"]
        later = [nb for _, state, nb in others if state == "queued" and nb > now]
        if self.paused and queued:
            waiting.append(Waiting("paused", len(queued), "`ocrwatch resume` reads them"))
        if later:
            at = _dt.datetime.fromtimestamp(min(later)).strftime("%H:%M:%S")
            waiting.append(Waiting("retrying later", len(later),
                                   f"a passing problem (see the log); the next at {at}"))
        if gpu_busy and (queued or reading):  # the vLLM engine waits for room on the card
            waiting.append(Waiting("GPU busy", len(queued) + len(reading), gpu_busy))
        elif engine_state in ("starting", "stopped") and (queued or reading) and not self.paused:
            waiting.append(Waiting("engine starting", len(queued) + len(reading),
                                   "the engine is loading; reading begins when it is ready"))
        return estimate(
            in_hand=[(r.done, r.pages) for r in reading],
            queued=self._page_counts.pages(p for p, _, _ in others),
            pages_done=max(0, self.scheduler.rate.total - self._batch_base),
            seconds_per_page=self.scheduler.rate.seconds_per_page(),
            since_last=self.scheduler.rate.since_last(),
            average_pages=facts.average_pages, waiting=tuple(waiting))

    def status(self) -> Status:
        midnight = _dt.datetime.combine(_dt.date.today(), _dt.time()).timestamp()
        if self._facts is not None:
            facts, counts_note = self._facts.read(midnight)
        else:
            facts, counts_note = read_facts(self.jobs, midnight, None), None
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
            config_file=str(self.config.file) if self.config.file is not None else None,
            log_file=str(self.log_file) if self.log_file else None,
            pid=os.getpid(), version=__version__,
            language_note=registry.note(self.choice.name, self.config),
            reading=self.reading(), languages=tuple(self.config.languages),
            restart_needed=self.restart_needed, config_note=self.config_note,
            progress=self.progress(str(engine_facts.get("state", "")), facts,
                                   str(engine_facts.get("waiting_reason") or "") or None),
            index_note=self.index_guard.note or self.index_note,
            kept=facts.kept, doubted=facts.doubted, doubts=facts.doubts,
            left_alone=self._settler.others.snapshot() if self._settler is not None else {},
        )
