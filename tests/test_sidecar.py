from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from ocrwatch.config import Config
from ocrwatch.core.domain import PageText
from ocrwatch.core.errors import TransientError
from ocrwatch.results import sidecar
from ocrwatch.results.lifecycle import output_folder
from ocrwatch.results.sidecar import choose_stem, render_markdown, render_text, write_atomic


def test_single_page_markdown_and_text() -> None:
    pages = [PageText("# Title\n\nBody", "Title\n\nBody")]
    assert render_markdown(pages) == "# Title\n\nBody\n"
    assert render_text(pages) == "Title\n\nBody\n"


def test_multi_page_files_mark_page_breaks() -> None:
    pages = [PageText("one", "one"), PageText("two", "two"), PageText("three", "three")]
    md = render_markdown(pages)
    assert md.index("<!-- page 1 -->") < md.index("one") < md.index("<!-- page 2 -->")
    assert md.count("\n---\n") == 2
    assert render_text(pages).split("\f") == ["one\n", "two\n", "three\n"]


def test_atomic_write_replaces_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "a.md"
    target.write_text("old")
    write_atomic(target, "new content")
    assert target.read_text() == "new content"
    assert [p.name for p in tmp_path.iterdir()] == ["a.md"]


def test_full_disk_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "a.md"
    target.write_text("old")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sidecar.os, "fsync", full)
    with pytest.raises(TransientError, match="disk is full"):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.md"]


def test_same_stem_originals_get_separate_sidecars(tmp_path: Path) -> None:
    jpg, pdf = tmp_path / "scan.jpg", tmp_path / "scan.pdf"
    first = choose_stem(jpg, tmp_path, others=set(), own=set())
    assert first == tmp_path / "scan"
    md, _ = sidecar.write_sidecars(first, [PageText("jpg", "jpg")])
    second = choose_stem(pdf, tmp_path, others={md, md.with_suffix(".txt")}, own=set())
    assert second == tmp_path / "scan.pdf"
    # The owner keeps its name on a second run.
    assert choose_stem(jpg, tmp_path, others=set(), own={md, md.with_suffix(".txt")}) == first


def test_users_own_file_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("my notes")
    stem = choose_stem(tmp_path / "notes.png", tmp_path, others=set(), own=set())
    assert stem == tmp_path / "notes.png"
    (tmp_path / "notes.png.md").write_text("also mine")
    assert choose_stem(tmp_path / "notes.png", tmp_path, set(), set()).name == "notes.png.2"


def test_output_dir_mirrors_the_tree(tmp_path: Path) -> None:
    inbox = tmp_path / "In"
    out = tmp_path / "Out"
    src = inbox / "2024" / "bills" / "a.pdf"
    beside = Config(inbox=[inbox], database=tmp_path / "i.sqlite3")
    assert output_folder(beside, src) == src.parent
    under = Config(inbox=[inbox], database=tmp_path / "i.sqlite3", output_dir=out)
    assert output_folder(under, src) == out / "In" / "2024" / "bills"


def test_sidecar_mode_follows_the_original(tmp_path: Path) -> None:
    """A readable scan gets readable sidecars; a private one (or unknown) private ones."""
    umask = os.umask(0o022)
    try:
        md, txt = sidecar.write_sidecars(tmp_path / "x", [PageText("a", "a")],
                                         original_mode=0o100644)
        assert os.stat(md).st_mode & 0o777 == 0o644 and os.stat(txt).st_mode & 0o777 == 0o644
        md, _ = sidecar.write_sidecars(tmp_path / "y", [PageText("a", "a")],
                                       original_mode=0o100600)
        assert os.stat(md).st_mode & 0o777 == 0o600
        md, _ = sidecar.write_sidecars(tmp_path / "z", [PageText("a", "a")])
        assert os.stat(md).st_mode & 0o777 == 0o600
        os.umask(0o077)
        md, _ = sidecar.write_sidecars(tmp_path / "w", [PageText("a", "a")],
                                       original_mode=0o100755)
        assert os.stat(md).st_mode & 0o777 == 0o600
    finally:
        os.umask(umask)
