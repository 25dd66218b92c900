"""ocrwatch's version, in a module of its own: what needs it (the daemon's status, the
CLI's --version) imports it from here rather than from the package, whose ``__init__``
loads the script API (:mod:`ocrwatch.api`) above every layer."""

from __future__ import annotations

__version__ = "0.1.0"  # the same as pyproject.toml's [project] version
