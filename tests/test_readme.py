"""The README's shell commands work as written: every command in its code blocks that can
run here runs, in README order, as a new user would type it, in a fresh HOME with
`ocrwatch` on the PATH and a real daemon (Tesseract) watching ~/OCR-Inbox."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_for, write_image

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

# Commands that cannot run in a test, and why. Everything else in a code block runs.
NOT_HERE = {
    "make ": "sets up this very checkout",
    "sudo ": "installs system packages",
    "systemctl ": "needs the user's systemd session",
    "journalctl ": "needs the user's systemd session",
    "launchctl ": "macOS",
    "brew ": "macOS",
    "ocrwatch run": "the test starts the daemon itself, exactly so",
    "ocrwatch autostart": "would change how the user's session starts",
    "pip ": "installs packages",
    "vllm ": "needs a GPU",
}


# The programs the README's commands start with; other lines in code blocks are diagrams.
PROGRAMS = {"ocrwatch", "cp", "mv", "mkdir", "sed", "ls", "cat", "echo", "export", "make",
            "sudo", "systemctl", "journalctl", "launchctl", "brew", "pip", "vllm", "curl"}


def _blocks(text: str) -> list[tuple[str, list[str]]]:
    """The fenced code blocks: (language, lines)."""
    blocks: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    language = ""
    for line in text.splitlines():
        fence = re.match(r"\s*```(\S*)", line)
        if fence and current is None:
            current, language = [], fence.group(1)
        elif fence:
            blocks.append((language, current or []))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def commands(text: str) -> list[str]:
    """Every shell command in the README's fenced code blocks, comments removed."""
    out: list[str] = []
    for language, lines in _blocks(text):
        if language not in ("", "sh", "bash", "console", "shell"):
            continue  # toml, python...: not commands
        if any(line.startswith("$ ") for line in lines):  # a transcript: its commands only
            lines = [line[2:] for line in lines if line.startswith("$ ")]
        joined = "\n".join(line.strip() for line in lines).replace("\\\n", " ")
        for line in joined.splitlines():
            line = re.sub(r"\s{2,}#.*$", "", line).strip()  # a comment after two spaces
            if line.split(" ", 1)[0] in PROGRAMS:  # not a diagram or a tree of folders
                out.append(line)
    return out


def _why_not(command: str) -> str | None:
    for prefix, why in NOT_HERE.items():
        if command.startswith(prefix):
            return why
    if "--web" in command and "--no-open" not in command:
        return "opens a browser"
    return None


def test_the_readme_lists_commands() -> None:
    found = commands(README.read_text())
    assert "ocrwatch status" in found and any(c.startswith("cp ") for c in found), found


def test_every_readme_command_that_can_run_here_works(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "Downloads").mkdir(parents=True)
    (home / "run").mkdir(mode=0o700)
    write_image(home / "Downloads" / "letter.jpg",
                ["Dear Sir,", "the harbour office opens at nine.", "Yours, A. Reader"],
                quality=95)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OCRWATCH_", "XDG_")) and k not in ("DISPLAY",
                                                                    "WAYLAND_DISPLAY")}
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(home / "run"), OCRWATCH_ENGINE="tesseract",
               OCRWATCH_SETTLE_SECONDS="0.5",
               PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]))
    log = tmp_path / "daemon.log"
    with log.open("wb") as out:
        daemon = subprocess.Popen(["ocrwatch", "run"], env=env, stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    ran: list[str] = []
    try:
        wait_for(lambda: "watching" in log.read_text(errors="replace"), 60, "the daemon")
        for command in commands(README.read_text()):
            if _why_not(command):
                continue
            done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env,
                                  capture_output=True, text=True, timeout=120)
            out = done.stdout + done.stderr
            assert "Traceback" not in out, (command, out)
            allowed = {0, 1} if command.startswith(("ocrwatch search", "ocrwatch doctor")) \
                else {0}
            assert done.returncode in allowed, (command, done.returncode, out)
            ran.append(command)
            if command.startswith("cp ") and "OCR-Inbox" in command:
                # "a moment later: letter.md, letter.txt"
                wait_for(lambda: (home / "OCR-Inbox" / "letter.txt").exists(), 120,
                         "the letter's sidecars")
            if command == 'ocrwatch search "harbour office"':
                assert "letter.jpg" in done.stdout, out
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(timeout=60)
    assert any(c.startswith("ocrwatch stop") for c in ran), ran
    for unit in (home / ".config" / "systemd" / "user" / "ocrwatch.service",
                 home / ".config" / "autostart" / "ocrwatch.desktop"):
        if unit.exists():  # made by the README's "by hand" lines
            text = unit.read_text()
            assert "@" not in text and str(Path(sys.executable).parent / "ocrwatch") in text


@pytest.mark.parametrize("command", ["make run", "sudo apt install x", "ocrwatch run",
                                     "systemctl --user daemon-reload"])
def test_commands_that_cannot_run_here_are_named(command: str) -> None:
    assert _why_not(command)
