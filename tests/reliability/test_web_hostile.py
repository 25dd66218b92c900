"""The search page under attack, on a real ``ocrwatch run`` and real sockets on 127.0.0.1:

- a client that closes mid-answer leaves no traceback on the daemon's console;
- the browser's command line (readable by every local user in /proc/PID/cmdline) holds
  nothing another user can use, and the log at DEBUG holds no token or code;
- a slowloris flood (no token needed) under a lowered open-file limit neither keeps
  ``status`` from answering nor fails a dropped file with "Too many open files".
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .helpers import (
    DaemonProcess,
    Home,
    drop,
    image_bytes,
    ocrwatch_cli,
    states,
    wait_for,
)


@dataclass
class Page:
    daemon: DaemonProcess
    url: str  # with the token, as `ocrwatch search --web --no-open` prints it
    port: int
    token: str


def _start(home: Home, make: Callable[..., DaemonProcess], prefix: list[str] | None = None
           ) -> Page:
    config = home.root / "config.toml"
    config.write_text('log_level = "DEBUG"\n')
    daemon = make(OCRWATCH_CONFIG=str(config))
    daemon.prefix = prefix or []
    daemon.start()
    daemon.wait_ready()
    drop(home.inbox / "letter.png", image_bytes("letter"))
    wait_for(lambda: states(home.database).get("done") == 1, 60, "the letter to be read")
    shown = ocrwatch_cli(home, "search", "--web", "--no-open", OCRWATCH_CONFIG=str(config))
    assert shown.returncode == 0, shown.stderr
    url = shown.stdout.strip()
    parts = urllib.parse.urlsplit(url)
    token = urllib.parse.parse_qs(parts.query)["token"][0]
    assert parts.port is not None
    return Page(daemon, url, parts.port, token)


@pytest.fixture
def page(home: Home, daemon_process: Callable[..., DaemonProcess]) -> Iterator[Page]:
    yield _start(home, daemon_process)


def _request(port: int, path: str, token: str | None = None, cookie: str | None = None
             ) -> bytes:
    lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
    if token:
        lines.append(f"X-Ocrwatch-Token: {token}")
    if cookie:
        lines.append(f"Cookie: {cookie}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _fetch(port: int, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(raw)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


# -- a client that goes away mid-answer --------------------------------------------------

def test_a_client_that_closes_mid_answer_leaves_no_traceback(page: Page) -> None:
    """Typing into the page aborts the previous query: the browser closes that connection
    before the answer. Each one printed BrokenPipeError tracebacks on the console."""
    paths = ["/api/search?q=letter", "/api/search?q=fake&prefix=1", "/static/app.js",
             "/api/folders", "/"]
    for n in range(30):
        s = socket.create_connection(("127.0.0.1", page.port), timeout=10)
        s.sendall(_request(page.port, paths[n % len(paths)], token=page.token))
        if n % 2:  # half with a reset (a tab closed), half with a plain close
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    # The page still answers, and the daemon ends cleanly (its server joins every
    # request's thread first, so every traceback would be printed by then).
    assert b" 200 " in _fetch(page.port, _request(page.port, "/api/folders", page.token))
    wait_for(lambda: page.daemon.output().count("search page: ") >= 31, 30,
             "the requests to be answered")
    assert page.daemon.stop() == 0
    out = page.daemon.output()
    assert "Traceback" not in out and "BrokenPipeError" not in out, out[-3000:]
    assert "ConnectionResetError" not in out


# -- the browser's command line and the log ----------------------------------------------

_BROWSER = textwrap.dedent('''
    import http.cookiejar, os, re, sys, time, urllib.parse, urllib.request
    pidfile, go, result = sys.argv[1:4]
    url = sys.argv[4]
    if os.fork():
        sys.exit(0)  # as a browser does: the launcher returns, the browser lives on
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    with open(pidfile, "w") as fh:
        fh.write(str(os.getpid()))
    while not os.path.exists(go):
        time.sleep(0.02)
    if url.startswith("file://"):
        page = open(urllib.parse.urlsplit(url).path).read()
        url = re.search(r'url=([^"]+)"', page).group(1).replace("&amp;", "&")
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    opener.open(url, timeout=10).read()
    base = url.split("?")[0]
    body = opener.open(base + "api/search?q=letter", timeout=10).read()
    with open(result + ".tmp", "wb") as fh:
        fh.write(body)
    os.rename(result + ".tmp", result)
''')

# Another local user: reads the browser's command line and tries whatever it finds.
_ATTACKER = textwrap.dedent('''
    import json, re, sys, urllib.parse, urllib.request
    pid = sys.argv[1]
    args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
    found = {"args": [a.decode(errors="replace") for a in args if a], "got": []}
    def attempt(url):
        parts = urllib.parse.urlsplit(url)
        base = f"http://127.0.0.1:{parts.port}/"
        query = urllib.parse.parse_qs(parts.query)
        tries = []
        for key in ("token", "code"):
            for value in query.get(key, []):
                tries.append(urllib.request.Request(base + "api/search?q=letter&" + key
                                                    + "=" + value))
                tries.append(urllib.request.Request(base + "api/search?q=letter",
                             headers={"X-Ocrwatch-Token": value}))
                tries.append(urllib.request.Request(url))
        for req in tries:
            try:
                with urllib.request.urlopen(req, timeout=5) as reply:
                    body = reply.read()
                    if b"letter" in body:
                        found["got"].append(req.full_url)
            except Exception:
                pass
    for arg in found["args"]:
        for url in re.findall(r"https?://[^\\s]+", arg):
            attempt(url)
        if arg.startswith("file://"):
            try:
                text = open(urllib.parse.urlsplit(arg).path).read()
            except OSError as exc:
                found.setdefault("unreadable", []).append(str(exc))
                continue
            for url in re.findall(r'url=([^"]+)"', text):
                attempt(url.replace("&amp;", "&"))
    print(json.dumps(found))
''')


def _as_other_user() -> list[str]:
    """Run as nobody when the tests run as root; else as this user (then the 0600 file
    cannot be refused to it, and only what is on the command line is tried)."""
    if os.getuid() == 0:
        return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    return []


def _attack(pid: int) -> dict[str, object]:
    done = subprocess.run([*_as_other_user(), "/usr/bin/python3", "-c", _ATTACKER, str(pid)],
                          capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    found: dict[str, object] = json.loads(done.stdout)
    return found


def test_the_browsers_command_line_is_useless_to_other_users(home: Home, page: Page) -> None:
    pidfile, go, result = (home.root / n for n in ("browser.pid", "go", "result.json"))
    browser = home.root / "browser.py"
    browser.write_text(_BROWSER)
    env = {"BROWSER": f"{sys.executable} {browser} {pidfile} {go} {result} %s",
           "OCRWATCH_CONFIG": str(home.root / "config.toml")}
    shown = ocrwatch_cli(home, "search", "--web", **env)
    assert shown.returncode == 0, shown.stderr
    pid = int(wait_for(lambda: pidfile.exists() and pidfile.read_text(), 30,
                       "the browser to start"))
    try:
        # Before the browser has used what it was given (the attacker's best chance) ...
        before = _attack(pid)
        args = " ".join(str(a) for a in before["args"])  # type: ignore[attr-defined]
        assert page.token not in args, "the token is on the browser's command line"
        assert before["got"] == [], f"another user read the index with {before}"
        launch = [a for a in before["args"] if str(a).startswith("file://")]  # type: ignore[attr-defined]
        code = None
        if launch:
            path = Path(urllib.parse.urlsplit(str(launch[0])).path)
            assert path.stat().st_mode & 0o777 == 0o600
            assert path.parent.stat().st_mode & 0o077 == 0
            match = re.search(r"code=([\w-]+)", path.read_text())
            assert match is not None
            code = match.group(1)
        # ... the browser, as this user, gets in ...
        go.write_text("")
        wait_for(result.exists, 30, "the browser to load the page")
        assert json.loads(result.read_text())["hits"], "the browser found nothing"
        # ... and afterwards what it was given is spent, for anyone.
        after = _attack(pid)
        assert after["got"] == [], after
        if code is not None:
            replay = _fetch(page.port, _request(page.port, f"/?code={code}"))
            assert replay.startswith(b"HTTP/1.1 403"), replay[:200]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
    # No token and no code in the log at DEBUG, nor on the console.
    assert page.daemon.stop() == 0
    logs = page.daemon.output() + "".join(
        p.read_text(errors="replace") for p in home.state.rglob("*.log"))
    assert "search page: " in logs  # the request lines were logged at DEBUG ...
    assert page.token not in logs  # ... without the token
    if code is not None:
        assert code not in logs


# -- slowloris under a low open-file limit -----------------------------------------------

CONNECTIONS = int(os.environ.get("OCRWATCH_SLOWLORIS_CONNECTIONS", "400"))
SECONDS = float(os.environ.get("OCRWATCH_SLOWLORIS_SECONDS", "14"))
NOFILE = 200


class Slowloris:
    """Up to ``count`` connections to ``port``, each sent one byte every half second (no
    token: none is needed to hold a connection); the ones the server closes are opened
    again at once. Non-blocking throughout, on one thread, for a bounded time."""

    def __init__(self, port: int, count: int) -> None:
        self.port, self.count = port, count
        self.socks: dict[socket.socket, float] = {}  # socket -> when it was opened
        self.closed_after: list[float] = []  # how long the server kept each one
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="slowloris")

    def _open(self) -> None:
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", self.port))
        self.socks[s] = time.monotonic()

    def _run(self) -> None:
        while not self.stop.is_set():
            while len(self.socks) < self.count:
                self._open()
            for s, opened in list(self.socks.items()):
                try:
                    s.send(b"G")
                except BlockingIOError:
                    pass  # not connected yet, or the server reads nothing: both hold it
                except OSError:
                    self.closed_after.append(time.monotonic() - opened)
                    del self.socks[s]
                    s.close()
            self.stop.wait(0.5)
        for s in self.socks:
            s.close()

    def __enter__(self) -> Slowloris:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


def test_slowloris_under_a_low_file_limit_keeps_status_and_reading_going(
        home: Home, daemon_process: Callable[..., DaemonProcess]) -> None:
    page = _start(home, daemon_process, ["prlimit", f"--nofile={NOFILE}:{NOFILE}"])
    status_took: list[float] = []
    with Slowloris(page.port, CONNECTIONS) as flood:
        started = time.monotonic()
        wait_for(lambda: len(flood.socks) >= CONNECTIONS, 30, "the flood to be under way")
        drop(home.inbox / "during.png", image_bytes("during the flood"))
        while time.monotonic() - started < SECONDS:
            asked = time.monotonic()
            done = ocrwatch_cli(home, "status", "--json", timeout=30)
            status_took.append(time.monotonic() - asked)
            assert done.returncode == 0, f"status failed in the flood: {done.stderr}"
            flood.stop.wait(max(0.0, 1.0 - (time.monotonic() - asked)))
        wait_for(lambda: states(home.database).get("done") == 2
                 or states(home.database).get("failed"), 60, "the dropped file to be read")
        assert states(home.database) == {"done": 2}, page.daemon.output()[-2000:]
        assert max(status_took) < 10, status_took
        # Connections sending a byte every half second are closed all the same.
        kept = sorted(flood.closed_after)
    assert kept and kept[-1] < 10 + 3, kept[-5:]
    # Once the flood's sockets are closed the page serves again; until the server has seen
    # each of them end it may still be full and answer 503 with Retry-After, as it should.
    wait_for(lambda: b" 200 " in _fetch(page.port, _request(page.port, "/api/folders",
                                                            page.token)),
             15, "the search page to answer again after the flood")
    assert page.daemon.stop() == 0
    out = page.daemon.output()
    # The listener's own pause at a full descriptor table is expected; nothing else may
    # have met it.
    others = [line for line in out.splitlines() if "cannot accept a connection" not in line]
    assert not [line for line in others if "Too many open files" in line], out[-3000:]
    print(f"\nslowloris: {CONNECTIONS} connections kept open for {SECONDS:g} s against a "
          f"daemon with nofile={NOFILE}: {len(kept)} closed by the server, the longest "
          f"after {kept[-1]:.1f} s; status answered in at most {max(status_took):.2f} s "
          f"({len(status_took)} asked); the dropped file was read")


def test_a_code_works_once_and_old_launch_pages_are_removed(
        tmp_path: Path, home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    from ocrwatch.pages.thumbs import Thumbnails
    from ocrwatch.store.db import Database
    from ocrwatch.web.server import CODE_SECONDS, SearchServer

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(home.run))  # the launch pages' folder
    Database(tmp_path / "index.sqlite3").close()
    with SearchServer(tmp_path / "index.sqlite3", Thumbnails(tmp_path / "thumbs"),
                      write_token_file=False) as server:
        first = Path(urllib.parse.urlsplit(server.launch_url()).path)
        match = re.search(r"code=([\w-]+)", first.read_text())
        assert match is not None
        raw = _request(server.port, f"/?code={match.group(1)}")
        answer = _fetch(server.port, raw)
        assert answer.startswith(b"HTTP/1.1 303") and server.token.encode() in answer
        assert not first.exists()  # spent: its page is removed
        assert _fetch(server.port, raw).startswith(b"HTTP/1.1 403")  # and it is void
        stale = Path(urllib.parse.urlsplit(server.launch_url()).path)
        old = time.time() - CODE_SECONDS - 60
        os.utime(stale, (old, old))
        fresh = Path(urllib.parse.urlsplit(server.launch_url()).path)
        assert fresh.exists() and not stale.exists()
    assert not fresh.exists()  # the server's own pages go with it
