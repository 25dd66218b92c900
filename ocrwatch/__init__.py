"""ocrwatch: turn a folder into a searchable archive.

For scripts: ``ocrwatch.read(path)`` reads a file's pages, ``ocrwatch.search(query)``
searches what the daemon has read (:mod:`ocrwatch.api`).
"""

from __future__ import annotations

from ocrwatch.api import read, search
from ocrwatch.core.version import __version__

__all__ = ["__version__", "read", "search"]
