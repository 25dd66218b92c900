"""Connections without the token cannot starve those with it (issue 52): real sockets on
127.0.0.1 against the real search page.

Before the door, each connection had a thread and one of 32 slots from the moment it was
accepted; 32 idle connections (no token needed) kept the owner at 503 for as long as
they were held."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from helpers import wait_for
from search_site import Site, site

from ocrwatch.web.doorman import HEAD_SECONDS, MAX_WAITING
from ocrwatch.web.listener import MAX_UNVERIFIED

__all__ = ["site"]

IDLE = 48  # connections that send nothing
TRICKLING = 16  # connections that send a byte of a head every second


class Flood:
    """``idle`` connections that send nothing and ``trickling`` ones that send a header
    byte a second (none shows the token), each opened again when the server closes it;
    on one thread, until stopped. Records how long the server kept each one."""

    def __init__(self, port: int, idle: int, trickling: int) -> None:
        self.port, self.idle, self.trickling = port, idle, trickling
        self.socks: dict[socket.socket, tuple[float, bool]] = {}  # -> (opened, trickles)
        self.kept: list[float] = []
        self.opened = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="flood")

    def _open(self, trickles: bool) -> None:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        s.setblocking(False)
        self.opened += 1
        self.socks[s] = (time.monotonic(), trickles)

    def _closed_by_server(self, s: socket.socket) -> bool:
        try:
            s.recv(4096, socket.MSG_PEEK)  # an end, or an answer: a refusal
        except BlockingIOError:
            return False
        except OSError:
            return True
        return True

    def _run(self) -> None:
        while not self.stop.is_set():
            for trickles, want in ((False, self.idle), (True, self.trickling)):
                while sum(1 for _, t in self.socks.values() if t == trickles) < want:
                    self._open(trickles)
            for s, (opened, trickles) in list(self.socks.items()):
                gone = self._closed_by_server(s)
                if not gone and trickles:
                    try:
                        s.send(b"X")
                    except BlockingIOError:
                        pass
                    except OSError:
                        gone = True
                if gone:
                    self.kept.append(time.monotonic() - opened)
                    del self.socks[s]
                    s.close()
            self.stop.wait(1.0)

    def __enter__(self) -> Flood:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()
        for s in self.socks:
            s.close()


def _threads() -> int:
    return threading.active_count()


@contextmanager
def _flood(site: Site, idle: int, trickling: int) -> Iterator[Flood]:
    with Flood(site.server.port, idle, trickling) as flood:
        wait_for(lambda: flood.opened >= idle + trickling, 10, "the flood to be open")
        yield flood


def test_a_flood_without_the_token_cannot_keep_the_owner_out(site: Site) -> None:
    with _flood(site, IDLE, TRICKLING) as flood:
        took: list[float] = []
        flood.stop.wait(0.5)  # the server has accepted them all by now
        ends = time.monotonic() + HEAD_SECONDS + 3  # past the trickling ones being cut
        while time.monotonic() < ends:
            asked = time.monotonic()
            status, _, body = site.request("GET", "/api/search?q=fake")
            took.append(time.monotonic() - asked)
            assert status == 200, (status, body)
            flood.stop.wait(0.25)
        # The trickling connections were cut, at the head's deadline, not kept.
        assert flood.kept and max(flood.kept) < HEAD_SECONDS + 3, flood.kept
    assert max(took) < 2.0, took
    print(f"\n{IDLE} idle and {TRICKLING} trickling connections without the token: "
          f"{len(took)} requests with it answered, the slowest in {max(took) * 1000:.0f} ms; "
          f"connections kept at most {max(flood.kept):.1f} s")


def test_a_larger_flood_is_refused_without_threads_piling_up(site: Site) -> None:
    before = _threads()
    most = before
    with _flood(site, 4 * MAX_WAITING, 0) as flood:
        for _ in range(10):
            most = max(most, _threads())
            flood.stop.wait(0.1)
        status, _, _ = site.request("GET", "/api/folders")
        assert status == 200
        most = max(most, _threads())
        # The oldest waiting connections were made to go (with a 503), not given threads.
        assert flood.kept, "no connection was refused"
        # A request without the token is still answered (refused), and its connection ends.
        status, headers, _ = site.request("GET", "/api/folders", token=False)
        assert status == 403 and headers.get("connection") == "close"
    # The flood thread, plus at most the few threads for connections without the token.
    assert most - before <= 1 + MAX_UNVERIFIED, (before, most)
    print(f"\n{4 * MAX_WAITING} connections at once: {most - before - 1} more threads")
    wait_for(lambda: _threads() <= before, 10, "the page's threads to end")
