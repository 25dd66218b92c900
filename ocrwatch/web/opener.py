"""Opening a file with the desktop's programs: at a given page for PDFs where the viewer
lets us say which page, else with the default program (``xdg-open``, ``open``)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

log = logging.getLogger(__name__)

# Desktop entries of PDF viewers that take a page on the command line, and how.
_PAGE_ARGS: dict[str, tuple[str, list[str]]] = {
    "org.gnome.Evince.desktop": ("evince", ["--page-index={page}", "{file}"]),
    "evince.desktop": ("evince", ["--page-index={page}", "{file}"]),
    "org.gnome.Papers.desktop": ("papers", ["--page-index={page}", "{file}"]),
    "okularApplication_pdf.desktop": ("okular", ["--page={page}", "{file}"]),
    "org.kde.okular.desktop": ("okular", ["--page={page}", "{file}"]),
    "org.pwmt.zathura.desktop": ("zathura", ["--page={page}", "{file}"]),
    "org.pwmt.zathura-pdf-mupdf.desktop": ("zathura", ["--page={page}", "{file}"]),
    "atril.desktop": ("atril", ["--page-index={page}", "{file}"]),
    "xreader.desktop": ("xreader", ["--page-index={page}", "{file}"]),
    "qpdfview.desktop": ("qpdfview", ["{file}#{page}"]),
}


def _default_pdf_viewer() -> str | None:
    if not shutil.which("xdg-mime"):
        return None
    try:
        out = subprocess.run(["xdg-mime", "query", "default", "application/pdf"],
                             capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def command(path: Path, page: int | None = None) -> list[str]:
    """The command that opens ``path`` (at ``page``, 1-based, for a PDF if possible)."""
    if sys.platform == "darwin":
        return ["open", str(path)]
    if page and path.suffix.lower() == ".pdf":
        viewer = _PAGE_ARGS.get(_default_pdf_viewer() or "")
        if viewer is not None and shutil.which(viewer[0]):
            program, args = viewer
            return [program, *(a.format(page=page, file=str(path)) for a in args)]
    return ["xdg-open", str(path)]


def open_file(path: Path, page: int | None = None) -> None:
    """Open ``path`` without waiting for the program; failures are logged."""
    if sys.platform == "win32":
        os.startfile(str(path))  # type: ignore[attr-defined,unused-ignore]
        return
    cmd = command(path, page)
    try:
        subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        log.warning("cannot open %s with %s: %s; install xdg-utils or open it by hand",
                    path, cmd[0], exc.strerror)
