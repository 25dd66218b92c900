"""The clients' end of the control socket: one request, one answer."""

from __future__ import annotations

import errno
import json
import logging
import socket
import struct
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
            line = _answer(sock, cmd, timeout)
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


_SLICE = 0.5  # how often a wait for an answer looks whether the daemon is stopped


def _answer(sock: socket.socket, cmd: str, timeout: float) -> bytes:
    """:func:`read_line` within ``timeout`` (raises TimeoutError), except that a daemon
    stopped (SIGSTOP, Ctrl+Z, a debugger), which would never answer in time, is said at
    once with what to do."""
    pid = _peer_pid(sock)
    deadline = time.monotonic() + timeout
    buf = b""
    while b"\n" not in buf:
        sock.settimeout(max(0.01, min(_SLICE, deadline - time.monotonic())))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            if pid is not None and _stopped(pid):
                raise DaemonError(
                    f"the daemon (PID {pid}) is stopped (SIGSTOP, Ctrl+Z or a debugger) and "
                    f"cannot answer `{cmd}`; `kill -CONT {pid}` lets it carry on where it "
                    "was, with nothing lost") from None
            if time.monotonic() >= deadline:
                raise
            continue
        if not chunk:
            break
        buf += chunk
    return buf.split(b"\n", 1)[0]


def _peer_pid(sock: socket.socket) -> int | None:
    """The PID of the process that listens at the other end (Linux), else None."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    try:
        pid, _uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, option,
                                                              struct.calcsize("3i")))
    except OSError:
        return None
    return pid if pid > 0 else None


def _stopped(pid: int) -> bool:
    """Whether the process ``pid`` is stopped by a signal or a tracer (Linux's /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in (b"T", b"t")


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
