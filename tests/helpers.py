"""Fixtures made on the fly: rendered text pages, generated PDFs, waiting on conditions."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import pytest
from PIL import Image, ImageDraw, ImageFont

from ocrwatch.config import Config
from ocrwatch.engines.registry import TESTING_VARIABLE

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float = 60.0, what: str = "condition",
             interval: float = 0.05, *,
             ignore: tuple[type[Exception], ...] = ()) -> T:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout``.

    Exceptions of the ``ignore`` types count as "not yet" (a window or a socket that is
    not up); the last one is named when the wait fails.
    """
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            value = condition()
        except ignore as exc:
            last, value = exc, None  # type: ignore[assignment]
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}"
                                 + (f" (last error: {last!r})" if last else ""))
        time.sleep(interval)


def make_config(tmp_path: Path, **kw: object) -> Config:
    """A config for a daemon in ``tmp_path``: the fake engine and a short settle time,
    with ``kw`` for the rest."""
    values: dict[str, object] = dict(
        inbox=[tmp_path / "inbox"], database=tmp_path / "index.sqlite3", settle_seconds=0.2,
        engine="fake")
    values.update(kw)
    return Config(**values)  # type: ignore[arg-type]


def text_page(lines: list[str], *, width: int = 1700, size: int = 44,
              mode: str = "RGB") -> Image.Image:
    """A clean page with ``lines`` of real text, as a scanner would give at ~200 dpi."""
    font = ImageFont.load_default(size=size)
    height = max(400, 160 + len(lines) * int(size * 1.6))
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    y = 80
    for line in lines:
        draw.text((90, y), line, fill="black", font=font)
        y += int(size * 1.6)
    return image.convert(mode) if mode != "RGB" else image


def save_pdf(path: Path, pages: list[list[str]], dpi: int = 200) -> Path:
    images = [text_page(lines) for lines in pages]
    images[0].save(path, "PDF", resolution=dpi, save_all=True, append_images=images[1:])
    return path


def write_image(path: Path, lines: list[str], **save: object) -> Path:
    text_page(lines).save(path, **save)  # type: ignore[arg-type]
    return path


def home_env(home: Path, run: Path | None = None) -> dict[str, str]:
    """The one HOME builder: the variables that keep a user's files under ``home``
    (HOME and the XDG folders; the runtime folder, 0700, is ``run`` or ``home/run``)."""
    run = run if run is not None else home / "run"
    run.mkdir(parents=True, exist_ok=True, mode=0o700)
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_RUNTIME_DIR": str(run),
    }


def use_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make ``home`` the private HOME of this process and its children, with its own XDG
    folders and none of the caller's OCRWATCH_ variables."""
    home.mkdir(parents=True, exist_ok=True)
    for key in list(os.environ):
        if key.startswith("OCRWATCH_") and key != TESTING_VARIABLE:
            monkeypatch.delenv(key)
    for key, value in home_env(home).items():
        monkeypatch.setenv(key, value)
    return home


def child_env(home: Path, extra: Mapping[str, str] | None = None, *,
              run: Path | None = None) -> dict[str, str]:
    """Environment for a child ocrwatch process living entirely under ``home``: no
    OCRWATCH_ or XDG_ variable and no display of the caller's."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OCRWATCH_", "XDG_")) and k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.update(home_env(home, run))
    env[TESTING_VARIABLE] = "1"  # the fake engine, for what surrounds an engine
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env


def ocrwatch(args: list[str], env: Mapping[str, str], timeout: float = 120,
             check: bool = False) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "ocrwatch", *args], env=dict(env),
                            capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"ocrwatch {args} failed ({result.returncode}):\n"
                             f"{result.stdout}\n{result.stderr}")
    return result


def normalize(text: str) -> str:
    return " ".join(text.split()).lower()


MINUTES = ["The committee met on Tuesday to discuss the budget.",
           "Members agreed that the library should open longer.",
           "A decision on the new roof was left for next month.",
           "The minutes were read and approved without changes."]


def scribbled(seed: int) -> tuple[Image.Image, int]:
    """A page of MINUTES with pencil strokes under the text (a shelf mark, a scrawl); the
    strokes' top, in pixels."""
    image = text_page([*MINUTES, "", "", ""], size=40)
    draw, rng = ImageDraw.Draw(image), random.Random(seed)
    top = image.height - 170
    for _ in range(40):
        x, y = 200 + rng.randint(0, 900), top + rng.randint(0, 60)
        draw.line([(x, y), (x + rng.randint(-30, 30), y + rng.randint(-40, 40))],
                  fill=(90, 90, 90), width=rng.randint(2, 5))
    return image, top - 40  # strokes reach 40 px above where they start


class NotificationService:
    """org.freedesktop.Notifications on a bus: records each Notify call and answers it."""

    def __init__(self, address: str) -> None:
        from jeepney.bus_messages import message_bus
        from jeepney.io.blocking import open_dbus_connection

        self.calls: list[tuple[object, ...]] = []
        self._conn = open_dbus_connection(bus=address)
        reply = self._conn.send_and_get_reply(
            message_bus.RequestName("org.freedesktop.Notifications"), timeout=5)
        assert reply.body == (1,)  # primary owner
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="test-notifications")
        self._thread.start()

    def _serve(self) -> None:
        from jeepney import HeaderFields, MessageType, new_method_return

        while not self._stop.is_set():
            try:
                msg = self._conn.receive(timeout=0.1)
            except TimeoutError:
                continue
            fields = msg.header.fields
            if (msg.header.message_type is MessageType.method_call
                    and fields.get(HeaderFields.member) == "Notify"):
                self.calls.append(msg.body)
                self._conn.send(new_method_return(msg, "u", (len(self.calls),)))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._conn.close()
