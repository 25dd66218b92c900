"""The control socket protocol, its client, and the one-daemon-per-user lock."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_standin import StandInDaemon

from ocrwatch.control import client as control_client
from ocrwatch.control import lock as control_lock
from ocrwatch.control import server as control_server
from ocrwatch.control.client import request
from ocrwatch.control.lock import InstanceLock
from ocrwatch.control.protocol import Controllable
from ocrwatch.control.server import ControlServer
from ocrwatch.core.errors import DaemonNotRunning, DaemonRunning, OcrwatchError
from ocrwatch.core.status import format_status


@pytest.fixture
def rundir() -> Iterator[Path]:
    # AF_UNIX paths are limited to about 100 bytes; pytest's tmp_path can be longer.
    d = Path(tempfile.mkdtemp(prefix="ow-"))
    os.chmod(d, 0o700)
    yield d
    for p in d.iterdir():
        p.unlink()
    d.rmdir()


@pytest.fixture
def served(rundir: Path) -> Iterator[tuple[StandInDaemon, Path, ControlServer]]:
    target = StandInDaemon(queued=3, failed=2)
    sock = rundir / "control.sock"
    server = ControlServer(sock, target)
    server.start()
    yield target, sock, server
    server.close()
    assert not server.running


def test_standin_satisfies_protocol() -> None:
    assert isinstance(StandInDaemon(), Controllable)


def test_status_pause_resume_rescan_retry(
    served: tuple[StandInDaemon, Path, ControlServer],
) -> None:
    target, sock, _ = served
    st = request("status", socket_path=sock)
    assert st["queued"] == 3 and st["state"] == "idle"
    assert request("pause", socket_path=sock)["paused"] is True
    assert target.status().paused is True
    assert request("resume", socket_path=sock)["paused"] is False
    assert request("rescan", socket_path=sock) is None
    assert request("retry", socket_path=sock, paths=["/a", "/b"]) == 2
    assert request("retry", socket_path=sock, paths=None, all_failed=True) == 2
    assert request("ping", socket_path=sock)["pid"] == os.getpid()
    assert {"pause", "resume", "rescan"} <= set(target.calls)


def test_stop_calls_request_stop(served: tuple[StandInDaemon, Path, ControlServer]) -> None:
    target, sock, _ = served
    assert request("stop", socket_path=sock) == {"pid": os.getpid()}
    assert target.stop_requested.is_set()


def test_socket_is_private(served: tuple[StandInDaemon, Path, ControlServer]) -> None:
    _, sock, _ = served
    mode = stat.S_IMODE(os.stat(sock).st_mode)
    assert mode == 0o600
    assert stat.S_ISSOCK(os.stat(sock).st_mode)


def test_bad_requests_get_clear_errors(
    served: tuple[StandInDaemon, Path, ControlServer],
) -> None:
    _, sock, _ = served
    with pytest.raises(OcrwatchError, match="unknown command 'dance'"):
        request("dance", socket_path=sock)
    with pytest.raises(OcrwatchError, match="'paths' must be a list"):
        request("retry", socket_path=sock, paths="nope")
    # Raw protocol: several lines on one connection, garbage answered, not fatal.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(str(sock))
        s.sendall(b"not json\n[1]\n" + json.dumps({"cmd": "status"}).encode() + b"\n")
        replies = _read_lines(s, 3)
    assert replies[0] == {"ok": False, "error": "request is not valid JSON"}
    assert replies[1]["ok"] is False and "JSON object" in replies[1]["error"]
    assert replies[2]["ok"] is True and replies[2]["result"]["failed"] == 2


def test_daemon_errors_reach_the_client(rundir: Path) -> None:
    class Broken(StandInDaemon):
        def pause(self) -> None:
            raise OcrwatchError("cannot pause now: stopping")

        def rescan(self) -> None:
            raise RuntimeError("boom")

    sock = rundir / "c.sock"
    with ControlServer(sock, Broken()):
        with pytest.raises(OcrwatchError, match="cannot pause now: stopping"):
            request("pause", socket_path=sock)
        with pytest.raises(OcrwatchError, match="rescan failed inside the daemon"):
            request("rescan", socket_path=sock)
        # The server carries on after both.
        assert request("status", socket_path=sock)["state"] == "idle"


def test_no_daemon_no_socket(rundir: Path) -> None:
    with pytest.raises(DaemonNotRunning, match="start one with `ocrwatch run`"):
        request("status", socket_path=rundir / "absent.sock")
    assert not control_client.is_running(socket_path=rundir / "absent.sock")


def test_stale_socket_file_reads_as_not_running(rundir: Path) -> None:
    sock = rundir / "stale.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(sock))
    s.close()  # the file stays, nobody listens: what a crash leaves behind
    assert sock.exists()
    with pytest.raises(DaemonNotRunning) as info:
        request("status", socket_path=sock)
    assert str(info.value) == control_client.NOT_RUNNING
    # A new server replaces the stale file.
    with ControlServer(sock, StandInDaemon()):
        assert request("status", socket_path=sock)["state"] == "idle"
    assert not sock.exists()


def test_server_refuses_to_steal_a_live_socket(
    served: tuple[StandInDaemon, Path, ControlServer],
) -> None:
    _, sock, _ = served
    second = ControlServer(sock, StandInDaemon())
    with pytest.raises(DaemonRunning, match="ocrwatch stop"):
        second.start()
    second.close()
    assert request("ping", socket_path=sock)


def test_close_twice_joins_and_removes_socket(rundir: Path) -> None:
    sock = rundir / "c.sock"
    server = ControlServer(sock, StandInDaemon())
    server.start()
    thread = server._threads[0]  # the selector's
    assert thread is not None and thread.alive
    server.close()
    server.close()
    assert not thread.alive
    assert not sock.exists()
    with pytest.raises(OcrwatchError, match="closed"):
        server.start()


def test_close_from_inside_a_request(rundir: Path) -> None:
    """The daemon may close the server from request_stop, i.e. on the server's thread."""
    sock = rundir / "c.sock"

    class ClosesServer(StandInDaemon):
        server: ControlServer

        def request_stop(self) -> None:
            super().request_stop()
            self.server.close()

    target = ClosesServer()
    server = ControlServer(sock, target)
    target.server = server
    server.start()
    thread = server._threads[0]  # the selector's
    assert request("stop", socket_path=sock)["pid"] == os.getpid()
    assert thread is not None
    thread.join(timeout=10)
    assert not thread.alive
    assert not sock.exists()


def test_silent_client_does_not_block_others(
    served: tuple[StandInDaemon, Path, ControlServer], monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, sock, _ = served
    monkeypatch.setattr(control_server, "CLIENT_IDLE_SECONDS", 0.5)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as idle:
        idle.connect(str(sock))  # connects, says nothing
        assert request("status", socket_path=sock, timeout=15)["queued"] == 3


def test_stop_daemon_waits_until_gone(rundir: Path) -> None:
    sock = rundir / "c.sock"
    target = StandInDaemon()
    server = ControlServer(sock, target)
    server.start()

    def daemon_main() -> None:
        target.stop_requested.wait(10)
        server.close()

    t = threading.Thread(target=daemon_main)
    t.start()
    assert control_client.stop_daemon(socket_path=sock, timeout=10) == os.getpid()
    t.join(10)
    assert not t.is_alive()
    with pytest.raises(DaemonNotRunning):
        control_client.stop_daemon(socket_path=sock)


def test_format_status_mentions_log_and_engine() -> None:
    st = StandInDaemon(
        engine={"name": "vllm", "state": "asleep", "why": "GPU found",
                "gpu_memory_mb": 912, "pages_per_second": 1.25},
        recent_failures=[{"path": "/in/x.pdf", "reason": "encrypted", "when": 1.0}],
        last_result="/in/y.md",
    ).status()
    text = format_status(st)
    assert "vllm (asleep)" in text and "912 MB" in text
    assert "1.25 pages/s" not in text and "speed" not in text  # one rate: the daemon's own
    assert "log:     /tmp/ocrwatch.log" in text
    assert "/in/x.pdf: encrypted" in text


def test_status_lists_the_newest_failures_and_says_how_many_more() -> None:
    """Six failed: the index gives them newest first; the five listed are the newest (the
    newest was left out before) and the sixth is counted."""
    from ocrwatch.core.status import Failure, Status

    failures = tuple(Failure(f"/in/f{n}.pdf", "damaged", 100.0 - n) for n in range(6))
    text = format_status(Status(failed=6, recent_failures=failures))
    assert all(f"/in/f{n}.pdf: damaged" in text for n in range(5)), text
    assert "/in/f5.pdf" not in text and "and 1 more" in text, text


def test_format_status_lists_the_remote_servers() -> None:
    st = StandInDaemon(engine={"name": "remote", "state": "remote", "why": "set", "servers": [
        {"url": "http://gpu1:8000/v1", "state": "up", "outstanding": 3, "answered": 40},
        {"url": "http://gpu2:8000/v1", "state": "down", "outstanding": 0, "answered": 2,
         "last_error": "nothing answers at http://gpu2:8000/v1"}]}).status()
    text = format_status(st)
    assert "server:  http://gpu1:8000/v1 up, 3 in flight, 40 answered\n" in text
    assert ("server:  http://gpu2:8000/v1 down, 0 in flight, 2 answered (nothing answers at "
            "http://gpu2:8000/v1)") in text


# --------------------------------------------------------------------------- lock


def test_lock_writes_pid_and_blocks_a_second_holder(rundir: Path) -> None:
    path = rundir / "daemon.lock"
    first = InstanceLock(path)
    first.acquire()
    assert control_lock.read_pid(path) == os.getpid()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    # flock is per open file, so a second lock in this process conflicts too.
    with pytest.raises(DaemonRunning) as info:
        InstanceLock(path).acquire()
    msg = str(info.value)
    assert f"PID {os.getpid()}" in msg and "ocrwatch stop" in msg
    assert info.value.exit_code == DaemonRunning.exit_code != 0
    first.release()
    first.release()
    with InstanceLock(path) as again:
        assert again.held


LOCK_HOLDER = textwrap.dedent(
    """
    import sys, time
    from ocrwatch.control.lock import InstanceLock
    lock = InstanceLock(sys.argv[1])
    lock.acquire()
    print("locked", flush=True)
    sys.stdin.readline()
    """
)


def test_lock_across_processes_and_freed_when_the_holder_dies(rundir: Path) -> None:
    path = rundir / "daemon.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(DaemonRunning, match=f"PID {holder.pid}"):
            InstanceLock(path).acquire()
    finally:
        holder.kill()  # a crash: no release, the kernel drops the lock
        holder.wait(10)
        if holder.stdin:
            holder.stdin.close()
        if holder.stdout:
            holder.stdout.close()
    deadline = time.monotonic() + 10
    lock = InstanceLock(path)
    while True:
        try:
            lock.acquire()
            break
        except DaemonRunning:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    assert control_lock.read_pid(path) == os.getpid()
    lock.release()


def _read_lines(s: socket.socket, n: int) -> list[dict[str, Any]]:
    buf = b""
    while buf.count(b"\n") < n:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    return [json.loads(line) for line in buf.splitlines()[:n]]
