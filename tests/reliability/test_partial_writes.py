"""Files still being written: each is read once, and only when it is complete.

The daemon runs in this process with the default settle time (2 s); a writer thread
plays a slow copy, a browser-style ``.part`` download, and a scanner that pauses between
pages longer than the settle time.
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from ocrwatch.daemon import Daemon
from ocrwatch.store.jobfiles import Seen

from .conftest import RecordingEngine, StartDaemon
from .helpers import Home, check_fake_sidecars, ended, image_bytes, pdf_bytes, wait_for

SETTLE = 2.0  # the shipped default


@pytest.fixture
def considered(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
    """Every file the watcher handed to the daemon as finished, with its size then."""
    seen: list[tuple[str, int]] = []
    real = Daemon.consider

    def spy(self: Daemon, path: Path, asked: str | None = None, *,
            wake: bool = True) -> Seen | None:
        try:
            seen.append((path.name, path.stat().st_size))
        except OSError:
            seen.append((path.name, -1))
        return real(self, path, asked, wake=wake)

    monkeypatch.setattr(Daemon, "consider", spy)
    yield seen


class Writer(threading.Thread):
    """Writes ``data`` to ``path`` in chunks over ``seconds``, optionally pausing once."""

    def __init__(self, path: Path, data: bytes, seconds: float, chunk: int = 64 * 1024,
                 pause_at: int | None = None, pause: float = 0.0,
                 then_rename_to: Path | None = None) -> None:
        super().__init__(name=f"writer-{path.name}")
        self.path, self.data, self.seconds, self.chunk = path, data, seconds, chunk
        self.pause_at, self.pause = pause_at, pause
        self.then_rename_to = then_rename_to
        self.finished_at: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        pieces = [self.data[i:i + self.chunk] for i in range(0, len(self.data), self.chunk)]
        gap = self.seconds / max(1, len(pieces))
        written = 0
        with self.path.open("wb") as fh:
            for piece in pieces:
                if self.pause_at is not None and written <= self.pause_at < written + len(piece):
                    cut = self.pause_at - written
                    fh.write(piece[:cut])
                    fh.flush()
                    if self.stop.wait(self.pause):  # the scanner feeds the next page
                        return
                    fh.write(piece[cut:])
                else:
                    fh.write(piece)
                fh.flush()
                written += len(piece)
                if self.stop.wait(gap):
                    return
        if self.then_rename_to is not None:
            os.replace(self.path, self.then_rename_to)
        self.finished_at = time.monotonic()


@pytest.fixture
def writers() -> Iterator[list[Writer]]:
    made: list[Writer] = []
    yield made
    for w in made:
        w.stop.set()
        w.join(timeout=30)


def _tiff_20mb() -> bytes:
    # Uncompressed RGB: 2600 x 2600 x 3 bytes is about 20 MB, and no end marker to go by.
    image = Image.new("RGB", (2600, 2600), "white")
    image.paste(Image.open(io.BytesIO(image_bytes("a big slow scan", "PNG"))), (100, 100))
    buf = io.BytesIO()
    image.save(buf, format="TIFF")
    return buf.getvalue()


def _read_once_when_complete(home: Home, engine: RecordingEngine, path: Path, data: bytes,
                             considered: list[tuple[str, int]], pages: int = 1) -> None:
    row = wait_for(lambda: ended(home.database, path), 60, f"{path.name} to be read")
    assert row["state"] == "done", row["reason"]
    assert row["sha256"] == hashlib.sha256(data).hexdigest()
    assert row["attempts"] == 0
    mine = [size for name, size in considered if name == path.name]
    assert mine == [len(data)], f"{path.name} handed over at sizes {mine}, final {len(data)}"
    assert engine.reads_of(path.name) == 1
    check_fake_sidecars(path, pages)


def test_slow_writer_20mb_over_10s(home: Home, run_daemon: StartDaemon,
                                   considered: list[tuple[str, int]],
                                   writers: list[Writer]) -> None:
    data = _tiff_20mb()
    assert len(data) > 20_000_000
    _daemon, engine = run_daemon(settle_seconds=SETTLE)
    target = home.inbox / "big-scan.tif"
    writer = Writer(target, data, seconds=10.0)
    writers.append(writer)
    writer.start()
    writer.join(timeout=60)
    assert writer.finished_at is not None
    _read_once_when_complete(home, engine, target, data, considered)


def test_part_file_renamed_when_done(home: Home, run_daemon: StartDaemon,
                                     considered: list[tuple[str, int]],
                                     writers: list[Writer]) -> None:
    data = pdf_bytes(["downloaded page one", "downloaded page two"])
    _daemon, engine = run_daemon(settle_seconds=SETTLE)
    final = home.inbox / "statement.pdf"
    writer = Writer(home.inbox / "statement.pdf.part", data, seconds=3.0, chunk=512,
                    then_rename_to=final)
    writers.append(writer)
    writer.start()
    writer.join(timeout=30)
    _read_once_when_complete(home, engine, final, data, considered, pages=2)
    assert not any(name.endswith(".part") for name, _ in considered)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "PDF", "TIFF", "BMP", "WEBP"])
def test_scanner_pauses_longer_than_settle_then_appends(
        home: Home, run_daemon: StartDaemon, considered: list[tuple[str, int]],
        writers: list[Writer], fmt: str) -> None:
    if fmt == "PDF":
        data = pdf_bytes(["scanned page one", "scanned page two", "scanned page three"])
        pages = 3
    else:
        data = image_bytes("a scanned receipt", fmt, (1200, 1600))
        pages = 1
    suffix = {"JPEG": ".jpg", "PNG": ".png", "PDF": ".pdf", "TIFF": ".tif", "BMP": ".bmp",
              "WEBP": ".webp"}[fmt]
    _daemon, engine = run_daemon(settle_seconds=SETTLE)
    target = home.inbox / f"scanner{suffix}"
    writer = Writer(target, data, seconds=0.5, chunk=4096, pause_at=len(data) * 2 // 3,
                    pause=3.0)
    writers.append(writer)
    writer.start()
    writer.join(timeout=30)
    _read_once_when_complete(home, engine, target, data, considered, pages=pages)


def _photo_with_exif_thumbnail() -> bytes:
    """A phone-like JPEG: an EXIF block holding a whole thumbnail JPEG (its own FF D9)."""
    thumb = io.BytesIO()
    Image.new("RGB", (64, 48), "white").save(thumb, "JPEG")
    exif = Image.Exif()
    exif[0x010F] = "Phone"
    photo = io.BytesIO()
    image = Image.open(io.BytesIO(image_bytes("motion photo page", "JPEG"))).convert("RGB")
    image.save(photo, "JPEG", exif=exif.tobytes() + thumb.getvalue())
    return photo.getvalue()


def test_a_jpeg_with_bytes_after_its_end_marker_is_read_without_the_long_wait(
        home: Home, run_daemon: StartDaemon, considered: list[tuple[str, int]]) -> None:
    """Phones append trailers and motion-photo videos after a JPEG's end marker: such a
    file was taken for one still being written and waited 15 settle periods (about 14 s
    before it was queued). Now the end marker is found by walking the JPEG's segments,
    and it is read once still for the settle time."""
    from ocrwatch.intake.inbox_files import looks_complete

    photo = _photo_with_exif_thumbnail()
    video = b"\x00\x00\x00\x18ftypmp42" + os.urandom(200_000)  # the motion photo's video
    whole = home.root / "whole.jpg"
    whole.write_bytes(photo + video)
    assert looks_complete(whole)
    # Half written, the thumbnail's end marker inside the EXIF block is not the image's.
    half = home.root / "half.jpg"
    for cut in (len(photo) // 2, len(photo) - 3):
        half.write_bytes(photo[:cut])
        assert not looks_complete(half), cut
    settle = 1.0
    _daemon, engine = run_daemon(settle_seconds=settle)
    target = home.inbox / "PXL_motion.jpg"
    tmp = home.inbox / ".writing-motion"
    tmp.write_bytes(photo + video)
    start = time.monotonic()
    os.replace(tmp, target)
    wait_for(lambda: considered, 30, "the photo handed over")
    waited = time.monotonic() - start
    assert waited < settle * 5, f"waited {waited:.1f} s (15 settle periods: {settle * 15} s)"
    wait_for(lambda: ended(home.database, target, "done"), 30, "the photo read")
    assert engine.reads_of(target.name) == 1
