"""How ocrwatch was installed, so that ``ocrwatch doctor`` advises what fits: ``make run`` in
a checkout, ``pipx`` or ``uv tool`` for their environments, pip elsewhere; and which of the
Debian packages it would name are installed already (asked of dpkg-query)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import ocrwatch

DPKG_SECONDS = 5.0


@dataclass(frozen=True)
class Install:
    """``kind`` is "checkout" (``root`` is the checkout), "pipx" or "uv" (``root`` is the
    tool's environment) or "pip" (``root`` is the environment, ``python`` its Python)."""

    kind: str
    root: Path
    python: str = sys.executable

    def extra(self, name: str, make_args: str = "") -> str:
        """The command that adds the extra ``name`` (tray, gpu) to this installation."""
        spec = shlex.quote(f"ocrwatch[{name}]")
        if self.kind == "checkout":
            return f"`make run{' ' + make_args if make_args else ''}` in {self.root}"
        if self.kind == "pipx":
            return f"`pipx install --force {spec}`"
        if self.kind == "uv":
            return f"`uv tool install --reinstall {spec}`"
        return f"`{shlex.quote(self.python)} -m pip install {spec}`"


def detect(prefix: Path | None = None, package: Path | None = None,
           python: str | None = None) -> Install:
    """The installation that runs this program: ``prefix`` is its environment
    (``sys.prefix``), ``package`` the folder of the ocrwatch package it imports."""
    prefix = Path(sys.prefix) if prefix is None else prefix
    package = Path(ocrwatch.__file__).parent if package is None else package
    python = sys.executable if python is None else python
    source = package.parent
    # Imported from a checkout (``make run`` installs it editable): its Makefile says how.
    if (source / "Makefile").is_file() and (source / "pyproject.toml").is_file():
        return Install("checkout", source, python)
    # Each tool leaves its mark in the environment it made.
    if (prefix / "pipx_metadata.json").is_file():
        return Install("pipx", prefix, python)
    if (prefix / "uv-receipt.toml").is_file():
        return Install("uv", prefix, python)
    return Install("pip", prefix, python)


def debs_missing(packages: list[str]) -> list[str]:
    """Those of ``packages`` that dpkg does not have installed; all of them where there
    is no dpkg-query (not Debian) or it does not answer."""
    dpkg = shutil.which("dpkg-query")
    if dpkg is None or not packages:
        return list(packages)
    try:
        # Unknown names go to stderr with status 1; the known ones are still listed.
        out = subprocess.run([dpkg, "-W", "-f", "${Package} ${db:Status-Abbrev}\n",
                              *packages], capture_output=True, text=True,
                             timeout=DPKG_SECONDS, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return list(packages)
    installed = set()
    for line in out.splitlines():
        name, _, status = line.partition(" ")
        if status.startswith("ii"):
            installed.add(name.split(":")[0])  # name:arch for Multi-Arch packages
    return [p for p in packages if p not in installed]


def apt_install(packages: list[str]) -> str | None:
    """``sudo apt install`` of those not installed yet, or None when all are."""
    missing = debs_missing(packages)
    return f"sudo apt install {' '.join(missing)}" if missing else None
