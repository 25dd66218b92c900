"""``ocrwatch restart``: stop the running daemon and start it again the way it was started.

A daemon that a service manager runs (the systemd user unit, the launchd agent) is
restarted by that manager, which keeps it in its care. Any other (``ocrwatch start``,
``make run``, the XDG autostart entry, ``ocrwatch run`` in a terminal) is stopped cleanly
(the page in hand finished, its socket and locks released) and its own command line is
run again in the background, from its folder and with its environment, read from
``/proc`` before it stops: the same options, config file and display (so its tray comes
back). Where ``/proc`` is not there, the same config file is all that is known.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ocrwatch.control import autostart, launch
from ocrwatch.core.errors import DaemonError, DaemonNotRunning

PROC = Path("/proc")
STOP_WAIT = 60.0  # seconds for the old process to end once it stopped answering


@dataclass(frozen=True)
class Origin:
    """How the running daemon was started, as its process shows it."""

    pid: int
    argv: list[str]
    cwd: Path | None = None
    env: dict[str, str] | None = None
    unit: str = ""  # "systemd" or "launchd": a service manager runs it
    terminal: bool = False  # attached to a terminal (`make run`, `ocrwatch run`)


@dataclass(frozen=True)
class Restarted:
    """What ``restart`` did: the old PID, how it started the new one, and what became
    of it."""

    old_pid: int
    how: str
    started: launch.Launched

    def __str__(self) -> str:
        head = f"stopped the daemon (PID {self.old_pid}) and started it again {self.how}"
        if self.started.failed:
            return f"{head}, but {self.started}"
        return f"{head}: {self.started}"


def origin(pid: int, *, proc: Path = PROC) -> Origin | None:
    """What ``/proc`` tells of process ``pid``; None where there is no such record."""
    where = proc / str(pid)
    try:
        raw = (where / "cmdline").read_bytes()
    except OSError:
        return None
    argv = [os.fsdecode(a) for a in raw.split(b"\0")[:-1]] if raw else []
    if not argv:
        return None
    cwd: Path | None
    try:
        cwd = Path(os.readlink(where / "cwd"))
    except OSError:
        cwd = None
    env: dict[str, str] | None
    try:
        pairs = (where / "environ").read_bytes().split(b"\0")
        env = dict(os.fsdecode(p).split("=", 1) for p in pairs if b"=" in p)
    except OSError:
        env = None
    try:
        cgroup = (where / "cgroup").read_text()
    except OSError:
        cgroup = ""
    try:
        # Field 7 of stat, after the command's name in parentheses: the controlling tty.
        tty = int((where / "stat").read_text().rsplit(")", 1)[1].split()[4])
    except (OSError, IndexError, ValueError):
        tty = 0
    unit = "systemd" if f"/{autostart.UNIT}" in cgroup else ""
    return Origin(pid, argv, cwd, env, unit, tty != 0)


def _gone(pid: int, proc: Path = PROC) -> bool:
    """Whether process ``pid`` has ended (a zombie left to its parent has)."""
    try:
        state = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
        return state == "Z"
    except FileNotFoundError:
        return True
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def missing_program(argv: Sequence[str]) -> str | None:
    """The program (or script) of ``argv`` that is no longer there, if one is gone: the
    daemon was left running from an install since removed."""
    for arg in argv[:2]:
        if os.path.isabs(arg) and not os.path.exists(arg):
            return arg
    return None


def restart(*, wait: float = launch.WAIT, runner: autostart.Runner = autostart.run_command,
            stop: Callable[[], int] | None = None, proc: Path = PROC) -> Restarted:
    """Restart the daemon that answers now; raise DaemonNotRunning when none does."""
    from ocrwatch.control.client import request, stop_daemon

    try:
        status = request("status", timeout=5)
    except DaemonNotRunning:
        raise DaemonNotRunning(
            "no daemon is running, so there is nothing to restart; `ocrwatch start` starts "
            "one in the background") from None
    pid = int(status["pid"]) if isinstance(status, dict) and "pid" in status else 0
    found = origin(pid, proc=proc) if pid else None
    if found is not None and found.unit == "systemd":
        began = time.time()
        cmd = ["systemctl", "--user", "restart", autostart.UNIT]
        done = runner(cmd)
        if done.returncode != 0:
            raise DaemonError(f"`{' '.join(cmd)}` failed: {(done.stderr or done.stdout).strip()}"
                              ". `systemctl --user status ocrwatch` says why")
        return Restarted(pid, "by its systemd user unit", launch.watch(began, wait=wait))
    if found is None and sys.platform == "darwin" and autostart.target_path("launchd").exists():
        began = time.time()
        label = f"gui/{os.getuid()}/{autostart.LABEL}"
        done = runner(["launchctl", "kickstart", "-k", label])
        if done.returncode == 0:
            return Restarted(pid, "by its launchd agent", launch.watch(began, wait=wait))
    if found is not None:
        argv, env, cwd = found.argv, found.env, found.cwd
        gone = missing_program(argv)
        if gone is not None:
            raise DaemonError(
                f"the daemon (PID {pid}) runs from {gone}, which is no longer there (ocrwatch "
                "was uninstalled or moved): it cannot be started the same way. Stop it with "
                "`ocrwatch stop` and start the installed one with `ocrwatch start`")
        how = ("in the background (it ran in a terminal, which it leaves)" if found.terminal
               else "in the background, with its own command line")
    else:
        config = status.get("config_file") if isinstance(status, dict) else None
        argv = [sys.executable, "-m", "ocrwatch", "run",
                *(["--config", str(config)] if config else [])]
        env, cwd = None, None
        how = ("in the background with its config file (its other command-line options "
               "cannot be known here)")
    old = (stop or stop_daemon)()
    pid = old if old > 0 else pid
    deadline = time.monotonic() + STOP_WAIT
    while pid and not _gone(pid, proc):
        if time.monotonic() >= deadline:
            raise DaemonError(f"the daemon (PID {pid}) stopped answering but has not ended "
                              f"after {STOP_WAIT:.0f} s; end it with `kill {pid}`, then "
                              "`ocrwatch start`")
        time.sleep(0.1)
    return Restarted(pid, how, launch.start(argv, wait=wait, env=env, cwd=cwd))
