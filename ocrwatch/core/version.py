"""ocrwatch's version, in a module of its own: what needs it (the daemon's status, the
CLI's --version) imports it from here rather than from the package, whose ``__init__``
loads the script API (:mod:`ocrwatch.api`) above every layer.

The build: two installs of the same version tell apart by the commit they were built
from. A wheel or sdist made from a git checkout records ``git describe`` in
``ocrwatch/_build.py`` (setup.py, which loads this file for :func:`git_describe`); a
checkout run in place (``make run``, an editable install) asks git when asked; an sdist
or wheel made without git has none, and the version stands alone. Standard library only.
"""

from __future__ import annotations

import importlib
import subprocess
from pathlib import Path

__version__ = "0.1.0"  # the same as pyproject.toml's [project] version


def git_describe(root: Path) -> str:
    """``git describe`` of the checkout at ``root`` (a tag, commits since, the commit,
    ``-dirty`` for uncommitted changes), or "" where git cannot tell."""
    if not (root / ".git").exists():
        return ""
    try:
        done = subprocess.run(["git", "-C", str(root), "describe", "--tags", "--always",
                               "--dirty"], capture_output=True, text=True, timeout=10,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def build() -> str:
    """The build this code comes from, or "" when nothing records it."""
    try:
        recorded = importlib.import_module("ocrwatch._build")
    except ImportError:
        return git_describe(Path(__file__).resolve().parents[2])
    return str(getattr(recorded, "BUILD", ""))


def describe() -> str:
    """What ``ocrwatch --version`` prints: ``ocrwatch 0.1.0 (git v0.1.0-12-gabc1234)``."""
    made = build()
    return f"ocrwatch {__version__}" + (f" (git {made})" if made else "")
