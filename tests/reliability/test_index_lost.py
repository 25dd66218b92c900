"""Results lost around the index: a copy of a deleted file, and the index itself deleted,
moved, replaced or damaged. Real ``ocrwatch run`` processes, real files, real SQLite."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from .helpers import (
    DaemonProcess,
    Home,
    check_fake_sidecars,
    drop,
    ended,
    image_bytes,
    job,
    sidecars,
    wait_for,
)

Start = Callable[..., DaemonProcess]


def _read(home: Home, path: Path, timeout: float = 60) -> None:
    wait_for(lambda: ended(home.database, path, "done") is not None
             and all(p.exists() for p in sidecars(path)), timeout, f"{path.name} read")


def _fake_name(path: Path) -> str:
    """Which file's reading the sidecars hold (the fake engine writes its name)."""
    text = sidecars(path)[1].read_text(encoding="utf-8")
    return text.split("fake text of ", 1)[1].split(" page ", 1)[0]


# -- a copy of a deleted file gets sidecars --------------------------------------------------
@pytest.mark.parametrize("how", ["file", "inbox", "while stopped"])
def test_a_copy_of_a_deleted_file_gets_its_own_sidecars(home: Home, daemon_process: Start,
                                                        how: str) -> None:
    """Delete a file with its sidecars (or the whole inbox), drop the same content under
    another name: it was "followed as a move" whose sidecars were gone, and the new file
    got none. Now it is a copy: sidecars made from the stored text, nothing read again."""
    data = image_bytes("harbour office")
    daemon = daemon_process().start()
    daemon.wait_ready()
    first = drop(home.inbox / "sub" / "letter.png", data)
    _read(home, first)
    if how == "while stopped":
        assert daemon.stop() == 0
    if how == "inbox":
        shutil.rmtree(home.inbox)
        home.inbox.mkdir()
    else:
        for path in (first, *sidecars(first)):
            path.unlink()
    copy = drop(home.inbox / "copy of letter.png", data)
    if how == "while stopped":
        daemon.start()
        daemon.wait_ready()
    _read(home, copy)
    check_fake_sidecars(copy, 1, names={"letter.png"})
    assert _fake_name(copy) == "letter.png", "the copy was read again"
    # The deleted file's row leaves the index, and takes nothing of the copy's with it.
    wait_for(lambda: job(home.database, first) is None, 30, "the deleted file pruned")
    assert all(p.exists() for p in sidecars(copy))
    assert "Traceback" not in daemon.output()
    assert daemon.stop() == 0
