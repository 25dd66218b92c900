"""`ocrwatch restart`: the running daemon stopped cleanly and started again the way it was
started (its command line, folder and environment), or a clear word when none runs. Real
processes in a private home, as `ocrwatch start` leaves them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_for
from test_start_failure import (
    FINE,
    REASON,
    TYPO,
    User,
    _pid_alive,
    user_fixture,  # noqa: F401  (the `user` fixture)
)

from ocrwatch.control import restart


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def test_restart_with_no_daemon_says_so_and_how_to_start_one(user: User) -> None:
    result = user.cli("restart")
    assert result.returncode == 5, result.stderr
    assert ("no daemon is running, so there is nothing to restart; `ocrwatch start` starts "
            "one") in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
def test_restart_starts_it_again_with_its_own_options_folder_and_environment(
        user: User, tmp_path: Path) -> None:
    user.config.write_text(FINE)
    # A relative --database: the new daemon must run from the old one's folder to find it.
    started = user.cli("start", "--no-tray", "--jobs", "2", "--database", "data/rel.sqlite3")
    assert started.returncode == 0, started.stderr
    old = user.running_pid()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = user.env()
    env.pop("OCRWATCH_ENGINE")  # the old daemon's environment counts, not this shell's
    done = subprocess.run([sys.executable, "-m", "ocrwatch", "restart"], env=env,
                          cwd=elsewhere, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (f"stopped the daemon (PID {old}) and started it again in the background, with "
            "its own command line: the daemon runs in the background (PID ") in done.stdout
    new = user.running_pid()
    assert new != old
    wait_for(lambda: not _pid_alive(old), 30, "the old daemon to end")
    argv = _cmdline(new)
    assert argv[argv.index("--jobs") + 1] == "2" and "--no-tray" in argv
    status = json.loads(user.cli("status", "--json").stdout)
    assert status["database"] == "data/rel.sqlite3"
    assert Path(os.readlink(f"/proc/{new}/cwd")) == user.home.root  # its folder, not ours
    assert not (elsewhere / "data").exists()
    assert status["engine"]["name"] == "fake"


def test_origin_reads_a_real_process(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             cwd=tmp_path, env={**os.environ, "OCRWATCH_MARK": "x"})
    try:
        # Until the child has run its exec, its cmdline is empty.
        found = wait_for(lambda: restart.origin(child.pid), 10, "the child's cmdline")
        assert found.argv[1:] == ["-c", "import time; time.sleep(30)"]
        assert found.cwd == tmp_path and found.env is not None
        assert found.env["OCRWATCH_MARK"] == "x" and found.unit == ""
        gone = "/nonexistent/bin/python"
        assert restart.missing_program([gone, "x"]) == gone
        assert restart.missing_program(found.argv) is None
    finally:
        child.kill()
        child.wait()
    assert restart.origin(child.pid) is None


def test_a_restart_into_a_bad_config_says_why_with_its_status(user: User) -> None:
    user.config.write_text(FINE)
    assert user.cli("start", "--no-tray").returncode == 0
    old = user.running_pid()
    user.config.write_text(TYPO)  # saved with a typo: the running daemon keeps its own
    done = user.cli("restart", "--wait", "30")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"stopped the daemon (PID {old}) and started it again" in done.stderr
    assert "but the daemon did not start (status 2): the file" in done.stderr
    assert REASON in done.stderr
    assert user.cli("status").returncode == 2


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
def test_a_daemon_whose_program_was_removed_is_left_running_with_what_to_do(
        user: User, tmp_path: Path) -> None:
    """As after `pipx uninstall`: the daemon runs on from files that are gone."""
    program = tmp_path / "installed" / "ocrwatch"
    program.parent.mkdir()
    program.write_text(f"#!{sys.executable}\nimport sys\nfrom ocrwatch.cli import main\n"
                       "sys.exit(main())\n")
    program.chmod(0o755)
    user.config.write_text(FINE)
    env = {**user.env(), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    # As a login entry runs it: the program itself.
    daemon = subprocess.Popen([str(program), "run", "--no-tray"], env=env, cwd=tmp_path,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: user.cli("status").returncode == 0, 60, "the daemon to answer")
        pid = user.running_pid()
        program.unlink()
        done = user.cli("restart")
        assert done.returncode != 0
        assert (f"the daemon (PID {pid}) runs from {program}, which is no longer there "
                "(ocrwatch was uninstalled or moved)") in done.stderr
        assert "`ocrwatch stop`" in done.stderr
        assert user.running_pid() == pid  # left as it was
    finally:
        user.cli("stop")
        daemon.wait(timeout=60)
