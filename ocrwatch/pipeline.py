"""One file's way through, as plain functions: no threads, no locks.

Read it top to bottom, the way one file goes:

1. :func:`consider` - a settled file is hashed and recorded as a queued job
   (:func:`identify` does the same for a retried job that was never hashed);
2. :func:`open_pages` - its pages, decoded and scaled for the engine, through one
   handle opened without following links below the inbox (:func:`open_source`);
3. :func:`read` - one batch of pages through the engine;
4. :func:`judge` - what the pages read come to: publish, fail or try again;
5. :func:`ocrwatch.outcome.finish` - carries the verdict out for the job and its
   identical copies: published (sidecars, then index rows and ``done`` in one
   transaction), failed (recorded reason, optional move to ``failed/``) or deferred.

The scheduler (ocrwatch/scheduler.py) decides when each stage runs and on which
thread; every stage here works on its arguments and the queue alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO

from ocrwatch.config import Config
from ocrwatch.context import Context, Verdict
from ocrwatch.core.domain import Job, Page, PageText
from ocrwatch.core.errors import (
    Doing,
    EngineError,
    EngineUnavailable,
    InputError,
    OcrwatchError,
    StateError,
    TransientError,
    os_reason,
)
from ocrwatch.core.events import FileQueued
from ocrwatch.core.textutil import text_to_markdown
from ocrwatch.core.wordlike import TRIM, mostly_nonwords, wordlike
from ocrwatch.engines import Engine
from ocrwatch.engines.tesseract_facts import LOW_CONFIDENCE
from ocrwatch.fs.safeopen import NotRegular, open_file_beneath, source_root
from ocrwatch.outcome import defer, fail, refuse
from ocrwatch.pages.decode import Limits, check_size, iter_pages
from ocrwatch.pages.merge import merged
from ocrwatch.reindex import known_by_sidecars
from ocrwatch.results.sidecar import remove_stale_temps
from ocrwatch.scan import orient, script
from ocrwatch.scan.prepare import ScanPrep, blank_result, finish
from ocrwatch.store.jobfiles import Seen
from ocrwatch.store.jobs import file_sha256

log = logging.getLogger(__name__)

# -- 0. start-up --------------------------------------------------------------------
def tidy(config: Config) -> None:
    """Half-written sidecars of a process killed mid-write: never shown, now removed."""
    folders = [*config.inbox, config.output_dir, config.failed_dir, config.archive_dir]
    try:
        removed = remove_stale_temps([f for f in folders if f is not None and f.is_dir()])
    except OSError as exc:
        log.warning("could not look for leftover temporary files: %s", exc)
        return
    if removed:
        log.info("removed %d temporary files left by an earlier crash", removed)


# -- 1. identify ----------------------------------------------------------------------
def consider(ctx: Context, path: Path, asked: str | None = None) -> Seen | None:
    """A finished file: record it as a job unless its content is already known.

    ``asked``: what the command that named it asks for its original after a whole
    reading (``ocrwatch add --on-success``; :func:`ocrwatch.results.retire.disposal`).

    Raises TransientError when the queue cannot record it now (the watcher offers it
    again later).
    """
    path = path.absolute()
    if path.is_symlink() and not ctx.config.follow_symlinks:
        _link(ctx, path)
        return None
    try:
        # Opened once, no link followed below the inbox; stat, size check and hash all
        # go through this one handle.
        with open_source(ctx, path) as fh:
            st = os.fstat(fh.fileno())
            if ctx.jobs.files.is_current(path, st.st_size, st.st_mtime_ns):
                return Seen.UNCHANGED
            new = ctx.jobs.known(path) is None
            if new and ctx.follower.relocated(path, st):
                return Seen.UNCHANGED  # the same inode, moved while nothing watched
            check_size(st.st_size, Limits.from_config(ctx.config))  # before hashing
            sha = file_sha256(fh)
            if new and ctx.follower.relocated(path, st, sha):
                return Seen.UNCHANGED  # the same content, moved while nothing watched
            if new and (known := known_by_sidecars(ctx.config, ctx.jobs, path, st, sha)):
                return known  # its sidecars say what it holds: the index had lost it
    except (FileNotFoundError, NotRegular):
        return None  # gone again before we looked, or not a file: nothing to do
    except OSError as exc:
        reason = open_reason(exc, path)
        if isinstance(reason, TransientError):  # not the file's fault: offered again
            log.warning("cannot open %s now (%s); will try again", path.name, exc.strerror)
            raise reason from None
        ctx.jobs.files.reject(path, str(reason))
        return None
    except InputError as exc:  # a link below the inbox, a file over max_file_mb
        ctx.jobs.files.reject(path, str(exc))
        return None
    try:
        seen = ctx.jobs.offer(path, st.st_size, st.st_mtime_ns, sha, dev=st.st_dev,
                              inode=st.st_ino, asked=asked)
    except TransientError as exc:
        log.warning("could not record %s: %s; will try again", path, exc)
        raise
    if seen is not Seen.UNCHANGED:
        log.info("queued %s (%s)", path, seen.value)
        ctx.events.publish(FileQueued(path, changed=seen is Seen.CHANGED))
    return seen


def open_reason(exc: OSError, path: Path) -> OcrwatchError:
    """:func:`os_reason` for opening ``path``; a file denied because it is another
    user's (reached through a link, or a hard link to it) says so: ``chmod`` is its
    owner's to do, not the user's."""
    reason = os_reason(exc, Doing.OPEN, name=path.name)
    if not isinstance(exc, PermissionError):
        return reason
    try:
        st = os.stat(path)  # needs no read permission, only the folders' search
    except OSError:
        return reason
    if st.st_uid == os.geteuid():
        return reason
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = f"uid {st.st_uid}"
    if path.is_symlink():
        what = f"the file this link leads to ({os.path.realpath(path)})"
    elif st.st_nlink > 1:
        what = f"this file (a hard link: {st.st_nlink} names)"
    else:
        what = "this file"
    return InputError(f"permission denied: {what} belongs to another user ({owner}) who "
                      "did not let you read it, so ocrwatch does not either; ask its owner "
                      "for a copy of your own, or remove it from the inbox")


def open_source(ctx: Context, path: Path) -> contextlib.AbstractContextManager[BinaryIO]:
    """The original, opened for reading without following a link below its inbox."""
    return open_file_beneath(
        source_root(path, ctx.config.inbox, ctx.config.follow_symlinks), path)


def _link(ctx: Context, path: Path) -> None:
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError):
        ctx.jobs.files.reject(path, "a symbolic link that loops or points to nothing; "
                              "remove it or fix its target")
        return
    if any(target.is_relative_to(root.resolve()) for root in ctx.config.inbox):
        return  # the target is watched itself and read on its own
    ctx.jobs.files.reject(path, f"a symbolic link to {target}, outside the watched folders: "
                          "not followed (set follow_symlinks = true to read such links)")


def gone(ctx: Context, path: Path) -> None:
    """A watched file was removed: its job and index rows go too (the follower tells
    a move from a deletion)."""
    if path.absolute() in ctx.retired:
        ctx.retired.discard(path.absolute())
        return  # archived or deleted after reading: its index entry stays
    try:
        if ctx.lifecycle.journalled(path.absolute()):
            # Archived, but recording where to failed (a full disk): no user's deletion.
            ctx.lifecycle.recover(path.absolute())
            return
    except OcrwatchError as exc:
        log.warning("%s was archived, but the index cannot say so yet: %s", path, exc)
        return
    ctx.follower.gone(path)


def identify(ctx: Context, job: Job) -> Job | None:
    """A claimed job with its content known, or None when it was failed or deferred.

    A retried job refused before it was ever hashed (unreadable then) is hashed now:
    without its size and time on record, :func:`check_unchanged` would fail every time.
    """
    if job.sha256 is not None:
        return job
    try:
        with open_source(ctx, job.path) as fh:
            st = os.fstat(fh.fileno())
            check_size(st.st_size, Limits.from_config(ctx.config))  # before hashing
            sha = file_sha256(fh)
        ctx.jobs.files.refresh(job.id, st.st_size, st.st_mtime_ns, sha)
    except (TransientError, InputError) as exc:
        refuse(ctx, job, exc)
        return None
    except OSError as exc:
        reason = open_reason(exc, job.path)
        if isinstance(reason, TransientError):  # descriptors ran out: not the file's fault
            defer(ctx, job, str(reason))
        else:
            fail(ctx, job, str(reason))
        return None
    return replace(job, sha256=sha, size=st.st_size, mtime_ns=st.st_mtime_ns)


def reuse(ctx: Context, job: Job) -> tuple[list[PageText], str] | None:
    """Pages of an identical file read before, and the engine that read them."""
    return ctx.jobs.reuse(job.sha256, job.id, ctx.read_with) if job.sha256 else None


# -- 2. open pages ------------------------------------------------------------------
def open_pages(ctx: Context, job: Job, max_side: int | None) -> Generator[Page, None, None]:
    """The file's pages, one at a time (a 500-page PDF never sits in memory whole).

    Read through one handle. After each page, and once more after the last, the file
    must still be there; after the last, it must also be the one that was claimed.
    Close the iterator (``contextlib.closing``) when leaving it early.
    """
    with open_source(ctx, job.path) as fh:

        def opened() -> Iterator[Page]:
            for page in iter_pages(job.path, ctx.config, max_side, fh, text_layer=True):
                _still_there(fh, job.path)  # a deleted file is not read to its end
                yield page

        assert ctx.scan is not None
        # Blank recorded, turned upright, straightened; closed with this generator, so
        # that pages being prepared ahead are let go of.
        with contextlib.closing(ctx.scan.prepare_all(opened())) as prepared:
            for page in prepared:
                if job.sha256:
                    ctx.thumbs.save(job.sha256, page.index + 1,
                                    page.sketch if page.sketch is not None else page.image)
                yield page
        st = _still_there(fh, job.path)
        if (st.st_size, st.st_mtime_ns) != (job.size, job.mtime_ns):
            raise TransientError("the file changed while it was being read")
        if job.sha256 and (now := file_sha256(fh)) != job.sha256:
            # Written in place with its size and time kept (``cp -p``), or where no
            # event tells (a network share): the text is never recorded against content
            # it was not read from. Queued again as what it holds now.
            ctx.jobs.offer(job.path, st.st_size, st.st_mtime_ns, now, dev=st.st_dev,
                           inode=st.st_ino, asked=job.asked)
            raise TransientError("the file changed while it was being read (its size and "
                                 "time kept): read again")


def _still_there(fh: BinaryIO, path: Path) -> os.stat_result:
    """The open file's status; raises if its name no longer leads to it."""
    st = os.fstat(fh.fileno())
    if st.st_nlink == 0:
        if os.path.lexists(path):  # replaced by another file: that one is read later
            raise TransientError("the file was replaced while it was being read")
        raise InputError("the file was deleted while it was being read")
    return st


def open_error(job: Job, exc: Exception) -> tuple[str | None, str | None]:
    """Why opening a file's pages failed: ``(error, None)`` fails the file,
    ``(None, reason)`` tries it again later."""
    if isinstance(exc, InputError):
        return str(exc), None
    if isinstance(exc, TransientError):
        return None, str(exc)
    if isinstance(exc, MemoryError):
        return "not enough memory to decode this file; lower max_pixels", None
    if isinstance(exc, OSError):  # opening it: gone, unreadable, descriptors run out
        reason = open_reason(exc, job.path)
        return (None, str(reason)) if isinstance(reason, TransientError) else (str(reason), None)
    log.error("cannot read %s", job.display, exc_info=exc)
    return f"unexpected error while decoding: {exc.__class__.__name__}: {exc}", None


# -- 3. read ------------------------------------------------------------------------
def read(engine: Engine, name: str, pages: Sequence[Page],
         scan: ScanPrep | None = None,
         turned: Callable[[Page], None] | None = None) -> tuple[list[PageText], str | None]:
    """Every page's result, and the reason when the engine cannot work at all.

    Pages that need no engine (blank, or taken from a PDF's own text layer) are
    answered here, the rest by the engine (:func:`recognize`). ``scan``, the preparation
    the pages went through, turns a page whose turn was left to its reading
    (``Page.turn_unchecked``) when that reading is not of upright text, and the page is
    read again (``turned`` is told of it: its thumbnail); and it is asked for the script
    of an unsure reading's page that OSD did not see (``Page.script_unchecked``).
    """
    given = {n: _with_doubt(merged(blank_result() if p.blank else
                            PageText(markdown=text_to_markdown(p.text) if p.text else "",
                                     text=p.text.strip() + "\n" if p.text else ""),
                                   p.known), p, scan)
             for n, p in enumerate(pages) if p.text is not None}
    rest = [p for n, p in enumerate(pages) if n not in given]
    answers, unavailable = recognize(engine, name, rest) if rest else ([], None)
    if unavailable is None and scan is not None:
        answers, rest, unavailable = _read_first(engine, name, answers, rest, scan, turned)
    if unavailable is None:
        answers = [_with_doubt(merged(finish(_pictures(a, p), p), p.known), p, scan)
                   if a.error is None else a for a, p in zip(answers, rest, strict=True)]
    got = iter([_doubted(a) for a in answers])
    return [given[n] if n in given else next(got) for n in range(len(pages))], unavailable


def _read_first(engine: Engine, name: str, answers: list[PageText], pages: list[Page],
                scan: ScanPrep, turned: Callable[[Page], None] | None,
                ) -> tuple[list[PageText], list[Page], str | None]:
    """The answers and pages, each page whose turn was left to its reading and whose
    reading is not of upright text (:func:`ocrwatch.scan.orient.reads_upright`) turned
    now and, when that turns it, read again; the reason when the engine cannot work."""
    answers, pages = list(answers), list(pages)
    for n, (answer, page) in enumerate(zip(answers, pages, strict=True)):
        if (not page.turn_unchecked or answer.error
                or orient.reads_upright(answer.confidence, answer.layout)):
            continue
        upright = scan.turn_after_reading(page)
        pages[n] = upright
        if upright.turned == page.turned:
            continue  # as it lies after all: the reading stands
        log.info("%s, page %d: read as it lay, not as upright text: turned %d degrees "
                 "and read again", page.source.name, page.index + 1, upright.turned)
        (again,), unavailable = recognize(engine, name, [upright])
        if unavailable is not None:
            return answers, pages, unavailable
        answers[n] = again
        if turned is not None:
            turned(upright)
    return answers, pages, None


def _with_doubt(result: PageText, page: Page, scan: ScanPrep | None) -> PageText:
    """The result keeps the doubt its page's preparation found (``Page.doubt``), and the
    script's doubt (``Page.script_doubt``, or asked now of a page OSD did not see) when
    the reading is unsure too."""
    doubt = page.doubt
    if doubt is None and (unread := script_doubt(page, result.confidence, scan)) is not None:
        log.warning("%s, page %d: %s", page.source.name, page.index + 1, unread)
        doubt = unread
    if doubt is None or result.keep_original:
        return result
    return replace(result, keep_original=doubt)


def script_doubt(page: Page, confidence: float | None, scan: ScanPrep | None) -> str | None:
    """The script's doubt that holds for ``page`` read at ``confidence``: the one its
    preparation found, or, for a page OSD did not see (``Page.script_unchecked``), the
    one ``scan`` finds now; None when the reading is sure (:func:`script.confirmed`)."""
    if not script.confirmed(confidence):
        return None
    if page.script_doubt is None and page.script_unchecked and scan is not None:
        return scan.script_doubt(page)
    return page.script_doubt


# A text page's pictures read unsurely with fewer word-like tokens than this are marks (a
# logo, a signature, an emblem: "NW INV" at 24%, "OO0Q00Q0900900000" at 1%); with this
# many or more they are words that were not read ("The ere sereie og 2) ed epee ae" at 30%,
# a blurred scan of a sentence).
PICTURE_WORDS = 3


def _pictures(answer: PageText, page: Page) -> PageText:
    """The engine's reading of a text page's pictures (``Page.beside_layer``: the page
    drawn without its layer), judged before the layer's lines are merged in.

    The layer is the page's text, read whole; its pictures are mostly logos, signatures,
    rules and photos. What they come to:

    - words read surely: merged with the layer's lines, and set over the page's own text
      in the searchable PDF (``PageLayout.beside_text``);
    - nothing: nothing to add, and no doubt;
    - marks: a reading that is mostly not words, or one the engine is unsure of
      (``LOW_CONFIDENCE``) with fewer than ``PICTURE_WORDS`` word-like tokens: left out
      of the text, the index and the PDF (a warning says what), and no doubt, so that a
      letter with a logo still leaves after its reading;
    - words lost: a reading the engine is unsure of with ``PICTURE_WORDS`` word-like
      tokens or more is a picture of words that were not read: kept as read, and a doubt
      (the original is kept, the reason says why).
    """
    if not page.beside_layer or answer.error or answer.keep_original:
        return answer
    layout = replace(answer.layout, beside_text=True) if answer.layout is not None else None
    text = answer.text.strip()
    unsure = next((w for w in answer.warnings if w.startswith(LOW_CONFIDENCE)), None)
    nonwords = answer.nonwords or (bool(text) and mostly_nonwords(text))
    if not text or (unsure is None and not nonwords):
        return replace(answer, layout=layout)
    words = sum(1 for token in text.split() if wordlike(token.strip(TRIM)))
    how = ("mostly not words" if nonwords else f"low confidence ({answer.confidence:.0f}%)"
           if answer.confidence is not None else "unsure")
    if not nonwords and words >= PICTURE_WORDS:
        return replace(answer, layout=layout, keep_original=(
            f"the words of a picture on the page were not read surely ({words} words, "
            f"{how}): check it"))
    shown = " ".join(text.split())
    shown = shown if len(shown) <= 40 else shown[:39] + "…"
    note = (f"marks in the page's pictures (a logo, a signature?) read as \"{shown}\", "
            f"{how}: left out")
    log.info("%s, page %d: %s", page.source.name, page.index + 1, note)
    return replace(answer, text="", markdown="", nonwords=False,
                   layout=replace(layout, words=()) if layout is not None else None,
                   warnings=[*(w for w in answer.warnings if w != unsure), note])


def _doubted(answer: PageText) -> PageText:
    """An engine's answer that may not be the whole page is indexed as it is, but marked,
    so that the original is kept (an original leaves only after a whole reading): an
    empty answer for a page that is not blank (blank pages never reach the engine), a
    reading that is mostly not words, one the engine is unsure of."""
    if answer.error or answer.keep_original:
        return answer
    why: str | None
    if not answer.markdown.strip() and not answer.text.strip():
        why = "the engine's answer was empty, though the page is not blank"
    elif answer.nonwords:
        why = "the reading is mostly not words (paper texture, noise or a picture?)"
    else:
        why = next((w for w in answer.warnings if w.startswith(LOW_CONFIDENCE)), None)
        if why is None:
            return answer
    return replace(answer, keep_original=why)


def recognize(engine: Engine, name: str,
              pages: Sequence[Page]) -> tuple[list[PageText], str | None]:
    """The engine's results for one batch, and the reason when it cannot work at all.

    A batch the engine fails on gets one error result per page (the files fail); an
    engine that is unavailable sends the files back to the queue instead.
    """
    try:
        results = engine.recognize(pages)
        if len(results) != len(pages):
            raise EngineError(f"the engine returned {len(results)} results for "
                                f"{len(pages)} pages")
        return results, None
    except EngineUnavailable as exc:
        log.error("the %s engine cannot read: %s", name, exc)
        reason = f"the {name} engine is unavailable: {exc}"
        return [PageText("", "", error=reason) for _ in pages], reason
    except Exception as exc:
        log.exception("the %s engine failed on a batch", name)
        reason = str(exc) if isinstance(exc, OcrwatchError) else f"engine error: {exc}"
        return [PageText("", "", error=reason) for _ in pages], None


# -- 4. judge -----------------------------------------------------------------------
def judge(results: Mapping[int, PageText], expected: int | None, *,
          error: str | None = None, transient: str | None = None) -> Verdict:
    """The verdict on one file from its page results (keyed by 0-based page)."""
    if transient:
        return Verdict(transient=transient)
    if error:
        return Verdict(error=error)
    if expected is None:
        raise StateError("a file was judged before all its pages were opened")
    pages = [results[i] for i in range(expected)]
    bad = [(i, p.error) for i, p in enumerate(pages, 1) if p.error]
    if bad:
        i, reason = bad[0]
        where = f"page {i} of {len(pages)}" if len(pages) > 1 else "the page"
        return Verdict(error=f"{where} could not be read: {reason}")
    return Verdict(pages=pages)
