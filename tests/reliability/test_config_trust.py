"""A config another local user could write is refused at start and on reload, as ssh
refuses such files; ``doctor`` says why and how to fix it.

Real ``ocrwatch run`` processes; the other user is ``nobody`` through ``setpriv`` when the
tests run as root (the tests that need one are skipped with the reason otherwise).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .helpers import DaemonProcess, Home, drop, ended, image_bytes, ocrwatch_cli, wait_for

NOBODY = 65534
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="making a file another user owns "
                               "(chown) and acting as that user (setpriv) need root")


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder under /tmp every user can reach (pytest's own folder is 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="owcfg-"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _config(folder: Path, body: str = "") -> Path:
    path = folder / "config.toml"
    path.write_text(f"log_level = \"INFO\"\n{body}")
    os.chmod(path, 0o644)
    return path


def _nogroup() -> int:
    import grp
    return grp.getgrnam("nogroup").gr_gid


CASES: dict[str, tuple[Callable[[Path], None], str, str]] = {
    "the file 0666": (lambda p: os.chmod(p, 0o666), "every user", "chmod o-w"),
    "its folder 0777": (lambda p: os.chmod(p.parent, 0o777), "every user", "chmod o-w"),
    "owned by another user": (lambda p: os.chown(p, NOBODY, -1), "owned by nobody",
                              "chown"),
    "group-writable, a shared group": (
        lambda p: (os.chown(p, -1, _nogroup()), os.chmod(p, 0o664)), "the group nogroup",
        "chmod g-w"),
    "a link in a 0777 folder owned by another user": (
        lambda p: None, "owned by nobody", "chown"),
}


@ROOT_ONLY
@pytest.mark.parametrize("case", list(CASES))
def test_a_config_another_user_could_write_is_refused_at_start(
        home: Home, open_folder: Path, case: str,
        daemon_process: Callable[..., DaemonProcess]) -> None:
    make_unsafe, why, fix = CASES[case]
    config = _config(open_folder)
    if case.startswith("a link"):
        shared = open_folder / "shared"
        shared.mkdir()
        os.chmod(shared, 0o1777)  # sticky: only the link's owner may replace it
        link = shared / "config.toml"
        link.symlink_to(config)
        os.lchown(link, NOBODY, NOBODY)
        config = link
    make_unsafe(config)
    daemon = daemon_process(OCRWATCH_CONFIG=str(config)).start()
    assert daemon.proc is not None
    assert daemon.proc.wait(timeout=120) == 2
    out = daemon.output()
    assert f"{config}: not read" in out and why in out and fix in out, out[-2000:]
    assert "Traceback" not in out
    doctor = ocrwatch_cli(home, "doctor", timeout=120, OCRWATCH_CONFIG=str(config))
    assert doctor.returncode == 2, doctor.stdout + doctor.stderr
    assert "[FAIL] config file" in doctor.stdout and "fix: " in doctor.stdout, doctor.stdout
    assert fix in doctor.stdout.split("fix: ", 1)[1], \
        doctor.stdout


def test_a_sticky_shared_folder_and_a_private_file_are_accepted(
        home: Home, open_folder: Path,
        daemon_process: Callable[..., DaemonProcess]) -> None:
    """As ssh: /tmp's sticky bit lets no one else replace a file of this user."""
    os.chmod(open_folder, 0o1777)
    config = _config(open_folder)
    daemon = daemon_process(OCRWATCH_CONFIG=str(config)).start()
    daemon.wait_ready()
    assert daemon.stop() == 0


@ROOT_ONLY
def test_another_users_rewrite_of_on_done_is_not_reloaded(
        home: Home, open_folder: Path,
        daemon_process: Callable[..., DaemonProcess]) -> None:
    """The config becomes 0666 (a umask of 000, a FAT mount) while the daemon runs; then
    nobody rewrites on_done. Before: the daemon reloaded it and ran it as its own user."""
    config = _config(open_folder)
    daemon = daemon_process(OCRWATCH_CONFIG=str(config)).start()
    daemon.wait_ready()
    os.chmod(config, 0o666)
    pwned = home.root / "PWNED"
    attack = (f'log_level = "INFO"\non_done = ["/usr/bin/touch", "{pwned}"]\n')
    done = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                           "--clear-groups", "/bin/sh", "-c", 'printf "%s" "$1" > "$2"',
                           "sh", attack, str(config)], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: "configuration not reloaded" in daemon.output(), 30,
             "the daemon to refuse the reload")
    out = daemon.output()
    assert "every user" in out and f"chmod o-w {config}" in out, out[-2000:]
    scan = drop(home.inbox / "a.png", image_bytes("hello"))
    wait_for(lambda: ended(home.database, scan, "done"), 60, "the file to be read")
    status = ocrwatch_cli(home, "status", OCRWATCH_CONFIG=str(config))
    assert daemon.stop() == 0
    assert not pwned.exists(), "another user's on_done ran as the daemon's user"
    assert "config:  the saved config is not valid" in status.stdout, status.stdout
    assert "every user" in status.stdout
