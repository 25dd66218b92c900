"""A file's outcome, the pipeline's last stage: published, failed or deferred.

:func:`finish` carries a :class:`~ocrwatch.context.Verdict` out for a job and its
identical copies: :func:`publish` writes the outputs (PDF, .md, .txt, all or none) and
then the index rows and ``done`` in one transaction; :func:`after_success` archives or
deletes the original; :func:`fail` records the reason (and moves the file to ``failed/``
when asked); :func:`defer` queues it again with backoff. Each says what happened on the
context's event stream (``ctx.events``), which the hooks, the notices and the metrics
follow.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ocrwatch.core import events as ev
from ocrwatch.core.domain import DOUBT_NOTE, Job, PageText, doubt_of
from ocrwatch.core.errors import InputError, OcrwatchError, TransientError
from ocrwatch.fs.safeopen import original_mode, root_of, source_root
from ocrwatch.results.formats import READ_FIRST, main_output, needs_boxes, paths
from ocrwatch.results.lifecycle import move_failure, output_folder
from ocrwatch.results.retire import disposal, why_keep
from ocrwatch.results.sidecar import UserEdits, sidecar_mark, write_sidecars
from ocrwatch.store.db import is_disk_full
from ocrwatch.store.index import pages_of

if TYPE_CHECKING:
    from ocrwatch.context import Context, Verdict

log = logging.getLogger(__name__)


def finish(ctx: Context, jobs: Sequence[Job], verdict: Verdict,
           engine: str | None = None) -> Path | None:
    """Carry the verdict out for each job (the file and its identical copies).

    Returns the Markdown sidecar of the file when published. Never raises for one
    file's trouble: what cannot be recorded is retried with backoff.
    """
    published: Path | None = None
    try:
        for job in jobs:
            if verdict.transient:
                defer(ctx, job, verdict.transient)
            elif verdict.error:
                fail(ctx, job, verdict.error)
            elif verdict.pages is not None:
                md = publish(ctx, job, verdict.pages, engine or ctx.engine_name)
                published = published or md
    except Exception as exc:
        log.exception("could not finish %s", jobs[0].display)
        # Retried with backoff and given up after max_attempts: putting it straight
        # back would read it again at once, forever, if the error is not passing.
        reason = f"unexpected error while saving the result: {exc.__class__.__name__}: {exc}"
        for job in jobs:
            try:
                ctx.jobs.defer(job.id, reason, ctx.config.max_attempts, job.sha256)
            except OcrwatchError as again:
                log.warning("could not put %s back in the queue: %s", job.display, again)
    return published


def publish(ctx: Context, job: Job, pages: list[PageText], engine: str) -> Path | None:
    """Outputs first (searchable PDF, ``.md``, ``.txt``, hOCR, ALTO: those configured, all
    or none), then index rows, the outputs written and ``done`` in one transaction, then
    what follows success (:func:`after_success`).

    Returns the main output's path, or None when the result was not kept.
    """
    folder = output_folder(ctx.config, job.path)
    pages = [_valid_text(p) for p in pages]
    outputs = tuple(ctx.config.outputs)
    try:
        # A sidecar the user corrected is never overwritten: the new reading goes beside.
        edits = UserEdits(lambda: pages_of(ctx.jobs.db, job.id))
        stem = ctx.jobs.files.name_sidecars(job, folder, edits, outputs)
        edits.tell(job.display, stem, outputs)
        prepared = []
        # Every output to write, by name (formats.OUTPUTS); None: not written.
        written: dict[str, Path | None] = {**paths(stem, outputs)}
        pdf = written.get("pdf")
        if ctx.pdf is not None and pdf is not None:
            pages, tmp = ctx.pdf.make(job.path, pages, pdf)
            if tmp is None:
                written["pdf"] = None  # could not be made: said in the page's warnings
            else:
                prepared.append((tmp, pdf))
        else:
            if "pdf" in written:
                written["pdf"] = None  # no maker for it (no Tesseract)
            if ctx.pdf is not None and needs_boxes(outputs):
                pages = ctx.pdf.place(job.path, pages)  # hOCR, ALTO: each word on its box
        source = source_root(job.path, ctx.config.inbox, ctx.config.follow_symlinks)
        pages = [_noted(p) for p in pages]
        write_sidecars(stem, pages, outputs, prepared, name=job.path.name,
                       root=ctx.config.output_dir or source,
                       original_mode=original_mode(job.path, source),
                       mark=sidecar_mark(job.path, job.sha256, engine, ctx.read_with)
                       if job.sha256 else None)
        done = {o: p for o, p in written.items() if p is not None}
        retire, keep = None, None
        # What a whole reading may do with the original, as the job row asks now: an
        # `ocrwatch add` may have named the file while it was being read.
        now = ctx.jobs.get(job.id)
        mode = disposal(ctx.config, job if now is None else replace(job, asked=now.asked))
        if mode != "keep":
            # Only a complete, verified read may part with the original.
            keep = why_keep(ctx.config, job.path, pages, written)
            retire = "kept" if keep else "pending"
        # Before the commit: a listener's record of it (on_done's) survives a kill now.
        ctx.events.publish(ev.FileCommitting(job.path, done, len(pages)))
        if not ctx.jobs.complete(job.id, pages, engine=engine, outputs=written,
                                 sha256=job.sha256, read_with=ctx.read_with,
                                 retire=retire, retire_reason=keep):
            ctx.events.publish(ev.FileNotCommitted(job.path))
            # The content changed (it is queued again) or the file is gone: then
            # these outputs belong to nothing.
            if not ctx.jobs.files.exists(job.id):
                for path in done.values():
                    path.unlink(missing_ok=True)
            log.info("%s changed or went away while it was read: result dropped", job.display)
            return None
    except (TransientError, InputError) as exc:
        ctx.events.publish(ev.FileNotCommitted(job.path))
        refuse(ctx, job, exc)
        return None
    except OSError as exc:
        ctx.events.publish(ev.FileNotCommitted(job.path))
        if not is_disk_full(exc):
            raise
        ctx.jobs.defer(job.id, "the disk is full", ctx.config.max_attempts, job.sha256)
        return None
    result = main_output(done, READ_FIRST)
    log.info("done: %s (%d page%s) -> %s", job.display, len(pages),
             "" if len(pages) == 1 else "s", result.name if result else "")
    if keep:
        log.warning("%s: the original is kept, not %s: %s", job.display,
                    "archived" if mode == "archive" else "deleted", keep)
    return after_success(ctx, job, done, pages, engine,
                         mode=mode if retire == "pending" else "keep") or result


def after_success(ctx: Context, job: Job, outputs: Mapping[str, Path],
                  pages: Sequence[PageText], engine: str, *,
                  mode: str = "keep") -> Path | None:
    """``mode`` ("keep", "archive", "delete": :func:`disposal`'s answer for a read whose
    original may go), then :class:`~ocrwatch.core.events.FileDone` (on_done, the batch
    count, the metrics).

    ``outputs``: the file's outputs by name, which move with it (every one).
    Returns the main output's new place when the outputs moved with the original.
    """
    original: Path | None = job.path
    moved: Path | None = None
    outputs = dict(outputs)
    if mode != "keep":
        ctx.retired.add(job.path)
        try:
            outcome = ctx.lifecycle.finish(job.id, job.path, outputs, job.sha256, mode)
        except (OSError, OcrwatchError) as exc:
            # The result is safe; the original stays where it is and is not read again;
            # the job row says "failed" and why, and the next start tries again.
            log.warning("%s is done but could not be %s: %s", job.display,
                        "archived" if mode == "archive" else "deleted",
                        move_failure(exc) if isinstance(exc, OSError) else exc)
            outcome = None
        if outcome is None or outcome.original == job.path:
            ctx.retired.discard(job.path)  # still there: its removal is the user's
        if outcome is not None:
            original = outcome.original
            outputs = {o: outcome.sidecars.get(p, p) for o, p in outputs.items()}
            moved = main_output(outputs, READ_FIRST)
            if original != job.path:
                ctx.events.publish(ev.OriginalRetired(job.path, original))
    ctx.events.publish(ev.FileDone(job, pages, engine, original, outputs))
    return moved


def fail(ctx: Context, job: Job, reason: str) -> None:
    """Record the reason; move the file to ``failed/`` when the user asked for it."""
    log.warning("failed: %s: %s", job.display, reason)
    if not ctx.jobs.fail(job.id, reason, job.sha256):
        return  # the file changed or went away meanwhile: this failure is moot
    ctx.events.publish(ev.FileFailed(job.path, reason))
    if ctx.config.failed_dir is not None and root_of(job.path, ctx.config.inbox) is not None:
        # Only a watched folder's files: one named to `ocrwatch add` stays where it is.
        from ocrwatch.results.failed import move_failed

        move_failed(job.path, reason, ctx.config)


def defer(ctx: Context, job: Job, reason: str) -> None:
    """A passing trouble: queued again with backoff, failed after ``max_attempts``."""
    again = ctx.jobs.defer(job.id, reason, ctx.config.max_attempts, job.sha256)
    ctx.events.publish(ev.FileDeferred(job.path, reason, again))
    log.warning("%s: %s (%s)", job.display, reason, "will retry" if again else "giving up")


def refuse(ctx: Context, job: Job, exc: TransientError | InputError) -> None:
    """A stage's refusal: passing trouble is deferred, a bad input is failed."""
    if isinstance(exc, TransientError):
        defer(ctx, job, str(exc))
    else:
        fail(ctx, job, str(exc))


def _noted(page: PageText) -> PageText:
    """A doubtful page's doubt kept among its warnings, so that the index row says it and
    a copy that reuses these pages keeps its original too."""
    if page.keep_original is None or doubt_of(replace(page, keep_original=None)) is not None:
        return page
    return replace(page, warnings=[*page.warnings, DOUBT_NOTE + page.keep_original])


def _valid_text(page: PageText) -> PageText:
    """The page with lone surrogates replaced: neither UTF-8 files nor SQLite take them.

    (A JSON reply may carry them as escapes; so may a file name in the text.)
    """

    def fix(text: str) -> str:
        return text.encode("utf-8", "replace").decode("utf-8")

    if fix(page.markdown) == page.markdown and fix(page.text) == page.text:
        return page
    return replace(page, markdown=fix(page.markdown), text=fix(page.text))
