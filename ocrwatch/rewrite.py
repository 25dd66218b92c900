"""Outputs asked for after files were read (``outputs`` changed): written for those files
from the text the index holds, without reading a page again.

``ocrwatch reread --outputs`` runs it (through the daemon when one runs). The ``.md``,
``.txt``, ``.hocr`` and ``.alto.xml`` come from the stored pages (text, and each word's
box where the index keeps the page's layout); ``NAME.ocr.pdf`` puts that text on those
boxes over the original's pages. A page stored without its layout (read before the
index kept it, or without an output that needed boxes) gets Tesseract's word boxes of
the original's page, as for a file read by a model engine: that page is looked at again
(the count says so), and the layout found is stored. Only what is missing is written,
next to the sidecars the file already has, all or none per file, and recorded among the
job's outputs (store/jobs.py: ``job_outputs``); an original that is
gone, changed since it was read, or has no stored text is left alone.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ocrwatch.core.errors import OcrwatchError
from ocrwatch.fs.safeopen import original_mode, source_root
from ocrwatch.results.formats import OUTPUTS, needs_boxes, paths
from ocrwatch.results.lifecycle import output_folder
from ocrwatch.results.sidecar import write_sidecars
from ocrwatch.store.index import keep_layouts, pages_of

if TYPE_CHECKING:
    from ocrwatch.context import Context
    from ocrwatch.results.outputs import PdfMaker

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Written:
    files: int = 0  # files that got an output they lacked
    outputs: int = 0  # outputs written in all
    skipped: int = 0  # gone, changed since read, or no stored text
    # Pages whose word boxes were not in the index (read before it kept them, or by an
    # engine without boxes): Tesseract found them on the original again.
    placed: int = 0


def missing_outputs(ctx: Context, pdf: PdfMaker | None) -> Written:
    files = outputs = skipped = placed = 0
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
        # The stem its outputs have (or would have): nothing reserved before writing.
        stem = ctx.jobs.files.name_sidecars(job, output_folder(ctx.config, job.path),
                                            outputs=())
        where = paths(stem, wanted)
        missing = [o for o in wanted if not where[o].exists()]
        if not missing:
            continue
        pages = pages_of(ctx.jobs.db, job.id)
        if not pages:
            skipped += 1
            continue
        unplaced = sum(1 for p in pages if p.layout is None)
        prepared = []
        if "pdf" in missing and pdf is not None:
            pages, tmp = pdf.make(job.path, pages, where["pdf"])
            if tmp is not None:
                prepared.append((tmp, where["pdf"]))
        elif needs_boxes(missing) and pdf is not None:
            pages = pdf.place(job.path, pages)
        if needs_boxes(missing) and unplaced:
            placed += unplaced
            keep_layouts(ctx.jobs.db, job.id, pages)  # found once: not again next time
        rendered = tuple(o for o in missing if OUTPUTS[o].render is not None)
        if not rendered and not prepared:
            skipped += 1
            continue
        source = source_root(job.path, ctx.config.inbox, ctx.config.follow_symlinks)
        try:
            write_sidecars(stem, pages, rendered, prepared, name=job.path.name,
                           root=ctx.config.output_dir or source,
                           original_mode=original_mode(job.path, source))
        except OcrwatchError as exc:
            log.warning("%s: the new outputs were not written: %s", job.display, exc)
            skipped += 1
            continue
        # Recorded with the job: they follow it, are archived and deleted with it.
        made = [*rendered, *("pdf" for _ in prepared)]
        ctx.jobs.files.reserve_outputs(job.id, {o: where[o] for o in made})
        files += 1
        outputs += len(made)
        log.info("%s: wrote %s from the stored %s", job.display,
                 ", ".join(made),
                 "text" if not needs_boxes(missing) or not unplaced
                 else "text, Tesseract finding the word boxes again")
    return Written(files, outputs, skipped, placed)
