"""packaging/ is the one copy of the login-start templates: the sdist carries it, and a
wheel built from that sdist has them as package data, read by `ocrwatch autostart`."""

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


@pytest.mark.skipif(importlib.util.find_spec("build") is None, reason="needs `build`")
def test_the_wheel_built_from_the_sdist_carries_the_templates(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    # `python -m build` makes the sdist, then the wheel from the unpacked sdist only.
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
                   check=True, capture_output=True, timeout=600)
    [sdist] = dist.glob("ocrwatch-*.tar.gz")
    [wheel] = dist.glob("ocrwatch-*.whl")
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
