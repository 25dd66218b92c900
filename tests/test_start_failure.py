"""A daemon that cannot start (a typo in the config, met at login) leaves a trace a person
meets: a line in its log, a desktop notification, `ocrwatch status` saying why; and
`ocrwatch start`, `make start` and `ocrwatch autostart enable --now` wait to see it up or
ended, and exit with the reason. Real processes in a private home; the notification is
received by a service on a D-Bus session bus of the test's own."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from helpers import NotificationService, wait_for
from reliability.helpers import Home

ROOT = Path(__file__).resolve().parents[1]
TYPO = 'on_success = "archiv"\n'
REASON = "on_success = 'archiv' is not one of keep, archive, delete"
FINE = 'outputs = ["md"]\n'
NO_BUS = {"DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent/bus"}


def _pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie left to a parent that does not reap has ended


class User:
    """A private home whose daemon runs detached from the test (as `start` leaves it):
    ended for sure at teardown, by its PID in the lock file."""

    def __init__(self, tmp_path: Path) -> None:
        self.home = Home.make(tmp_path)
        self.config = tmp_path / "home" / ".config" / "ocrwatch" / "config.toml"
        self.config.parent.mkdir(parents=True)
        self.log = self.home.state / "ocrwatch" / "log" / "ocrwatch.log"
        self.record = self.log.with_name("last-start-failed.json")
        self.lock = self.home.run / "ocrwatch" / "daemon.lock"
        self.pids: set[int] = set()

    def env(self, **extra: str) -> dict[str, str]:
        return self.home.env(**{"OCRWATCH_ENGINE": "fake",
                                "OCRWATCH_DATABASE": str(self.home.database),
                                "OCRWATCH_INBOX": str(self.home.inbox), **NO_BUS, **extra})

    def cli(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([sys.executable, "-m", "ocrwatch", *args], env=self.env(**env),
                                cwd=self.home.root, capture_output=True, text=True,
                                timeout=120)
        self.note_pid()
        return result

    def note_pid(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            text = self.lock.read_text().strip()
            if text:
                self.pids.add(int(text))

    def running_pid(self) -> int:
        status = self.cli("status", "--json")
        assert status.returncode == 0, status.stderr
        pid = int(json.loads(status.stdout)["pid"])
        self.pids.add(pid)
        return pid

    def close(self) -> None:
        self.note_pid()
        self.cli("stop")
        for pid in self.pids:
            if _pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            wait_for(lambda p=pid: not _pid_alive(p), 30, f"PID {pid} to end")
        self.home.cleanup()


@pytest.fixture(name="user")  # also for test_restart and test_uninstall, which import it
def user_fixture(tmp_path: Path) -> Iterator[User]:
    u = User(tmp_path)
    try:
        yield u
    finally:
        u.close()


def test_a_config_typo_at_start_is_logged_notified_and_shown_by_status(
        user: User, session_bus: str) -> None:
    user.config.write_text(TYPO)
    service = NotificationService(session_bus)
    try:
        run = user.cli("run", "--no-tray", DBUS_SESSION_BUS_ADDRESS=session_bus)
        assert run.returncode == 2, run.stderr
        assert REASON in run.stderr
        # The notification is answered before `run` exits: it is there now.
        assert len(service.calls) == 1, service.calls
        app, _replaces, _icon, title, body, _actions, _hints, _timeout = service.calls[0]
        assert (app, title) == ("ocrwatch", "ocrwatch did not start")
        assert REASON in str(body) and "ocrwatch start" in str(body)
    finally:
        service.close()
    logged = user.log.read_text()
    assert "ERROR" in logged and f"ocrwatch did not start: the file {user.config}" in logged
    assert REASON in logged

    status = user.cli("status")
    assert status.returncode == 2, status.stderr  # the config still does not load
    assert "no daemon is running; the last start failed (" in status.stderr
    assert f"status 2): the file {user.config}: {REASON}" in status.stderr
    assert f"log: {user.log}" in status.stderr

    # Fixed: the daemon starts, and the failure is history.
    user.config.write_text(FINE)
    started = user.cli("start", "--no-tray")
    assert started.returncode == 0, started.stderr
    assert "the daemon runs in the background (PID " in started.stdout
    user.running_pid()
    assert not user.record.exists()
    assert user.cli("stop").returncode == 0
    stopped = user.cli("status", "--json")
    assert stopped.returncode == 5
    assert json.loads(stopped.stdout)["start_failure"] is None


def test_status_names_a_failed_start_that_the_config_does_not_explain(user: User) -> None:
    """A start that fails for another reason than the config (the index cannot be made):
    the config loads, and `status` lists the failure above the index's facts."""
    blocker = user.home.root / "not-a-folder"
    blocker.write_text("a file where the index's folder should be")
    index = str(blocker / "index.sqlite3")
    run = user.cli("run", "--no-tray", OCRWATCH_DATABASE=index)
    assert run.returncode != 0 and "Traceback" not in run.stderr, run.stderr
    assert "ocrwatch did not start: " in user.log.read_text()
    status = user.cli("status", "--json", OCRWATCH_DATABASE=index)
    assert status.returncode == 5
    failure = json.loads(status.stdout)["start_failure"]
    assert failure.startswith("the last start failed (") and str(blocker) in failure
    text = user.cli("status", OCRWATCH_DATABASE=index)
    assert "  start:   the last start failed (" in text.stdout


def test_ocrwatch_start_with_a_typo_exits_with_its_status_and_reason(user: User) -> None:
    user.config.write_text(TYPO)
    started = user.cli("start", "--no-tray")
    assert started.returncode == 2, (started.stdout, started.stderr)
    assert "the daemon did not start (status 2): the file" in started.stderr
    assert REASON in started.stderr and f"its log: {user.log}" in started.stderr
    assert "runs in the background" not in started.stdout + started.stderr
    assert user.cli("status").returncode == 2  # nothing runs


def test_ocrwatch_start_says_when_one_runs_already(user: User) -> None:
    user.config.write_text(FINE)
    first = user.cli("start", "--no-tray")
    assert first.returncode == 0, first.stderr
    pid = user.running_pid()
    again = user.cli("start", "--no-tray")
    assert again.returncode == 0, again.stderr
    assert f"the daemon already runs (PID {pid})" in again.stdout
    assert user.running_pid() == pid


# -- make start ------------------------------------------------------------------------
def _venv(user: User) -> tuple[Path, dict[str, str]]:
    """A stand-in for the Makefile's .venv: its stamps made, its `ocrwatch` this checkout's
    (installing a real one is what tests/test_setup.py does)."""
    venv = user.home.root / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    program = venv / "bin" / "ocrwatch"
    program.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ocrwatch "$@"\n')
    program.chmod(0o755)
    for stamp in (".base", ".tray"):
        (venv / stamp).touch()
    link_dir = user.home.root / "bin"
    env = {k: v for k, v in user.env().items() if not k.startswith("MAKE") and k != "MFLAGS"}
    env.update(PYTHONPATH=str(ROOT), PATH=os.pathsep.join([str(link_dir), env["PATH"]]))
    return venv, env


def _make_start(user: User, venv: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "start", f"VENV={venv}", "GPU=0",
         f"LINK_DIR={user.home.root / 'bin'}"],
        env=env, capture_output=True, text=True, timeout=180)
    user.note_pid()
    return result


def test_make_start_fails_with_the_reason_and_succeeds_once_fixed(user: User) -> None:
    if shutil.which("make") is None:
        pytest.skip("needs make")
    venv, env = _venv(user)
    user.config.write_text(TYPO)
    failed = _make_start(user, venv, env)
    out = failed.stdout + failed.stderr
    assert failed.returncode != 0, out
    assert "the daemon did not start (status 2)" in out and REASON in out
    assert "runs in the background" not in out

    user.config.write_text(FINE)
    ok = _make_start(user, venv, env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "the daemon runs in the background (PID " in ok.stdout
    user.running_pid()


# -- autostart enable --now without a systemd user session -----------------------------
def _program(user: User) -> Path:
    program = user.home.root / "ocrwatch-program"
    program.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ocrwatch "$@"\n')
    program.chmod(0o755)
    return program


def test_autostart_now_starts_the_daemon_where_no_service_manager_does(user: User) -> None:
    user.config.write_text(FINE)
    done = user.cli("autostart", "enable", "--now", "--kind", "xdg", "--exec",
                    str(_program(user)), PYTHONPATH=str(ROOT))
    assert done.returncode == 0, done.stderr
    entry = user.home.root / "home" / ".config" / "autostart" / "ocrwatch.desktop"
    assert entry.exists()
    assert "starts at every login. Now the daemon runs in the background (PID " in done.stdout
    pid = user.running_pid()
    again = user.cli("autostart", "enable", "--now", "--kind", "xdg", "--exec",
                     str(_program(user)), PYTHONPATH=str(ROOT))
    assert again.returncode == 0, again.stderr
    assert f"it already runs now (PID {pid})" in again.stdout


def test_autostart_now_with_a_typo_installs_the_entry_and_exits_with_the_reason(
        user: User) -> None:
    user.config.write_text(TYPO)
    done = user.cli("autostart", "enable", "--now", "--kind", "xdg", "--exec",
                    str(_program(user)), PYTHONPATH=str(ROOT))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "But it did not start now: the daemon did not start (status 2)" in done.stderr
    assert REASON in done.stderr
    assert (user.home.root / "home" / ".config" / "autostart" / "ocrwatch.desktop").exists()
    assert user.cli("status").returncode == 2


class StandInSystemd:
    """systemctl, as far as `enable --now` goes: it starts `ocrwatch run` as the unit
    would, and says it did, whatever becomes of the daemon."""

    def __init__(self, user: User) -> None:
        self.user = user
        self.procs: list[subprocess.Popen[bytes]] = []

    def __call__(self, cmd: Sequence[str]) -> subprocess.CompletedProcess[str]:
        if list(cmd[-2:]) == ["--now", "ocrwatch.service"]:
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "ocrwatch", "run", "--no-tray"], env=self.user.env(),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True))
        return subprocess.CompletedProcess(list(cmd), 0, "", "")

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def test_autostart_now_under_systemd_says_whether_the_daemon_came_up(
        user: User, monkeypatch: pytest.MonkeyPatch) -> None:
    """`systemctl --user enable --now` succeeds whether or not the daemon then starts:
    the daemon's own record of a failed start, or its answer, says which."""
    from ocrwatch.control import autostart

    for key, value in user.env().items():  # this process reads the user's files too
        monkeypatch.setenv(key, value)
    systemd = StandInSystemd(user)
    try:
        user.config.write_text(TYPO)
        res = autostart.enable(kind="systemd", executable=Path("/usr/bin/ocrwatch"),
                               start=True, runner=systemd, environ=user.env(), wait=60)
        assert res.exit_code == 2, res.message
        assert "But it did not start now: the daemon did not start (status 2)" in res.message
        assert REASON in res.message

        user.config.write_text(FINE)
        res = autostart.enable(kind="systemd", executable=Path("/usr/bin/ocrwatch"),
                               start=True, runner=systemd, environ=user.env(), wait=60)
        assert res.exit_code == 0, res.message
        assert "Now the daemon runs in the background (PID " in res.message
        assert user.running_pid() == systemd.procs[-1].pid
    finally:
        user.close()  # before the stand-in reaps what it started
        systemd.close()
