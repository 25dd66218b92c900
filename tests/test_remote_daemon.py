"""The daemon with the remote engine, against fake servers on 127.0.0.1 that fail.

One fake server runs as a process of its own so that it can be killed with requests in
flight, as a crashed or rebooted server is. Every file must end ``done`` with one index
row per page and sidecars holding its own pages' text: nothing lost, nothing read twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeServer
from helpers import wait_for
from PIL import Image

from ocrwatch.config import Config
from ocrwatch.daemon import Daemon

FAKE = Path(__file__).with_name("fake_openai.py")


class ServerProcess:
    """tests/fake_openai.py in a child process, killed with SIGKILL at will."""

    def __init__(self, *args: str, port: int = 0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(FAKE), "--port", str(port), *args],
            stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def processes() -> Iterator[list[ServerProcess]]:
    started: list[ServerProcess] = []
    yield started
    for proc in started:
        proc.kill()


def colour(i: int) -> tuple[int, int, int]:
    return (20, 40 + i // 200, i % 200)


def hexa(c: tuple[int, int, int]) -> str:
    return "".join(f"{v:02x}" for v in c)


def coloured_page(c: tuple[int, int, int]) -> Image.Image:
    """A page of colour ``c`` (its corner names it to the fake server) with a dark block:
    a page of one colour alone is blank, and the daemon reads no blank page."""
    image = Image.new("RGB", (120, 160), c)
    image.paste((0, 0, 0), (40, 60, 80, 100))
    return image


def drop(inbox: Path, n_png: int, n_tiff: int) -> dict[Path, list[tuple[int, int, int]]]:
    """PNG files of one page and TIFF files of three, every page its own colour."""
    inbox.mkdir(parents=True, exist_ok=True)
    files: dict[Path, list[tuple[int, int, int]]] = {}
    k = 0
    for i in range(n_png):
        path = inbox / f"page{i}.png"
        coloured_page(colour(k)).save(path)
        files[path] = [colour(k)]
        k += 1
    for i in range(n_tiff):
        path = inbox / f"bundle{i}.tif"
        colours = [colour(k + j) for j in range(3)]
        frames = [coloured_page(c) for c in colours]
        frames[0].save(path, save_all=True, append_images=frames[1:])
        files[path] = colours
        k += 3
    return files


def config_for(tmp_path: Path, *urls: str, **remote: Any) -> Config:
    config = Config(inbox=[tmp_path / "inbox"], database=tmp_path / "index.sqlite3",
                    settle_seconds=0.3, engine="remote")
    config.remote.urls = list(urls)
    for key, value in remote.items():
        setattr(config.remote, key, value)
    return config


def all_done(daemon: Daemon, files: dict[Path, list[tuple[int, int, int]]]) -> bool:
    for path in files:
        job = daemon.jobs.known(path)
        if job is None or job.state.value not in ("done", "failed"):
            return False
    return True


def check_each_read_once(daemon: Daemon,
                         files: dict[Path, list[tuple[int, int, int]]]) -> None:
    for path, colours in files.items():
        job = daemon.jobs.known(path)
        assert job is not None and job.state.value == "done", (path, job)
        rows = daemon.db.query("SELECT page, text FROM pages WHERE job_id = ? ORDER BY page",
                               (job.id,))
        assert [r["page"] for r in rows] == list(range(1, len(colours) + 1))
        for row, c in zip(rows, colours, strict=True):
            assert f"colour {hexa(c)}" in row["text"]
        md = path.with_suffix(".md").read_text()
        assert [line.split(" colour ")[1] for line in md.splitlines() if "colour" in line] == [
            hexa(c) for c in colours]


def test_killed_busy_and_hanging_servers_lose_no_page_and_read_none_twice(
        tmp_path: Path, processes: list[ServerProcess]) -> None:
    doomed = ServerProcess("--delay", "60")  # takes pages, and dies before answering
    processes.append(doomed)
    with FakeServer(mode="busy") as busy, FakeServer(mode="hang") as hung, \
            FakeServer() as fine:
        config = config_for(tmp_path, doomed.url, busy.url, hung.url, fine.url,
                            concurrency=4, timeout_seconds=2.0)
        daemon = Daemon(config)
        try:
            daemon.start()
            files = drop(config.inbox[0], n_png=10, n_tiff=3)

            def doomed_holds_pages() -> bool:
                servers: Any = daemon.engine.describe()["servers"]
                return bool(servers[0]["outstanding"] >= 1)

            wait_for(doomed_holds_pages, 30, "pages in flight on the doomed server")
            doomed.kill()
            wait_for(lambda: all_done(daemon, files), 90, "every file read")
            check_each_read_once(daemon, files)
            facts: Any = daemon.status().engine.to_dict()
        finally:
            hung.release()
            daemon.close()
    states = [s["state"] for s in facts["servers"]]
    assert states[0] == "down" and states[2] == "down" and states[3] == "up"
    assert busy.answered == Counter() and hung.answered == Counter()
    assert fine.answered == Counter({hexa(c): 1 for cs in files.values() for c in cs})


def test_the_only_server_restarting_mid_drop_loses_no_page(
        tmp_path: Path, processes: list[ServerProcess]) -> None:
    first = ServerProcess("--delay", "60")
    processes.append(first)
    config = config_for(tmp_path, first.url, concurrency=3, retry_seconds=60.0,
                        health_seconds=0.5)
    daemon = Daemon(config)
    try:
        daemon.start()
        files = drop(config.inbox[0], n_png=6, n_tiff=1)

        def in_flight() -> bool:
            return bool(daemon.engine.describe()["in_flight"] == 3)

        wait_for(in_flight, 30, "three pages in flight")
        first.kill()
        # The same server back on the same port, as after a restart.
        again = ServerProcess(port=first.port)
        processes.append(again)
        wait_for(lambda: all_done(daemon, files), 90, "every file read after the restart")
        check_each_read_once(daemon, files)
    finally:
        daemon.close()
