"""The Tesseract engine's entry in the engine registry, apart from the engine itself:
``ocrwatch status`` asks it for its note (the desktop's language left out for want of
data) and ``doctor`` for its checks without importing the engine (Pillow, tesserocr's
wrapper, the text rules); the engine is imported when one is built."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ocrwatch.config.languages import locale_note
from ocrwatch.engines.base import Doctor, Registration

if TYPE_CHECKING:
    from ocrwatch.config import Config
    from ocrwatch.engines.base import Engine


def _build(config: Config) -> Engine:
    from ocrwatch.engines.tesseract import TesseractEngine

    return TesseractEngine(config)


ENGINE = Registration("tesseract", _build, doctor=(Doctor.TESSERACT,),
                      note=lambda config: locale_note(config.languages), languages=True)
