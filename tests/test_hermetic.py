"""The run's own check that the tests leave the real home alone (tests/hermetic.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).parent


def run_pytest(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    """pytest with only the hermetic plugin, on one test file, with ``tmp_path/real`` as
    the home it starts from (the REAL_HOME variable tells the test where that is)."""
    real = tmp_path / "real"
    (real / ".cache").mkdir(parents=True, exist_ok=True)
    (tmp_path / "test_one.py").write_text(body)
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    env.update(HOME=str(real), REAL_HOME=str(real), PYTHONPATH=str(TESTS))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "hermetic", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_one.py")],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_a_run_that_writes_to_the_real_home_fails_and_says_where(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, (
        "import os\nfrom pathlib import Path\n\n"
        "def test_writes() -> None:\n"
        "    cache = Path(os.environ['REAL_HOME']) / '.cache' / 'ocrwatch' / 'thumbnails'\n"
        "    cache.mkdir(parents=True)\n"
    ))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    assert "the tests changed the real home" in result.stdout
    assert f"created {tmp_path / 'real' / '.cache' / 'ocrwatch'}" in result.stdout


def test_a_file_changed_inside_ocrwatchs_folder_fails_the_run(tmp_path: Path) -> None:
    config = tmp_path / "real" / ".config" / "ocrwatch"
    config.mkdir(parents=True)
    (config / "config.toml").write_text("engine = 'tesseract'\n")
    os.utime(config / "config.toml", ns=(0, 0))
    result = run_pytest(tmp_path, (
        "import os\nfrom pathlib import Path\n\n"
        "def test_edits() -> None:\n"
        "    path = Path(os.environ['REAL_HOME']) / '.config/ocrwatch/config.toml'\n"
        "    path.write_text('engine = \"fake\"\\n')\n"
    ))
    assert result.returncode == 1
    assert f"changed {config / 'config.toml'}" in result.stdout


def test_home_and_xdg_folders_point_away_from_the_real_home(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, (
        "import os\nfrom pathlib import Path\n\n"
        "def test_uses_home() -> None:\n"
        "    real = Path(os.environ['REAL_HOME'])\n"
        "    assert Path.home() != real\n"
        "    for key in ('XDG_CACHE_HOME', 'XDG_CONFIG_HOME', 'XDG_DATA_HOME',\n"
        "                'XDG_STATE_HOME', 'XDG_RUNTIME_DIR'):\n"
        "        assert not Path(os.environ[key]).is_relative_to(real)\n"
        "    (Path.home() / '.cache' / 'ocrwatch').mkdir(parents=True)\n"
        "    (Path.home() / '.config' / 'chromium').mkdir(parents=True)\n"
    ))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "changed the real home" not in result.stdout
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == [".cache"]


def test_every_test_here_has_a_home_of_its_own(tmp_path: Path) -> None:
    home = Path(os.environ["HOME"])
    assert home.name.startswith("private-home")
    assert Path(os.environ["XDG_CACHE_HOME"]).is_relative_to(home)
    assert "OCRWATCH_CONFIG" not in os.environ
