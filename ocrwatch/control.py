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

log = logging.getLogger(__name__)

NOT_RUNNING = "no ocrwatch daemon is running for this user; start one with `ocrwatch run`"
MAX_LINE = 64 * 1024  # a request is a short JSON line; anything longer is refused
CLIENT_IDLE_SECONDS = 5.0  # a connected client that sends nothing is dropped after this
COMMANDS = ("ping", "status", "pause", "resume", "stop", "rescan", "retry")


@runtime_checkable
class Controllable(Protocol):
    """What the tray and the control socket need from the daemon.

    ``status()`` returns a dict with the keys ``state`` ("idle" | "working" | "paused" |
    "stopping"), ``paused``, ``queued``, ``running``, ``done``, ``failed``, ``pages_today``,
    ``engine`` (``name``, ``why``, ``state`` and optionally ``gpu_memory_mb`` and
    ``pages_per_second``), ``last_result``, ``recent_failures`` (``path``, ``reason``,
    ``when``), ``inbox``, ``log_file``, ``pid`` and ``version``. The return values of the
    other methods, except ``retry``, are ignored.
    """

    def status(self) -> dict[str, Any]: ...

    def pause(self) -> object: ...

    def resume(self) -> object: ...

    def request_stop(self) -> object: ...

    def rescan(self) -> object: ...

    def retry(self, paths: list[str] | None, all_failed: bool) -> int: ...


# --------------------------------------------------------------------------- server


class ControlServer:
    """Answers control requests on a Unix socket, in a thread of its own.

    Lifecycle: created, ``start()`` once, ``close()`` (safe twice, also from a request
    handler). ``close()`` joins the thread and removes the socket file.
    """

    def __init__(self, path: Path | str | None, target: Controllable) -> None:
        self.path = Path(path) if path is not None else paths.control_socket()
        self.target = target
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = -1, -1
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._closed = False
        self._handlers: dict[str, Callable[[dict[str, Any]], Any]] = {
            "ping": lambda _req: {"pid": os.getpid()},
            "status": lambda _req: self.target.status(),
            "pause": self._pause,
            "resume": self._resume,
            "stop": self._stop,
            "rescan": self._rescan,
            "retry": self._retry,
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
            self._thread = threading.Thread(
                target=self._serve, name="ocrwatch-control", daemon=True
            )
            self._thread.start()
        log.info("control socket listening at %s", self.path)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        self._closing.set()
        if self._wake_w >= 0:
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"x")
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=CLIENT_IDLE_SECONDS + 5)
            if thread.is_alive():
                log.warning("the control thread did not end within %.0f s",
                            CLIENT_IDLE_SECONDS + 5)
        if thread is None or thread is not threading.current_thread():
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
            sock.listen(8)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise OcrwatchError(
                f"cannot listen on the control socket {self.path}: {exc.strerror}. "
                "Check that the folder exists and belongs to you."
            ) from exc
        return sock

    def _cleanup(self) -> None:
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

    # -- serving

    def _serve(self) -> None:
        assert self._sock is not None
        sel = selectors.DefaultSelector()
        sel.register(self._sock, selectors.EVENT_READ)
        sel.register(self._wake_r, selectors.EVENT_READ)
        try:
            while not self._closing.is_set():
                for key, _ in sel.select():
                    if key.fileobj is self._sock and not self._closing.is_set():
                        self._accept()
        except Exception:
            log.exception("the control socket stopped answering")
        finally:
            sel.close()
            if self._closed and self._thread is threading.current_thread():
                # close() was called from a request handler and could not join us.
                self._cleanup()

    def _accept(self) -> None:
        assert self._sock is not None
        try:
            conn, _ = self._sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        with conn:
            conn.setblocking(True)
            conn.settimeout(CLIENT_IDLE_SECONDS)
            if not _same_user(conn):
                log.warning("refused a control connection from another user")
                return
            # A client that goes away or says nothing is its own loss.
            with contextlib.suppress(TimeoutError, ConnectionError):
                self._converse(conn)

    def _converse(self, conn: socket.socket) -> None:
        buf = b""
        while not self._closing.is_set():
            while b"\n" not in buf:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                buf += chunk
                if len(buf) > MAX_LINE:
                    _send(conn, {"ok": False, "error": "request too long"})
                    return
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                _send(conn, self.handle_line(line))

    def handle_line(self, line: bytes) -> dict[str, Any]:
        """Answer one request line; never raises."""
        try:
            req = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            return {"ok": False, "error": "request is not valid JSON"}
        if not isinstance(req, dict) or not isinstance(req.get("cmd"), str):
            return {"ok": False, "error": 'request must be a JSON object like {"cmd": "status"}'}
        cmd = req["cmd"]
        handler = self._handlers.get(cmd)
        if handler is None:
            return {"ok": False,
                    "error": f"unknown command {cmd!r}; known: {', '.join(COMMANDS)}"}
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
        return self.target.status()

    def _resume(self, _req: dict[str, Any]) -> dict[str, Any]:
        self.target.resume()
        return self.target.status()

    def _stop(self, _req: dict[str, Any]) -> dict[str, Any]:
        log.info("stop requested over the control socket")
        self.target.request_stop()
        return {"pid": os.getpid()}

    def _rescan(self, _req: dict[str, Any]) -> None:
        self.target.rescan()

    def _retry(self, req: dict[str, Any]) -> int:
        raw = req.get("paths")
        if raw is not None and (not isinstance(raw, list)
                                or not all(isinstance(p, str) for p in raw)):
            raise OcrwatchError("retry: 'paths' must be a list of file paths")
        return self.target.retry(raw, bool(req.get("all_failed", False)))


def _send(conn: socket.socket, obj: dict[str, Any]) -> None:
    conn.sendall(json.dumps(obj, default=str).encode() + b"\n")


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
            sock.connect(str(path))
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


def format_status(status: dict[str, Any]) -> str:
    """The human-readable form of ``status()`` that ``ocrwatch status`` prints."""
    engine = status.get("engine") or {}
    lines = [
        f"ocrwatch {status.get('version', '?')} (PID {status.get('pid', '?')}): "
        f"{status.get('state', '?')}",
        f"  queue:   {status.get('queued', 0)} waiting, {status.get('running', 0)} running, "
        f"{status.get('done', 0)} done, {status.get('failed', 0)} failed",
        f"  today:   {status.get('pages_today', 0)} pages",
    ]
    eng = f"  engine:  {engine.get('name', '?')} ({engine.get('state', '?')})"
    if engine.get("why"):
        eng += f", {engine['why']}"
    lines.append(eng)
    if engine.get("gpu_memory_mb") is not None:
        lines.append(f"  GPU:     {float(engine['gpu_memory_mb']):.0f} MB held")
    if engine.get("pages_per_second") is not None:
        lines.append(f"  speed:   {float(engine['pages_per_second']):.2f} pages/s")
    for folder in status.get("inbox") or []:
        lines.append(f"  inbox:   {folder}")
    if status.get("last_result"):
        lines.append(f"  last:    {status['last_result']}")
    failures = status.get("recent_failures") or []
    if failures:
        lines.append("  recent failures (retry with `ocrwatch retry --all-failed`):")
        for f in failures[-5:]:
            lines.append(f"    {f.get('path')}: {f.get('reason')}")
    lines.append(f"  log:     {status.get('log_file', '?')}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- lock


class InstanceLock:
    """One daemon per user: an exclusive ``flock`` on a file holding the daemon's PID."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else paths.lock_file()
        self._fd: int | None = None

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
            raise DaemonRunning(
                f"an ocrwatch daemon is already running for this user ({who}); "
                "stop it with `ocrwatch stop` (or Quit in its tray menu) before starting "
                "another"
            ) from None
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


def read_pid(path: Path | str | None = None) -> int | None:
    """The PID written in the lock file, or None when there is none."""
    p = Path(path) if path is not None else paths.lock_file()
    try:
        text = p.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None
