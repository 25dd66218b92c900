"""packaging/ is the one copy of the login-start templates: the sdist carries it, and a
wheel built from that sdist has them as package data, read by `ocrwatch autostart`. The
wheel also ships the man page (share/man/man1, which pipx exposes) and names its build
in `--version`."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ("ocrwatch.service", "ocrwatch.desktop", "org.ocrwatch.daemon.plist")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist and the wheel `python -m build` makes of this checkout (once)."""
    if importlib.util.find_spec("build") is None:
        pytest.skip("needs `build`")
    dist = tmp_path_factory.mktemp("dist")
    # `python -m build` makes the sdist, then the wheel from the unpacked sdist only.
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
                   check=True, capture_output=True, timeout=600)
    [sdist] = dist.glob("ocrwatch-*.tar.gz")
    [wheel] = dist.glob("ocrwatch-*.whl")
    return sdist, wheel


def test_the_wheel_built_from_the_sdist_carries_the_templates(
        built: tuple[Path, Path], tmp_path: Path) -> None:
    sdist, wheel = built
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        for name in (*TEMPLATES, "arch/PKGBUILD"):
            assert f"{top}/packaging/{name}" in tar.getnames()
    unpacked = tmp_path / "wheel"
    with zipfile.ZipFile(wheel) as whl:
        for name in TEMPLATES:
            assert whl.read(f"ocrwatch/data/{name}") == (ROOT / "packaging" / name).read_bytes()
        whl.extractall(unpacked)
    # The installed package reads its own copy, not this checkout's packaging/.
    probe = ("from ocrwatch.control import autostart; import sys; "
             "print(autostart.__file__); sys.stdout.write(autostart.template('systemd'))")
    env = {**os.environ, "PYTHONPATH": str(unpacked)}
    out = subprocess.run([sys.executable, "-c", probe], env=env, check=True, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60).stdout
    where, text = out.split("\n", 1)
    assert Path(where).is_relative_to(unpacked)
    assert text == (ROOT / "packaging" / "ocrwatch.service").read_text(encoding="utf-8")


def _git_describe() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "describe", "--tags", "--always",
                           "--dirty"], check=True, capture_output=True, text=True,
                          timeout=30).stdout.strip()


def test_the_wheel_ships_the_man_page_and_names_its_build(
        built: tuple[Path, Path], tmp_path: Path) -> None:
    sdist, wheel = built
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        [page] = [n for n in names if n.endswith(".data/data/share/man/man1/ocrwatch.1")]
        assert whl.read(page) == (ROOT / "packaging" / "ocrwatch.1").read_bytes()
        whl.extractall(tmp_path / "wheel")
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        assert f"{top}/packaging/ocrwatch.1" in tar.getnames()
        assert f"{top}/ocrwatch/_build.py" in tar.getnames()  # made where git was
    # The wheel was built from the unpacked sdist, with no git: it keeps the sdist's build.
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "wheel")}
    shown = subprocess.run([sys.executable, "-m", "ocrwatch", "--version"], env=env,
                           cwd=tmp_path, check=True, capture_output=True, text=True,
                           timeout=60).stdout
    assert shown == f"ocrwatch 0.1.0 (git {_git_describe()})\n"


def test_the_shipped_man_page_matches_the_options() -> None:
    """packaging/ocrwatch.1 is made from the parser (`make man`): it must not lag behind."""
    made = subprocess.run([sys.executable, "-m", "ocrwatch", "manpage"], check=True,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    shipped = (ROOT / "packaging" / "ocrwatch.1").read_text(encoding="utf-8")
    # The first line holds the date it was made.
    assert made.split("\n", 1)[1] == shipped.split("\n", 1)[1], "run `make man`"


def test_version_names_the_checkout_or_stands_alone_without_git(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    here = subprocess.run([sys.executable, "-m", "ocrwatch", "--version"], env=env,
                          cwd=tmp_path, check=True, capture_output=True, text=True,
                          timeout=60).stdout
    assert here == f"ocrwatch 0.1.0 (git {_git_describe()})\n"
    # A source tree without git and without a recorded build (an sdist made elsewhere).
    tree = tmp_path / "tree"
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD", "ocrwatch"],
                             check=True, capture_output=True, timeout=60).stdout
    tree.mkdir()
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True, timeout=60)
    bare = subprocess.run([sys.executable, "-m", "ocrwatch", "--version"], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(tree)}, check=True,
                          capture_output=True, text=True, timeout=60).stdout
    assert bare == "ocrwatch 0.1.0\n"
