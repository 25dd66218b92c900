"""ocrwatch: turn a folder into a searchable archive."""

from __future__ import annotations

__version__ = "0.1.0"
