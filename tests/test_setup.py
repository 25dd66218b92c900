"""A new user's first minutes: a fresh clone, `make run` on a machine without the tray's
system packages, a short and useful output, `ocrwatch` on the PATH afterwards, and a
later `make` that tries the tray extra again."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from helpers import wait_for

ROOT = Path(__file__).resolve().parents[1]

# pkg-config as on a machine without the cairo and GObject headers: it knows nothing of
# them, and answers everything else as the real one does.
SHIM = """#!/bin/sh
for arg in "$@"; do
    case "$arg" in cairo*|gobject-introspection*) exit 1;; esac
done
exec {real} "$@"
"""


def _needs(*tools: str) -> None:
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool}")


def _user(tmp: Path) -> dict[str, str]:
    home = tmp / "home"
    (home / "run").mkdir(parents=True, mode=0o700)
    shim = tmp / "shim"
    shim.mkdir()
    real = shutil.which("pkg-config") or "/bin/false"
    (shim / "pkg-config").write_text(SHIM.format(real=real))
    (shim / "pkg-config").chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OCRWATCH_", "XDG_", "VIRTUAL_ENV", "MAKE", "PYTEST"))
           and k not in ("DISPLAY", "WAYLAND_DISPLAY", "MFLAGS")}
    path = [p for p in env.get("PATH", "").split(os.pathsep)
            if not p.startswith(str(ROOT))]  # not this checkout's .venv/bin
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(home / "run"),
               PATH=os.pathsep.join([str(shim), str(home / ".local" / "bin"), *path]))
    return env


@pytest.mark.slow
def test_make_run_in_a_fresh_clone_without_the_tray_packages(tmp_path: Path) -> None:
    _needs("git", "make", "pkg-config")
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                      capture_output=True).returncode != 0:
        pytest.skip("needs the project as a git checkout to clone")
    repo = tmp_path / "ocrwatch"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True, timeout=120)
    env = _user(tmp_path)
    out_file = tmp_path / "make-run.out"
    with out_file.open("wb") as out:
        proc = subprocess.Popen(["make", "run", "GPU=0"], cwd=repo, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def watching() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"make run ended ({proc.returncode}):\n"
                                     f"{out_file.read_text(errors='replace')[-4000:]}")
            return " watching " in out_file.read_text(errors="replace")
        wait_for(watching, 900, "make run to set up and start watching", interval=0.5)
        # The program is on the PATH now: stop the daemon with it, as a user would.
        stop = subprocess.run(["ocrwatch", "stop"], env=env, capture_output=True,
                              text=True, timeout=120)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    output = out_file.read_text(errors="replace")
    setup = output[:output.index(" watching ")].splitlines()
    # One line to say it is setting up, one for the tray, one for the link, then the
    # daemon's own first lines; no build log, no setuptools warnings.
    assert len(setup) <= 8, output
    for noise in ("Dependency", "cairo not found", "Deprecat", "setuptools", "Traceback",
                  "error:", "!!"):
        assert noise not in output, (noise, output)
    tray = [line for line in setup if "no menu" in line]
    assert len(tray) == 1 and len(tray[0]) <= 100, output  # one short line, once
    assert "make tray-help" in tray[0], tray[0]
    assert "holds" in output or "runs in this terminal" in output  # says it holds it
    help_ = subprocess.run(["make", "--no-print-directory", "tray-help"], cwd=repo, env=env,
                           capture_output=True, text=True, timeout=60)
    for system in ("sudo apt install", "libcairo2-dev", "sudo dnf install",
                   "sudo pacman -S"):
        assert system in help_.stdout, help_.stdout
    # A second `make` says it no more.
    lint = subprocess.run(["make", "--no-print-directory", ".venv/.tray"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=600)
    assert "no menu" not in lint.stdout, lint.stdout
    link = tmp_path / "home" / ".local" / "bin" / "ocrwatch"
    assert link.is_symlink() and link.resolve() == (repo / ".venv" / "bin" / "ocrwatch").resolve()
    assert sum("linked" in line for line in setup) == 1, output
    assert not (repo / ".venv" / ".tray").exists()  # no stamp: the next run tries again

    # Once the packages are there, the next `make` builds the tray extra by itself.
    real = shutil.which("pkg-config")
    have = subprocess.run([real or "pkg-config", "--exists", "cairo",
                           "gobject-introspection-1.0"], env=env).returncode == 0
    if not have:
        return  # this machine lacks them too: nothing more can be shown here
    env["PATH"] = env["PATH"].split(os.pathsep, 1)[1]  # the shim goes away
    again = subprocess.run(["make", "tray-extra"], cwd=repo, env=env, capture_output=True,
                           text=True, timeout=900)
    assert again.returncode == 0, again.stdout + again.stderr
    assert (repo / ".venv" / ".tray").exists(), again.stdout + again.stderr
    assert again.stdout.strip() == "" and "Traceback" not in again.stderr, again.stdout
    ran = subprocess.run(["ocrwatch", "--version"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert ran.returncode == 0 and ran.stdout.startswith("ocrwatch "), ran.stdout


def test_the_link_folder_is_on_the_path_of_a_new_shell_at_once(tmp_path: Path) -> None:
    """`make run` links the program into ~/.local/bin; where that is not on PATH yet (it
    is added at login only once it exists), new shells must find it all the same."""
    _needs("bash")
    home = tmp_path / "home"
    bindir = home / ".local" / "bin"
    bindir.mkdir(parents=True)
    (home / ".bashrc").write_text("# the user's own\n")
    (bindir / "ocrwatch").write_text("#!/bin/sh\necho here\n")
    (bindir / "ocrwatch").chmod(0o755)
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    script = ROOT / "tools" / "ensure-path.sh"
    first = subprocess.run(["sh", str(script), str(bindir)], env=env, capture_output=True,
                           text=True, timeout=30)
    assert first.returncode == 0 and "new shells find" in first.stdout, first.stdout
    assert len(first.stdout.splitlines()) == 1
    again = subprocess.run(["sh", str(script), str(bindir)], env=env, capture_output=True,
                           text=True, timeout=30)
    assert again.returncode == 0
    rc = (home / ".bashrc").read_text()
    assert rc.startswith("# the user's own\n") and rc.count(str(bindir)) == 3  # one block
    shell = subprocess.run(["bash", "-ic", "ocrwatch"], env=env, capture_output=True,
                           text=True, timeout=30)
    assert shell.stdout.strip() == "here", shell.stderr
    on_path = subprocess.run(["sh", str(script), str(bindir)], capture_output=True, text=True,
                             env={**env, "PATH": f"{bindir}:/usr/bin:/bin"}, timeout=30)
    assert on_path.stdout == ""  # already there: nothing to say, nothing changed
    assert (home / ".bashrc").read_text() == rc
