"""Control of a running daemon: a local socket, the per-user lock, and their clients.

The daemon listens on a Unix socket inside the per-user runtime folder (0700), the socket
itself 0600, so only its user can talk to it. The protocol is one JSON object per line:
a request ``{"cmd": "pause"}`` (or ``{"cmd": "retry", "paths": [...], "all_failed": false}``)
is answered by ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "..."}``.
``ocrwatch status | pause | resume | stop | rescan | retry`` are thin clients of it.

One daemon per user: :class:`InstanceLock` holds an ``flock`` on a file in the same folder
for the daemon's lifetime. The kernel drops the lock when the process dies, so a crash
never leaves a stale lock behind (unlike a PID file alone).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import queue
import selectors
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

from ocrwatch import paths
from ocrwatch.errors import DaemonNotRunning, DaemonRunning, OcrwatchError
from ocrwatch.status import Status

log = logging.getLogger(__name__)

NOT_RUNNING = "no ocrwatch daemon is running for this user; start one with `ocrwatch run`"
MAX_LINE = 64 * 1024  # a request is a short JSON line; anything longer is refused
CLIENT_IDLE_SECONDS = 5.0  # a client must send a whole request line within this
REPLY_SECONDS = 5.0  # ... and take its answer within this
MAX_CLIENTS = 64  # connections held at once; the longest idle one makes room for a new one
WORKERS = 4  # threads answering requests (status, pause...) side by side
COMMANDS = ("ping", "status", "pause", "resume", "stop", "rescan", "retry", "web")


@runtime_checkable
class Controllable(Protocol):
    """What the tray and the control socket need from the daemon.

    The return values of the methods other than ``status`` and ``retry`` are ignored.
    """

    def status(self) -> Status: ...

    def pause(self) -> object: ...

    def resume(self) -> object: ...

    def request_stop(self) -> object: ...

    def rescan(self) -> object: ...

    def retry(self, paths: list[str] | None, all_failed: bool) -> int: ...


# --------------------------------------------------------------------------- server


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
        self._thread: threading.Thread | None = None
        self._workers: list[threading.Thread] = []
        self._jobs: queue.SimpleQueue[tuple[_Client, bytes | None] | None] = queue.SimpleQueue()
        self._returned: queue.SimpleQueue[_Client] = queue.SimpleQueue()
        self._clients: set[_Client] = set()  # touched by the selector thread only
        self._wake_r, self._wake_w = -1, -1
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._closed = False
        self._handlers: dict[str, Callable[[dict[str, Any]], Any]] = {
            "ping": lambda _req: {"pid": os.getpid()},
            "status": lambda _req: self.target.status().to_dict(),
            "pause": self._pause,
            "resume": self._resume,
            "stop": self._stop,
            "rescan": self._rescan,
            "retry": self._retry,
            "web": self._web,
        }

    # -- lifecycle

    def start(self) -> None:
        with self._lock:
            if self._closed:
                raise OcrwatchError("the control server was closed; create a new one")
            if self._thread is not None:
                return
            self._sock = self._bind()
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_w, False)
            self._thread = threading.Thread(
                target=self._serve, name="ocrwatch-control", daemon=True
            )
            self._workers = [
                threading.Thread(target=self._work, name=f"ocrwatch-control-{n}", daemon=True)
                for n in range(WORKERS)
            ]
            self._thread.start()
            for worker in self._workers:
                worker.start()
        log.info("control socket listening at %s", self.path)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        self._closing.set()
        self._wake()
        for _ in self._workers:
            self._jobs.put(None)
        me = threading.current_thread()
        wait = REPLY_SECONDS + 5
        for t in [thread, *self._workers]:
            if t is not None and t is not me:
                t.join(timeout=wait)
                if t.is_alive():
                    log.warning("the control thread %s did not end within %.0f s",
                                t.name, wait)
        if thread is None or thread is not me:
            self._cleanup()

    def __enter__(self) -> ControlServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

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
            raise OcrwatchError(
                f"cannot listen on the control socket {self.path}: {exc.strerror}. "
                "Check that the folder exists and belongs to you."
            ) from exc
        return sock

    def _cleanup(self) -> None:
        for client in list(self._clients):
            if not client.busy:  # a worker still answering closes its own
                client.sock.close()
        self._clients.clear()
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

    def _serve(self) -> None:
        assert self._sock is not None
        sel = selectors.DefaultSelector()
        sel.register(self._sock, selectors.EVENT_READ)
        sel.register(self._wake_r, selectors.EVENT_READ)
        try:
            while not self._closing.is_set():
                try:
                    self._serve_once(sel)
                except Exception:
                    # Whatever happened, the next client must still get an answer.
                    log.exception("control socket: unexpected error (serving on)")
        finally:
            sel.close()
            if self._closed and self._thread is threading.current_thread():
                # close() was called from a request handler and could not join us.
                self._cleanup()

    def _serve_once(self, sel: selectors.BaseSelector) -> None:
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
        while True:
            job = self._jobs.get()
            if job is None:
                return
            client, line = job
            try:
                if line is None:
                    reply: dict[str, Any] = {"ok": False, "error": (
                        f"request too long (more than {MAX_LINE} bytes in one line)")}
                else:
                    reply = self.handle_line(line)
                client.sock.settimeout(REPLY_SECONDS)  # a client that never reads
                client.sock.sendall(_encode(reply))
                client.sock.setblocking(False)
            except Exception as exc:
                if not isinstance(exc, OSError):
                    log.exception("control socket: could not answer a client")
                client.sock.close()  # the selector thread forgets it on its return
            if self._closing.is_set():
                client.sock.close()
            self._returned.put(client)
            self._wake()

    def handle_line(self, line: bytes) -> dict[str, Any]:
        """Answer one request line; never raises."""
        try:
            req = json.loads(line)
        except Exception:  # also RecursionError from a deeply nested line
            return {"ok": False, "error": "request is not valid JSON"}
        if not isinstance(req, dict) or not isinstance(req.get("cmd"), str):
            return {"ok": False, "error": 'request must be a JSON object like {"cmd": "status"}'}
        cmd = req["cmd"]
        handler = self._handlers.get(cmd)
        if handler is None:
            return {"ok": False,
                    "error": f"unknown command {_short(cmd)!r}; known: {', '.join(COMMANDS)}"}
        try:
            return {"ok": True, "result": handler(req)}
        except OcrwatchError as exc:
            return {"ok": False, "error": str(exc)}
        except Exception as exc:
            log.exception("control command %r failed", cmd)
            return {"ok": False,
                    "error": f"{cmd} failed inside the daemon: {exc!r}; see the daemon's log"}

    def _pause(self, _req: dict[str, Any]) -> dict[str, Any]:
        self.target.pause()
        return self.target.status().to_dict()

    def _resume(self, _req: dict[str, Any]) -> dict[str, Any]:
        self.target.resume()
        return self.target.status().to_dict()

    def _stop(self, _req: dict[str, Any]) -> dict[str, Any]:
        log.info("stop requested over the control socket")
        self.target.request_stop()
        return {"pid": os.getpid()}

    def _rescan(self, _req: dict[str, Any]) -> None:
        self.target.rescan()

    def _web(self, _req: dict[str, Any]) -> dict[str, str]:
        web_url = getattr(self.target, "web_url", None)
        if web_url is None:
            raise OcrwatchError("this daemon has no search page")
        return {"url": str(web_url())}

    def _retry(self, req: dict[str, Any]) -> int:
        raw = req.get("paths")
        if raw is not None and (not isinstance(raw, list)
                                or not all(isinstance(p, str) for p in raw)):
            raise OcrwatchError("retry: 'paths' must be a list of file paths")
        return self.target.retry(raw, bool(req.get("all_failed", False)))


class _Client:
    """One connection: what it sent so far and when it must have sent a whole line."""

    __slots__ = ("buf", "busy", "deadline", "sock")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.buf = bytearray()
        self.busy = False  # a worker holds it: not read, no deadline


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _encode(obj: dict[str, Any]) -> bytes:
    try:
        return json.dumps(obj, default=str).encode() + b"\n"
    except Exception as exc:  # a result that cannot be written as JSON
        log.exception("control socket: cannot encode an answer")
        return json.dumps({"ok": False, "error": f"cannot encode the answer: {exc!r}"}
                          ).encode() + b"\n"


def _send_nowait(conn: socket.socket, obj: dict[str, Any]) -> None:
    """A last word to a client that is being dropped, if its buffer takes it at once."""
    with contextlib.suppress(OSError):
        conn.send(_encode(obj))


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


# --------------------------------------------------------------------------- client


def request(
    cmd: str,
    *,
    socket_path: Path | str | None = None,
    timeout: float = 10.0,
    **args: Any,
) -> Any:
    """Send one command to the running daemon and return its result.

    Raises DaemonNotRunning when nothing listens (no socket, or a stale one), and
    OcrwatchError with the daemon's message when it refuses the command.
    """
    path = Path(socket_path) if socket_path is not None else paths.control_socket()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            _connect(sock, path, timeout)
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            raise DaemonNotRunning(NOT_RUNNING) from None
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTSOCK):
                raise DaemonNotRunning(NOT_RUNNING) from None
            raise OcrwatchError(
                f"cannot reach the daemon at {path}: {exc.strerror or exc}"
            ) from exc
        try:
            sock.sendall(json.dumps({"cmd": cmd, **args}).encode() + b"\n")
            buf = b""
            while b"\n" not in buf:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                buf += chunk
        except TimeoutError:
            raise OcrwatchError(
                f"the daemon did not answer `{cmd}` within {timeout:.0f} s; it may be busy. "
                "Try again, or see its log (the path is in `ocrwatch status` output)."
            ) from None
        except (ConnectionResetError, BrokenPipeError):
            raise DaemonNotRunning(NOT_RUNNING) from None
    finally:
        sock.close()
    if not buf.strip():
        # The daemon closed the connection without a word: it is going away.
        raise DaemonNotRunning(NOT_RUNNING)
    try:
        reply = json.loads(buf.split(b"\n", 1)[0])
    except ValueError:
        raise OcrwatchError(
            f"the process on {path} did not answer like an ocrwatch daemon"
        ) from None
    if not isinstance(reply, dict) or "ok" not in reply:
        raise OcrwatchError(f"the process on {path} did not answer like an ocrwatch daemon")
    if not reply["ok"]:
        raise OcrwatchError(str(reply.get("error", "the daemon refused the command")))
    return reply.get("result")


def _connect(sock: socket.socket, path: Path, timeout: float) -> None:
    """Connect, waiting up to ``timeout`` while the daemon's backlog is full (EAGAIN)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock.connect(str(path))
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise OcrwatchError(
                    f"the daemon at {path} is too busy to take a connection; try again"
                ) from None
            time.sleep(0.05)


def is_running(*, socket_path: Path | str | None = None, timeout: float = 2.0) -> bool:
    """Whether a daemon answers on the control socket."""
    try:
        request("ping", socket_path=socket_path, timeout=timeout)
    except OcrwatchError:
        return False
    return True


def stop_daemon(
    *, socket_path: Path | str | None = None, timeout: float = 60.0, poll: float = 0.1
) -> int:
    """Ask the daemon to stop and wait until it no longer answers; return its PID.

    Raises DaemonNotRunning when none runs, and OcrwatchError when it is still answering
    after ``timeout`` seconds (it finishes the page in hand first).
    """
    result = request("stop", socket_path=socket_path)
    pid = int(result["pid"]) if isinstance(result, dict) and "pid" in result else -1
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_running(socket_path=socket_path, timeout=poll * 10):
            return pid
        time.sleep(poll)
    raise OcrwatchError(
        f"the daemon (PID {pid}) is still running {timeout:.0f} s after being asked to stop; "
        f"it may be finishing a long page. Wait, or end it with `kill {pid}`."
    )


# --------------------------------------------------------------------------- lock


class InstanceLock:
    """One daemon per user: an exclusive ``flock`` on a file holding the daemon's PID.

    ``busy``: the message when another process holds it, with ``{who}`` for its PID.
    """

    def __init__(self, path: Path | str | None = None, *, busy: str | None = None) -> None:
        self.path = Path(path) if path is not None else paths.lock_file()
        self._fd: int | None = None
        self._busy = busy or (
            "an ocrwatch daemon is already running for this user ({who}); stop it with "
            "`ocrwatch stop` (or Quit in its tray menu) before starting another")

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise OcrwatchError(f"cannot lock {self.path}: {exc.strerror}") from exc
            pid = read_pid(self.path)
            who = f"PID {pid}" if pid else "another process"
            raise DaemonRunning(self._busy.format(who=who)) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        """Drop the lock; safe twice. The file stays: removing it would race a newcomer."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def __enter__(self) -> InstanceLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def database_lock(database: Path) -> InstanceLock:
    """The lock beside the index: one daemon per database, whatever its runtime folder.

    The per-user lock lives in ``XDG_RUNTIME_DIR``; two sessions (or a ``sudo -E``) with
    different runtime folders would each get one and both write the same index.
    """
    return InstanceLock(
        database.with_name(database.name + ".lock"),
        busy=(f"another ocrwatch daemon ({{who}}) already uses the index {database}; stop it "
              "(`ocrwatch stop` in its session, or `kill` its PID) or give this one another "
              "--database"))


class DaemonLocks:
    """Both locks a daemon holds: the per-user one and the one beside its database."""

    def __init__(self, database: Path) -> None:
        self.locks = [InstanceLock(), database_lock(database)]

    def acquire(self) -> None:
        taken: list[InstanceLock] = []
        try:
            for lock in self.locks:
                lock.acquire()
                taken.append(lock)
        except BaseException:
            for lock in taken:
                lock.release()
            raise

    def release(self) -> None:
        for lock in reversed(self.locks):
            lock.release()


def read_pid(path: Path | str | None = None) -> int | None:
    """The PID written in the lock file, or None when there is none."""
    p = Path(path) if path is not None else paths.lock_file()
    try:
        text = p.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None
