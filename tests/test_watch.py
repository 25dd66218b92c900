from __future__ import annotations

import os
import queue
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import text_page

from ocrwatch.intake.inbox_files import is_ignored_name, looks_complete, walk, wanted
from ocrwatch.intake.settle import Settler
from ocrwatch.intake.watch import Watcher


@pytest.mark.parametrize("name", ["scan.pdf.part", "scan.crdownload", "x.tmp", "~$doc.pdf",
                                  ".hidden.png", "backup.png~"])
def test_temporary_and_hidden_names_are_ignored(name: str) -> None:
    assert is_ignored_name(name)


def test_wanted_by_name(tmp_path: Path) -> None:
    assert wanted(tmp_path / "a" / "Scan.PDF", [tmp_path])
    assert not wanted(tmp_path / "scan.md", [tmp_path])
    assert not wanted(tmp_path / "scan.txt", [tmp_path])
    assert not wanted(tmp_path / ".git" / "x.png", [tmp_path])
    assert not wanted(Path("/elsewhere/x.png"), [tmp_path])


def test_looks_complete(tmp_path: Path) -> None:
    full = tmp_path / "a.jpg"
    text_page(["x"], width=200).save(full, "JPEG")
    data = full.read_bytes()
    assert looks_complete(full)
    half = tmp_path / "b.jpg"
    half.write_bytes(data[: len(data) // 2])
    assert not looks_complete(half)
    pdf = tmp_path / "c.pdf"
    pdf.write_bytes(b"%PDF-1.4\n1 0 obj\n")
    assert not looks_complete(pdf)
    pdf.write_bytes(b"%PDF-1.4\n1 0 obj\n%%EOF\n")
    assert looks_complete(pdf)


class Rig:
    """A Settler on a clock the test moves by hand, with what it reported."""

    def __init__(self, folder: Path, settle: float = 2.0) -> None:
        self.now = 1000.0
        self.ready: list[Path] = []
        self.gone: list[Path] = []
        self.settler = Settler([folder], settle, self.ready.append, self.gone.append,
                               clock=lambda: self.now)

    def feed(self, *kinds: str, path: Path) -> Path:
        for kind in kinds:
            self.settler.feed(kind, path)
        return path

    def after(self, seconds: float) -> None:
        """Let ``seconds`` pass, then let the settler look."""
        self.now += seconds
        self.settler.check()


def png(path: Path) -> Path:
    text_page(["x"], width=100).save(path)
    return path


def test_file_is_ready_only_after_settle_time(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    path = rig.feed("changed", path=png(tmp_path / "a.png"))
    rig.after(0)
    rig.after(1.9)
    assert rig.ready == []
    rig.after(0.2)
    assert rig.ready == [path]
    assert rig.settler.pending == {}


def test_growing_file_restarts_the_wait(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    path = tmp_path / "a.tif"
    path.write_bytes(b"II*\x00" + b"\x00" * 100)
    rig.feed("changed", path=path)
    for _ in range(5):
        rig.now += 1.5
        with path.open("ab") as fh:
            fh.write(b"\x00" * 100)
        os.utime(path, ns=(int(rig.now * 1e9), int(rig.now * 1e9)))
        rig.after(0)
    assert rig.ready == []
    rig.after(2.1)
    assert rig.ready == [path]


def test_close_after_write_shortens_but_does_not_replace_the_check(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    path = rig.feed("changed", "closed", path=png(tmp_path / "a.png"))
    rig.after(0)
    assert rig.ready == []  # still must be seen unchanged for a while
    rig.after(0.6)
    assert rig.ready == [path]


def test_a_file_renamed_in_is_as_good_as_closed_but_must_still_be_still(tmp_path: Path) -> None:
    """Renamed in whole (its end marker there): handed on once seen unchanged one look
    (0.2 s) after its event; cut off (no end marker yet): as a closed file, 0.5 s."""
    rig = Rig(tmp_path)
    path = png(tmp_path / "a.png")
    cut = tmp_path / "cut.png"
    cut.write_bytes(path.read_bytes()[:200])
    rig.settler.feed("moved", tmp_path / "a.png.part", path)
    rig.settler.feed("moved", tmp_path / "cut.png.part", cut)
    rig.after(0)
    assert rig.ready == []
    rig.after(0.25)
    assert rig.ready == [path]
    rig.after(0.3)
    assert cut in rig.settler.pending  # its end marker is waited for
    # One that is still being written after the rename waits the whole settle time.
    growing = png(tmp_path / "b.png")
    rig.settler.feed("moved", tmp_path / "b.png.part", growing)
    rig.now += 0.3
    with growing.open("ab") as fh:
        fh.write(b"\0" * 10)
    os.utime(growing, ns=(int(rig.now * 1e9), int(rig.now * 1e9)))
    rig.after(0)
    rig.after(1.0)
    assert rig.ready == [path]
    rig.after(1.1)
    assert rig.ready == [path, growing]


def test_files_that_settle_together_are_all_handed_on_before_one_wake(
        tmp_path: Path) -> None:
    """The daemon wakes its preparers once a look has handed every settled file on,
    not after the first (13 preparers woken by it slowed the recording of the rest
    fifty-fold); a look that hands nothing on wakes nobody."""
    handed: list[object] = []
    rig = Rig(tmp_path)
    rig.settler.ready = handed.append
    rig.settler.settled = lambda: handed.append("wake")
    for name in ("a.png", "b.png", "c.png"):
        rig.feed("changed", path=png(tmp_path / name))
    rig.after(0)
    rig.after(1.0)
    assert handed == []
    rig.after(1.1)
    assert sorted(map(str, handed[:3])) == sorted(str(tmp_path / n) for n in
                                                  ("a.png", "b.png", "c.png"))
    assert handed[3:] == ["wake"]
    rig.after(2.1)
    assert handed[4:] == []


def test_a_file_whole_when_created_is_as_good_as_closed(tmp_path: Path) -> None:
    """A creation is what inotify reports for a file renamed in from outside the watched
    folders: whole when it appears, it settles as a closed one does; a creation of an
    empty file, or of one whose end marker is not there yet, waits the settle time."""
    rig = Rig(tmp_path)
    whole = rig.feed("created", path=png(tmp_path / "a.png"))
    data = (tmp_path / "a.png").read_bytes()
    cut = tmp_path / "b.png"
    cut.write_bytes(data[: len(data) // 2])
    rig.feed("created", path=cut)
    empty = tmp_path / "c.png"
    empty.touch()
    rig.feed("created", path=empty)
    rig.after(0)
    rig.after(0.25)
    assert rig.ready == [whole]
    empty.write_bytes(data)
    rig.feed("changed", path=empty)  # its writer's events follow
    rig.after(0)
    rig.feed("closed", path=empty)
    rig.after(0.6)
    assert rig.ready == [whole, empty]
    assert cut in rig.settler.pending  # no end marker: the settle time and its grace


def test_a_file_renamed_in_from_outside_is_ready_before_the_settle_time(
        tmp_path: Path) -> None:
    """Real inotify: a file moved in from a folder not watched (a scanner's or browser's
    staging folder) is reported as a creation, and is handed on well before the 3 s
    settle time; one written in place still waits it."""
    import time

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    ready: queue.Queue[Path] = queue.Queue()
    watcher = Watcher(Settler([inbox], 3.0, ready.put, lambda p: None))
    watcher.start()
    try:
        staged = png(tmp_path / "staged.png")
        moved = time.monotonic()
        staged.rename(inbox / "moved.png")
        assert ready.get(timeout=10) == inbox / "moved.png"
        assert time.monotonic() - moved < 2.0
        written = time.monotonic()
        with (inbox / "written.png").open("wb") as fh:
            fh.write(b"\x89PNG\r\n")  # a scanner's first bytes; the rest comes later
        with pytest.raises(queue.Empty):
            ready.get(timeout=1.5)
        (inbox / "written.png").write_bytes((inbox / "moved.png").read_bytes())
        assert ready.get(timeout=10) == inbox / "written.png"
        assert time.monotonic() - written >= 3.0
    finally:
        watcher.stop()


def test_incomplete_looking_file_waits_longer(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    path = tmp_path / "half.pdf"
    path.write_bytes(b"%PDF-1.4\n1 0 obj\n")
    rig.feed("changed", path=path)
    rig.after(0)
    rig.after(5)
    assert rig.ready == []  # a scanner pausing mid-file
    with path.open("ab") as fh:
        fh.write(b"%%EOF\n")
    rig.after(0)
    rig.after(2.1)
    assert rig.ready == [path]


def test_deleted_file_is_reported_gone(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    path = rig.feed("changed", path=png(tmp_path / "a.png"))
    path.unlink()
    rig.after(0)
    assert rig.gone == [] and rig.ready == []  # a move may show up as a deletion first
    rig.after(2 * 2.0 + 3.1)
    assert rig.gone == [path] and rig.ready == []
    rig.feed("gone", path=tmp_path / "other.png")
    rig.after(2 * 2.0 + 3.1)
    assert rig.gone[-1] == tmp_path / "other.png"


def test_walk_skips_hidden_folders_and_other_files(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / ".trash").mkdir()
    for p in ("a.png", "sub/b.pdf", ".trash/c.png", "sub/notes.md", "sub/d.part"):
        (tmp_path / p).write_bytes(b"x")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in walk([tmp_path])) == [
        "a.png", "sub/b.pdf"]


@pytest.mark.parametrize("observer", ["native", "polling"])
def test_real_events_in_a_real_folder(tmp_path: Path, observer: str) -> None:
    ready: queue.Queue[Path] = queue.Queue()
    gone: queue.Queue[Path] = queue.Queue()
    existing = tmp_path / "before.png"
    text_page(["x"], width=100).save(existing)
    watcher = Watcher(Settler([tmp_path], 0.3, ready.put, gone.put), observer=observer)
    watcher.start()
    try:
        assert ready.get(timeout=10) == existing  # the startup scan
        sub = tmp_path / "deep" / "er"
        sub.mkdir(parents=True)
        new = sub / "new.jpg"
        part = tmp_path / "copy.pdf.part"
        text_page(["y"], width=100).save(part, "PDF")
        assert ready.empty()
        part.rename(tmp_path / "copy.pdf")  # the usual download pattern
        text_page(["z"], width=100).save(new, "JPEG")
        got = {ready.get(timeout=15), ready.get(timeout=15)}
        assert got == {new, tmp_path / "copy.pdf"}
        (tmp_path / "copy.md").write_text("a sidecar is never read back")
        new.unlink()
        assert gone.get(timeout=15) == new
        assert ready.empty()
    finally:
        watcher.stop()


def test_arriving_is_told_of_files_written_or_moved_in_not_of_what_a_scan_finds(
        tmp_path: Path) -> None:
    ready: queue.Queue[Path] = queue.Queue()
    arriving: queue.Queue[Path] = queue.Queue()
    existing = tmp_path / "before.png"
    text_page(["x"], width=100).save(existing)
    watcher = Watcher(Settler([tmp_path], 0.5, ready.put, lambda p: None,
                              arriving=arriving.put))
    watcher.start()
    try:
        assert ready.get(timeout=10) == existing  # the startup scan: nothing arriving
        assert arriving.empty()
        staged = tmp_path.parent / f"{tmp_path.name}-staged.png"
        text_page(["y"], width=100).save(staged)
        staged.rename(tmp_path / "moved-in.png")
        assert arriving.get(timeout=10) == tmp_path / "moved-in.png"
        assert ready.empty()  # told while it still settles
        assert ready.get(timeout=10) == tmp_path / "moved-in.png"
        (tmp_path / "moved-in.png").rename(tmp_path / "renamed.png")  # there already
        text_page(["z"], width=100).save(tmp_path / "written.png")
        assert arriving.get(timeout=10) == tmp_path / "written.png"
        assert {ready.get(timeout=10), ready.get(timeout=10)} == {
            tmp_path / "renamed.png", tmp_path / "written.png"}
        assert arriving.empty()  # once per file, and not for the rename
    finally:
        watcher.stop()
        staged.unlink(missing_ok=True)


def test_rescan_finds_files_without_events(tmp_path: Path) -> None:
    ready: queue.Queue[Path] = queue.Queue()
    # No observer at all: as if every event was lost. Only the rescan can find the file.
    s = Settler([tmp_path], 0.2, ready.put, lambda p: None)
    s.start()
    try:
        path = tmp_path / "missed.png"
        text_page(["x"], width=100).save(path)
        s.request_rescan()
        assert ready.get(timeout=15) == path
    finally:
        s.close(timeout=10)


def test_periodic_rescan(tmp_path: Path) -> None:
    ready: queue.Queue[Path] = queue.Queue()
    s = Settler([tmp_path], 0.2, ready.put, lambda p: None, rescan_seconds=0.5)
    s.start()
    try:
        path = tmp_path / "later.png"
        text_page(["x"], width=100).save(path)
        assert ready.get(timeout=15) == path
    finally:
        s.close(timeout=10)


@pytest.mark.skipif(shutil.which("findmnt") is None, reason="needs findmnt (util-linux)")
def test_fs_type_agrees_with_findmnt(tmp_path: Path) -> None:
    """The file system of a folder, from psutil's mount table, as util-linux says it."""
    from ocrwatch.intake.watch import fs_type

    for folder in (tmp_path, Path("/proc"), Path("/dev/shm"), Path("/")):
        if not folder.exists():
            continue
        said = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "--target", str(folder)],
                              capture_output=True, text=True, timeout=30).stdout.split()
        # Mounts stacked on one place are listed in order: the last one is what is seen.
        assert fs_type(folder) == (said[-1] if said else None), folder
