"""The remote engine: the same requests as the embedded one, sent to OpenAI-compatible
servers such as ``vllm serve lightonai/LightOnOCR-2-1B``.

For pages that outgrow one card: many daemons share served models that vLLM scales out
(docs/scale-out.md). Each page goes as a base64 PNG data URL, alone in a user turn, since
a text prompt makes the model echo it.

- Up to ``remote.concurrency`` requests are in flight; each page's result goes back to
  the daemon as soon as its answer arrives.
- ``remote.urls`` lists several servers: each request goes to the server with the fewest
  requests outstanding. Servers are health-checked (``GET /models``, which also says
  whether the model is served) at the start and every ``remote.health_seconds``.
- 429, 502, 503 and 504 answers, dropped connections and timeouts are retried with
  jittered exponential backoff, on whichever server is fit. A server whose connection
  fails or hangs is marked down and probed again later, waiting longer each time it
  fails again. A page whose servers stay unfit for ``remote.retry_seconds`` raises
  :class:`EngineUnavailable`, which puts its file back in the queue: nothing is lost.
- Each page takes exactly one answer: a request that timed out or was cut is never
  counted, so no page is read twice into the index.

httpx gives keep-alive connections, separate connect and read timeouts and verified TLS
(the system's trust store, or ``remote.ca_file`` for a private authority).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
import statistics
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx

from ocrwatch.core.domain import Page, PageText
from ocrwatch.core.errors import EngineError, EngineUnavailable
from ocrwatch.core.threads import Loop
from ocrwatch.engines import lightonocr, profiles, router
from ocrwatch.engines.base import Doctor, Registration, gpu_read_policy
from ocrwatch.engines.openai_http import (
    CONNECT_TIMEOUT,
    PROBE_TIMEOUT,
    PageFailed,
    Retry,
    ServerError,
    Timing,
    chat_body,
    data_url,
    make_client,
    post_chat,
    probe,
)

if TYPE_CHECKING:

    from ocrwatch.config import Config

log = logging.getLogger(__name__)

BACKOFF_BASE = 0.5  # seconds; doubled for each failure in a row, then jittered
BACKOFF_CAP = 30.0
DOWN_BASE = 2.0  # a server marked down is probed again after this, doubling...
DOWN_CAP = 120.0  # ...up to this


# Upper bounds (seconds) of the request-time buckets: a card reads a page in about 1 s
# alone and in tens of seconds behind a full batch.
REQUEST_BUCKETS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


@dataclass(frozen=True)
class ServerFigures:
    """One server's requests since the engine started, for the metrics (docs/metrics.md)."""

    url: str
    answered: int  # requests that came back with an answer
    failed: int  # requests that ended without one (refused, busy, lost, HTTP 5xx)
    retried: int  # failed requests whose page was sent again
    seconds: float  # the answered requests' time, summed
    buckets: tuple[int, ...]  # answered requests per REQUEST_BUCKETS bound, cumulative


@dataclass(eq=False)
class _Server:
    """One server and what the engine knows about it. Guarded by the engine's lock."""

    url: str  # the base URL, ending in /v1 for vLLM
    up: bool = False  # answered its last probe or request
    checked: bool = False  # probed at least once
    outstanding: int = 0  # requests sent and not yet answered
    sent: int = 0
    answered: int = 0
    failures: int = 0  # in a row; reset by an answer
    not_before: float = 0.0  # monotonic time before which nothing is sent (or probed)
    last_error: str | None = None
    fatal: str | None = None  # down for a reason waiting will not cure (key, certificate)
    # The servers behind it when it is a router (vllm-router's /workers); None: no router.
    behind: list[router.Backend] | None = None
    failed: int = 0  # requests that ended without an answer, all told
    retried: int = 0
    seconds: float = 0.0
    under: list[int] = field(default_factory=lambda: [0] * len(REQUEST_BUCKETS))
    over: int = 0  # answered requests slower than the last bucket

    def took(self, seconds: float) -> None:
        """An answered request's time, counted into its buckets."""
        self.seconds += seconds
        if seconds > REQUEST_BUCKETS[-1]:
            self.over += 1
        for i, bound in enumerate(REQUEST_BUCKETS):
            if seconds <= bound:
                self.under[i] += 1

    def figures(self) -> ServerFigures:
        return ServerFigures(self.url, self.under[-1] + self.over, self.failed, self.retried,
                             self.seconds, tuple(self.under))

    def capacity(self) -> int:
        """How many servers it stands for: the healthy ones behind a router, else one."""
        if not self.up:
            return 0
        if self.behind is None:
            return 1
        return sum(b.healthy for b in self.behind)

    def facts(self) -> dict[str, object]:
        state = "up" if self.up else ("down" if self.checked else "not checked yet")
        facts: dict[str, object] = {"url": self.url, "state": state,
                                    "outstanding": self.outstanding, "answered": self.answered}
        if self.last_error:
            facts["last_error"] = self.last_error
        if self.behind is not None:
            facts["behind"] = [{"url": b.url, "healthy": b.healthy} for b in self.behind]
        return facts


class Slots:
    """Requests in flight, at most ``limit``; the limit may change while pages wait
    (``remote.per_server`` times the servers that are up)."""

    def __init__(self, limit: int) -> None:
        self._cond = threading.Condition()
        self._limit = limit
        self._used = 0

    @property
    def limit(self) -> int:
        with self._cond:
            return self._limit

    def set_limit(self, limit: int) -> None:
        with self._cond:
            self._limit = limit
            self._cond.notify_all()

    def __enter__(self) -> Slots:
        with self._cond:
            self._cond.wait_for(lambda: self._used < self._limit)
            self._used += 1
        return self

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._used -= 1
            self._cond.notify_all()


STAGES = ("encode", "queue", "send", "wait", "read", "parse")
TOKENS = ("prompt", "completion")  # the server's usage counts of each answer


class Stages:
    """Where each page's time goes in the engine, the last few thousand pages of each stage:
    encode (image to data URL, in a preparer thread), queue (waiting for a request slot
    and a fit server), send, wait (the server's work), read (the answer's body), parse."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds: dict[str, deque[float]] = {s: deque(maxlen=4096) for s in STAGES}
        self._tokens: dict[str, deque[int]] = {t: deque(maxlen=4096) for t in TOKENS}

    def add(self, stage: str, seconds: float) -> None:
        with self._lock:
            self._seconds[stage].append(seconds)

    def add_tokens(self, prompt: int | None, completion: int | None) -> None:
        with self._lock:
            for kind, count in zip(TOKENS, (prompt, completion), strict=True):
                if count is not None:
                    self._tokens[kind].append(count)

    def token_medians(self) -> dict[str, float]:
        """The median tokens a page of each kind, over the answers that counted them."""
        with self._lock:
            return {t: statistics.median(v) for t, v in self._tokens.items() if v}

    def medians_ms(self) -> dict[str, float]:
        with self._lock:
            return {s: round(statistics.median(v) * 1000, 2)
                    for s, v in self._seconds.items() if v}

    def pages(self) -> int:
        with self._lock:
            return len(self._seconds["parse"])


def backoff(failures: int, base: float, cap: float) -> float:
    """Full-jitter exponential backoff: uniform in [0, min(cap, base * 2**failures))."""
    return random.uniform(0.0, min(cap, base * 2.0 ** max(0, failures)))


class RemoteEngine(lightonocr.LightOnOCREngine):
    """The ``remote`` engine: ``concurrency`` pages in flight across ``urls``."""

    name = "remote"

    def __init__(self, config: Config) -> None:
        self._cfg = config.remote
        self._profile = profiles.of(config)
        self._keep_margins = config.keep_margins
        self._model = profiles.model_id(config, "remote")
        self._temperature, self._top_p = profiles.sampling(config, "remote")
        self._max_tokens = profiles.max_tokens(config, "remote")
        urls = self._cfg.urls or [self._cfg.url]
        self._servers = [_Server(u.rstrip("/")) for u in urls]
        self._policy = gpu_read_policy(self._cfg.concurrency, config.rotate_pages)
        self._cond = threading.Condition()
        self._starting = threading.Lock()
        # remote.concurrency bounds what is in flight; remote.per_server, when set, lowers
        # it to what the servers that are up can take (each one behind a router counts).
        self._slots = Slots(self._in_flight_limit())
        self._client: httpx.Client | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._health: Loop | None = None
        self._last_round = 0.0  # when the health thread last probed every server
        self._stop = threading.Event()
        self._closed = False
        self._pages = 0
        self._last_error: str | None = None
        self.stages = Stages()

    # -- lifecycle ----------------------------------------------------------------------

    def _get_client(self) -> httpx.Client:
        with self._cond:
            if self._closed:
                raise EngineError("the remote engine was closed; start the daemon again.")
            if self._client is None:
                self._client = make_client(self._cfg, [s.url for s in self._servers])
            return self._client

    def _ensure_started(self) -> httpx.Client:
        """The client and the health thread, made on first use; the first probe of all."""
        client = self._get_client()
        with self._starting:  # the daemon's reader threads all arrive at once
            if self._health is None:
                # The first call probes every server at once: a server that is not there,
                # or refuses the key, is reported now rather than page by page.
                self._probe_all(client)
                with self._cond:
                    if not self._closed:
                        self._last_round = time.monotonic()
                        self._health = Loop("ocrwatch-remote-health", self._health_round,
                                            self._stop.set)
                        self._health.start()
                if not any(s.up for s in self._servers):
                    raise EngineUnavailable(self._none_up_message())
        return client

    def check(self) -> list[dict[str, object]]:
        """Probe every server once, now, and say how each is (``ocrwatch doctor``)."""
        self._probe_all(self._get_client())
        with self._cond:
            return [{**s.facts(), "fatal": s.fatal} for s in self._servers]

    def recognize(self, pages: Sequence[Page]) -> list[PageText]:
        """Read pages, each as soon as a request slot is free; a failed page has ``error``."""
        client = self._ensure_started()
        if len(pages) == 1:
            return [self._read(client, pages[0])]
        with self._cond:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._cfg.concurrency,
                                                thread_name_prefix="ocrwatch-remote")
            pool = self._pool
        futures = [pool.submit(self._read, client, p) for p in pages]
        return [f.result() for f in futures]

    def release(self) -> None:
        """Nothing is held here: the servers own the GPUs."""

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            pool, self._pool = self._pool, None
            health, self._health = self._health, None
            client = self._client
            self._cond.notify_all()
        self._stop.set()
        if pool is not None:
            pool.shutdown(wait=True)
        if health is not None:
            health.close(PROBE_TIMEOUT + CONNECT_TIMEOUT)
        if client is not None:
            client.close()
        if self.stages.pages():
            log.info("remote engine, median ms a page over %d answers: %s",
                     self.stages.pages(), ", ".join(
                         f"{k} {v:.2f}" for k, v in self.stages.medians_ms().items()))
            if tokens := self.stages.token_medians():
                log.info("remote engine, median tokens a page: %s", ", ".join(
                    f"{k} {v:g}" for k, v in tokens.items()))

    def describe(self) -> dict[str, object]:
        with self._cond:
            servers = [s.facts() for s in self._servers]
            facts: dict[str, object] = {
                "engine": self.name, "state": "remote", "model": self._model,
                "url": self._servers[0].url, "servers": servers, "pages": self._pages,
                "in_flight": sum(s.outstanding for s in self._servers),
                "in_flight_limit": self._slots.limit}
            if self._last_error:
                facts["last_error"] = self._last_error
        facts["stage_ms"] = self.stages.medians_ms()
        return facts

    def server_figures(self) -> list[ServerFigures]:
        """Each server's requests, answered and failed, and their times (the metrics)."""
        with self._cond:
            return [s.figures() for s in self._servers]

    # -- health -------------------------------------------------------------------------

    def _in_flight_limit(self) -> int:
        """remote.concurrency, or per_server times the servers up when that is less (at
        least per_server: while none is up, pages wait for a fit server anyway)."""
        if self._cfg.per_server <= 0:
            return self._cfg.concurrency
        servers = sum(s.capacity() for s in self._servers) or 1
        return min(self._cfg.concurrency, self._cfg.per_server * servers)

    def _health_round(self) -> None:
        """Probe down servers whose wait is over, and every server each health_seconds;
        then wait for the next one due."""
        assert self._client is not None
        client = self._client
        every = self._cfg.health_seconds
        now = time.monotonic()
        with self._cond:
            due = [s for s in self._servers if not s.up and s.not_before <= now]
            if now - self._last_round >= every:
                due = list(self._servers)
                self._last_round = now
            waits = [s.not_before - now for s in self._servers if not s.up]
        for server in due:
            if self._stop.is_set():
                return
            self._probe(client, server)
        pause = min([every - (time.monotonic() - self._last_round), *waits, every])
        self._stop.wait(max(0.05, pause))

    def _probe_all(self, client: httpx.Client) -> None:
        threads = [threading.Thread(target=self._probe, args=(client, s),
                                    name="ocrwatch-remote-probe") for s in self._servers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _probe(self, client: httpx.Client, server: _Server) -> None:
        """``GET /models``: the server answers and serves our model, or it is down; a
        router also says which servers behind it are healthy."""
        problem, fatal = probe(client, server.url, self._model)
        behind = router.backends(client, server.url) if problem is None else None
        with self._cond:
            if problem is None:
                self._note_behind(server, behind)
            server.checked = True
            if problem is None:
                if not server.up:
                    log.info("OCR server %s is up", server.url)
                server.up = True
                server.not_before = 0.0
                server.fatal = None
            else:
                if server.up or server.last_error != problem:
                    log.warning("OCR server %s is down: %s", server.url, problem)
                server.up = False
                server.failures += 1
                server.last_error = problem
                server.not_before = time.monotonic() + max(
                    DOWN_BASE, backoff(server.failures, DOWN_BASE, DOWN_CAP))
                server.fatal = None if fatal is None else str(fatal)
            self._cond.notify_all()
        self._slots.set_limit(self._in_flight_limit())

    def _note_behind(self, server: _Server, behind: list[router.Backend] | None) -> None:
        """Log what changed behind a router: the router routes around a lost server
        without failing a request, so this is the only word of it."""
        before = {b.url: b.healthy for b in server.behind or []}
        for backend in behind or []:
            was = before.get(backend.url)
            if backend.healthy and was is False:
                log.info("OCR server %s behind the router %s is up again", backend.url,
                         server.url)
            elif not backend.healthy and was is not False:
                log.warning("OCR server %s behind the router %s is down; the router sends "
                            "its pages to the others", backend.url, server.url)
        if behind is not None and server.behind is None:
            log.info("%s is a router with %d OCR server%s behind it (%d healthy)", server.url,
                     len(behind), "" if len(behind) == 1 else "s",
                     sum(b.healthy for b in behind))
        server.behind = behind

    def _none_up_message(self) -> str:
        with self._cond:
            servers = list(self._servers)
        if len(servers) == 1:
            (server,) = servers
            if server.fatal:
                return server.fatal
            return (f"the OCR server at {server.url} is not usable: {server.last_error}. "
                    f"Start it (vllm serve {self._model}) or fix remote.url.")
        lines = "; ".join(f"{s.url}: {s.last_error}" for s in servers)
        return (f"none of the {len(servers)} OCR servers is usable ({lines}). Start them "
                f"(vllm serve {self._model}) or fix remote.urls.")

    # -- choosing a server --------------------------------------------------------------

    def _acquire(self, deadline: float) -> _Server:
        """The fit server with the fewest requests outstanding; waits while none is fit."""
        with self._cond:
            while True:
                if self._closed:
                    raise EngineError("the remote engine was closed; start the daemon again.")
                now = time.monotonic()
                fit = [s for s in self._servers if s.up and s.not_before <= now]
                if fit:
                    # Fewest outstanding; among equals, the one that was sent least.
                    server = min(fit, key=lambda s: (s.outstanding, s.sent))
                    server.outstanding += 1
                    server.sent += 1
                    return server
                fatal = [s.fatal for s in self._servers if s.fatal]
                if len(fatal) == len(self._servers):
                    raise EngineUnavailable(fatal[0])
                if now >= deadline:
                    raise EngineUnavailable(
                        f"no OCR server could take a page for {self._cfg.retry_seconds:g} s "
                        f"({self._servers_summary()}); the files go back to the queue. "
                        "Check the servers (`ocrwatch status` lists them).")
                waits = [s.not_before - now for s in self._servers if s.up]
                self._cond.wait(max(0.01, min([deadline - now, 1.0, *waits])))

    def _servers_summary(self) -> str:
        return "; ".join(f"{s.url}: {'busy' if s.up else 'down'}"
                         f"{', ' + s.last_error if s.last_error else ''}" for s in self._servers)

    def _settle(self, server: _Server, failure: Retry | None, seconds: float | None,
                *, again: bool = False) -> None:
        """A request ended: ``failure`` set when the server is to be rested or marked down;
        ``seconds`` the time of a request that brought the page's answer, None for one that
        did not (``again``: its page is sent once more)."""
        with self._cond:
            server.outstanding -= 1
            if seconds is not None:
                server.took(seconds)
            else:
                server.failed += 1
                server.retried += again
            if failure is None:
                server.answered += 1
                server.failures = 0
                server.up = True
            else:
                server.failures += 1
                server.last_error = str(failure)
                now = time.monotonic()
                if failure.down:
                    if server.up:
                        log.warning("OCR server %s marked down: %s", server.url, failure)
                    server.up = False
                    server.not_before = now + max(
                        DOWN_BASE, backoff(server.failures, DOWN_BASE, DOWN_CAP))
                else:
                    pause = max(failure.after, backoff(server.failures, BACKOFF_BASE,
                                                       BACKOFF_CAP))
                    server.not_before = max(server.not_before, now + pause)
            self._cond.notify_all()

    # -- one page -----------------------------------------------------------------------

    def prepare_page(self, page: Page) -> Page:
        """In the daemon's preparer threads: the page as it will be sent, so that no
        request slot waits on encoding."""
        started = time.monotonic()
        url = data_url(page.image)
        self.stages.add("encode", time.monotonic() - started)
        return dataclasses.replace(page, payload=url)

    def _read(self, client: httpx.Client, page: Page) -> PageText:
        url = page.payload
        if url is None:  # not through the daemon's preparers (doctor, tests)
            url = self.prepare_page(page).payload
            assert url is not None
        with self._slots:
            try:
                text, finish = self._ask(client, url, self._temperature)
                still_looped = False
                if lightonocr.looped(text, finish, ignore_eos=self._cfg.ignore_eos):
                    log.info("Page %d of %s did not finish cleanly; trying again at "
                             "temperature %.1f.", page.index + 1, page.source.name,
                             self._profile.retry_temperature)
                    with contextlib.suppress(PageFailed):  # else the first reading stands
                        text, finish = self._ask(client, url,
                                                 self._profile.retry_temperature)
                    if lightonocr.looped(text, finish, ignore_eos=self._cfg.ignore_eos):
                        still_looped = True
            except PageFailed as exc:
                with self._cond:
                    self._last_error = str(exc)
                return lightonocr.failed_page(str(exc))
        with self._cond:
            self._pages += 1
        # Benchmarks ask for every page to run to max_tokens (ignore_eos): no doubt there.
        return lightonocr.page_text(text, finish="stop" if self._cfg.ignore_eos else finish,
                                    looped=still_looped, profile=self._profile,
                                    size=page.size, keep_margins=self._keep_margins)

    def _ask(self, client: httpx.Client, image_url: str, temperature: float) -> tuple[str, str]:
        """One reading of a page: retried across servers until one answers or time is up."""
        body = chat_body(self._cfg, image_url, temperature, profile=self._profile,
                         model=self._model, top_p=self._top_p, max_tokens=self._max_tokens)
        deadline = time.monotonic() + self._cfg.retry_seconds
        server_errors = 0
        tries = 0
        queued = time.monotonic()
        while True:
            server = self._acquire(deadline)
            failure: Retry | None = None
            answered = again = False
            timing = Timing()
            sent = time.monotonic()
            try:
                self.stages.add("queue", time.monotonic() - queued)
                answer = post_chat(client, server.url, body,
                                   seconds=self._cfg.timeout_seconds, timing=timing)
                for stage in ("send", "wait", "read", "parse"):
                    self.stages.add(stage, getattr(timing, stage))
                self.stages.add_tokens(timing.prompt_tokens, timing.completion_tokens)
                answered = True
                return answer
            except Retry as exc:
                failure, again = exc, True
            except ServerError as exc:
                # An answer, but a failed one (HTTP 500): tried once more, then the page fails.
                server_errors += 1
                if server_errors >= 2:
                    raise PageFailed(str(exc)) from exc
                again = True
            finally:
                self._settle(server, failure, time.monotonic() - sent if answered else None,
                             again=again and not self._stop.is_set())
            tries += 1
            if failure is not None:
                log.info("%s; trying again (%d)", failure, tries)
            # Jitter spreads the retries of many pages and many daemons over time.
            if self._stop.wait(backoff(tries - 1, BACKOFF_BASE, BACKOFF_CAP)):
                raise EngineError("the remote engine was closed; start the daemon again.")
            queued = time.monotonic()


ENGINE = Registration("remote", RemoteEngine, section="remote", doctor=(Doctor.SERVERS,))
