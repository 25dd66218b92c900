"""``ocrwatch reindex``: the full-text tables rebuilt from the stored page text, or the
index rebuilt from the sidecars when the database is lost.

Rebuilding from the database reads no file: the page text is in ``pages``; the word,
trigram and name tables are emptied and filled again in one transaction, in chunks so the
progress bar moves. From the sidecars, each original in the watched folders whose
``.txt`` (and ``.md``) are found where ocrwatch writes them gets its job back as done,
with its pages split at the form feeds (``.txt``) and page markers (``.md``): nothing is
read by the engine again. Every output found beside them under the same stem (the
searchable PDF, hOCR, ALTO: :data:`ocrwatch.results.formats.OUTPUTS`) is recorded as the
job's, so that it follows the file, is archived with it and goes with it. A sidecar
ocrwatch marked (:data:`ocrwatch.results.sidecar.MARK_ATTR`) says for which content it
was written: one for other content is stale, and its original
is queued to be read again over it (never beside it).

The daemon does the same for each new file whose marked sidecars are found
(:func:`known_by_sidecars`): an index lost while nothing watched costs no reading.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ocrwatch.config import Config
from ocrwatch.core.domain import PageText
from ocrwatch.core.errors import UsageError
from ocrwatch.intake.inbox_files import walk
from ocrwatch.results.formats import OUTPUTS, main_output, paths
from ocrwatch.results.lifecycle import output_folder
from ocrwatch.results.sidecar import fitting, read_mark, sidecar_paths
from ocrwatch.store.db import Database
from ocrwatch.store.index import count_pages as count_pages  # re-exported for the CLI
from ocrwatch.store.index import rebuild_fts as rebuild_fts
from ocrwatch.store.jobfiles import Seen
from ocrwatch.store.jobs import JobQueue, file_sha256

log = logging.getLogger(__name__)

_PAGE_MARK = re.compile(r"^<!-- page (\d+) -->\n\n", re.M)

Progress = Callable[[int], None]  # called with how many more items are done


@dataclass(frozen=True)
class Restored:
    files: int
    pages: int
    without_sidecars: list[Path]


def split_pages(txt: str, md: str | None) -> list[PageText]:
    """Pages from a ``.txt`` (form feeds between pages) and its ``.md`` (page markers)."""
    texts = [t.strip() for t in txt.split("\f")]
    marks = [] if md is None else list(_PAGE_MARK.finditer(md))
    if md is not None and len(texts) == 1:
        markdowns = [md.strip()]
    elif len(marks) == len(texts):
        markdowns = []
        for i, mark in enumerate(marks):
            end = marks[i + 1].start() if i + 1 < len(marks) else len(md or "")
            body = (md or "")[mark.end():end].strip()
            markdowns.append(body.removesuffix("---").strip())
    else:
        markdowns = texts  # no usable .md: the text stands in for it
    return [PageText(markdown=m, text=t) for m, t in zip(markdowns, texts, strict=True)]


def _is_file(path: Path) -> bool:
    """``path.is_file()``, False for a name too long for the file system (a 255-byte
    original's ``NAME.png.txt``) rather than an error."""
    try:
        return path.is_file()
    except OSError:
        return False


def _sidecars_of(original: Path, config: Config, taken: set[Path]) -> tuple[Path, Path] | None:
    folder = output_folder(config, original)
    for stem in (fitting(original.name), fitting(original.stem)):
        md, txt = sidecar_paths(folder / stem)
        if txt not in taken and _is_file(txt):
            return md, txt
    return None


def outputs_beside(txt: Path) -> dict[str, Path]:
    """Every output found under the stem of ``txt`` (``scan.txt``: ``scan.md``,
    ``scan.ocr.pdf``, ``scan.hocr``, ``scan.alto.xml``...), by name."""
    stem = txt.with_name(txt.name.removesuffix(".txt"))
    return {o: p for o, p in paths(stem, OUTPUTS).items() if _is_file(p)}


def archived(config: Config) -> list[Path]:
    """Originals archived after reading (``on_success = "archive"``) whose sidecars went
    with them: beside them in the archive (without ``output_dir``)."""
    archive = config.archive_dir
    if config.on_success != "archive" or archive is None or config.output_dir is not None \
            or not archive.is_dir():
        return []
    return sorted(walk([archive]))


def results_of_deleted(config: Config) -> list[tuple[Path, dict[str, Path]]]:
    """``on_success = "delete"``: the result and outputs (by name) of each original
    deleted after its reading, known by the marked ``.txt`` it left beside where it was
    (the index entry named the result: :func:`~ocrwatch.results.formats.main_output`,
    the searchable PDF, else the ``.md``, else the ``.txt``). Only marked sidecars say
    which original they had."""
    if config.on_success != "delete" or config.output_dir is not None:
        return []
    out: list[tuple[Path, dict[str, Path]]] = []
    for root in config.inbox:
        for folder, dirs, names in os.walk(root, followlinks=False):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(names):
                if not name.endswith(".txt") or name.startswith("."):
                    continue
                txt = Path(folder) / name
                mark = read_mark(txt)
                if mark is None or mark.get("name") is None \
                        or os.path.lexists(txt.parent / str(mark["name"])):
                    continue  # not ours, or its original is there (restored as such)
                found = outputs_beside(txt)
                out.append((main_output(found) or txt, found))
    return out


def restorable(config: Config) -> list[Path]:
    """The originals :func:`from_sidecars` looks at: the watched folders', then the
    archive's."""
    return sorted(walk(config.inbox)) + archived(config)


def from_sidecars(config: Config, db: Database, progress: Progress | None = None, *,
                  originals: list[Path] | None = None, marked: bool = False,
                  deleted: bool = True) -> Restored:
    """Give every original with sidecars its job and pages back (no engine involved).

    ``originals``: those to look at (default :func:`restorable`); ``marked``: only
    sidecars that carry ocrwatch's mark count; ``deleted``: also the entries of
    originals deleted after reading (:func:`results_of_deleted`).
    """
    if config.output_dir is not None and config.output_layout == "date":
        raise UsageError("sidecars filed by date (output_layout = \"date\") do not say "
                            "which original they belong to; read the files again instead "
                            "(`ocrwatch add` on the inbox)")
    jobs = JobQueue(db)
    originals = restorable(config) if originals is None else originals
    # Full-name sidecars first (scan.pdf.md), so that scan.md goes to the file that had it.
    taken: set[Path] = set()
    found: dict[Path, tuple[Path, Path]] = {}
    for exact in (True, False):
        for original in originals:
            if original in found:
                continue
            pair = _sidecars_of(original, config, taken)
            if pair is None or (exact and pair[1].name != fitting(original.name) + ".txt"):
                continue
            found[original] = pair
            taken.add(pair[1])
    files = pages = 0
    missing: list[Path] = []
    for original in originals:
        if original not in found:
            missing.append(original)
        elif jobs.known(original) is None:
            try:
                st = os.stat(original)
                sha = file_sha256(original)
                restored = _restore(jobs, original, st, sha, found[original], marked=marked,
                                    queue=any(original.is_relative_to(i) for i in config.inbox))
            except (OSError, UnicodeDecodeError) as exc:
                log.warning("cannot restore %s from its sidecars: %s", original, exc)
                restored = None
            if restored is None:
                missing.append(original)
            elif restored:
                files += 1
                pages += restored
        if progress is not None:
            progress(1)
    if deleted:
        for result, outputs in results_of_deleted(config):
            if jobs.known(result) is not None or jobs.files.outputs_owned(outputs.values()):
                continue
            try:
                pages += _restore_result(jobs, result, outputs)
                files += 1
            except (OSError, UnicodeDecodeError) as exc:
                log.warning("cannot restore %s from its sidecars: %s", result, exc)
    return Restored(files, pages, missing)


def _restore_result(jobs: JobQueue, result: Path, outputs: dict[str, Path]) -> int:
    """The entry of an original deleted after reading, named by its result, with every
    output found beside it."""
    txt, md = outputs["txt"], outputs.get("md")
    mark = read_mark(txt) or {}
    text = txt.read_text(encoding="utf-8")
    markdown = md.read_text(encoding="utf-8") if md is not None else None
    read = split_pages(text, markdown)
    sha = str(mark.get("sha256"))
    job_id = jobs.files.restore(result, os.stat(result), sha, original_gone=True)
    jobs.complete(job_id, read, engine=mark.get("engine") or "sidecars", outputs=outputs,
                  sha256=sha, read_with=mark.get("read_with"))
    return len(read)



def known_by_sidecars(config: Config, jobs: JobQueue, original: Path, st: os.stat_result,
                      sha: str) -> Seen | None:
    """A new file whose sidecars ocrwatch marked are found where it writes them (its
    index was lost): restored from them (UNCHANGED), or, when they were written for other
    content, queued to be read over them (NEW). None: no marked sidecars, read it."""
    if config.output_dir is not None and config.output_layout == "date":
        return None  # sidecars filed by date name no original
    folder = output_folder(config, original)
    pair = next((pair for stem in (fitting(original.name), fitting(original.stem))
                 if _is_file((pair := sidecar_paths(folder / stem))[1])
                 and read_mark(pair[1]) is not None and not jobs.files.sidecars_owned(*pair)), None)
    if pair is None:
        return None
    try:
        restored = _restore(jobs, original, st, sha, pair, marked=True)
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("cannot restore %s from its sidecars: %s", original, exc)
        return None
    if restored is None:
        return None
    return Seen.UNCHANGED if restored else Seen.NEW


def _restore(jobs: JobQueue, original: Path, st: os.stat_result, sha: str,
             pair: tuple[Path, Path], *, marked: bool, queue: bool = True) -> int | None:
    """Restore ``original`` from its sidecars; the pages restored, 0 when they are stale
    (marked for other content: with ``queue``, queued, the names kept for its reading),
    None when they do not count (``marked`` and not marked by ocrwatch)."""
    md, txt = pair
    mark = read_mark(txt)
    if mark is None and marked:
        return None
    if mark is not None and mark.get("name") != os.fsdecode(original.name):
        return None  # another original's (scan.png's scan.md, for scan.pdf): never taken
    if mark is not None and mark["sha256"] != sha:
        if not queue:
            return None  # an archived original is read again only when put back
        jobs.offer(original, st.st_size, st.st_mtime_ns, sha, dev=st.st_dev, inode=st.st_ino)
        job = jobs.known(original)
        if job is not None:  # its outputs' names, to be written over
            jobs.files.reserve_outputs(job.id, {"md": md, "txt": txt, **outputs_beside(txt)})
        log.info("%s changed since its sidecars were written: read again over them",
                 original)
        return 0
    outputs = outputs_beside(txt)
    text = txt.read_text(encoding="utf-8")
    markdown = md.read_text(encoding="utf-8") if "md" in outputs else None
    read = split_pages(text, markdown)
    job_id = jobs.files.restore(original, st, sha)
    # Every output found under the sidecars' stem is the job's (the PDF, hOCR, ALTO...).
    jobs.complete(job_id, read, engine=(mark or {}).get("engine") or "sidecars",
                  outputs=outputs, sha256=sha, read_with=(mark or {}).get("read_with"))
    if marked:
        log.info("%s restored from its sidecars (%d page%s): not read again", original,
                 len(read), "" if len(read) == 1 else "s")
    return len(read)
