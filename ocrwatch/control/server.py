"""The daemon's end of the control socket: many clients at once, none able to hold it up."""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import selectors
import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ocrwatch.control.protocol import MAX_LINE, Commands, Controllable, encode
from ocrwatch.core.errors import DaemonRunning, MachineError, StateError
from ocrwatch.core.threads import Loop
from ocrwatch.fs import paths

log = logging.getLogger(__name__)

CLIENT_IDLE_SECONDS = 5.0  # a client must send a whole request line within this
REPLY_SECONDS = 5.0  # ... and take its answer within this
MAX_CLIENTS = 64  # connections held at once; the longest idle one makes room for a new one
WORKERS = 4  # threads answering requests (status, pause...) side by side


class ControlServer:
    """Answers control requests on a Unix socket, many clients at once.

    One thread multiplexes every connection with a selector (reading never blocks it), and
    a few worker threads answer complete request lines. So a client that connects and says
    nothing, or sends a byte now and then, costs a file descriptor until its deadline and
    never delays ``status`` for anyone else. Each request must arrive whole within
    ``CLIENT_IDLE_SECONDS`` and be at most ``MAX_LINE`` bytes; its answer must be taken within
    ``REPLY_SECONDS``. Every error is caught per request or per connection: the server
    stays up whatever a client sends.

    Lifecycle: created, ``start()`` once, ``close()`` (safe twice, also from a request
    handler). ``close()`` joins the threads and removes the socket file.
    """

    def __init__(self, path: Path | str | None, target: Controllable) -> None:
        self.path = Path(path) if path is not None else paths.control_socket()
        self.target = target
        self._sock: socket.socket | None = None
        self._sel: selectors.BaseSelector | None = None
        self._threads: list[Loop] = []  # the selector's, then the workers
        self._jobs: queue.SimpleQueue[tuple[_Client, bytes | None] | None] = queue.SimpleQueue()
        self._returned: queue.SimpleQueue[_Client] = queue.SimpleQueue()
        self._clients: set[_Client] = set()  # touched by the selector thread only
        self._wake_r, self._wake_w = -1, -1
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._closed = False
        self.commands = Commands(target)

    # -- lifecycle

    def start(self) -> None:
        with self._lock:
            if self._closed:
                raise StateError("the control server was closed; create a new one")
            if self._threads:
                return
            self._sock = self._bind()
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_w, False)
            self._sel = selectors.DefaultSelector()
            self._sel.register(self._sock, selectors.EVENT_READ)
            self._sel.register(self._wake_r, selectors.EVENT_READ)
            # Whatever goes wrong in one round, the next client must still get an answer.
            self._threads = [
                Loop("ocrwatch-control", self._serve_once, self._wake, error_pause=0.0),
                *(Loop(f"ocrwatch-control-{n}", self._work, lambda: self._jobs.put(None))
                  for n in range(WORKERS)),
            ]
            for thread in self._threads:
                thread.start()
        log.info("control socket listening at %s", self.path)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._closing.set()
        # Every thread is asked first: a worker takes whichever stop comes first.
        for thread in self._threads:
            thread.stop()
        wait = REPLY_SECONDS + 5
        for thread in self._threads:  # join() passes over the thread calling close()
            if not thread.join(wait):
                log.warning("the control thread %s did not end within %.0f s",
                            thread.name, wait)
        self._cleanup()

    def __enter__(self) -> ControlServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def running(self) -> bool:
        return bool(self._threads) and self._threads[0].alive

    def _bind(self) -> socket.socket:
        parent = self.path.parent
        parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.path.exists() or self.path.is_symlink():
            # The instance lock says we are the only daemon, so a socket file left here is
            # from a crash; but never steal a socket that still answers.
            if _answers(self.path):
                raise DaemonRunning(
                    f"another process answers on {self.path}; stop it with `ocrwatch stop` "
                    "before starting a new daemon"
                )
            log.info("removing a stale control socket %s", self.path)
            self.path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(self.path))
            # The runtime folder is 0700 already; 0600 on the socket itself keeps it private
            # even where someone points the socket at a shared folder.
            os.chmod(self.path, 0o600)
            sock.listen(128)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise MachineError(
                f"cannot listen on the control socket {self.path}: {exc.strerror}. "
                "Check that the folder exists and belongs to you."
            ) from exc
        return sock

    def _cleanup(self) -> None:
        for client in list(self._clients):
            if not client.busy:  # a worker still answering closes its own
                client.sock.close()
        self._clients.clear()
        if self._sel is not None and not self.running:  # the selector thread's own
            self._sel.close()
            self._sel = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._wake_r = self._wake_w = -1

    def _wake(self) -> None:
        if self._wake_w >= 0:
            with contextlib.suppress(OSError):  # full pipe: it is awake already
                os.write(self._wake_w, b"x")

    # -- the selector thread: accepting and reading

    def _serve_once(self) -> None:
        """One round: wait for what comes (a client, a request, the deadline of the first
        client due), read it, and take back the clients the workers answered."""
        sel = self._sel
        if sel is None or self._closing.is_set():
            return
        now = time.monotonic()
        deadlines = [c.deadline for c in self._clients if not c.busy]
        timeout = max(0.0, min(deadlines) - now) if deadlines else None
        for key, _ in sel.select(timeout):
            if self._closing.is_set():
                return
            if key.fileobj is self._sock:
                for _ in range(MAX_CLIENTS):  # all that wait, not one per wake-up
                    if not self._accept(sel):
                        break
            elif key.fileobj == self._wake_r:
                with contextlib.suppress(OSError):
                    os.read(self._wake_r, 4096)
            else:
                client = key.data
                try:
                    self._read(sel, client)
                except Exception as exc:
                    if not isinstance(exc, OSError):
                        log.exception("control socket: dropped a client after an error")
                    self._drop(sel, client)
        while not self._returned.empty():
            client = self._returned.get()
            if client.sock.fileno() < 0:
                self._clients.discard(client)
                continue
            client.busy = False
            client.deadline = time.monotonic() + CLIENT_IDLE_SECONDS
            if self._complete_line(client):
                continue
            sel.register(client.sock, selectors.EVENT_READ, client)
        now = time.monotonic()
        for client in [c for c in self._clients if not c.busy and c.deadline <= now]:
            # Said nothing, or not a whole request, in time: its loss, nobody else's.
            _send_nowait(client.sock, {"ok": False, "error": (
                f"no complete request within {CLIENT_IDLE_SECONDS:g} s; closing")})
            self._drop(sel, client)

    def _accept(self, sel: selectors.BaseSelector) -> bool:
        """Take one waiting client; False when none waits."""
        assert self._sock is not None
        try:
            conn, _ = self._sock.accept()
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as exc:  # EMFILE and the like: the listener itself is fine
            log.warning("control socket: cannot accept a client: %s", exc)
            return False
        conn.setblocking(False)
        try:
            same = _same_user(conn)
        except OSError:
            same = False
        if not same:
            log.warning("refused a control connection from another user")
            conn.close()
            return True
        if len(self._clients) >= MAX_CLIENTS:
            # Make room by dropping the client idle the longest; a new client is more
            # likely a user typing `ocrwatch status` than the oldest silent one.
            idle = [c for c in self._clients if not c.busy]
            if not idle:
                _send_nowait(conn, {"ok": False, "error": "too many control clients at once; "
                                    "try again in a moment"})
                conn.close()
                return True
            self._drop(sel, min(idle, key=lambda c: c.deadline))
        client = _Client(conn, time.monotonic() + CLIENT_IDLE_SECONDS)
        self._clients.add(client)
        sel.register(conn, selectors.EVENT_READ, client)
        return True

    def _read(self, sel: selectors.BaseSelector, client: _Client) -> None:
        try:
            chunk = client.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        if not chunk:
            self._drop(sel, client)
            return
        client.buf += chunk
        if self._complete_line(client):
            sel.unregister(client.sock)
        elif len(client.buf) > MAX_LINE:
            _send_nowait(client.sock, {"ok": False, "error": (
                f"request too long (more than {MAX_LINE} bytes in one line)")})
            self._drop(sel, client)

    def _complete_line(self, client: _Client) -> bool:
        """Hand the next whole line of ``client`` to a worker; False when there is none."""
        while b"\n" in client.buf:
            raw, _, rest = client.buf.partition(b"\n")
            client.buf = bytearray(rest)
            line = bytes(raw) if len(raw) <= MAX_LINE else None  # None: too long
            if line is None or line.strip():
                client.busy = True
                self._jobs.put((client, line))
                return True
        return False

    def _drop(self, sel: selectors.BaseSelector, client: _Client) -> None:
        if client.sock.fileno() >= 0:
            with contextlib.suppress(KeyError, ValueError):
                sel.unregister(client.sock)
        self._clients.discard(client)
        client.sock.close()

    # -- worker threads: answering

    def _work(self) -> None:
        """Answer one request line (None: a wake-up, to see whether to stop)."""
        job = self._jobs.get()
        if job is not None:
            self._answer(*job)

    def _answer(self, client: _Client, line: bytes | None) -> None:
        try:
            if line is None:
                reply: dict[str, Any] = {"ok": False, "error": (
                    f"request too long (more than {MAX_LINE} bytes in one line)")}
            else:
                reply = self.commands.handle_line(line)
            client.sock.settimeout(REPLY_SECONDS)  # a client that never reads
            client.sock.sendall(encode(reply))
            client.sock.setblocking(False)
        except Exception as exc:
            if not isinstance(exc, OSError):
                log.exception("control socket: could not answer a client")
            client.sock.close()  # the selector thread forgets it on its return
        if self._closing.is_set():
            client.sock.close()
        self._returned.put(client)
        self._wake()


class _Client:
    """One connection: what it sent so far and when it must have sent a whole line."""

    __slots__ = ("buf", "busy", "deadline", "sock")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.buf = bytearray()
        self.busy = False  # a worker holds it: not read, no deadline


def _send_nowait(conn: socket.socket, obj: dict[str, Any]) -> None:
    """A last word to a client that is being dropped, if its buffer takes it at once."""
    with contextlib.suppress(OSError):
        conn.send(encode(obj))


def _same_user(conn: socket.socket) -> bool:
    """Check the peer's user where the platform tells it (the file mode already does)."""
    if sys.platform.startswith("linux"):
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        return bool(uid == os.getuid())
    return True


def _answers(path: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            s.connect(str(path))
    except OSError:
        return False
    return True
