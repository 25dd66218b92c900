"""One finding of ``ocrwatch doctor``, shared by the modules that make them."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass

NET_TIMEOUT = 3.0


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
