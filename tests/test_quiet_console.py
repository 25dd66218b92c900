"""A quiet console: native libraries' messages and warnings ocrwatch handles itself go to
the log, not through `ocrwatch add`'s or `reread`'s progress bar."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import wait_for
from reliability.helpers import Home, image_bytes, ocrwatch_cli

LEPTONICA = "Error in boxClipToRectangle: box outside rectangle"


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Home]:
    h = Home.make(tmp_path)
    yield h
    h.cleanup()


def log_file(home: Home) -> Path:
    return home.state / "ocrwatch" / "log" / "ocrwatch.log"


@pytest.mark.parametrize("command", ["add", "reread"])
def test_native_messages_go_to_the_log_not_through_the_progress_bar(
        home: Home, command: str) -> None:
    scans = [home.inbox / f"s{n}.png" for n in range(3)]
    for n, scan in enumerate(scans):
        scan.write_bytes(image_bytes(f"scan {n}"))
    base = ["--engine", "fake", "--database", str(home.database)]
    if command == "reread":
        done = ocrwatch_cli(home, "add", *base, *map(str, scans))
        assert done.returncode == 0, done.stderr
        args = ["reread", "--all", *base]
    else:
        args = ["add", *base, *map(str, scans)]
    proc = subprocess.Popen([sys.executable, "-m", "ocrwatch", *args],
                            env=home.env(OCRWATCH_FAKE_DELAY="1.0"), cwd=home.root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Once it reads, write as Leptonica would: straight to its descriptor 2.
        wait_for(lambda: log_file(home).exists(), 60, "the log to be opened")
        assert proc.stderr is not None
        ours = os.readlink(f"/proc/self/fd/{proc.stderr.fileno()}")  # the pipe we read

        def redirected() -> bool:
            try:
                return os.readlink(f"/proc/{proc.pid}/fd/2") != ours
            except OSError:
                return False
        wait_for(redirected, 30, "descriptor 2 to be the log's own pipe")
        with open(f"/proc/{proc.pid}/fd/2", "w") as fd2:
            fd2.write(LEPTONICA + "\n")
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert LEPTONICA not in err, err
    assert f"ocrwatch.native: {LEPTONICA}" in log_file(home).read_text()


def png16_with_alpha(width: int = 64, height: int = 48) -> bytes:
    """A 16-bit RGBA PNG: img2pdf refuses it with three warning lines of its own."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    row = b"\0" + b"\xff\xff\xff\xff\xff\xff\xff\xff" * width
    ihdr = struct.pack(">IIBBBBB", width, height, 16, 6, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
            + chunk(b"IDAT", zlib.compress(row * height)) + chunk(b"IEND", b""))


def test_img2pdfs_alpha_warning_goes_to_the_log(home: Home) -> None:
    config = home.root / "config.toml"
    config.write_text('outputs = ["md", "txt", "pdf"]\npdfa = "never"\n')
    scan = home.inbox / "clear.png"
    scan.write_bytes(png16_with_alpha())
    done = ocrwatch_cli(home, "add", "--config", str(config), "--engine", "tesseract",
                        "--database", str(home.database), str(scan))
    assert done.returncode == 0, done.stderr
    assert scan.with_suffix(".ocr.pdf").exists()
    assert "transparency" not in done.stderr and "img2pdf" not in done.stderr, done.stderr
    assert "Image with transparency and a bit depth of 16" in log_file(home).read_text()
