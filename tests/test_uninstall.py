"""`ocrwatch uninstall` and `make clean`: what installing and running ocrwatch added goes
(the daemon, the autostart entry, the link `make run` made, its PATH lines), the user's
data stays and is named. Real processes in a private home: a daemon started with
`ocrwatch start`, the real autostart entry, the real tools/ensure-path.sh, real make."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_for
from test_start_failure import (
    FINE,
    User,
    _pid_alive,
    user_fixture,  # noqa: F401  (the `user` fixture)
)

ROOT = Path(__file__).resolve().parents[1]
USERS_OWN = "# the user's own\nalias ll='ls -l'\n"


def _stand_in_venv(where: Path) -> Path:
    """A venv as the Makefile leaves it (its .base stamp), its `ocrwatch` this checkout's."""
    (where / "bin").mkdir(parents=True)
    program = where / "bin" / "ocrwatch"
    program.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ocrwatch "$@"\n')
    program.chmod(0o755)
    (where / ".base").touch()
    return program


def _ensure_path(home: Path, bindir: Path) -> None:
    subprocess.run(["sh", str(ROOT / "tools" / "ensure-path.sh"), str(bindir)], check=True,
                   env={"HOME": str(home), "PATH": "/usr/bin:/bin"}, capture_output=True,
                   timeout=30)


def test_uninstall_asks_then_removes_what_was_added_and_names_the_data_left(
        user: User) -> None:
    home = user.home.root / "home"
    program = _stand_in_venv(user.home.root / "checkout" / ".venv")
    bindir = home / ".local" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "ocrwatch").symlink_to(program)
    for rc in (".bashrc", ".zshrc"):
        (home / rc).write_text(USERS_OWN)
    _ensure_path(home, bindir)
    assert str(bindir) in (home / ".bashrc").read_text()
    # Another tool's link (pipx's, say) is not ours to remove.
    other = user.home.root / "pipx" / "venvs" / "ocrwatch" / "bin"
    other.mkdir(parents=True)
    (other / "ocrwatch").write_text("#!/bin/sh\n")
    elsewhere = home / "bin"
    elsewhere.mkdir()
    (elsewhere / "ocrwatch").symlink_to(other / "ocrwatch")

    # What the README's commands write: the man page, a completion script; and a file of
    # the user's own at such a place.
    page = home / ".local" / "share" / "man" / "man1" / "ocrwatch.1"
    fish = home / ".config" / "fish" / "completions" / "ocrwatch.fish"
    for path, args in ((page, ["manpage"]), (fish, ["completion", "fish"])):
        path.parent.mkdir(parents=True)
        path.write_text(user.cli(*args).stdout)
    own = home / ".zfunc" / "_ocrwatch"
    own.parent.mkdir()
    own.write_text("#compdef ocrwatch\n# my own\n")

    user.config.write_text(FINE)
    entry = home / ".config" / "autostart" / "ocrwatch.desktop"
    enabled = user.cli("autostart", "enable", "--kind", "xdg", "--exec", str(program))
    assert enabled.returncode == 0 and entry.exists(), enabled.stderr
    assert user.cli("start", "--no-tray").returncode == 0
    pid = user.running_pid()

    # Not at a terminal, without --yes: what it would do, and nothing done.
    asked = user.cli("uninstall")
    assert asked.returncode == 0, asked.stderr
    assert asked.stdout.startswith("ocrwatch uninstall would:\n")
    for step in (f"  stop the daemon (PID {pid})", f"  remove the autostart entry {entry}",
                 f"  remove the link {bindir / 'ocrwatch'} (to {program})",
                 f"  remove from {home / '.bashrc'} the lines that put {bindir} on PATH",
                 f"  remove from {home / '.zshrc'} the lines that put {bindir} on PATH",
                 f"  remove {page} (written by `ocrwatch manpage` or `ocrwatch completion`)",
                 f"  remove {fish} (written by",
                 "Nothing was changed; `ocrwatch uninstall --yes` does it."):
        assert step in asked.stdout, asked.stdout
    assert str(elsewhere) not in asked.stdout
    assert user.running_pid() == pid and entry.exists() and (bindir / "ocrwatch").is_symlink()

    done = user.cli("uninstall", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"stopped the daemon (PID {pid})" in done.stdout
    wait_for(lambda: not _pid_alive(pid), 30, "the daemon to end")
    assert user.cli("status").returncode == 5
    assert not entry.exists()
    assert not os.path.lexists(bindir / "ocrwatch")
    assert (elsewhere / "ocrwatch").is_symlink()  # another's link stays
    assert not page.exists() and not fish.exists()
    assert own.read_text() == "#compdef ocrwatch\n# my own\n"
    for rc in (".bashrc", ".zshrc"):
        assert (home / rc).read_text() == USERS_OWN  # exactly the user's own lines
    # The data stays, each named with its place.
    assert "Your data stays (remove by hand what you no longer want):" in done.stdout
    assert f"  {user.config}: the config file" in done.stdout
    assert f"  {user.home.database}: the index" in done.stdout
    assert f"  {user.home.inbox}: your files and, beside each, its sidecars" in done.stdout
    assert user.config.exists() and user.home.database.exists()
    assert "The program itself: " in done.stdout

    again = user.cli("uninstall", "--yes")
    assert again.returncode == 0
    assert "nothing to remove" in again.stdout


def test_uninstall_removes_a_dangling_link_left_by_an_old_make_clean(user: User) -> None:
    home = user.home.root / "home"
    bindir = home / ".local" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "ocrwatch").symlink_to(user.home.root / "gone" / ".venv" / "bin" / "ocrwatch")
    result = user.cli("uninstall", "-y")
    assert result.returncode == 0, result.stderr
    assert f"removed the link {bindir / 'ocrwatch'}" in result.stdout
    assert not os.path.lexists(bindir / "ocrwatch")


def test_make_clean_leaves_no_dangling_link_and_names_the_path_line(tmp_path: Path) -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    # A copy of the Makefile: `clean` also empties the checkout's caches.
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    shutil.copy(ROOT / "Makefile", checkout / "Makefile")
    venv = checkout / ".venv"
    program = _stand_in_venv(venv)
    home = tmp_path / "home"
    links = home / ".local" / "bin"
    links.mkdir(parents=True)
    (links / "ocrwatch").symlink_to(program)
    (home / ".bashrc").write_text(USERS_OWN)
    _ensure_path(home, links)
    env = {"HOME": str(home), "PATH": os.environ["PATH"]}
    cleaned = subprocess.run(["make", "--no-print-directory", "-C", str(checkout), "clean"],
                             env=env, capture_output=True, text=True, timeout=60)
    assert cleaned.returncode == 0, cleaned.stderr
    assert not venv.exists()
    assert not os.path.lexists(links / "ocrwatch")
    assert f"ocrwatch: removed the link {links / 'ocrwatch'}" in cleaned.stdout
    assert (f"the PATH line for {links} stays in {home / '.bashrc'} (`make uninstall` "
            "removes it") in cleaned.stdout

    # A file of the user's own at the link's place is never touched.
    (links / "ocrwatch").write_text("mine\n")
    _stand_in_venv(venv)
    again = subprocess.run(["make", "--no-print-directory", "-C", str(checkout), "clean"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0
    assert (links / "ocrwatch").read_text() == "mine\n"


def _at_a_terminal(user: User, answer: str) -> str:
    """`ocrwatch uninstall` at a terminal (a pty): what it printed, ``answer`` typed at
    its question."""
    import pty
    import select

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "ocrwatch", "uninstall"], env=user.env(),
                            stdin=slave, stdout=slave, stderr=slave, cwd=user.home.root)
    os.close(slave)
    out = b""
    try:
        def read_some() -> bytes:
            ready, _, _ = select.select([master], [], [], 0.2)
            if not ready:
                return b""
            try:
                return os.read(master, 4096)
            except OSError:  # the other end closed: it has ended
                return b""

        def asked() -> bool:
            nonlocal out
            out += read_some()
            return b"Go ahead? [y/N] " in out
        wait_for(asked, 60, "the question")
        os.write(master, answer.encode() + b"\n")
        proc.wait(timeout=60)
        while chunk := read_some():
            out += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert proc.returncode == 0, out
    return out.decode().replace("\r\n", "\n")


def test_at_a_terminal_it_asks_and_a_no_changes_nothing(user: User) -> None:
    home = user.home.root / "home"
    bindir = home / ".local" / "bin"
    bindir.mkdir(parents=True)
    link = bindir / "ocrwatch"
    link.symlink_to(user.home.root / "gone" / ".venv" / "bin" / "ocrwatch")
    said = _at_a_terminal(user, "n")
    assert f"ocrwatch uninstall will:\n  remove the link {link}" in said
    assert "Nothing was changed.\n" in said and "would:" not in said
    assert link.is_symlink()
    said = _at_a_terminal(user, "y")
    assert f"removed the link {link}" in said
    assert not os.path.lexists(link)
