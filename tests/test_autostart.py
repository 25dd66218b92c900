"""Autostart entries, installed into a temporary HOME with a recording command runner."""

from __future__ import annotations

import configparser
import plistlib
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from ocrwatch.control import autostart
from ocrwatch.core.errors import OcrwatchError

ROOT = Path(__file__).resolve().parents[1]


class Recorder:
    """Stands in for subprocess: records each command, answers from a table."""

    def __init__(self, answers: dict[str, tuple[int, str]] | None = None) -> None:
        self.commands: list[list[str]] = []
        self.answers = answers or {}

    def __call__(self, cmd: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.commands.append(list(cmd))
        code, out = self.answers.get(" ".join(cmd), (0, ""))
        return subprocess.CompletedProcess(list(cmd), code, out, "" if code == 0 else out)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    return {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "DISPLAY": ":5"}


EXE = Path("/opt/ocr tools/bin/ocrwatch")  # a space, to check the quoting


def test_templates_are_the_packaged_files() -> None:
    for name in (autostart.UNIT, autostart.DESKTOP, autostart.PLIST):
        packaged = (ROOT / "packaging" / name).read_text(encoding="utf-8")
        assert autostart.template(
            {"ocrwatch.service": "systemd", "ocrwatch.desktop": "xdg"}.get(name, "launchd")
        ) == packaged


def test_detect() -> None:
    active = Recorder({"systemctl --user is-active graphical-session.target": (0, "active\n")})
    inactive = Recorder({"systemctl --user is-active graphical-session.target":
                         (3, "inactive\n")})
    gui = {"DISPLAY": ":0"}
    assert autostart.detect(platform="darwin", environ=gui) == ("launchd", "")
    assert autostart.detect(platform="linux", environ=gui, runner=active,
                            has_systemd=True) == ("systemd", "graphical-session.target")
    assert autostart.detect(platform="linux", environ=gui, runner=inactive,
                            has_systemd=True) == ("xdg", "")
    assert autostart.detect(platform="linux", environ={}, runner=inactive,
                            has_systemd=True) == ("systemd", "default.target")
    assert autostart.detect(platform="linux", environ=gui, runner=inactive,
                            has_systemd=False) == ("xdg", "")
    with pytest.raises(OcrwatchError, match="shell:startup"):
        autostart.detect(platform="win32", environ=gui)


def test_systemd_enable_and_disable(env: dict[str, str]) -> None:
    runner = Recorder({"systemctl --user is-active graphical-session.target": (0, "active")})
    res = autostart.enable(executable=EXE, runner=runner, environ=env, platform="linux",
                           has_systemd=True)
    unit = Path(env["XDG_CONFIG_HOME"]) / "systemd" / "user" / "ocrwatch.service"
    assert res.kind == "systemd" and res.paths == [unit]
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.read(unit)
    assert cp["Service"]["ExecStart"] == '"/opt/ocr tools/bin/ocrwatch" run'
    assert cp["Install"]["WantedBy"] == "graphical-session.target"
    assert cp["Unit"]["PartOf"] == "graphical-session.target"
    assert "@" not in unit.read_text()
    assert runner.commands[1:] == [
        ["systemctl", "--user", "show-environment"],
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", "ocrwatch.service"],
    ]
    assert "next login" in res.message and "systemctl --user start ocrwatch" in res.message
    assert str(res) == res.message

    runner2 = Recorder()
    res = autostart.disable(runner=runner2, environ=env, platform="linux")
    assert res.paths == [unit] and not unit.exists()
    assert ["systemctl", "--user", "disable", "--now", "ocrwatch.service"] in runner2.commands
    assert autostart.disable(runner=runner2, environ=env).message.startswith("No autostart")


def test_systemd_start_now_and_headless_target(env: dict[str, str]) -> None:
    del env["DISPLAY"]
    runner = Recorder()
    res = autostart.enable(kind="systemd", executable=Path("/usr/bin/ocrwatch"), start=True,
                           runner=runner, environ=env, wait=0)
    text = res.paths[0].read_text()
    assert "ExecStart=/usr/bin/ocrwatch run" in text
    assert "WantedBy=default.target" in text
    assert ["systemctl", "--user", "enable", "--now", "ocrwatch.service"] in runner.commands


def test_systemd_failure_tells_what_to_do(env: dict[str, str]) -> None:
    runner = Recorder({"systemctl --user daemon-reload": (1, "Failed to connect to bus")})
    with pytest.raises(OcrwatchError, match=r"Failed to connect to bus.*systemctl --user status"):
        autostart.enable(kind="systemd", executable=EXE, runner=runner, environ=env)


def test_xdg_enable_and_disable(env: dict[str, str]) -> None:
    runner = Recorder()
    res = autostart.enable(executable=Path('/o$d/"q"/ocrwatch'), runner=runner, environ=env,
                           platform="linux", has_systemd=False)
    path = Path(env["XDG_CONFIG_HOME"]) / "autostart" / "ocrwatch.desktop"
    assert res.kind == "xdg" and res.paths == [path] and runner.commands == []
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read(path)
    entry = cp["Desktop Entry"]
    assert entry["Type"] == "Application" and entry["Terminal"] == "false"
    # Quoted per the Desktop Entry spec: \$ and \" inside quotes, each \ doubled.
    assert entry["Exec"] == '"/o\\\\$d/\\\\"q\\\\"/ocrwatch" run'
    res = autostart.disable(runner=runner, environ=env, platform="linux")
    assert res.paths == [path] and not path.exists()


def test_launchd_enable_and_disable(env: dict[str, str]) -> None:
    runner = Recorder()
    res = autostart.enable(executable=Path("/Users/me/.local/bin/ocrwatch"), start=True,
                           runner=runner, environ=env, platform="darwin", wait=0)
    path = Path(env["HOME"]) / "Library" / "LaunchAgents" / "org.ocrwatch.daemon.plist"
    assert res.kind == "launchd" and res.paths == [path]
    with path.open("rb") as f:
        plist = plistlib.load(f)
    assert plist["Label"] == "org.ocrwatch.daemon"
    assert plist["ProgramArguments"] == ["/Users/me/.local/bin/ocrwatch", "run"]
    assert plist["RunAtLoad"] is True and plist["KeepAlive"] == {"SuccessfulExit": False}
    assert plist["StandardErrorPath"].startswith(env["HOME"] + "/Library/Logs/ocrwatch/")
    assert runner.commands[0][:2] == ["launchctl", "bootstrap"]
    runner2 = Recorder()
    res = autostart.disable(runner=runner2, environ=env, platform="darwin")
    assert not path.exists()
    assert runner2.commands[0][:2] == ["launchctl", "bootout"]


def test_enable_twice_replaces(env: dict[str, str]) -> None:
    runner = Recorder()
    autostart.enable(kind="xdg", executable=Path("/a/ocrwatch"), runner=runner, environ=env)
    autostart.enable(kind="xdg", executable=Path("/b/ocrwatch"), runner=runner, environ=env)
    (path,) = autostart.installed(env)
    assert "Exec=/b/ocrwatch run" in path.read_text()
    assert not path.with_name(path.name + ".tmp").exists()


def test_find_executable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "nowhere" / "python"))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "ocrwatch"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert autostart.find_executable({"PATH": str(bindir)}) == exe
    with pytest.raises(OcrwatchError, match="--exec"):
        autostart.find_executable({"PATH": str(tmp_path / "empty")})


def test_unknown_kind(env: dict[str, str]) -> None:
    with pytest.raises(OcrwatchError, match="systemd, xdg, launchd"):
        autostart.enable(kind="cron", executable=EXE, environ=env)


def test_systemd_without_a_session_bus_writes_nothing(env: dict[str, str]) -> None:
    no_bus = "Failed to connect to bus: No medium found"
    runner = Recorder({"systemctl --user show-environment": (1, no_bus)})
    with pytest.raises(OcrwatchError, match="no session bus") as err:
        autostart.enable(kind="systemd", executable=EXE, runner=runner, environ=env)
    assert no_bus in str(err.value) and "--kind xdg" in str(err.value)
    assert not autostart.target_path("systemd", env).exists()
    assert runner.commands == [["systemctl", "--user", "show-environment"]]


def test_systemd_enable_failing_later_leaves_no_unit(env: dict[str, str]) -> None:
    runner = Recorder({"systemctl --user enable ocrwatch.service": (1, "Access denied")})
    with pytest.raises(OcrwatchError, match="Access denied"):
        autostart.enable(kind="systemd", executable=EXE, runner=runner, environ=env)
    assert not autostart.target_path("systemd", env).exists()
