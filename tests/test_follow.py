"""The index follows the files: real moves, renames and deletions in a real inbox, seen by
inotify and by polling, with sidecars beside the originals or in output_dir."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import save_pdf, text_page, wait_for

from ocrwatch.config import Config
from ocrwatch.daemon import Daemon
from ocrwatch.store.index import Filters, search
from ocrwatch.testing.fake import FakeEngine

OBSERVERS = ["native", "polling"]


@pytest.fixture(params=OBSERVERS)
def observer(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["beside", "output_dir"])
def config(tmp_path: Path, observer: str, request: pytest.FixtureRequest) -> Config:
    return Config(inbox=[tmp_path / "inbox"], database=tmp_path / "index.sqlite3",
                  settle_seconds=0.3, engine="fake", observer=observer,
                  output_dir=tmp_path / "out" if request.param == "output_dir" else None,
                  cache_dir=tmp_path / "cache")


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
def daemon(config: Config, engine: FakeEngine) -> Iterator[Daemon]:
    with Daemon(config, engine=engine) as d:
        yield d


def sidecar_dir(config: Config, original: Path) -> Path:
    if config.output_dir is None:
        return original.parent
    inbox = config.inbox[0]
    return config.output_dir / inbox.name / original.parent.relative_to(inbox)


def rows(d: Daemon) -> dict[str, tuple[str, str | None]]:
    """Every job: path -> (state, md path)."""
    return {r["display"]: (r["state"], os.fsdecode(r["md_path"]) if r["md_path"] else None)
            for r in d.db.query("SELECT display, state, md_path FROM jobs")}


def pages_read(engine: FakeEngine) -> int:
    return sum(len(b) for b in engine.batches)


def done(d: Daemon, *paths: Path) -> bool:
    r = rows(d)
    return all(r.get(str(p), ("",))[0] == "done" for p in paths)


def settled(d: Daemon, expected: dict[Path, Path]) -> bool:
    """Rows are exactly ``expected`` (original -> its .md), all done, sidecars there."""
    r = rows(d)
    want = {str(k): ("done", str(v)) for k, v in expected.items()}
    return r == want and all(v.exists() and v.with_suffix(".txt").exists()
                             for v in expected.values())


def leftovers(config: Config) -> list[str]:
    """Sidecar files on disk (beside or under output_dir), relative names."""
    roots = [config.inbox[0]] + ([config.output_dir] if config.output_dir else [])
    out = []
    for root in roots:
        for p in root.rglob("*"):
            if p.suffix in (".md", ".txt"):
                out.append(str(p.relative_to(root.parent)))
    return sorted(out)


def test_file_move_rename_and_delete(daemon: Daemon, config: Config,
                                     engine: FakeEngine) -> None:
    inbox = config.inbox[0]
    a = inbox / "letter.png"
    text_page(["harbour office"]).save(a)
    pdf = save_pdf(inbox / "report.pdf", [["one"], ["two"]])
    wait_for(lambda: done(daemon, a, pdf), 30, "both read")
    read = pages_read(engine)
    thumbs = sorted(p.name for p in (config.cache_dir / "thumbnails").rglob("*.webp"))
    assert thumbs == ["1.webp", "1.webp", "2.webp"]

    # Into a subfolder: the row and the sidecars follow, nothing is read again.
    (inbox / "2024").mkdir()
    b = inbox / "2024" / "letter.png"
    os.rename(a, b)
    expected = {b: sidecar_dir(config, b) / "letter.md",
                pdf: sidecar_dir(config, pdf) / "report.md"}
    wait_for(lambda: settled(daemon, expected), 30, "the row and sidecars of the moved file")
    assert not (sidecar_dir(config, a) / "letter.md").exists()
    assert not (sidecar_dir(config, a) / "letter.txt").exists()

    # A rename in place: the sidecars take the new name.
    c = inbox / "2024" / "harbour letter.png"
    os.rename(b, c)
    expected = {c: sidecar_dir(config, c) / "harbour letter.md",
                pdf: sidecar_dir(config, pdf) / "report.md"}
    wait_for(lambda: settled(daemon, expected), 30, "the renamed file's row and sidecars")
    hits = search(daemon.db, "", filters=Filters(name="harbour"))
    assert [h.path for h in hits] == [str(c)]
    assert pages_read(engine) == read, "a moved file was read again"

    # Deleted: rows, sidecars and thumbnails go.
    c.unlink()
    pdf.unlink()
    wait_for(lambda: rows(daemon) == {}, 30, "rows of deleted files to go")
    wait_for(lambda: leftovers(config) == [], 30, "sidecars of deleted files to go")
    wait_for(lambda: not list((config.cache_dir / "thumbnails").rglob("*.webp")), 30,
             "thumbnails of deleted files to go")


def test_folder_rename_and_move_out(daemon: Daemon, config: Config, engine: FakeEngine,
                                    tmp_path: Path) -> None:
    inbox = config.inbox[0]
    folder = inbox / "tax"
    (folder / "deep").mkdir(parents=True)
    files = [folder / "a.png", folder / "deep" / "b.png", folder / "deep" / "c.png"]
    for i, f in enumerate(files):
        text_page([f"page {i}"]).save(f)
    wait_for(lambda: done(daemon, *files), 30, "three files read")
    read = pages_read(engine)

    renamed = inbox / "Taxes 2024"
    os.rename(folder, renamed)
    moved = [renamed / f.relative_to(folder) for f in files]
    expected = {m: sidecar_dir(config, m) / (m.stem + ".md") for m in moved}
    wait_for(lambda: settled(daemon, expected), 30, "rows and sidecars of the renamed folder")
    # No second set of sidecars, no orphans.
    assert len(leftovers(config)) == 6, leftovers(config)
    assert pages_read(engine) == read, "files of a renamed folder were read again"
    assert {h.path for h in search(daemon.db, "fake")} == {str(m) for m in moved}
    # The renamed folder is still watched, deep down: a file dropped there now is read
    # (the rescan is minutes away, so only the watch can find it).
    later = renamed / "deep" / "d.png"
    text_page(["page 3"]).save(later)
    wait_for(lambda: done(daemon, later), 30, "a file dropped into the renamed folder")
    moved.append(later)

    # Moved out of the inbox: it leaves the index; the user's files stay whole.
    outside = tmp_path / "elsewhere"
    shutil.move(str(renamed), str(outside))
    wait_for(lambda: rows(daemon) == {}, 30, "rows of the folder moved out")
    assert sorted(p.name for p in outside.rglob("*.png")) == ["a.png", "b.png", "c.png",
                                                              "d.png"]


def test_deleting_keeps_a_sidecar_the_user_edited(daemon: Daemon, config: Config) -> None:
    inbox = config.inbox[0]
    a = inbox / "note.png"
    text_page(["note"]).save(a)
    wait_for(lambda: done(daemon, a), 30, "note read")
    md = sidecar_dir(config, a) / "note.md"
    md.write_text(md.read_text() + "\nmy own remark\n")
    a.unlink()
    wait_for(lambda: rows(daemon) == {}, 30, "the row to go")
    wait_for(lambda: not md.with_suffix(".txt").exists(), 30, "the untouched .txt to go")
    assert "my own remark" in md.read_text()


def test_a_move_over_a_known_file_replaces_its_row(daemon: Daemon, config: Config) -> None:
    inbox = config.inbox[0]
    a, b = inbox / "a.png", inbox / "b.png"
    text_page(["first"]).save(a)
    text_page(["second", "longer"]).save(b)
    wait_for(lambda: done(daemon, a, b), 30, "both read")
    os.replace(a, b)
    expected = {b: sidecar_dir(config, b) / "b.md"}
    wait_for(lambda: settled(daemon, expected), 30, "one row left, for b.png")
    assert "a.png" in (sidecar_dir(config, b) / "b.txt").read_text()
    assert [Path(p).name for p in leftovers(config)] == ["b.md", "b.txt"]


@pytest.mark.parametrize("observer", ["native"])
@pytest.mark.parametrize("config", ["beside"], indirect=True)
def test_rescan_prunes_and_finds_moves_made_while_stopped(config: Config,
                                                          engine: FakeEngine) -> None:
    inbox = config.inbox[0]
    (inbox / "x").mkdir(parents=True)
    keep, gone, moved = inbox / "keep.png", inbox / "gone.png", inbox / "x" / "moved.png"
    for i, f in enumerate((keep, gone, moved)):
        text_page([f"file {i}"]).save(f)
    with Daemon(config, engine=engine) as d:
        wait_for(lambda: done(d, keep, gone, moved), 30, "three files read")
    read = pages_read(engine)
    # While no daemon runs: one file deleted, one moved (its sidecars left behind).
    gone.unlink()
    dest = inbox / "y" / "moved.png"
    dest.parent.mkdir()
    os.rename(moved, dest)
    with Daemon(config, engine=engine) as d:
        expected = {keep: inbox / "keep.md", dest: inbox / "y" / "moved.md"}
        wait_for(lambda: settled(d, expected), 30, "the pruned and followed index")
    assert pages_read(engine) == read, "a file moved while stopped was read again"
    assert not (inbox / "x" / "moved.md").exists()
    # The pruned file's sidecars held what ocrwatch wrote: they went with its row.
    assert not (inbox / "gone.md").exists()


@pytest.mark.parametrize("observer", ["native"])
@pytest.mark.parametrize("config", ["output_dir"], indirect=True)
def test_sidecars_filed_by_date_stay_in_their_month(config: Config, engine: FakeEngine) -> None:
    from dataclasses import replace

    config = replace(config, output_layout="date")
    inbox = config.inbox[0]
    (inbox / "a").mkdir(parents=True)
    (inbox / "b").mkdir()
    original = inbox / "a" / "bill.png"
    text_page(["bill"]).save(original)
    with Daemon(config, engine=engine) as d:
        wait_for(lambda: done(d, original), 30, "the bill read")
        md = Path(rows(d)[str(original)][1] or "")
        assert md.parent.parent.parent == config.output_dir
        moved = inbox / "b" / "electricity bill.png"
        os.rename(original, moved)
        expected = {moved: md.with_name("electricity bill.md")}
        wait_for(lambda: settled(d, expected), 30, "the sidecars renamed in their month")
