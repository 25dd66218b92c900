"""No user file is overwritten or lost, whatever the folder does: a sidecar the user
corrected, a removable inbox that comes back empty, two originals with one stem, links in
the inbox. Real ``ocrwatch run`` and ``ocrwatch add`` processes, real files."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from .helpers import (
    DaemonProcess,
    Home,
    drop,
    ended,
    image_bytes,
    job,
    ocrwatch_cli,
    sidecars,
    wait_for,
)

Start = Callable[..., DaemonProcess]
CORRECTED = "Dear Ms Lund,\n\nthe harbour office opens at nine (corrected by hand).\n"


def _read(home: Home, path: Path, timeout: float = 60) -> None:
    wait_for(lambda: ended(home.database, path, "done") is not None
             and all(p.exists() for p in sidecars(path)), timeout, f"{path.name} read")


def _edit(path: Path, how: str) -> None:
    """The user's correction, saved as editors save: in place (the inode and its
    extended attributes stay) or atomically (a new file renamed over the old)."""
    if how == "in place":
        with path.open("r+", encoding="utf-8") as fh:
            fh.write(CORRECTED)
            fh.truncate()
    else:
        tmp = path.with_name(f".{path.name}.swp")
        tmp.write_text(CORRECTED, encoding="utf-8")
        os.replace(tmp, path)


# -- item: a user's corrections to a sidecar ------------------------------------------------
@pytest.mark.parametrize("how", ["in place", "atomically"])
@pytest.mark.parametrize("then", ["reread --all", "a new scan saved over it"])
def test_a_corrected_sidecar_is_never_overwritten(home: Home, daemon_process: Start,
                                                  how: str, then: str) -> None:
    """The user corrects ``letter.md``, then the file is read again: the correction stays
    as the user saved it, the new reading goes to ``letter.png.md`` beside it and the log
    says where (before: overwritten without a word)."""
    daemon = daemon_process().start()
    daemon.wait_ready()
    letter = drop(home.inbox / "letter.png", image_bytes("harbour office"))
    _read(home, letter)
    md, txt = sidecars(letter)
    first_id = job(home.database, letter)["id"]
    _edit(md, how)
    if then == "reread --all":
        done = ocrwatch_cli(home, "reread", "--all", "--database", str(home.database))
        assert done.returncode == 0, done.stdout + done.stderr
    else:
        drop(letter, image_bytes("harbour office, second scan"))
    beside = home.inbox / "letter.png.md"
    wait_for(lambda: beside.exists() and ended(home.database, letter, "done") is not None
             and os.fsdecode(job(home.database, letter)["md_path"]) == str(beside),
             60, "the new reading beside the corrected sidecar")
    assert md.read_text(encoding="utf-8") == CORRECTED
    assert "fake text of letter.png" in beside.read_text(encoding="utf-8")
    assert job(home.database, letter)["id"] == first_id
    log = daemon.output()
    assert f"{md} was changed since ocrwatch wrote it" in log, log[-3000:]
    assert str(beside) in log
    assert "Traceback" not in log
    # Read once more: the new reading stays where it went, the correction is untouched.
    third = image_bytes("harbour office, third scan")
    drop(letter, third)
    wait_for(lambda: (row := ended(home.database, letter, "done")) is not None
             and row["sha256"] == hashlib.sha256(third).hexdigest(), 60, "the third scan read")
    assert daemon.stop() == 0
    assert md.read_text(encoding="utf-8") == CORRECTED
    assert txt.exists()  # ocrwatch's own, unchanged: the new .txt went beside it with the .md
    assert not list(home.inbox.glob("letter.png.*.md")), sorted(home.inbox.iterdir())


def test_a_corrected_sidecar_survives_a_language_change_and_reread(
        home: Home, daemon_process: Start) -> None:
    """A language change, the daemon started again and ``ocrwatch reread`` (no daemon
    running): the corrected ``letter.md`` stays, the new reading goes beside it."""
    daemon = daemon_process().start()
    daemon.wait_ready()
    letter = drop(home.inbox / "letter.png", image_bytes("harbour office"))
    _read(home, letter)
    md, _txt = sidecars(letter)
    _edit(md, "in place")
    assert daemon.stop() == 0
    done = ocrwatch_cli(home, "reread", "--all", "--languages", "eng+deu", "--engine", "fake",
                        "--inbox", str(home.inbox), "--database", str(home.database),
                        timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert md.read_text(encoding="utf-8") == CORRECTED
    beside = home.inbox / "letter.png.md"
    assert "fake text of letter.png" in beside.read_text(encoding="utf-8")
    assert str(beside) in done.stdout + done.stderr
