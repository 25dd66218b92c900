"""The index follows the files: moves, renames and deletions inside the watched folders.

A moved or renamed file keeps its job, pages and thumbnails (nothing is read again), and
its sidecars move with it: beside the original, or in the mirrored tree of
``output_dir``. A deleted file leaves the index, and its sidecars go too while they still
hold what ocrwatch wrote (``delete_sidecars``); a file the user wrote is never touched.
A file moved while nothing watched is known again by its inode, size and time, or by its
SHA-256, when the rescan finds it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from ocrwatch.config import Config
from ocrwatch.core.domain import Job, PageText
from ocrwatch.pages.thumbs import Thumbnails
from ocrwatch.results.formats import main_output, paths, plain
from ocrwatch.results.lifecycle import output_folder
from ocrwatch.results.sidecar import choose_stem, move_without_overwriting, remove_if_ours
from ocrwatch.store.jobfiles import Forgotten, Moved
from ocrwatch.store.jobs import JobQueue

log = logging.getLogger(__name__)


def _on_another_device(path: Path, dev: int | None) -> bool:
    """Whether the nearest folder above ``path`` that exists is on another device than
    the file was (``dev``): its disk is not mounted there now (unplugged, or an empty
    folder or another file system in its place)."""
    if dev is None:
        return False
    for folder in path.parents:
        try:
            return os.stat(folder).st_dev != dev  # the inbox may be a link to the disk
        except OSError:
            continue
    return False


def out_of_reach(known: list[tuple[int, Path, int | None, bool]], roots: list[Path],
                 replaced: set[Path], sidecars_left: Callable[[int], bool],
                 ) -> tuple[list[Path], dict[Path, int]]:
    """Known files not at their paths: those gone, and per watched folder how many are
    only out of reach, not deleted.

    Out of reach: a file whose folder is now on another device than the file was (its
    disk unmounted), and a file of a watched folder that is not the folder it was in
    (``replaced``: renamed away and made again, a sync client's fresh folder) whose
    sidecars are still there (in ``output_dir``). A file deleted with its sidecars, or
    deleted while the daemon watches (told by its own event, not here), is gone.
    """
    gone: list[Path] = []
    kept: dict[Path, int] = {}
    for job_id, path, dev, there in known:
        if there:
            continue
        root = next((r for r in roots if path.is_relative_to(r)), None)
        if root is None:
            gone.append(path)  # archived elsewhere, or a file given to `ocrwatch add`
        elif _on_another_device(path, dev) or (root in replaced and sidecars_left(job_id)):
            kept[root] = kept.get(root, 0) + 1
        else:
            gone.append(path)
    return gone, kept


class Follower:
    """Applies what happened on disk to the index, the sidecars and the thumbnails."""

    def __init__(self, jobs: JobQueue, config: Config, thumbs: Thumbnails) -> None:
        self.jobs = jobs
        self.config = config
        self.thumbs = thumbs
        self._unreachable: dict[Path, int] = {}  # watched folder -> files kept, as last told
        self._replaced_folders(None)  # each watched folder as it is now, if none is kept

    # -- events ------------------------------------------------------------------------
    def moved(self, old: Path, new: Path) -> bool:
        """A file was renamed or moved inside the watched folders; False if unknown."""
        moved, replaced = self.jobs.files.move(old.absolute(), new.absolute())
        if replaced is not None:
            self._clean([replaced])
        if moved is None:
            return False
        log.info("%s moved to %s: the index and sidecars follow", old, new)
        self._place_sidecars(moved)
        return True

    def moved_tree(self, old: Path, new: Path) -> int:
        """A folder was renamed or moved inside the watched folders; returns rows moved."""
        moved = self.jobs.files.move_tree(old.absolute(), new.absolute())
        for item in moved:
            self._place_sidecars(item)
        if moved:
            log.info("%s moved to %s: %d files follow in the index", old, new, len(moved))
        return len(moved)

    def gone(self, path: Path) -> bool:
        forgotten = self.jobs.files.remove(path.absolute())
        if forgotten is None:
            return False
        log.info("%s was removed: dropped from the index", path)
        self._clean([forgotten])
        return True

    def gone_tree(self, folder: Path) -> int:
        """A folder was deleted or moved out of the watched folders."""
        forgotten = self.jobs.files.forget_tree(folder.absolute())
        if forgotten:
            log.info("%s left the watched folders: %d files dropped from the index", folder,
                     len(forgotten))
        self._clean(forgotten)
        return len(forgotten)

    def missing(self) -> list[Path]:
        """Known files that no longer exist (the rescan reports them as gone, so that a
        file moved meanwhile is followed rather than dropped), after sweeping thumbnails
        of content no longer in the index.

        Files that are only out of reach are not reported (:func:`out_of_reach`): a
        watched folder whose disk went away, or that came back empty, has not lost them.
        """
        self.thumbs.sweep(self.jobs.files.contents())
        known = self.jobs.files.whereabouts()
        replaced = self._replaced_folders(known)
        gone, kept = out_of_reach(known, self.config.inbox, replaced, self._sidecars_left)
        for folder in set(kept) | set(self._unreachable):
            before, now = self._unreachable.get(folder, 0), kept.get(folder, 0)
            if now > before:
                log.warning("%d known files of %s are not there: the folder is on another "
                            "disk than before, or was made again in its place (a disk "
                            "unmounted, a folder renamed away); they stay in the index with "
                            "their sidecars and are not read again when they are back",
                            now, folder)
            elif now < before:
                log.info("%d known files of %s are within reach again", before - now, folder)
            if now:
                log.debug("%d known files of %s still out of reach", now, folder)
        self._unreachable = kept
        return gone

    def _replaced_folders(self, known: list[tuple[int, Path, int | None, bool]] | None,
                          ) -> set[Path]:
        """The watched folders that are not the folder (device and inode, kept in the
        index) their known files were in. A folder's identity is recorded while every
        known file in it is there, so a folder made again in its place stays "replaced"
        until the files are back or gone with their sidecars."""
        replaced: set[Path] = set()
        for root in self.config.inbox:
            try:
                st = os.stat(root)
            except OSError:
                continue  # gone: its files are judged by the device of what is above
            now = f"{st.st_dev}:{st.st_ino}"
            key = f"watched folder {os.fsdecode(root)}"
            was = self.jobs.db.get_setting(key)
            if was is not None and was != now:
                replaced.add(root)
            complete = known is not None and all(
                there for _id, p, _dev, there in known if p.is_relative_to(root))
            if was is None or (was != now and complete):
                self.jobs.db.set_setting(key, now)
                replaced.discard(root)
        return replaced

    def relocated(self, path: Path, st: os.stat_result, sha256: str | None = None) -> bool:
        """Whether ``path`` is a known file that moved while nothing watched (its old
        path gone); if so its row, sidecars and thumbnails now follow it."""
        job: Job | None = self.jobs.files.moved_away(st.st_dev, st.st_ino, st.st_size,
                                               st.st_mtime_ns, sha256)
        if job is None:
            return False
        if job.sha256 is not None and sha256 is not None and job.sha256 != sha256:
            return False
        if not self._sidecars_left(job.id):
            # Deleted with its sidecars (or with the whole inbox): this is a copy, not a
            # move, and following it would leave the new file without any. Read as a
            # copy, it gets sidecars made from the stored text (nothing is read again).
            log.info("%s has the content of %s, which is gone with its sidecars: "
                     "a copy, given sidecars of its own", path, job.path)
            self.jobs.files.drop_sidecar_names(job.id)
            return False
        log.info("%s is %s, moved: the index follows without reading it again", path,
                 job.path)
        return self.moved(job.path, path)

    # -- sidecars and thumbnails ---------------------------------------------------------
    def _sidecars_left(self, job_id: int) -> bool:
        """Whether one of a job's recorded outputs is still on disk, or it has none
        recorded (queued, failed): only then is there something to follow."""
        own = self.jobs.files.own_sidecars(job_id)
        return not own or any(os.path.lexists(p) for p in own)

    def _place_sidecars(self, moved: Moved) -> None:
        """Move a moved file's outputs (every one recorded: .md, .txt, PDF, hOCR, ALTO...)
        to where a fresh read would have put them."""
        was = dict(moved.outputs)
        if not was:
            return
        if not any(os.path.lexists(p) for p in was.values()):
            # Polling reports the files of a moved folder before the folder itself: their
            # outputs beside them have moved already, to the same place relative to them.
            try:
                there = {o: moved.path.parent / p.relative_to(moved.old.parent)
                         for o, p in was.items()}
            except ValueError:
                pass
            else:
                if any(os.path.lexists(p) for p in there.values()):
                    was = there
        if self.config.output_dir is not None and self.config.output_layout == "date":
            # Filed by the month it was read: only the name follows.
            folder = (main_output(was) or next(iter(was.values()))).parent
        else:
            folder = output_folder(self.config, moved.path)
        stem = choose_stem(moved.path, folder, self.jobs.files.sidecars_of_others(moved.id),
                           set(was.values()))
        new = paths(stem, was)
        if new == was:
            if was != moved.outputs:
                self.jobs.files.reserve_outputs(moved.id, was)
            return
        placed: list[tuple[Path, Path]] = []
        for name, old in was.items():
            if name not in new or not os.path.lexists(old):
                continue  # the user removed it: nothing to carry
            if move_without_overwriting(old, new[name]):
                placed.append((old, new[name]))
            else:
                log.warning("could not move %s to %s; it stays where it is", old, new[name])
                # Keep the outputs together and the record pointing at what is there.
                for o, n in placed:
                    move_without_overwriting(n, o)
                self.jobs.files.reserve_outputs(moved.id, was)
                return
        self.jobs.files.reserve_outputs(moved.id, {**was, **new})

    @staticmethod
    def _remove_made(item: Forgotten) -> list[Path]:
        """The outputs that the stored text cannot tell (searchable PDF, hOCR, ALTO) that
        ocrwatch wrote, unless changed after they were written."""
        if item.finished is None:
            return []
        removed = []
        for name, path in item.outputs.items():
            if plain(name):
                continue  # told by their text (remove_if_ours)
            try:
                if path.is_symlink() or path.stat().st_mtime > item.finished + 1.0:
                    continue
                path.unlink()
            except OSError:
                continue
            removed.append(path)
        return removed

    def _clean(self, forgotten: list[Forgotten]) -> None:
        for item in forgotten:
            if self.config.delete_sidecars:
                pages = [PageText(markdown=m, text=t) for m, t in item.pages]
                removed = remove_if_ours(item.outputs, pages)
                removed += self._remove_made(item)
                if removed:
                    log.info("removed %s", ", ".join(p.name for p in removed))
            if item.sha256 and not self.jobs.files.has_content(item.sha256):
                self.thumbs.remove(item.sha256)
