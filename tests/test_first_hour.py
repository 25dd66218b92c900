"""What a new user meets on the command line: help with examples, a reason with every
non-zero exit, plurals, queries beginning with "-", autostart without a session bus, and
doctor's word on notifications and opening files. The real program in a child process."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import child_env, write_image

from ocrwatch.cli import build_parser

COMMANDS = sorted(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]


def run(home: Path, *args: str, env: dict[str, str] | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "ocrwatch", *args],
                          env=env if env is not None else child_env(home),
                          capture_output=True, text=True, timeout=timeout, cwd=home)
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    if done.returncode not in (0,):  # every failure says why, on stderr
        assert done.stderr.strip() or args[0] == "doctor", (args, done.returncode, done.stdout)
    return done


@pytest.fixture
def user(tmp_path: Path) -> Path:
    home = tmp_path / "u"
    home.mkdir()
    return home


def test_commands_are_all_there() -> None:
    assert {"run", "add", "search", "status", "pause", "resume", "stop", "rescan", "retry",
            "doctor", "autostart"} <= set(COMMANDS)


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_every_help_has_an_example_and_no_test_engine(user: Path, command: str | None) -> None:
    done = run(user, *([command] if command else []), "--help")
    assert done.returncode == 0
    text = done.stdout
    assert "examples:" in text, text
    example = f"  ocrwatch {command}" if command else "  ocrwatch "
    assert example in text.split("examples:", 1)[1], text
    assert "fake" not in text, text


def test_the_test_engine_is_not_offered_in_errors(user: Path) -> None:
    done = run(user, "doctor", "--engine", "tesseractt")
    assert done.returncode == 2
    assert "auto, tesseract, vllm, remote" in done.stderr and "fake" not in done.stderr


def _read(user: Path, *names: str) -> Path:
    inbox = user / "inbox"
    inbox.mkdir(exist_ok=True)
    files = [write_image(inbox / name, ["a page"]) for name in names]
    done = run(user, "add", "--engine", "fake", *map(str, files))
    assert done.returncode == 0, done.stdout + done.stderr
    return inbox


def test_retry_of_a_file_that_does_not_exist_says_so(user: Path) -> None:
    done = run(user, "retry", "nonexistent.jpg")
    assert done.returncode == 1
    assert "nonexistent.jpg does not exist" in done.stderr, done.stderr
    assert "0 files" not in done.stdout + done.stderr


def test_retry_of_a_file_never_read_says_why(user: Path) -> None:
    _read(user, "known.png")
    fresh = write_image(user / "inbox" / "fresh.png", ["new"])
    done = run(user, "retry", str(fresh))
    assert done.returncode == 1
    assert "not been read yet" in done.stderr and "ocrwatch add" in done.stderr, done.stderr


def test_retry_speaks_in_the_singular_and_the_plural(user: Path) -> None:
    inbox = _read(user, "one.png", "two.png", "three.png")
    done = run(user, "retry", str(inbox / "one.png"))
    assert done.returncode == 0
    assert done.stdout.startswith("1 file queued again; it will be read"), done.stdout
    done = run(user, "retry", str(inbox / "two.png"), str(inbox / "three.png"))
    assert done.stdout.startswith("2 files queued again; they will be read"), done.stdout
    done = run(user, "retry", "--all-failed")
    assert done.returncode == 0 and "no file has failed" in done.stdout, done.stdout


def test_a_query_may_begin_with_a_dash(user: Path) -> None:
    _read(user, "draft-2024.png")
    for args in (["--", "-2024"], ["-2024"], ["--limit", "3", "--", "-2024"]):
        done = run(user, "search", *args)
        assert done.returncode == 0, (args, done.stderr)
        assert "draft-2024.png" in done.stdout, (args, done.stdout)
    done = run(user, "search", "--jsn", "draft")
    assert done.returncode == 2 and "unrecognized arguments: --jsn" in done.stderr


def test_no_matches_and_no_daemon_say_so(user: Path) -> None:
    _read(user, "page.png")
    done = run(user, "search", "nowhere")
    assert done.returncode == 1 and "no matches" in done.stderr
    for command in ("pause", "resume", "rescan", "stop"):
        done = run(user, command)
        assert done.returncode == 5 and "daemon is running" in done.stderr, done.stderr


def test_systemd_autostart_without_a_session_bus_writes_nothing(user: Path) -> None:
    env = child_env(user)
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    done = run(user, "autostart", "enable", "--kind", "systemd", env=env)
    assert done.returncode == 1, done.stdout
    assert "systemctl --user show-environment" in done.stderr, done.stderr
    assert "--kind xdg" in done.stderr, done.stderr
    assert not (user / ".config" / "systemd").exists()


def _doctor_env(user: Path, with_opener: bool) -> dict[str, str]:
    """A desktop-like environment whose PATH holds only what the test chooses."""
    env = child_env(user, {"DISPLAY": ":93"})  # a display name is all the check reads
    tools = user / "bin"
    tools.mkdir(exist_ok=True)
    if with_opener:
        opener = tools / "xdg-open"
        opener.write_text("#!/bin/sh\nexit 0\n")
        opener.chmod(0o755)
    for tool in ("dbus-daemon", "sh"):  # what dbus-run-session and the opener need
        found = shutil.which(tool)
        if found and not (tools / tool).exists():
            (tools / tool).symlink_to(found)
    env["PATH"] = os.pathsep.join([str(tools), str(Path(sys.executable).parent)])
    return env


def test_doctor_says_when_notifications_and_open_cannot_work(user: Path) -> None:
    session = shutil.which("dbus-run-session")
    if session is None or shutil.which("dbus-daemon") is None:
        pytest.skip("needs dbus-run-session (dbus-daemon) for a real session bus")
    env = _doctor_env(user, with_opener=False)
    done = subprocess.run([session, "--", sys.executable, "-m", "ocrwatch",
                           "doctor", "--engine", "tesseract"], env=env, cwd=user,
                          capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert "Traceback" not in out and done.returncode == 1, out
    lines = out.splitlines()
    notif = next(i for i, line in enumerate(lines) if "notifications" in line)
    assert "[FAIL]" in lines[notif] and "no notification server" in lines[notif], out
    assert "fix:" in lines[notif + 1] and "dunst" in lines[notif + 1], out
    opener = next(i for i, line in enumerate(lines) if "open files" in line)
    assert "[FAIL]" in lines[opener] and "xdg-open is missing" in lines[opener], out
    assert "sudo apt install xdg-utils" in lines[opener + 1], out


def test_doctor_without_a_session_bus_at_all(user: Path) -> None:
    env = _doctor_env(user, with_opener=True)
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    done = run(user, "doctor", "--engine", "tesseract", env=env)
    line = next(line for line in done.stdout.splitlines() if "notifications" in line)
    assert "[FAIL]" in line and "DBUS_SESSION_BUS_ADDRESS is not set" in line, done.stdout
    line = next(line for line in done.stdout.splitlines() if "open files" in line)
    assert "[ok  ]" in line, done.stdout


# -- status: the file and page being read, the queue, the rate, the languages -------------
def test_status_says_which_file_and_page_are_being_read(user: Path) -> None:
    from helpers import save_pdf, wait_for

    inbox = user / "inbox"
    inbox.mkdir()
    env = child_env(user, {"OCRWATCH_FAKE_DELAY": "0.8", "OCRWATCH_SETTLE_SECONDS": "0.3"})
    daemon = subprocess.Popen([sys.executable, "-m", "ocrwatch", "run", "--no-tray", "--engine",
                               "fake", "--inbox", str(inbox), "--languages", "eng,deu"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: run(user, "status", env=env).returncode == 0
                 and "PID" in run(user, "status", env=env).stdout, 60, "the daemon")
        save_pdf(inbox / ".report.pdf", [[f"page {n}"] for n in range(1, 13)])
        (inbox / ".report.pdf").rename(inbox / "report.pdf")

        def reading_later_page() -> str | None:
            out = run(user, "status", env=env).stdout
            # From the fourth page: the rate counts the pages after the first two.
            later = re.search(r"^  reading: report\.pdf, page ([4-9]|1[0-2]) of 12$", out, re.M)
            return out if later else None
        out = wait_for(reading_later_page, 120, "status to show a later page of report.pdf")
        assert "  languages: eng, deu" in out, out
        assert "  engine:  fake (ready)" in out, out
        assert re.search(r"^  rate:    [\d.]+ pages/(s|min) while reading$", out, re.M), out
        assert "waiting" in out and "in hand (1 being read)" in out, out  # the queue
        import json
        data = json.loads(run(user, "status", "--json", env=env).stdout)
        assert data["languages"] == ["eng", "deu"]
        # 12 pages at 0.8 s each: still reading a moment after a later page was shown.
        assert data["reading"][0]["pages"] == 12, data
        assert data["reading"][0]["path"].endswith("report.pdf"), data
        stop = run(user, "stop", env=env)
        assert stop.returncode == 0, stop.stderr
    finally:
        if daemon.poll() is None:
            daemon.kill()
        daemon.wait(timeout=60)


def test_the_tray_status_submenu_shows_the_same() -> None:
    from ocrwatch.core.progress import Progress
    from ocrwatch.core.status import EngineStatus, Reading, Status
    from ocrwatch.tray import status_lines

    status = Status(state="working", queued=3, running=1, languages=("eng", "fra"),
                    progress=Progress(pages_per_second=1.5),
                    engine=EngineStatus("tesseract", "", "ready"),
                    reading=(Reading("/in/minutes.pdf", 6, 80),))
    lines = status_lines(status)
    assert "Reading: minutes.pdf, page 7 of 80" in lines, lines
    assert "Rate: 1.50 pages/s while reading" in lines, lines
    assert "Languages: eng, fra" in lines and "Engine: tesseract (ready)" in lines, lines
    assert lines[0] == "State: working, 3 waiting, 1 in hand (1 being read)", lines


def test_add_shows_progress_in_pages(user: Path) -> None:
    from helpers import save_pdf

    folder = user / "batch"
    folder.mkdir()
    save_pdf(folder / "three.pdf", [["one"], ["two"], ["three"]])
    write_image(folder / "one.png", ["single"])
    env = child_env(user, {"OCRWATCH_FAKE_DELAY": "0.2"})
    done = run(user, "add", "--engine", "fake", str(folder), env=env)
    assert done.returncode == 0, done.stderr
    last = done.stderr.replace("\r", "\n").strip().splitlines()[-1]
    assert "4/4" in last and ("page/s" in last or "s/page" in last), done.stderr
    assert "2/2 files" in last, done.stderr
    assert done.stdout.startswith("2 read, 0 failed"), done.stdout


# -- console hygiene ----------------------------------------------------------------------
def test_native_stderr_goes_to_the_log_not_the_console(user: Path) -> None:
    """What C code writes to descriptor 2 (Leptonica, GTK) lands in the log file; the
    console keeps the daemon's own lines. The test writes into the running daemon's
    descriptor 2 from outside, through /proc, as a native library inside it would."""
    from helpers import wait_for

    proc_fd = Path("/proc/self/fd/2")
    if not proc_fd.exists():
        pytest.skip("needs /proc")
    inbox = user / "inbox"
    inbox.mkdir()
    env = child_env(user)
    console = user / "console.txt"
    with console.open("wb") as out:
        daemon = subprocess.Popen([sys.executable, "-m", "ocrwatch", "run", "--no-tray",
                                   "--engine", "fake", "--inbox", str(inbox)], env=env,
                                  stdout=out, stderr=out)
    try:
        wait_for(lambda: "watching" in console.read_text(errors="replace"), 60, "the daemon")
        native = "Error in boxClipToRectangle: box outside rectangle"
        gtk = "(ocrwatch:1234): Gdk-CRITICAL **: gdk_window_get_scale_factor: assertion"
        with open(f"/proc/{daemon.pid}/fd/2", "w") as fd2:
            fd2.write(f"{native}\n{gtk}\n")
        log = user / ".local" / "state" / "ocrwatch" / "log" / "ocrwatch.log"
        wait_for(lambda: log.exists() and gtk in log.read_text(errors="replace"), 30,
                 "the native lines in the log")
        text = log.read_text(errors="replace")
        assert f"ocrwatch.native: {native}" in text, text
        assert run(user, "stop", env=env).returncode == 0
        assert daemon.wait(timeout=60) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(timeout=30)
    shown = console.read_text(errors="replace")
    assert native not in shown and "Gdk-CRITICAL" not in shown, shown
    assert "watching" in shown and "stopped" in shown, shown  # the daemon's own lines stay


def test_the_tray_says_why_it_cannot_open_a_file(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Without xdg-open, "Show failed files" and friends answer with a notification
    that names the package, not with silence."""
    from ocrwatch.core.status import Status
    from ocrwatch.tray import TrayController, open_path

    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(sys, "platform", "linux")

    class Target:
        def status(self) -> Status:
            return Status(log_file=str(tmp_path / "ocrwatch.log"))

    shown: list[tuple[str, str]] = []
    controller = TrayController(Target(), opener=open_path,  # type: ignore[arg-type]
                                notify=lambda message, title: shown.append((message, title)))
    controller.refresh()
    controller.open_log()
    assert len(shown) == 1, shown
    message, title = shown[0]
    assert "xdg-open" in message and "sudo apt install xdg-utils" in message, message
    assert title == "ocrwatch cannot open it"


def test_autostart_with_a_program_that_does_not_exist(user: Path) -> None:
    done = run(user, "autostart", "enable", "--kind", "xdg", "--exec", "/nonexistent/ocrwatch")
    assert done.returncode == 1 and "not a program that can be run" in done.stderr
    assert not (user / ".config" / "autostart").exists()
