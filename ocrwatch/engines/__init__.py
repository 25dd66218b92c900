"""The OCR engines: the seam every engine fits (:mod:`.base`), and the registry that
names them, chooses one and builds it (:mod:`.registry`)."""

from __future__ import annotations

from ocrwatch.core.domain import Page, PageText
from ocrwatch.engines.base import Engine, ReadPolicy

__all__ = ["Engine", "Page", "PageText", "ReadPolicy"]
