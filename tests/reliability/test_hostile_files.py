"""Hostile and broken files: each ends ``failed`` with a plain reason, and the next is read.

Every case runs a real daemon (watcher, settler, preparer, recognizer threads) in this
process with the fake engine; the file arrives in the inbox the way a user would put it
there, and a good file dropped after it must still be read.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pypdf
import pytest

from ocrwatch import pipeline
from ocrwatch.pages import decode as pages_mod

from .conftest import RecordingEngine, StartDaemon
from .helpers import (
    Home,
    check_fake_sidecars,
    drop,
    ended,
    huge_png,
    image_bytes,
    jobs,
    pdf_bytes,
    sidecars,
    wait_for,
    write,
)


def _pdf(pages: int = 1, password: str | None = None) -> bytes:
    writer = pypdf.PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(72, 72)
    if password:
        writer.encrypt(password)
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue()


def _half(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _symlink_loop(inbox: Path) -> Path:
    a, b = inbox / "loop-a.png", inbox / "loop-b.png"
    os.symlink(b, a)
    os.symlink(a, b)
    return a


def _symlink_outside(inbox: Path) -> Path:
    outside = write(inbox.parent / "elsewhere" / "private.png", image_bytes("private"))
    link = inbox / "link.png"
    os.symlink(outside, link)
    return link


# name, how to make it, the reason it must fail with (a regex, case-insensitive)
CASES: list[tuple[str, Callable[[Path], Path], str]] = [
    ("zero-bytes", lambda d: write(d / "empty.png", b""), r"empty \(0 bytes\)"),
    ("truncated-jpeg", lambda d: write(d / "cut.jpg", _half(image_bytes("cut", "JPEG"))),
     r"damaged or incomplete"),
    ("truncated-png", lambda d: write(d / "cut.png", _half(image_bytes("cut", "PNG"))),
     r"damaged or incomplete"),
    ("truncated-tiff", lambda d: write(d / "cut.tif", _half(image_bytes("cut", "TIFF"))),
     r"damaged or incomplete"),
    ("text-named-jpg", lambda d: write(d / "notes.jpg", b"Dear diary,\nnothing here.\n" * 20),
     r"not an image or PDF"),
    ("corrupt-pdf", lambda d: write(d / "broken.pdf", b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog"
                                    b" /Pages 2 0 R >>\nendobj\n\x00\x01garbage\n%%EOF\n"),
     r"PDF is damaged"),
    ("password-pdf", lambda d: write(d / "secret.pdf", _pdf(1, password="hunter2")),
     r"password-protected"),
    ("pdf-no-pages", lambda d: write(d / "nothing.pdf", _pdf(0)), r"has no pages"),
    ("pdf-5000-pages", lambda d: write(d / "tome.pdf", _pdf(5000)),
     r"5000 pages, over the limit of 2000"),
    ("png-30000x30000", lambda d: write(d / "huge.png", huge_png(30000, 30000)),
     r"30000x30000 pixels .* over the limit"),
    ("symlink-loop", _symlink_loop, r"loops or points to nothing"),
    ("symlink-outside", _symlink_outside, r"outside the watched folders: not followed"),
]


def _plain(reason: str) -> None:
    """A reason for people: no traceback, no bare exception repr."""
    assert "Traceback" not in reason and "Errno" not in reason, reason
    assert not re.search(r"\b[A-Z]\w+(Error|Exception)\(", reason), reason


def _next_file_is_read(home: Home, engine: RecordingEngine) -> None:
    good = drop(home.inbox / "next.png", image_bytes("the next file"))
    wait_for(lambda: ended(home.database, good), 30, "the next file to be read")
    assert ended(home.database, good, "done"), jobs(home.database)[str(good)]["reason"]
    check_fake_sidecars(good, 1)


@pytest.mark.parametrize(("make", "reason"), [(c[1], c[2]) for c in CASES],
                         ids=[c[0] for c in CASES])
def test_hostile_file_fails_plainly(home: Home, run_daemon: StartDaemon,
                                    make: Callable[[Path], Path], reason: str) -> None:
    _daemon, engine = run_daemon()
    bad = make(home.inbox)
    row = wait_for(lambda: ended(home.database, bad), 30, f"{bad.name} to end")
    assert row["state"] == "failed", f"{bad.name} ended {row['state']}"
    assert re.search(reason, row["reason"], re.I), row["reason"]
    _plain(row["reason"])
    assert engine.reads_of(bad.name) == 0  # refused before the engine
    assert not any(p.exists() for p in sidecars(bad))
    _next_file_is_read(home, engine)
    assert all(r["state"] != "running" for r in jobs(home.database).values())


def test_symlink_outside_is_read_when_configured(home: Home, run_daemon: StartDaemon) -> None:
    _daemon, _engine = run_daemon(follow_symlinks=True)
    link = _symlink_outside(home.inbox)
    row = wait_for(lambda: ended(home.database, link), 30, "the link to be read")
    assert row["state"] == "done", row["reason"]
    check_fake_sidecars(link, 1)


@pytest.fixture
def hooked_pages(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Callable[[Path], None]]]:
    """Run a hook on a file right before / after the daemon reads its first page."""
    hooks: dict[str, Callable[[Path], None]] = {}
    real = pages_mod.iter_pages

    def wrapped(path: Path, *args: object, **kwargs: object) -> Iterator[object]:
        if "before" in hooks and path.name.startswith("victim"):
            hooks.pop("before")(path)
        for n, page in enumerate(real(path, *args, **kwargs)):  # type: ignore[arg-type]
            yield page
            if n == 0 and "after_first" in hooks and path.name.startswith("victim"):
                hooks.pop("after_first")(path)

    monkeypatch.setattr(pipeline, "iter_pages", wrapped)
    yield hooks


def test_file_deleted_between_event_and_read(home: Home, run_daemon: StartDaemon,
                                             hooked_pages: dict[str, Callable[[Path], None]],
                                             ) -> None:
    hooked_pages["before"] = lambda p: p.unlink()
    _daemon, engine = run_daemon()
    victim = drop(home.inbox / "victim.png", image_bytes("soon gone"))
    # Deleted files are forgotten (the watcher drops them) or fail saying why.
    wait_for(lambda: "before" not in hooked_pages, 30, "the daemon to reach the file")
    wait_for(lambda: (row := jobs(home.database).get(str(victim))) is None
             or row["state"] == "failed", 30, "the deleted file to be dropped")
    row = jobs(home.database).get(str(victim))
    if row is not None:
        assert re.search("deleted", row["reason"]), row["reason"]
    assert not any(p.exists() for p in sidecars(victim))
    _next_file_is_read(home, engine)


def test_file_replaced_while_being_read(home: Home, run_daemon: StartDaemon,
                                        hooked_pages: dict[str, Callable[[Path], None]],
                                        ) -> None:
    """The reader notices and reads the new content; the old one is never published."""
    new = pdf_bytes(["new one", "new two", "new three"])

    def replace(path: Path) -> None:
        drop(path, new)

    hooked_pages["after_first"] = replace
    daemon_mod_backoff = pytest.MonkeyPatch()
    daemon_mod_backoff.setattr("ocrwatch.store.jobs.BACKOFF_BASE", 0.2)
    try:
        _daemon, engine = run_daemon()
        victim = drop(home.inbox / "victim.pdf", pdf_bytes(["old one", "old two"]))
        row = wait_for(lambda: ended(home.database, victim), 30, "the replaced file to end")
    finally:
        daemon_mod_backoff.undo()
    assert row["state"] == "done", row["reason"]
    assert row["pages"] == 3
    import hashlib

    assert row["sha256"] == hashlib.sha256(new).hexdigest()
    check_fake_sidecars(victim, 3)
    _next_file_is_read(home, engine)


def test_odd_names_are_read(home: Home, run_daemon: StartDaemon) -> None:
    """Names that are not UTF-8 and names at the file system's length limit."""
    _daemon, _engine = run_daemon()
    raw = os.fsencode(home.inbox) + b"/scan-\xff\xfe-latin1-\xe9t\xe9.png"
    odd = Path(os.fsdecode(raw))
    long = home.inbox / ("l" * (255 - len(".jpeg")) + ".jpeg")
    spaced = home.inbox / "  spaced  name\twith tab.png"
    for path in (odd, long, spaced):
        drop(path, image_bytes(path.name[:20], "JPEG" if path.suffix == ".jpeg" else "PNG"))
    for path in (odd, long, spaced):
        row = wait_for(partial(ended, home.database, path), 30, f"{path.name[:30]} to end")
        assert row["state"] == "done", row["reason"]
        check_fake_sidecars(path, 1)
        assert "\ufffd" in row["display"] or path != odd
