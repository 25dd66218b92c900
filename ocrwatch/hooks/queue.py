"""The ``on_done`` queue on disk, so that a hook queued when ocrwatch is killed runs at
the next start, once.

One small JSON file per queued hook, in a 0700 folder beside the index
(``index.sqlite3.hooks/``), written whole (a temporary, fsync, rename) before the hook is
queued in memory. Just before the program starts, its file is renamed ``.run``; once the
program is done with, the file is removed. At the next start:

- ``.json`` files are hooks that never started: they are run, in the order they were
  queued, and the log says so by file name;
- ``.pending`` files were written just before the file was marked done in the index
  (so that a kill between the two loses no hook): run if the index says the file is
  done, else dropped;
- ``.run`` files are hooks whose start had begun. The hook's own process writes a byte
  to ``NAME.started`` just before it becomes the program (after ocrwatch forked it, so
  even when ocrwatch is killed in between): with that byte the program started; it runs
  in a session of its own and has likely finished on its own, so it is not run again
  (twice would be worse for a hook that sends or moves something) and the log names it.
  Without it the program never started: it is run like a queued one.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ocrwatch.core.naming import OUTPUT_NAMES
from ocrwatch.fs.private import private_dir

log = logging.getLogger(__name__)

_FIELDS = ("source", "original", *OUTPUT_NAMES)  # a record of before has no hocr, alto


@dataclass(frozen=True)
class Entry:
    """One hook on disk: its file and what it was queued for."""

    path: Path
    values: dict[str, Path | None]
    pages: int
    queued: float


def folder_for(database: Path) -> Path:
    return database.with_name(database.name + ".hooks")


def trace_for(running: Path) -> Path:
    """The file the hook's own process writes a byte to just before it becomes the
    program (see hooks.run_hook): it tells "started" from "killed before the start"."""
    return running.with_suffix(".started")


class HookJournal:
    """Hooks queued on disk. Methods never raise OSError: a journal that cannot be
    written is logged, and the hook still runs from memory."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._seq = itertools.count()

    def add(self, values: dict[str, Path | None], pages: int, *, pending: bool = False,
            replaces: Path | None = None) -> Path | None:
        """Record a hook to run; its file, or None when it could not be written.

        ``pending``: the file is about to be marked done (``.pending``: run at the next
        start only if the index says it is done). ``replaces``: a pending record made
        whole now (same name, ``.json``; the pending one is removed after)."""
        record: dict[str, object] = {k: (os.fsdecode(v) if v is not None else None)
                                     for k, v in values.items()}
        record.update(pages=pages, queued=time.time())
        name = (replaces.stem if replaces is not None
                else f"{time.time_ns():020d}-{os.getpid()}-{next(self._seq):06d}")
        target = self.folder / f"{name}.{'pending' if pending else 'json'}"
        tmp = self.folder / f".{name}.tmp"
        try:
            private_dir(self.folder, ours=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                # ensure_ascii keeps undecodable name bytes (surrogates) as \udcxx.
                json.dump(record, fh, ensure_ascii=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
            _sync_dir(self.folder)
            if replaces is not None and replaces != target:
                self.finished(replaces)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            log.warning("on_done for %s could not be recorded in %s (%s): it runs all the "
                        "same, but not after a crash", Path(str(values.get("source"))).name,
                        self.folder, exc.strerror or exc)
            return None
        return target

    def started(self, path: Path) -> Path:
        """The hook's program is about to start: ``.json`` -> ``.run``."""
        running = path.with_suffix(".run")
        try:
            os.replace(path, running)
        except OSError as exc:
            log.debug("cannot mark %s as started: %s", path, exc)
            return path
        return running

    def finished(self, path: Path) -> None:
        _remove(path)
        if path.suffix == ".run":
            # The record first, then its trace: killed between the two, a trace is left
            # alone (removed at the next start), never a ".run" record without its trace,
            # which reads as a hook that never started and would be run a second time.
            _remove(trace_for(path))

    def recover(self, was_done: Callable[[Entry], bool] | None = None
                ) -> tuple[list[Entry], list[Entry]]:
        """What the last run left: (hooks never started, hooks started but not seen
        through). The started ones are removed from disk here; the others stay until
        they are run. A ``.pending`` record (killed while its file was being marked
        done) is a hook to run when ``was_done`` says the file is done, else dropped."""
        try:
            names = sorted(os.listdir(self.folder))
        except FileNotFoundError:
            return [], []
        except OSError as exc:
            log.warning("cannot read the on_done queue %s: %s", self.folder,
                        exc.strerror or exc)
            return [], []
        waiting: list[Entry] = []
        cut: list[Entry] = []
        for name in names:
            path = self.folder / name
            if name.startswith("."):
                with contextlib.suppress(OSError):
                    path.unlink()  # a record never made whole: its hook was never queued
                continue
            if name.endswith(".started") and f"{path.stem}.run" not in names:
                _remove(path)  # its record went before the kill: the hook was seen through
                continue
            if not name.endswith((".json", ".run", ".pending")):
                continue
            if name.endswith(".pending") and (
                    f"{path.stem}.json" in names or f"{path.stem}.run" in names):
                self.finished(path)  # made whole already; the kill came before this went
                continue
            entry = _read(path)
            if entry is None:
                continue
            if name.endswith(".pending"):
                if was_done is not None and was_done(entry):
                    final = self.folder / f"{path.stem}.json"
                    with contextlib.suppress(OSError):
                        os.replace(path, final)
                        entry = Entry(final, entry.values, entry.pages, entry.queued)
                    waiting.append(entry)
                else:
                    self.finished(path)  # its file was not marked done: no hook is due
            elif name.endswith(".run"):
                trace = trace_for(path)
                if trace.exists() and trace.stat().st_size > 0:
                    cut.append(entry)  # the program started: it is not run twice
                    self.finished(path)
                else:  # killed before the program started: it is still to run
                    final = path.with_suffix(".json")
                    with contextlib.suppress(OSError):
                        os.replace(path, final)
                        entry = Entry(final, entry.values, entry.pages, entry.queued)
                    waiting.append(entry)
                self.finished(trace)
            else:
                waiting.append(entry)
        return waiting, cut


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("cannot remove %s (%s): on_done for it may be named as cut short at "
                    "the next start", path, exc.strerror or exc)


def _read(path: Path) -> Entry | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        values = {k: (Path(os.fsencode(record[k]).decode("utf-8", "surrogateescape"))
                      if record.get(k) else None) for k in _FIELDS}
        return Entry(path, values, int(record.get("pages", 0)),
                     float(record.get("queued", 0.0)))
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        log.warning("the on_done record %s cannot be read (%s): set aside as %s.bad",
                    path, exc, path.name)
        with contextlib.suppress(OSError):
            os.replace(path, path.with_name(path.name + ".bad"))
        return None


def _sync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
