"""The clients' end of the control socket: one request, one answer."""

from __future__ import annotations

import errno
import json
import logging
import socket
import time
from pathlib import Path
from typing import Any

from ocrwatch.core.errors import DaemonError, DaemonNotRunning, OcrwatchError
from ocrwatch.fs import paths

log = logging.getLogger(__name__)

NOT_RUNNING = "no ocrwatch daemon is running for this user; start one with `ocrwatch run`"


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
            raise DaemonError(
                f"cannot reach the daemon at {path}: {exc.strerror or exc}"
            ) from exc
        try:
            sock.sendall(json.dumps({"cmd": cmd, **args}).encode() + b"\n")
            line = read_line(sock)
        except TimeoutError:
            raise DaemonError(
                f"the daemon did not answer `{cmd}` within {timeout:.0f} s; it may be busy. "
                "Try again, or see its log (the path is in `ocrwatch status` output)."
            ) from None
        except (ConnectionResetError, BrokenPipeError):
            raise DaemonNotRunning(NOT_RUNNING) from None
    finally:
        sock.close()
    if not line.strip():
        # The daemon closed the connection without a word: it is going away.
        raise DaemonNotRunning(NOT_RUNNING)
    try:
        reply = json.loads(line)
    except ValueError:
        raise DaemonError(
            f"the process on {path} did not answer like an ocrwatch daemon"
        ) from None
    if not isinstance(reply, dict) or "ok" not in reply:
        raise DaemonError(f"the process on {path} did not answer like an ocrwatch daemon")
    if not reply["ok"]:
        raise DaemonError(str(reply.get("error", "the daemon refused the command")))
    return reply.get("result")


def read_line(sock: socket.socket) -> bytes:
    """The first line the other end sends (without its newline), or what it sent before
    closing the connection."""
    buf = b""
    while b"\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf.split(b"\n", 1)[0]


def _connect(sock: socket.socket, path: Path, timeout: float) -> None:
    """Connect, waiting up to ``timeout`` while the daemon's backlog is full (EAGAIN)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock.connect(str(path))
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise DaemonError(
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
    raise DaemonError(
        f"the daemon (PID {pid}) is still running {timeout:.0f} s after being asked to stop; "
        f"it may be finishing a long page. Wait, or end it with `kill {pid}`."
    )
