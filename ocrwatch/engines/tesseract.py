"""The CPU engine: Tesseract through tesserocr, one page per core.

Tesseract's own OpenMP threads make it several times slower on few cores, so each
page runs single-threaded (``OMP_THREAD_LIMIT=1``) and pages run side by side, one
Tesseract instance per daemon thread (tesserocr releases the GIL while it reads).
"""

from __future__ import annotations

import os

# Must be set before Tesseract's library is loaded to take effect.
os.environ.setdefault("OMP_THREAD_LIMIT", "1")

import logging
import re
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ocrwatch import paths
from ocrwatch.config import Config
from ocrwatch.domain import Page, PageText
from ocrwatch.engines.base import BatchPolicy
from ocrwatch.errors import EngineUnavailable
from ocrwatch.layout import PageLayout, Word

log = logging.getLogger(__name__)

DEFAULT_DPI = 300  # Tesseract's own guess for files that carry no resolution
ESTIMATE_DPI = 70  # Tesseract's floor: at exactly this it estimates the dpi from the text
MAX_PAGE_INCHES = 17  # longest paper a scanner takes (A3, tabloid); beyond: not a real dpi


def tessdata_dirs(explicit: Path | None = None) -> list[Path]:
    """Folders that may hold ``*.traineddata``, most specific first."""
    found: list[Path] = []
    if explicit is not None:
        found.append(explicit)
    if os.environ.get("TESSDATA_PREFIX"):
        found.append(Path(os.environ["TESSDATA_PREFIX"]))
    found += [
        Path(sys.prefix) / "share" / "tessdata",  # the tessdata.fast-* wheels
        Path("/usr/share/tesseract-ocr/5/tessdata"),
        Path("/usr/share/tesseract-ocr/4.00/tessdata"),
        Path("/usr/share/tessdata"),
        Path("/usr/local/share/tessdata"),
        Path("/opt/homebrew/share/tessdata"),
    ]
    return [d for d in found if d.is_dir()]


def available_languages(explicit: Path | None = None) -> dict[str, Path]:
    """Every installed language and the file that holds it (first folder wins)."""
    langs: dict[str, Path] = {}
    for folder in tessdata_dirs(explicit):
        for f in sorted(folder.glob("*.traineddata")):
            langs.setdefault(f.name.removesuffix(".traineddata"), f)
    return langs


def prepare_tessdata(languages: list[str], explicit: Path | None = None) -> Path:
    """One folder with every wanted language, linked from wherever each is installed.

    English may come from a pip wheel and French from the system's packages; Tesseract
    takes a single folder, so ocrwatch links them side by side in its cache.
    """
    have = available_languages(explicit)
    missing = [lang for lang in languages if lang not in have]
    if missing:
        hint = " ".join(f"tesseract-ocr-{m.replace('_', '-').lower()}" for m in missing)
        raise EngineUnavailable(
            f"Tesseract has no data for {', '.join(missing)}. Install it (Debian/Ubuntu: "
            f"`sudo apt install {hint}`; macOS: `brew install tesseract-lang`), point "
            "`tessdata` in the config at a folder holding "
            f"{', '.join(m + '.traineddata' for m in missing)}, or change `languages`. "
            f"Installed: {', '.join(sorted(have)) or 'none'}."
        )
    folders = {have[lang].parent for lang in languages}
    if len(folders) == 1:
        return folders.pop()
    merged = paths.data_dir() / "tessdata"
    merged.mkdir(parents=True, exist_ok=True)
    for lang in [*languages, "osd"]:
        if lang not in have:
            continue
        link = merged / f"{lang}.traineddata"
        if link.is_symlink() or link.exists():
            if link.resolve() == have[lang].resolve():
                continue
            link.unlink()
        link.symlink_to(have[lang])
    return merged


def source_resolution(page: Page) -> int:
    """The dpi to give Tesseract for ``page``.

    Cameras and editors stamp 72 or 96 dpi on anything: a 3000-pixel scan "at 72 dpi"
    would be a 42-inch page. Tesseract believing it reads worse than Tesseract measuring
    the text itself, so such a resolution is left to its estimate (not to 300, which
    garbles small screenshot text).
    """
    if page.dpi is None:
        return DEFAULT_DPI
    if max(page.size) > page.dpi * MAX_PAGE_INCHES:
        return ESTIMATE_DPI
    return page.dpi


class TesseractEngine:
    name = "tesseract"

    def __init__(self, config: Config) -> None:
        try:
            import tesserocr
        except ImportError as exc:  # pragma: no cover - tesserocr is a hard dependency
            raise EngineUnavailable(
                f"tesserocr cannot be loaded ({exc}); reinstall ocrwatch with pip"
            ) from exc
        self._tesserocr: Any = tesserocr
        self.languages = "+".join(config.languages)
        self.tessdata = prepare_tessdata(config.languages, config.tessdata)
        self.workers = config.workers or (os.cpu_count() or 1)
        self._local = threading.local()
        self._apis: list[Any] = []
        self._lock = threading.Lock()
        self._closed = False
        self._pages = 0
        self._busy = 0.0
        log.info("Tesseract %s, languages %s, %d pages at once",
                 tesserocr.tesseract_version().split()[1], self.languages, self.workers)

    @property
    def max_side(self) -> int | None:
        return None  # Tesseract wants about 300 dpi: never shrink the scan for it

    @property
    def policy(self) -> BatchPolicy:
        return BatchPolicy(max_pages=1, concurrency=self.workers)

    def _api(self) -> Any:
        api = getattr(self._local, "api", None)
        if api is None:
            try:
                api = self._tesserocr.PyTessBaseAPI(path=str(self.tessdata) + os.sep,
                                                    lang=self.languages)
            except RuntimeError as exc:
                raise EngineUnavailable(
                    f"Tesseract could not start with languages {self.languages} from "
                    f"{self.tessdata}: {exc}"
                ) from exc
            self._local.api = api
            with self._lock:
                self._apis.append(api)
        return api

    def recognize(self, pages: Sequence[Page]) -> list[PageText]:
        api = self._api()
        out: list[PageText] = []
        for page in pages:
            start = time.monotonic()
            api.SetImage(page.image)
            # Without the real resolution Tesseract assumes 70 dpi and reads worse.
            api.SetSourceResolution(source_resolution(page))
            text = api.GetUTF8Text()
            confidence = api.MeanTextConf()
            layout = PageLayout(page.image.width, page.image.height, self._words(api))
            api.Clear()
            warnings = []
            if text.strip() and confidence < 40:
                warnings.append(f"low confidence ({confidence}%): check the scan")
            out.append(PageText(markdown=text_to_markdown(text), text=text.strip() + "\n",
                                warnings=warnings, layout=layout))
            with self._lock:
                self._pages += 1
                self._busy += time.monotonic() - start
        return out

    def _words(self, api: Any) -> tuple[Word, ...]:
        """The words of the page just read, with Tesseract's boxes and line numbers."""
        level = self._tesserocr.RIL
        words: list[Word] = []
        iterator = api.GetIterator()
        if iterator is None:
            return ()
        line = -1
        for item in self._tesserocr.iterate_level(iterator, level.WORD):
            if line < 0 or item.IsAtBeginningOf(level.TEXTLINE):
                line += 1
            try:
                text = item.GetUTF8Text(level.WORD)
            except RuntimeError:  # tesserocr's way of saying "no text here"
                continue
            box = item.BoundingBox(level.WORD)
            if text and text.strip() and box:
                words.append(Word(text.strip(), tuple(box), line))
        return tuple(words)

    def layout(self, page: Page) -> PageLayout:
        """Only the word boxes of ``page`` (for placing another engine's text on them)."""
        api = self._api()
        api.SetImage(page.image)
        api.SetSourceResolution(source_resolution(page))
        try:
            api.Recognize()
            return PageLayout(page.image.width, page.image.height, self._words(api))
        finally:
            api.Clear()

    def release(self) -> None:
        """Nothing on an accelerator to give back."""

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            apis, self._apis = self._apis, []
        for api in apis:
            api.End()

    def describe(self) -> dict[str, object]:
        with self._lock:
            rate = self._pages / self._busy * self.workers if self._busy else None
        return {"state": "closed" if self._closed else "ready", "languages": self.languages,
                "workers": self.workers, "tessdata": str(self.tessdata),
                "pages_per_second": round(rate, 2) if rate else None}


def text_to_markdown(text: str) -> str:
    """Tesseract's text as Markdown: paragraphs kept, characters Markdown would eat escaped."""
    lines = []
    for line in text.strip().splitlines():
        stripped = line.rstrip()
        # A line starting with #, >, - or "1." would turn into a heading, quote or list.
        if stripped[:1] and stripped[:1] in "#>+-*|":
            stripped = "\\" + stripped
        elif stripped[:1].isdigit():
            stripped = re.sub(r"^(\d+)([.)]) ", r"\1\\\2 ", stripped)
        lines.append(stripped + ("  " if stripped else ""))
    return "\n".join(lines).replace("  \n\n", "\n\n").rstrip() + "\n"
