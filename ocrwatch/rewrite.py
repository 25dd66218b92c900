"""Outputs asked for after files were read (``outputs`` changed): written for those files
from the text the index holds, without reading a page again.

``ocrwatch reread --outputs`` runs it (through the daemon when one runs). The ``.md`` and
``.txt`` come from the stored page text; ``NAME.ocr.pdf`` puts that text on Tesseract's
word boxes of the original's pages, as for a file read by a model engine. Only what is
missing is written, next to the sidecars the file already has, all or none per file; an
original that is gone, changed since it was read, or has no stored text is left alone.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ocrwatch.core.errors import OcrwatchError
from ocrwatch.fs.safeopen import original_mode, source_root
from ocrwatch.results.lifecycle import output_folder
from ocrwatch.results.sidecar import pdf_path, sidecar_paths, write_sidecars
from ocrwatch.store.index import pages_of

if TYPE_CHECKING:
    from ocrwatch.context import Context
    from ocrwatch.results.outputs import PdfMaker

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Written:
    files: int = 0  # files that got an output they lacked
    outputs: int = 0  # outputs written in all
    skipped: int = 0  # gone, changed since read, or no stored text


def missing_outputs(ctx: Context, pdf: PdfMaker | None) -> Written:
    files = outputs = skipped = 0
    wanted = tuple(ctx.config.outputs)
    for job in ctx.jobs.read_otherwise(""):  # every file read ("" matches no engine)
        try:
            st = os.stat(job.path)
        except OSError:
            skipped += 1
            continue
        if (st.st_size, st.st_mtime_ns) != (job.size, job.mtime_ns):
            skipped += 1  # changed since it was read: the daemon reads it again anyway
            continue
        stem = ctx.jobs.files.name_sidecars(job, output_folder(ctx.config, job.path))
        md, txt = sidecar_paths(stem)
        have = {"md": md.exists(), "txt": txt.exists(), "pdf": pdf_path(stem).exists()}
        missing = [o for o in wanted if not have[o]]
        if not missing:
            continue
        pages = pages_of(ctx.jobs.db, job.id)
        if not pages:
            skipped += 1
            continue
        prepared = []
        if "pdf" in missing and pdf is not None:
            pages, tmp = pdf.make(job.path, pages, pdf_path(stem))
            if tmp is not None:
                prepared.append((tmp, pdf_path(stem)))
        text_outputs = tuple(o for o in missing if o in ("md", "txt"))
        if not text_outputs and not prepared:
            skipped += 1
            continue
        source = source_root(job.path, ctx.config.inbox, ctx.config.follow_symlinks)
        try:
            write_sidecars(stem, pages, text_outputs, prepared,
                           root=ctx.config.output_dir or source,
                           original_mode=original_mode(job.path, source))
        except OcrwatchError as exc:
            log.warning("%s: the new outputs were not written: %s", job.display, exc)
            skipped += 1
            continue
        files += 1
        outputs += len(text_outputs) + len(prepared)
        log.info("%s: wrote %s from the stored text", job.display,
                 ", ".join([*text_outputs, *("pdf" for _ in prepared)]))
    return Written(files, outputs, skipped)
