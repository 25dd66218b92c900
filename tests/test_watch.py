from __future__ import annotations

import os
import queue
from pathlib import Path

import pytest
from helpers import text_page

from ocrwatch.inbox_files import is_ignored_name, looks_complete, walk, wanted
from ocrwatch.settle import Settler
from ocrwatch.watch import Watcher


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


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


def settler(tmp_path: Path, clock: Clock, settle: float = 2.0) -> tuple[Settler, list[Path],
                                                                         list[Path]]:
    ready: list[Path] = []
    gone: list[Path] = []
    return Settler([tmp_path], settle, ready.append, gone.append, clock=clock), ready, gone


def test_file_is_ready_only_after_settle_time(tmp_path: Path) -> None:
    clock = Clock()
    s, ready, _ = settler(tmp_path, clock)
    path = tmp_path / "a.png"
    text_page(["x"], width=100).save(path)
    s.feed("changed", path)
    s.check()
    clock.now += 1.9
    s.check()
    assert ready == []
    clock.now += 0.2
    s.check()
    assert ready == [path]
    assert s.pending == {}


def test_growing_file_restarts_the_wait(tmp_path: Path) -> None:
    clock = Clock()
    s, ready, _ = settler(tmp_path, clock)
    path = tmp_path / "a.tif"
    path.write_bytes(b"II*\x00" + b"\x00" * 100)
    s.feed("changed", path)
    for _ in range(5):
        clock.now += 1.5
        with path.open("ab") as fh:
            fh.write(b"\x00" * 100)
        os.utime(path, ns=(int(clock.now * 1e9), int(clock.now * 1e9)))
        s.check()
    assert ready == []
    clock.now += 2.1
    s.check()
    assert ready == [path]


def test_close_after_write_shortens_but_does_not_replace_the_check(tmp_path: Path) -> None:
    clock = Clock()
    s, ready, _ = settler(tmp_path, clock)
    path = tmp_path / "a.png"
    text_page(["x"], width=100).save(path)
    s.feed("changed", path)
    s.feed("closed", path)
    s.check()
    assert ready == []  # still must be seen unchanged for a while
    clock.now += 0.6
    s.check()
    assert ready == [path]


def test_incomplete_looking_file_waits_longer(tmp_path: Path) -> None:
    clock = Clock()
    s, ready, _ = settler(tmp_path, clock)
    path = tmp_path / "half.pdf"
    path.write_bytes(b"%PDF-1.4\n1 0 obj\n")
    s.feed("changed", path)
    s.check()
    clock.now += 5
    s.check()
    assert ready == []  # a scanner pausing mid-file
    with path.open("ab") as fh:
        fh.write(b"%%EOF\n")
    s.check()
    clock.now += 2.1
    s.check()
    assert ready == [path]


def test_deleted_file_is_reported_gone(tmp_path: Path) -> None:
    clock = Clock()
    s, ready, gone = settler(tmp_path, clock)
    path = tmp_path / "a.png"
    text_page(["x"], width=100).save(path)
    s.feed("changed", path)
    path.unlink()
    s.check()
    assert gone == [] and ready == []  # a move may show up as a deletion first
    clock.now += 2 * 2.0 + 3.1
    s.check()
    assert gone == [path] and ready == []
    s.feed("gone", tmp_path / "other.png")
    clock.now += 2 * 2.0 + 3.1
    s.check()
    assert gone[-1] == tmp_path / "other.png"


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
    watcher = Watcher([tmp_path], 0.3, ready.put, gone.put, observer=observer,
                      rescan_seconds=None)
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


def test_rescan_finds_files_without_events(tmp_path: Path) -> None:
    ready: queue.Queue[Path] = queue.Queue()
    # No observer at all: as if every event was lost. Only the rescan can find the file.
    s = Settler([tmp_path], 0.2, ready.put, lambda p: None, scan=lambda: walk([tmp_path]))
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
    s = Settler([tmp_path], 0.2, ready.put, lambda p: None, scan=lambda: walk([tmp_path]),
                rescan_seconds=0.5)
    s.start()
    try:
        path = tmp_path / "later.png"
        text_page(["x"], width=100).save(path)
        assert ready.get(timeout=15) == path
    finally:
        s.close(timeout=10)
