"""GIF, AVIF and HEIC: read like any scan (before: ignored, with no job, no status line
and no log line). Each file is made by a real encoder in the test: Pillow for GIF and
AVIF, pillow-heif (libheif with x265) for HEIC."""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image, features

from ocrwatch.intake.inbox_files import looks_complete

from .conftest import StartDaemon
from .helpers import Home, check_fake_sidecars, drop, ended, jobs, page_image, wait_for


def _encode(fmt: str, **save: object) -> bytes:
    if fmt == "HEIF":
        import pillow_heif

        pillow_heif.register_heif_opener()
    buf = io.BytesIO()
    page_image(f"a page saved as {fmt}").save(buf, fmt, **save)  # type: ignore[arg-type]
    return buf.getvalue()


def _animated_gif() -> bytes:
    frames = [page_image(f"frame {n}").convert("P") for n in range(3)]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=200, loop=0)
    return buf.getvalue()


FORMATS: dict[str, tuple[str, Callable[[], bytes]]] = {
    "gif": ("scan.gif", lambda: _encode("GIF")),
    "animated-gif": ("moving.gif", _animated_gif),
    "avif": ("photo.avif", lambda: _encode("AVIF")),
    "heic": ("photo.heic", lambda: _encode("HEIF")),
}


@pytest.mark.parametrize("kind", list(FORMATS))
def test_gif_avif_and_heic_are_read(home: Home, run_daemon: StartDaemon, kind: str) -> None:
    """Each is read into one page: an animated GIF's frames are an animation, not pages
    (its first frame is the page), as the docs say."""
    if kind == "avif" and not features.check("avif"):
        pytest.skip("this Pillow was built without AVIF")
    name, make = FORMATS[kind]
    data = make()
    if kind == "animated-gif":
        assert Image.open(io.BytesIO(data)).n_frames == 3
    _daemon, engine = run_daemon()
    path = drop(home.inbox / name, data)
    row = wait_for(lambda: ended(home.database, path), 30, f"{name} to be read")
    assert row["state"] == "done", row["reason"]
    assert row["pages"] == 1
    assert engine.reads_of(name) == 1
    check_fake_sidecars(path, 1)


@pytest.mark.parametrize("kind", ["gif", "heic", "avif"])
def test_a_half_written_gif_heic_or_avif_is_not_complete(tmp_path: Path, kind: str) -> None:
    """The watcher waits for the GIF trailer, and for a HEIF file's boxes to reach its
    end, as it waits for a JPEG's end marker."""
    if kind == "avif" and not features.check("avif"):
        pytest.skip("this Pillow was built without AVIF")
    data = FORMATS[kind][1]()
    whole, half = tmp_path / f"whole.{kind}", tmp_path / f"half.{kind}"
    whole.write_bytes(data)
    half.write_bytes(data[: len(data) * 2 // 3])
    assert looks_complete(whole)
    assert not looks_complete(half)


def test_heic_without_its_decoder_fails_saying_what_to_install(
        home: Home, run_daemon: StartDaemon, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where pillow-heif is missing, the photo fails with the reason and the fix."""
    data = _encode("HEIF")
    monkeypatch.setitem(sys.modules, "pillow_heif", None)  # import fails, as uninstalled
    _daemon, engine = run_daemon()
    path = drop(home.inbox / "photo.heic", data)
    row = wait_for(lambda: ended(home.database, path), 30, "the HEIC to end")
    assert row["state"] == "failed", dict(row)
    assert re.search(r"HEIC photo, and pillow-heif .* is not installed: install it .*"
                     r"pipx inject ocrwatch pillow-heif", row["reason"]), row["reason"]
    assert engine.reads_of("photo.heic") == 0
    assert str(path) in jobs(home.database)
