"""What the daemon is doing, as one typed value, and its text for ``ocrwatch status``.

The daemon builds a :class:`Status`; the control socket sends it as JSON
(:meth:`Status.to_dict`) and clients read it back with :meth:`Status.from_dict`, which
takes any subset of the keys, so an older or newer daemon still answers. The tray draws
it (ocrwatch/tray/); :func:`format_status` writes it for the terminal.
"""

from __future__ import annotations

import datetime as _dt
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ocrwatch.core.progress import Progress
from ocrwatch.core.progress import lines as progress_lines

# The daemon's states; "stopped" is only ever shown by a client when no daemon answers.
STATES = ("idle", "working", "paused", "stopping", "stopped")


@dataclass(frozen=True)
class Failure:
    """One failed file, as the queue recorded it."""

    path: str
    reason: str
    when: float | None = None  # Unix time the file failed

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Failure:
        when = data.get("when")
        return cls(str(data.get("path", "?")), str(data.get("reason", "")),
                   float(when) if isinstance(when, int | float) else None)

    @property
    def when_text(self) -> str:
        if self.when is None:
            return "?"
        return _dt.datetime.fromtimestamp(self.when).isoformat(sep=" ", timespec="seconds")


@dataclass(frozen=True)
class Reading:
    """A file being read: how many of its pages are read, of how many."""

    path: str
    done: int = 0  # pages read so far
    pages: int | None = None  # None until known

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Reading:
        pages = data.get("pages")
        return cls(str(data.get("path", "?")), int(data.get("done") or 0),
                   int(pages) if pages is not None else None)

    @property
    def text(self) -> str:
        """``letter.pdf, page 3 of 80``: the page now in hand."""
        name = Path(self.path).name
        if self.pages == 1:
            return name
        page = self.done + 1 if self.pages is None else min(self.done + 1, self.pages)
        return f"{name}, page {page}" + (f" of {self.pages}" if self.pages else "")


class PageRate:
    """How fast pages are read, measured from their results (thread-safe).

    What a page costs is the time from one page's result to the next while there is work
    in hand: with several readers it is their shared pace, and the preparing of pages and
    the finishing of files, when they hold the readers up, are in it. A page's own
    seconds in the engine are not enough: four readers at 0.4 s a page promise 10 pages a
    second, and gave 3.4 where pages were prepared more slowly than that. The mean over
    the last ``window`` pages is the rate and makes the ETA.

    Time with nothing to read is in no page: each stretch of work, and each resume,
    starts the clock again (:meth:`mark_start`). Pages that began before a stretch's first
    result may have waited for the engine to start (a model loading, waking from sleep),
    and the next ones carry what a file's first finishing costs once (0.75 s against
    0.33 s for the pages after them): the time up to the pages that began before the
    stretch's second result is left out.
    """

    def __init__(self, window: int = 64) -> None:
        self._gaps: deque[float] = deque(maxlen=window)
        self._clock: float | None = None  # the last result, or the stretch's start
        self._results = 0  # page results since this stretch of work began
        self._lock = threading.Lock()
        self.total = 0  # pages read since start (the status's pages done count from it)

    def warm(self) -> bool:
        """Whether a page beginning now is read by an engine known to be up (to hand back
        to :meth:`took` with its result)."""
        with self._lock:
            return self._results >= 2

    def add(self, pages: int = 1) -> None:
        """Pages read well (an error's page is 0)."""
        with self._lock:
            self.total += pages

    def took(self, *, warm: bool = True, now: float | None = None) -> None:
        """A page's result came; ``warm`` as :meth:`warm` said when the page began."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if warm and self._clock is not None:
                self._gaps.append(max(0.0, now - self._clock))
            self._clock = now
            self._results += 1

    def mark_start(self, now: float | None = None) -> None:
        """Work begins after a quiet spell or a pause, or the engine gave its memory back:
        the clock starts here, and the engine may have to start again."""
        with self._lock:
            self._clock = time.monotonic() if now is None else now
            self._results = 0

    def seconds_per_page(self) -> float | None:
        """The mean seconds a page while reading; None before the first ones are read."""
        with self._lock:
            return sum(self._gaps) / len(self._gaps) if self._gaps else None

    def since_last(self, now: float | None = None) -> float:
        """Seconds since the last result (or the stretch's start): the pages in hand have
        been read that long already."""
        now = time.monotonic() if now is None else now
        with self._lock:
            return 0.0 if self._clock is None else max(0.0, now - self._clock)


@dataclass(frozen=True)
class EngineStatus:
    """The engine's name, why it was chosen, and what it says about itself."""

    name: str = "?"
    why: str = ""
    state: str = "?"  # e.g. ready, asleep, stopped, starting, or "error: ..."
    gpu_memory_mb: float | None = None
    pages_per_second: float | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # the rest of Engine.describe()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EngineStatus:
        known = {"name", "why", "state", "gpu_memory_mb", "pages_per_second"}
        mb, pps = data.get("gpu_memory_mb"), data.get("pages_per_second")
        return cls(
            name=str(data.get("name", "?")), why=str(data.get("why", "")),
            state=str(data.get("state", "?")),
            gpu_memory_mb=float(mb) if mb is not None else None,
            pages_per_second=float(pps) if pps is not None else None,
            facts={k: v for k, v in data.items() if k not in known},
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.facts, "state": self.state}
        if self.gpu_memory_mb is not None:
            out["gpu_memory_mb"] = self.gpu_memory_mb
        if self.pages_per_second is not None:
            out["pages_per_second"] = self.pages_per_second
        return {**out, "name": self.name, "why": self.why}


@dataclass(frozen=True)
class Status:
    """A snapshot of the daemon (or, with ``state == "stopped"``, of its database alone)."""

    state: str = "idle"  # one of STATES
    paused: bool = False
    queued: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0
    pages_today: int = 0
    turned_today: int = 0  # of those, pages turned upright to be read
    blank_today: int = 0  # and pages recorded blank without reading
    engine: EngineStatus = field(default_factory=EngineStatus)
    last_result: str | None = None
    recent_failures: tuple[Failure, ...] = ()
    inbox: tuple[str, ...] = ()
    database: str | None = None
    log_file: str | None = None
    pid: int | None = None
    version: str | None = None
    reading: tuple[Reading, ...] = ()  # files whose pages are being read now
    languages: tuple[str, ...] = ()
    language_note: str | None = None  # the desktop's language left out for want of data
    # Done files whose original was not archived or deleted (an incomplete read, a
    # full disk...), and why.
    kept: tuple[Failure, ...] = ()
    # Done files read with doubts: a page that may not have been read whole (an empty or
    # cut-off answer, low confidence, a script the languages cannot read...). Their
    # originals are kept; ``doubts`` holds the newest, with the first doubt of each.
    doubted: int = 0
    doubts: tuple[Failure, ...] = ()
    restart_needed: tuple[str, ...] = ()  # config keys changed that wait for a restart
    progress: Progress = field(default_factory=Progress)  # pages left, rate, ETA, waiting
    index_note: str | None = None  # the index file was damaged, deleted or replaced
    counts_note: str | None = None  # the counts come from memory: the index was locked
    config_note: str | None = None  # the saved config does not load: why (not taken)
    # No daemon runs, and the last `ocrwatch run` ended before it was up: when and why.
    start_failure: str | None = None
    config_file: str | None = None  # the file the daemon's config was read from, if any
    # Files in the watched folders that are no image or PDF, left alone: suffix -> count.
    left_alone: dict[str, int] = field(default_factory=dict)

    @property
    def in_queue(self) -> int:
        """Files waiting or being read."""
        return self.queued + self.running

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the control socket sends and ``ocrwatch status --json`` prints."""
        out = asdict(self)
        out["engine"] = self.engine.to_dict()
        out["recent_failures"] = [asdict(f) for f in self.recent_failures]
        out["kept"] = [asdict(f) for f in self.kept]
        out["doubts"] = [asdict(f) for f in self.doubts]
        out["inbox"] = list(self.inbox)
        out["reading"] = [asdict(r) for r in self.reading]
        out["languages"] = list(self.languages)
        out["restart_needed"] = list(self.restart_needed)
        out["progress"] = self.progress.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Status:
        def num(key: str) -> int:
            return int(data.get(key) or 0)

        def text(key: str) -> str | None:
            value = data.get(key)
            return None if value is None else str(value)

        pid = data.get("pid")
        progress = Progress.from_dict(data.get("progress"))
        if progress.pages_per_second is None and isinstance(
                old := data.get("pages_per_second"), int | float):
            # An older daemon's one rate, beside its progress: the rate is said once.
            progress = replace(progress, pages_per_second=float(old))
        return cls(
            state=str(data.get("state", "idle")), paused=bool(data.get("paused", False)),
            queued=num("queued"), running=num("running"), done=num("done"),
            failed=num("failed"), pages_today=num("pages_today"),
            turned_today=num("turned_today"), blank_today=num("blank_today"),
            engine=EngineStatus.from_dict(data.get("engine") or {}),
            last_result=text("last_result"),
            recent_failures=tuple(Failure.from_dict(f)
                                  for f in data.get("recent_failures") or ()),
            inbox=tuple(str(p) for p in data.get("inbox") or ()),
            database=text("database"), log_file=text("log_file"),
            pid=int(pid) if pid is not None else None, version=text("version"),
            reading=tuple(Reading.from_dict(r) for r in data.get("reading") or ()),
            languages=tuple(str(x) for x in data.get("languages") or ()),
            language_note=text("language_note"), counts_note=text("counts_note"),
            restart_needed=tuple(str(k) for k in data.get("restart_needed") or ()),
            progress=progress,
            kept=tuple(Failure.from_dict(f) for f in data.get("kept") or ()),
            doubted=num("doubted"),
            doubts=tuple(Failure.from_dict(f) for f in data.get("doubts") or ()),
            index_note=text("index_note"), config_note=text("config_note"),
            start_failure=text("start_failure"), config_file=text("config_file"),
            left_alone={str(k): int(v) for k, v in (data.get("left_alone") or {}).items()},
        )


def in_hand(status: Status) -> str:
    """``8 in hand (3 being read)``: files taken from the queue, and those of them whose
    pages are being read now (the others are being prepared or wait for the engine)."""
    if status.state == "stopped" or not status.running:
        return f"{status.running} running"
    return f"{status.running} in hand ({len(status.reading)} being read)"


def done_text(status: Status) -> str:
    """``12 done (2 read with doubts)``: files read, and how many of them not whole."""
    doubted = f" ({status.doubted} read with doubts)" if status.doubted else ""
    return f"{status.done} done{doubted}"


def _listed(title: str, items: tuple[Failure, ...], total: int, more: str) -> list[str]:
    """A heading, the first five items (newest first, as the index gives them) and how
    many more there are."""
    if not items and not total:
        return []
    lines = [f"  {title}:"] + [f"    {f.path}: {f.reason}" for f in items[:5]]
    if total > len(items[:5]):
        lines.append(f"    and {total - len(items[:5])} more{more}")
    return lines


def format_status(status: Status) -> str:
    """The text ``ocrwatch status`` prints, for a running daemon or a stopped one."""
    engine = status.engine
    queue = (f"  queue:   {status.queued} waiting, {in_hand(status)}, "
             f"{done_text(status)}, {status.failed} failed")
    doubted = {f.path for f in status.doubts}
    kept = tuple(f for f in status.kept if f.path not in doubted)  # said once, as a doubt
    languages = f"  languages: {', '.join(status.languages)}" if status.languages else None
    if languages and status.language_note:
        languages += f"\n  note:    {status.language_note}"
    if status.state == "stopped":
        lines = ["ocrwatch: no daemon is running (start one with `ocrwatch run`)",
                 *([f"  start:   {status.start_failure}"] if status.start_failure else []),
                 queue,
                 f"  engine:  {engine.name} ({engine.why})",
                 *([languages] if languages else []),
                 f"  index:   {status.database}", f"  log:     {status.log_file}"]
        lines += [f"  failed:  {f.path}: {f.reason}" for f in status.recent_failures]
        lines += [f"  doubt:   {f.path}: {f.reason} (original kept)" for f in status.doubts]
        lines += [f"  kept:    {f.path}: {f.reason}" for f in kept]
        return "\n".join(lines)
    lines = [
        f"ocrwatch {status.version or '?'} (PID {status.pid or '?'}): {status.state}",
        queue,
    ]
    if status.counts_note:
        lines.append(f"  counts:  {status.counts_note}")
    lines += [f"  reading: {r.text}" for r in status.reading[:5]]
    if len(status.reading) > 5:
        lines.append(f"  reading: and {len(status.reading) - 5} more files")
    lines += progress_lines(status.progress)
    prepared = [f"{n} {what}" for n, what in ((status.turned_today, "turned upright"),
                                               (status.blank_today, "blank")) if n]
    lines.append(f"  today:   {status.pages_today} pages"
                 + (f" ({', '.join(prepared)})" if prepared else ""))
    eng = f"  engine:  {engine.name} ({engine.state})"
    if engine.why:
        eng += f", {engine.why}"
    lines.append(eng)
    if engine.gpu_memory_mb is not None:
        lines.append(f"  GPU:     {engine.gpu_memory_mb:.0f} MB held")
    if engine.facts.get("waiting_reason"):  # pages held until the card has room
        lines.append(f"  waiting: {engine.facts['waiting_reason']}")
    if languages:
        lines.append(languages)
    if status.config_note:
        lines.append(f"  config:  {status.config_note}")
    if status.restart_needed:
        lines.append(f"  restart: {', '.join(status.restart_needed)} changed in the config; "
                     "they take effect when the daemon starts again (`ocrwatch restart`)")
    for server in engine.facts.get("servers") or []:  # the remote engine's servers
        line = (f"  server:  {server.get('url')} {server.get('state')}, "
                f"{server.get('outstanding', 0)} in flight, {server.get('answered', 0)} answered")
        if server.get("state") != "up" and server.get("last_error"):
            line += f" ({server['last_error']})"
        lines.append(line)
    lines += [f"  inbox:   {folder}" for folder in status.inbox]
    if status.left_alone:
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(
            status.left_alone.items(), key=lambda item: (-item[1], item[0])))
        lines.append(f"  left alone: {kinds} (no image or PDF: save or print them as PDFs "
                     "into the inbox to have them read)")
    if status.index_note:
        lines.append(f"  index:   {status.index_note}")
    if status.last_result:
        lines.append(f"  last:    {status.last_result}")
    # Newest first, as the index lists them (the last five were the oldest of ten).
    lines += _listed("recent failures (retry with `ocrwatch retry --all-failed`)",
                     status.recent_failures, status.failed, "")
    lines += _listed("read with doubts (originals kept; check their text)", status.doubts,
                     status.doubted, "")
    if kept:
        lines.append("  originals kept, not archived or deleted:")
        lines += [f"    {f.path}: {f.reason}" for f in kept[:5]]
    lines.append(f"  log:     {status.log_file or '?'}")
    return "\n".join(lines)
