"""Start the daemon at login: a systemd user unit, an XDG autostart entry or a launchd agent.

Which one, by platform:

* Linux with a systemd user manager whose session runs ``graphical-session.target``
  (GNOME, KDE Plasma): a systemd user unit tied to that target, so the daemon starts
  with the desktop (and its tray) and stops with it. Without a desktop at all (a
  headless box): the same unit under ``default.target``.
* Other Linux desktops (Xfce, LXQt, i3...): an XDG autostart ``.desktop`` entry, which
  every freedesktop session starts inside the session, with its display and D-Bus.
* macOS: a launchd agent in ``~/Library/LaunchAgents``.

The templates' one copy is ``packaging/`` at the top of the source (the README shows how
to install them by hand); the wheel carries them in ``ocrwatch/data`` (copied there by
``setup.py`` at build time). ``@OCRWATCH@`` and friends are filled in here. Commands such as
``systemctl`` run through an injectable runner, so tests never touch the real session.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from xml.sax.saxutils import escape as xml_escape

from ocrwatch.control import launch
from ocrwatch.core.errors import MachineError, OcrwatchError, UsageError
from ocrwatch.fs import paths

log = logging.getLogger(__name__)

KINDS = ("systemd", "xdg", "launchd")
UNIT = "ocrwatch.service"
DESKTOP = "ocrwatch.desktop"
LABEL = "org.ocrwatch.daemon"
PLIST = f"{LABEL}.plist"
TEMPLATE = {"systemd": UNIT, "xdg": DESKTOP, "launchd": PLIST}

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]
Launcher = Callable[[Sequence[str]], launch.Launched]  # launch.start, waiting its time


def run_command(cmd: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """The real runner: runs ``cmd``, never raises for a non-zero exit."""
    try:
        return subprocess.run(list(cmd), capture_output=True, text=True, timeout=30,
                              check=False)
    except FileNotFoundError:
        return subprocess.CompletedProcess(list(cmd), 127, "", f"{cmd[0]}: not found")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(cmd), 124, "", f"{cmd[0]}: timed out")


@dataclass
class Result:
    """What ``enable`` or ``disable`` did, and what to tell the user."""

    kind: str
    paths: list[Path] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)
    message: str = ""
    exit_code: int = 0  # non-zero: the entry is installed, but the start asked for failed

    def __str__(self) -> str:
        return self.message


# --------------------------------------------------------------------------- where


def _home(environ: Mapping[str, str]) -> Path:
    return Path(environ["HOME"]) if environ.get("HOME") else Path.home()


def _config_home(environ: Mapping[str, str]) -> Path:
    xdg = environ.get("XDG_CONFIG_HOME")
    return Path(xdg) if xdg and os.path.isabs(xdg) else _home(environ) / ".config"


def target_path(kind: str, environ: Mapping[str, str] | None = None) -> Path:
    """Where the file for ``kind`` goes for this user."""
    env = os.environ if environ is None else environ
    if kind == "systemd":
        return _config_home(env) / "systemd" / "user" / UNIT
    if kind == "xdg":
        return _config_home(env) / "autostart" / DESKTOP
    if kind == "launchd":
        return _home(env) / "Library" / "LaunchAgents" / PLIST
    raise UsageError(f"unknown autostart kind {kind!r}; use one of {', '.join(KINDS)}")


def systemd_present() -> bool:
    """Whether this machine booted with systemd and has ``systemctl``."""
    return Path("/run/systemd/system").is_dir() and shutil.which("systemctl") is not None


def detect(
    *,
    platform: str | None = None,
    environ: Mapping[str, str] | None = None,
    runner: Runner = run_command,
    has_systemd: bool | None = None,
) -> tuple[str, str]:
    """Pick the autostart kind for this machine: ``(kind, systemd target)``."""
    plat = sys.platform if platform is None else platform
    env = os.environ if environ is None else environ
    if plat == "darwin":
        return "launchd", ""
    if not plat.startswith("linux") and not plat.startswith("freebsd"):
        raise MachineError(
            "ocrwatch cannot set up autostart on this platform; add `ocrwatch run` to the "
            "programs your session starts at login (on Windows: a shortcut in shell:startup)"
        )
    graphical = bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))
    systemd = systemd_present() if has_systemd is None else has_systemd
    if systemd:
        probe = runner(["systemctl", "--user", "is-active", "graphical-session.target"])
        if probe.stdout.strip() == "active":
            return "systemd", "graphical-session.target"
        if not graphical:
            return "systemd", "default.target"
    return "xdg", ""


# --------------------------------------------------------------------------- what


def find_executable(environ: Mapping[str, str] | None = None) -> Path:
    """The installed ``ocrwatch`` program: beside this Python first (a venv), then PATH."""
    env = os.environ if environ is None else environ
    beside = Path(sys.executable).parent / "ocrwatch"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside.absolute()
    found = shutil.which("ocrwatch", path=env.get("PATH"))
    if found:
        return Path(found).absolute()
    raise MachineError(
        "cannot find the `ocrwatch` program to start at login; install ocrwatch with pip "
        "(or pipx) so that `ocrwatch` is on your PATH, or pass its path with --exec"
    )


# A checkout or an editable install: the templates are read from the source's packaging/.
SOURCE_TEMPLATES = Path(__file__).resolve().parents[2] / "packaging"


def template(kind: str) -> str:
    name = TEMPLATE[kind]
    packaged = resources.files("ocrwatch").joinpath("data", name)
    if packaged.is_file():  # an installed wheel
        return packaged.read_text(encoding="utf-8")
    source = SOURCE_TEMPLATES / name
    if source.is_file():
        return source.read_text(encoding="utf-8")
    raise MachineError(
        f"the {kind} template {name} is missing from this installation (neither in the "
        f"package's data nor in {SOURCE_TEMPLATES}); reinstall ocrwatch from its wheel or sdist"
    )


def _systemd_quote(arg: str) -> str:
    arg = arg.replace("%", "%%")  # systemd expands %-specifiers in ExecStart
    if any(c in arg for c in " \t\"'\\"):
        return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return arg


def _desktop_quote(arg: str) -> str:
    # Desktop Entry spec: quote args with reserved characters; inside quotes escape
    # " ` $ \ with a backslash; and the file format escapes \ once more.
    if not any(c in arg for c in " \t\n\"'\\><~|&;$*?#()`%"):
        return arg
    inner = "".join("\\" + c if c in '"`$\\' else c for c in arg).replace("%", "%%")
    return ('"' + inner + '"').replace("\\", "\\\\")


def render(kind: str, executable: Path, *, wanted_by: str = "graphical-session.target",
           log_dir: Path | None = None) -> str:
    """The file for ``kind`` with the program's path filled in."""
    text = template(kind)
    exe = str(executable)
    if kind == "systemd":
        return text.replace("@OCRWATCH@", _systemd_quote(exe)).replace("@WANTED_BY@",
                                                                        wanted_by)
    if kind == "xdg":
        return text.replace("@OCRWATCH@", _desktop_quote(exe))
    logs = str(log_dir if log_dir is not None else paths.log_dir())
    return text.replace("@OCRWATCH@", xml_escape(exe)).replace("@LOG_DIR@", xml_escape(logs))


# --------------------------------------------------------------------------- do


def _check(runner: Runner, cmd: list[str], result: Result, fix: str) -> None:
    result.commands.append(cmd)
    done = runner(cmd)
    if done.returncode != 0:
        raise MachineError(
            f"`{' '.join(cmd)}` failed: {(done.stderr or done.stdout).strip()}. {fix}"
        )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def enable(
    *,
    kind: str | None = None,
    executable: Path | None = None,
    start: bool = False,
    runner: Runner = run_command,
    environ: Mapping[str, str] | None = None,
    platform: str | None = None,
    has_systemd: bool | None = None,
    launcher: Launcher | None = None,
    wait: float = launch.WAIT,
) -> Result:
    """Install the autostart entry for this platform (or ``kind``); ``start`` also starts it.

    Installing again replaces the file, so it also repairs a moved executable. Where no
    service manager starts it (an XDG entry: a desktop starts those at login only),
    ``start`` runs it in the background here (``launcher``). Either way it waits up to
    ``wait`` seconds to see the daemon answer, or its start fail, and says which.
    """
    env = os.environ if environ is None else environ
    wanted_by = "graphical-session.target"
    if kind is None:
        kind, wanted_by = detect(platform=platform, environ=env, runner=runner,
                                 has_systemd=has_systemd)
    elif kind == "systemd" and not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")):
        wanted_by = "default.target"
    if kind not in KINDS:
        raise UsageError(f"unknown autostart kind {kind!r}; use one of {', '.join(KINDS)}")
    exe = executable if executable is not None else find_executable(env)
    path = target_path(kind, env)
    result = Result(kind=kind, paths=[path])
    if kind == "systemd":
        # Ask the user's systemd before writing anything: without a session bus (a shell
        # from su, ssh or cron) nothing could be enabled, and a unit file would be left.
        _check(runner, ["systemctl", "--user", "show-environment"], result,
               "No systemd user manager answers in this shell (no session bus). Run it "
               "from a terminal inside your desktop or login session, or use --kind xdg.")
    log_dir = _home(env) / "Library" / "Logs" / "ocrwatch" if kind == "launchd" else None
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
    existed = path.exists()
    _write(path, render(kind, exe, wanted_by=wanted_by, log_dir=log_dir))
    log.info("installed %s autostart entry %s", kind, path)

    began = time.time()  # a failed start recorded after this is the one asked for
    if kind == "systemd":
        fix = "Check `systemctl --user status` works in this session."
        try:
            _check(runner, ["systemctl", "--user", "daemon-reload"], result, fix)
            cmd = ["systemctl", "--user", "enable", *(["--now"] if start else []), UNIT]
            _check(runner, cmd, result, fix)
        except OcrwatchError:
            if not existed:  # leave nothing behind that does not work
                path.unlink(missing_ok=True)
            raise
        when = "at every login" if start else (
            "at your next login; start it now with `systemctl --user start ocrwatch`")
        result.message = (
            f"Installed {path} ({wanted_by}). ocrwatch starts {when}. "
            "Its output: `journalctl --user -u ocrwatch`."
        )
        if start:  # systemctl says the unit started, not that the daemon came up
            _said(result, launch.watch(began, wait=wait))
    elif kind == "launchd":
        if start:
            uid = str(os.getuid())
            _check(runner, ["launchctl", "bootstrap", f"gui/{uid}", str(path)], result,
                   "If it is loaded already, run `ocrwatch autostart disable` first.")
        result.message = (
            f"Installed {path}. ocrwatch starts "
            + ("at every login." if start else
               f"at your next login; start it now with "
               f"`launchctl bootstrap gui/$(id -u) {path}`.")
        )
        if start:
            _said(result, launch.watch(began, wait=wait))
    elif start:
        _start_here(result, [str(exe), "run"],
                    launcher or (lambda cmd: launch.start(cmd, wait=wait)))
    else:
        result.message = f"Installed {path}. ocrwatch starts at your next login."
    return result


def _start_here(result: Result, command: list[str], launcher: Launcher) -> None:
    """``--now`` without a service manager to ask: start the daemon in the background
    as ``ocrwatch start`` does, and say truthfully what became of it."""
    installed = f"Installed {result.paths[0]}. ocrwatch starts at every login"
    pid = launch.already_running()
    if pid is not None:
        result.message = f"{installed}; it already runs now (PID {pid})."
        return
    result.commands.append(command)
    result.message = f"{installed}."
    _said(result, launcher(command))


def _said(result: Result, started: launch.Launched) -> None:
    """Add what became of the daemon started now to ``result``'s message (and status)."""
    if started.failed:
        result.exit_code = started.exit_code or 1
        result.message += f" But it did not start now: {started}"
    else:
        result.message += f" Now {started}."


def disable(
    *,
    runner: Runner = run_command,
    environ: Mapping[str, str] | None = None,
    platform: str | None = None,
) -> Result:
    """Remove every autostart entry ocrwatch installed (whichever kinds are present).

    A daemon started by systemd or launchd is stopped as well; one started by a desktop
    session keeps running until Quit or `ocrwatch stop`.
    """
    env = os.environ if environ is None else environ
    plat = sys.platform if platform is None else platform
    result = Result(kind="")
    kinds: list[str] = []
    for kind in KINDS:
        path = target_path(kind, env)
        if not path.exists():
            continue
        kinds.append(kind)
        if kind == "systemd":
            cmd = ["systemctl", "--user", "disable", "--now", UNIT]
            result.commands.append(cmd)
            done = runner(cmd)
            if done.returncode != 0:  # the unit file goes anyway; say so in the log
                log.warning("%s: %s", " ".join(cmd), (done.stderr or done.stdout).strip())
        if kind == "launchd" and plat == "darwin":
            cmd = ["launchctl", "bootout", f"gui/{os.getuid()}/{LABEL}"]
            result.commands.append(cmd)
            runner(cmd)  # fails when it is not loaded, which is fine
        path.unlink()
        result.paths.append(path)
        if kind == "systemd":
            cmd = ["systemctl", "--user", "daemon-reload"]
            result.commands.append(cmd)
            runner(cmd)
    result.kind = ",".join(kinds)
    if result.paths:
        result.message = "Removed " + ", ".join(str(p) for p in result.paths) + "."
    else:
        result.message = "No autostart entry was installed; nothing to remove."
    return result


def installed(environ: Mapping[str, str] | None = None) -> list[Path]:
    """The autostart files present for this user."""
    return [p for p in (target_path(k, environ) for k in KINDS) if p.exists()]
