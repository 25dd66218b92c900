"""The remote engine behind vLLM's own router: the real ``vllm-router`` binary (from its
wheel, a dev dependency) in front of the project's OpenAI-compatible test servers on
127.0.0.1, and the real daemon reading a drop through it.

Every file must end ``done`` with each page read once, whatever happens behind the router:
a server killed with pages in flight, a server that answers 503 to everything.
"""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_openai import FakeServer
from helpers import wait_for
from test_remote_daemon import (
    ServerProcess,
    all_done,
    check_each_read_once,
    config_for,
    drop,
    hexa,
)

from ocrwatch.daemon import Daemon
from ocrwatch.engines.router import parse_workers, root_of

ROUTER = shutil.which("vllm-router", path=str(Path(sys.executable).parent)) \
    or shutil.which("vllm-router")
needs_router = pytest.mark.skipif(
    ROUTER is None, reason="vllm-router is not installed (it comes with '.[dev]')")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Router:
    """``vllm-router`` on 127.0.0.1 in front of ``workers`` (their OpenAI base URLs)."""

    def __init__(self, workers: list[str], log_file: Path) -> None:
        assert ROUTER is not None
        self.port = free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.root}/v1"
        self._log = log_file.open("w")
        # Health checked every second, so that a lost server shows within a test's wait.
        self.proc = subprocess.Popen(
            [ROUTER, "--host", "127.0.0.1", "--port", str(self.port),
             "--worker-urls", *(root_of(w) for w in workers), "--policy", "power_of_two",
             "--health-check-interval-secs", "1", "--worker-startup-check-interval", "1",
             "--request-timeout-secs", "120", "--log-level", "warning"],
            stdout=self._log, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: httpx.get(f"{self.url}/models", timeout=2).status_code == 200,
                     60, "the router to answer", ignore=(httpx.HTTPError,))
        except BaseException:
            self.close()
            raise

    def workers(self) -> list[dict[str, Any]]:
        workers: list[dict[str, Any]] = httpx.get(f"{self.root}/workers",
                                                  timeout=5).json()["workers"]
        return workers

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


@pytest.fixture
def routers() -> Iterator[list[Router]]:
    started: list[Router] = []
    yield started
    for router in started:
        router.close()


@pytest.fixture
def processes() -> Iterator[list[ServerProcess]]:
    started: list[ServerProcess] = []
    yield started
    for proc in started:
        proc.kill()


def start_router(routers: list[Router], tmp_path: Path, *workers: str) -> Router:
    router = Router(list(workers), tmp_path / f"router{len(routers)}.log")
    routers.append(router)
    return router


def test_the_workers_listing_is_read_and_anything_else_is_no_router() -> None:
    body = (b'{"workers":[{"url":"http://a:8000","is_healthy":true},'
            b'{"url":"http://b:8000","is_healthy":false}],"total":2}')
    listed = parse_workers(body)
    assert listed is not None
    assert [(b.url, b.healthy) for b in listed] == [("http://a:8000", True),
                                                    ("http://b:8000", False)]
    for other in (b'{"detail": "Not Found"}', b"[]", b"not json",
                  b'{"workers": [{"url": 5}]}'):
        assert parse_workers(other) is None
    assert root_of("http://r:30000/v1") == "http://r:30000"
    assert root_of("https://r/ocr/v1/") == "https://r/ocr"


@needs_router
def test_a_drop_is_read_through_the_router_each_page_once(
        tmp_path: Path, routers: list[Router]) -> None:
    with FakeServer(delay=0.2) as one, FakeServer(delay=0.2) as two:
        router = start_router(routers, tmp_path, one.url, two.url)
        config = config_for(tmp_path, router.url, concurrency=8, health_seconds=0.5)
        daemon = Daemon(config)
        try:
            daemon.start()
            files = drop(config.inbox[0], n_png=8, n_tiff=2)
            wait_for(lambda: all_done(daemon, files), 90, "every file read")
            check_each_read_once(daemon, files)
            facts: Any = daemon.engine.describe()
        finally:
            daemon.close()
    pages = Counter({hexa(c): 1 for cs in files.values() for c in cs})
    assert one.answered + two.answered == pages  # each page asked once, answered once
    assert one.answered and two.answered  # the router spread them
    (server,) = facts["servers"]
    assert sorted(b["url"] for b in server["behind"]) == sorted(
        root_of(u) for u in (one.url, two.url))
    assert all(b["healthy"] for b in server["behind"])


@needs_router
def test_a_server_killed_behind_the_router_costs_no_page_and_is_logged(
        tmp_path: Path, routers: list[Router], processes: list[ServerProcess],
        caplog: pytest.LogCaptureFixture) -> None:
    doomed = ServerProcess("--delay", "60")  # takes pages and dies before answering
    processes.append(doomed)
    with FakeServer(delay=0.1) as fine:
        router = start_router(routers, tmp_path, doomed.url, fine.url)
        config = config_for(tmp_path, router.url, concurrency=6, health_seconds=0.5)
        daemon = Daemon(config)
        try:
            with caplog.at_level(logging.INFO, logger="ocrwatch.engines.remote"):
                daemon.start()
                files = drop(config.inbox[0], n_png=10, n_tiff=2)

                def doomed_holds_pages() -> bool:
                    return any(w["url"] == root_of(doomed.url) and w.get("load", 0) >= 1
                               for w in router.workers())

                wait_for(doomed_holds_pages, 30, "pages in flight on the doomed server")
                doomed.kill()
                wait_for(lambda: all_done(daemon, files), 90, "every file read")
                check_each_read_once(daemon, files)
                wait_for(lambda: f"{root_of(doomed.url)} behind the router" in caplog.text,
                         30, "the lost server in the log")
        finally:
            daemon.close()
    assert fine.answered == Counter({hexa(c): 1 for cs in files.values() for c in cs})
    assert f"OCR server {root_of(doomed.url)} behind the router {router.url} is down" \
        in caplog.text


@needs_router
def test_a_server_that_answers_503_is_routed_around(
        tmp_path: Path, routers: list[Router]) -> None:
    with FakeServer(mode="busy") as busy, FakeServer(delay=0.05) as fine:
        router = start_router(routers, tmp_path, busy.url, fine.url)
        config = config_for(tmp_path, router.url, concurrency=4, health_seconds=0.5)
        daemon = Daemon(config)
        try:
            daemon.start()
            files = drop(config.inbox[0], n_png=8, n_tiff=1)
            wait_for(lambda: all_done(daemon, files), 90, "every file read")
            check_each_read_once(daemon, files)
        finally:
            daemon.close()
    assert busy.answered == Counter()
    assert fine.answered == Counter({hexa(c): 1 for cs in files.values() for c in cs})


@needs_router
def test_pages_in_flight_follow_the_servers_the_router_has(
        tmp_path: Path, routers: list[Router]) -> None:
    """remote.per_server: two healthy servers behind the router take 2 x 2 pages at once,
    not remote.concurrency's 50; one lost, 2."""
    one, two = FakeServer(mode="hang").start(), FakeServer(mode="hang").start()
    closed: set[int] = set()
    try:
        router = start_router(routers, tmp_path, one.url, two.url)
        config = config_for(tmp_path, router.url, concurrency=50, per_server=2,
                            health_seconds=0.3, timeout_seconds=60.0)
        daemon = Daemon(config)
        try:
            daemon.start()
            files = drop(config.inbox[0], n_png=12, n_tiff=0)
            wait_for(lambda: one.active + two.active == 4, 30, "four pages in flight")
            assert daemon.engine.describe()["in_flight_limit"] == 4
            with pytest.raises(AssertionError):  # no fifth page goes out
                wait_for(lambda: one.active + two.active > 4, 1.5, "a fifth page")
            two.mode = "ok"
            two.close()
            closed.add(two.port)  # its hanging pages end unanswered; the router retries them on one
            wait_for(lambda: daemon.engine.describe()["in_flight_limit"] == 2, 30,
                     "the limit to follow the one server left")
            one.mode = "ok"
            one.release()
            wait_for(lambda: all_done(daemon, files), 90, "every file read")
            check_each_read_once(daemon, files)
        finally:
            daemon.close()
    finally:
        one.close()
        if two.port not in closed:
            two.close()
