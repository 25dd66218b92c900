"""Tesseract's orientation detection (OSD), run with Python's interpreter lock released.

tesserocr's ``DetectOrientationScript`` keeps the interpreter lock for the whole
detection (0.3-0.7 s on a page): the daemon's preparers, threads of one process, then
detect one page at a time. With the Tesseract engine that hardly shows (reading a page
takes longer and does release the lock), but eight preparers feeding the vLLM engine
turned 1.36 pages/s where they prepared 5.77 without orientation
(``benchmarks/results/gpu_scan.txt``). So OSD is called through Tesseract's own C API
(``capi.h``) with ctypes, which releases the lock during a foreign call, on the very
library tesserocr loaded: no second Tesseract in the process, and the same results as
tesserocr's call (it wraps the same function). Where that library cannot be found (not
a Linux process map, nor a wheel's bundled copy), tesserocr's own call is used.

The same call names the page's script ("Latin", "Cyrillic", "Greek", "Han"...) with a
confidence of its own: :mod:`ocrwatch.scan.script` checks it against the languages.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

log = logging.getLogger(__name__)

PSM_OSD_ONLY = 0  # Tesseract's PageSegMode


@dataclass(frozen=True)
class Found:
    """What OSD says of a page: the counter-clockwise turn that makes it upright and its
    confidence, and the script its characters look like, with its own confidence (how
    much more the page's characters look like that script than the next: 0 near a tie)."""

    degrees: int
    confidence: float
    script: str
    script_confidence: float


@functools.cache
def _library() -> Any | None:
    """tesserocr's libtesseract, with the C API's signatures declared; None if not found."""
    import tesserocr

    path = _loaded_library() or _bundled_library(Path(tesserocr.__file__).parent)
    if path is None:
        log.info("orientation detection holds the interpreter: tesserocr's libtesseract "
                 "was not found")
        return None
    try:
        lib = ctypes.CDLL(str(path))
        handle, text, number = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
        lib.TessBaseAPICreate.restype = handle
        lib.TessBaseAPICreate.argtypes = []
        lib.TessBaseAPIInit3.restype = number
        lib.TessBaseAPIInit3.argtypes = [handle, text, text]
        lib.TessBaseAPISetPageSegMode.argtypes = [handle, number]
        lib.TessBaseAPISetImage.argtypes = [handle, text, number, number, number, number]
        lib.TessBaseAPISetSourceResolution.argtypes = [handle, number]
        lib.TessBaseAPIDetectOrientationScript.restype = number
        lib.TessBaseAPIDetectOrientationScript.argtypes = [
            handle, ctypes.POINTER(number), ctypes.POINTER(ctypes.c_float),
            ctypes.POINTER(text), ctypes.POINTER(ctypes.c_float)]
        for name in ("TessBaseAPIClear", "TessBaseAPIEnd", "TessBaseAPIDelete"):
            getattr(lib, name).argtypes = [handle]
    except (OSError, AttributeError) as exc:  # not loadable, or without the C API
        log.info("orientation detection holds the interpreter: %s: %s", path, exc)
        return None
    return lib


def _loaded_library() -> Path | None:
    """The libtesseract this process has mapped (tesserocr's), from Linux's /proc."""
    try:
        maps = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)  # address, perms, offset, device, inode, path
        path = fields[5] if len(fields) == 6 else ""
        if os.path.basename(path).startswith("libtesseract"):
            return Path(path)
    return None


def _bundled_library(package: Path) -> Path | None:
    """A wheel's own copy: ``tesserocr.libs`` beside the package, or its ``.dylibs``."""
    for folder in (package.parent / "tesserocr.libs", package / ".dylibs"):
        found = sorted(folder.glob("libtesseract*")) if folder.is_dir() else []
        if found:
            return found[0]
    return None


class OsdApi:
    """One Tesseract instance loaded with ``osd.traineddata``; one thread uses it."""

    def __init__(self, osd_file: Path) -> None:
        self._lib: Any = _library()
        self._handle: int | None = None
        self._tesserocr: Any = None
        folder = str(osd_file.parent) + os.sep
        if self._lib is not None:
            handle = self._lib.TessBaseAPICreate()
            if handle and self._lib.TessBaseAPIInit3(handle, folder.encode(), b"osd") == 0:
                self._lib.TessBaseAPISetPageSegMode(handle, PSM_OSD_ONLY)
                self._handle = handle
                return
            if handle:
                self._lib.TessBaseAPIDelete(handle)
        import tesserocr

        self._tesserocr = tesserocr.PyTessBaseAPI(path=folder, lang="osd",
                                                  psm=tesserocr.PSM.OSD_ONLY)

    def detect(self, image: Image.Image, dpi: int) -> tuple[int, float] | None:
        """OSD's counter-clockwise turn that makes ``image`` (grey) upright and its
        confidence; None when it cannot decide (too little text)."""
        found = self.found(image, dpi)
        return None if found is None else (found.degrees, found.confidence)

    def found(self, image: Image.Image | list[Image.Image], dpi: int) -> Found | None:
        """All OSD says of ``image`` (grey): its turn and its script; None when it cannot
        decide (too little text). Given as a list of one (a copy made for OSD that nothing
        else holds), the image is taken out of it and freed as soon as its bytes are
        made, and they once Tesseract has its own copy: an A4 page sized for OSD is 9 MB,
        held three times over at once before."""
        if isinstance(image, list):
            image = image.pop()
        grey = image if image.mode == "L" else image.convert("L")
        del image
        if self._handle is None:
            return self._detect_tesserocr(grey, dpi)
        lib, handle = self._lib, self._handle
        width, height = grey.size
        data = [grey.tobytes()]
        del grey
        degrees, confidence = ctypes.c_int(), ctypes.c_float()
        script, script_confidence = ctypes.c_char_p(), ctypes.c_float()
        try:
            lib.TessBaseAPISetImage(handle, data[0], width, height, 1, width)
            data.clear()  # Tesseract has copied the pixels
            lib.TessBaseAPISetSourceResolution(handle, dpi)
            found = lib.TessBaseAPIDetectOrientationScript(
                handle, ctypes.byref(degrees), ctypes.byref(confidence), ctypes.byref(script),
                ctypes.byref(script_confidence))
        finally:
            lib.TessBaseAPIClear(handle)
        if not found:
            return None
        name = (script.value or b"").decode("utf-8", errors="replace")
        return Found(int(degrees.value), float(confidence.value), name,
                     float(script_confidence.value))

    def _detect_tesserocr(self, grey: Image.Image, dpi: int) -> Found | None:
        api = self._tesserocr
        try:
            api.SetImage(grey)
            api.SetSourceResolution(dpi)
            found = api.DetectOrientationScript()
        except RuntimeError:
            found = None
        finally:
            api.Clear()
        if not found:
            return None
        return Found(int(found["orient_deg"]), float(found["orient_conf"]),
                     str(found.get("script_name") or ""), float(found.get("script_conf") or 0))

    @property
    def releases_the_interpreter(self) -> bool:
        return self._handle is not None

    def close(self) -> None:
        if self._handle is not None:
            self._lib.TessBaseAPIEnd(self._handle)
            self._lib.TessBaseAPIDelete(self._handle)
            self._handle = None
        if self._tesserocr is not None:
            self._tesserocr.End()
            self._tesserocr = None
