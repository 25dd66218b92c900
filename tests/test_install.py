"""Installed as a desktop tool: the built wheel, put in a fresh tool environment with
`uv tool install` (offline, from a local folder of wheels), gives an `ocrwatch` that
writes its config with `ocrwatch init`, runs, reads a dropped scan and finds it again.

The wheels are built here (`pip wheel`, from pip's index or its cache); nothing of this
checkout is on the installed program's path.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import wait_for, write_image

ROOT = Path(__file__).resolve().parent.parent


def uv_program() -> str | None:
    try:
        from uv import find_uv_bin
    except ImportError:
        return shutil.which("uv")
    return str(find_uv_bin())


def base_python() -> str:
    """The interpreter this test's virtual environment was made from (not the venv's
    own, whose packages, this checkout included, must not show through)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return str(Path(sys.base_prefix) / "bin" / version)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("wheels")
    # A copy of the sources, so that the build leaves nothing in the checkout.
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "ocrwatch"):
        item = ROOT / name
        if item.is_dir():
            shutil.copytree(item, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(item, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(folder),
                            str(source)], capture_output=True, text=True, timeout=600)
    if built.returncode != 0:
        pytest.fail(f"pip wheel failed:\n{built.stdout[-3000:]}\n{built.stderr[-3000:]}")
    return folder


@pytest.fixture
def user(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A user with nothing of ocrwatch yet: a private HOME, tools in ~/.local."""
    home = tmp_path / "u"
    run = home / "run"
    run.mkdir(parents=True, mode=0o700)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OCRWATCH_", "XDG_", "VIRTUAL_ENV", "PYTHON", "UV_"))
           and k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    bindir = home / ".local" / "bin"
    path = [p for p in env.get("PATH", "").split(os.pathsep)
            if not p.startswith(str(ROOT)) and p != str(Path(sys.executable).parent)]
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(run),
               PATH=os.pathsep.join([str(bindir), *path]),
               UV_TOOL_DIR=str(home / ".local" / "share" / "uv" / "tools"),
               UV_TOOL_BIN_DIR=str(bindir), UV_CACHE_DIR=str(home / ".cache" / "uv"),
               UV_PYTHON_DOWNLOADS="never", OCRWATCH_SETTLE_SECONDS="0.3")
    yield env


def test_uv_tool_install_then_init_run_read_and_search(wheels: Path,
                                                       user: dict[str, str]) -> None:
    uv = uv_program()
    if uv is None:
        pytest.skip("needs uv (the dev extra installs it)")
    home = Path(user["HOME"])
    installed = subprocess.run(
        [uv, "tool", "install", "--offline", "--no-index", "--find-links", str(wheels),
         "--python", base_python(), "ocrwatch"],
        env=user, capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    program = home / ".local" / "bin" / "ocrwatch"
    assert program.exists()
    assert shutil.which("ocrwatch", path=user["PATH"]) == str(program)

    def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ocrwatch", *args], env=user, capture_output=True, text=True,
                              timeout=timeout, cwd=home)

    init = cli("init")
    assert init.returncode == 0, init.stderr
    config = home / ".config" / "ocrwatch" / "config.toml"
    assert config.read_text() == (ROOT / "config.example.toml").read_text()
    # The installed program is the wheel's, not this checkout's.
    where = cli("--version")
    assert where.returncode == 0 and where.stdout.startswith("ocrwatch ")
    tool_python = next((home / ".local" / "share" / "uv" / "tools" / "ocrwatch").glob(
        "bin/python"))
    origin = subprocess.run([str(tool_python), "-c", "import ocrwatch; print(ocrwatch.__file__)"],
                            env=user, capture_output=True, text=True, timeout=60, cwd=home)
    assert not origin.stdout.strip().startswith(str(ROOT)), origin.stdout

    log = (home / "daemon.log").open("wb")
    daemon = subprocess.Popen(["ocrwatch", "run", "--no-tray", "--engine", "tesseract"],
                              env=user, stdout=log, stderr=subprocess.STDOUT, cwd=home,
                              start_new_session=True)
    try:
        wait_for(lambda: cli("status").returncode == 0, 120, "the installed daemon to answer")
        inbox = home / "OCR-Inbox"
        letter = write_image(inbox / ".letter.part", ["the harbour office in Rotterdam"],
                             format="PNG")
        letter = letter.rename(inbox / "letter.png")
        wait_for(lambda: (inbox / "letter.md").exists(), 120, "letter.md")
        found = cli("search", "harbour")
        assert found.returncode == 0, found.stderr
        assert str(letter) in found.stdout
        stopped = cli("stop")
        assert stopped.returncode == 0, stopped.stderr
        assert daemon.wait(timeout=120) == 0
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait(timeout=30)
        log.close()
