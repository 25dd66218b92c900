"""Whether an original may be archived or deleted: only after a complete, verified read,
and only when its place or the command that named it says so.

:func:`disposal` is the one rule of what a whole reading may do with an original, for
every way a file is read: the daemon's watch, ``ocrwatch add``, ``reread``, ``retry`` and
the tray's retry (each keeps the job's ``asked``; :mod:`ocrwatch.outcome` asks this rule,
and :class:`~ocrwatch.results.lifecycle.Lifecycle` carries out its answer).

The original is often the only copy. ``on_success = "archive"`` or ``"delete"`` parts
with it only when all of these hold; otherwise it stays where it is, and the reason is
kept in the job row (``retire_reason``) and shown by ``ocrwatch status``:

- every page was read: as many pages as the larger of two independent counts, PDFium's
  and qpdf's walk of the page tree for a PDF (a ``/Count`` can lie), Pillow's frames for
  an image;
- every configured output (``.md``, ``.txt``, the searchable PDF) was written and
  reads back as it was meant: the sidecars hold their text, the PDF opens with qpdf
  and has every page;
- no page's text came from an error or an empty or invalid answer
  (:func:`ocrwatch.core.domain.doubt_of`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ocrwatch.config import Config
from ocrwatch.core.domain import Job, PageText, doubt_of
from ocrwatch.core.errors import InputError
from ocrwatch.fs.safeopen import open_file_beneath, source_root
from ocrwatch.results.formats import OUTPUTS


def disposal(config: Config, job: Job) -> str:
    """What a whole reading of ``job`` may do with its original: "keep", "archive" or
    "delete".

    - A file inside the archive, ``failed_dir`` or ``output_dir`` stays: it was archived
      or set aside already, or it is ocrwatch's own output (never archived twice).
    - A file named to a command follows what that command asked (``job.asked``:
      ``ocrwatch add --on-success``, "keep" for ``reread``), kept by ``retry``.
    - Otherwise a file in a watched folder follows ``on_success``; any other file stays
      where it is.
    """
    if job.original_gone:
        return "keep"
    for folder in (config.archive_dir, config.failed_dir, config.output_dir):
        if folder is not None and _within(job.path, folder):
            return "keep"
    mode = job.asked
    if mode is None:
        inside = any(_within(job.path, inbox) for inbox in config.inbox)
        mode = config.on_success if inside else "keep"
    if mode == "archive" and config.archive_dir is None:
        return "keep"  # asked by an `add` when the config had an archive_dir, gone since
    return mode if mode in ("archive", "delete") else "keep"


def _within(path: Path, folder: Path) -> bool:
    """Whether ``path`` lies under ``folder``, as named or with links resolved."""
    real = Path(os.path.realpath(path.parent)) / path.name
    return (real.is_relative_to(os.path.realpath(folder))
            or path.absolute().is_relative_to(folder.absolute()))


def why_keep(config: Config, source: Path, pages: list[PageText],
             written: Mapping[str, Path | None]) -> str | None:
    """Why the original must be kept after this read, or None when it may go.

    ``written``: each output ("md", "txt", "pdf", ...) and where it was written (None: not
    written). Never raises: a check that cannot be made keeps the original.
    """
    for n, page in enumerate(pages, 1):
        doubt = doubt_of(page)
        if doubt:
            where = f"page {n}" if len(pages) > 1 else "the page"
            return f"{where} may not have been read: {doubt}"
    for output in config.outputs:
        problem = _unverified(output, written.get(output), pages)
        if problem:
            return problem
    try:
        return _missing_pages(config, source, len(pages))
    except Exception as exc:  # a decoder's own error type: not counted, so not parted with
        return f"its pages cannot be counted again ({exc.__class__.__name__}: {exc})"


def _unverified(output: str, path: Path | None, pages: list[PageText]) -> str | None:
    if path is None:
        if output == "pdf":
            why = next((w for p in pages[:1] for w in p.warnings
                        if w.startswith("no searchable PDF")), "no searchable PDF was written")
            return why
        return f"no .{output} was written"
    try:
        return OUTPUTS[output].verify(path, pages)
    except Exception as exc:  # unreadable, damaged, gone: not verified
        return f"{path.name} cannot be read back ({exc.__class__.__name__}: {exc})"


def _missing_pages(config: Config, source: Path, read: int) -> str | None:
    """Why not every page of ``source`` was read (``read`` pages), or None."""
    from ocrwatch.pages.decode import sniff

    try:
        with open_file_beneath(source_root(source, config.inbox, config.follow_symlinks),
                               source) as fh:
            if sniff(source, fh) == "pdf":
                from ocrwatch.pages.pdfium_lock import PDFIUM
                from ocrwatch.pages.pdfpages import page_tree_count, pdf_document

                doc = pdf_document(source, fh)
                with PDFIUM:
                    try:
                        pdfium = len(doc)  # type: ignore[arg-type]
                    finally:
                        doc.close()  # type: ignore[attr-defined]
                qpdf = page_tree_count(source, fh)
                if qpdf is None:
                    return "qpdf cannot open the PDF to count its pages"
                if read < max(pdfium, qpdf):
                    return (f"{read} page{'' if read == 1 else 's'} read, but the PDF has "
                            f"{max(pdfium, qpdf)} (PDFium counts {pdfium}, qpdf {qpdf})")
                return None
            from PIL import Image

            with Image.open(fh) as image:
                frames = int(getattr(image, "n_frames", 1))
    except (OSError, InputError, ValueError) as exc:
        return f"its pages cannot be counted again ({exc})"
    if read < frames:
        return f"{read} of {frames} pages read"
    return None
