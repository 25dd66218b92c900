"""The tray's drawing, tooltip, menu behaviour and backend choice, without a display."""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from daemon_standin import StandInDaemon

from ocrwatch import tray
from ocrwatch.core.status import Status
from ocrwatch.fs import paths
from ocrwatch.tray import app as tray_app

S = Status.from_dict


def colour_at(img: Any, xy: tuple[int, int]) -> tuple[int, int, int]:
    r, g, b, _a = img.getpixel(xy)
    return r, g, b


def near(a: tuple[int, int, int], b: tuple[int, int, int], tol: int = 12) -> bool:
    return all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


BACKGROUND = (6, 32)  # left edge, inside the rounded square, clear of the page


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        ({"state": "idle"}, "idle"),
        ({"state": "working", "queued": 3, "running": 1}, "working"),
        ({"state": "paused", "paused": True}, "paused"),
        ({"state": "idle", "engine": {"state": "asleep"}}, "asleep"),
        ({"state": "idle", "engine": {"state": "stopped"}}, "asleep"),
        ({"state": "working", "paused": True}, "paused"),  # paused wins
        ({"state": "stopping"}, "stopping"),
    ],
)
def test_background_tells_the_state(status: dict[str, Any], kind: str) -> None:
    assert tray.look(S(status)) == kind
    img = tray.draw_icon(S(status))
    assert img.size == (64, 64) and img.mode == "RGBA"
    assert near(colour_at(img, BACKGROUND), tray.COLOURS[kind])
    corner = img.getpixel((0, 0))
    assert isinstance(corner, tuple) and corner[3] == 0  # the square has round corners


def test_states_differ_at_a_glance() -> None:
    states: list[dict[str, Any]] = [{"state": "idle"}, {"state": "working", "queued": 2},
              {"state": "paused", "paused": True}, {"state": "idle", "engine": {"state": "asleep"}}]
    bgs = {colour_at(tray.draw_icon(S(s)), BACKGROUND) for s in states}
    assert len(bgs) == 4


def test_working_badge_shows_a_count() -> None:
    one = tray.draw_icon(S({"state": "working", "queued": 1}))
    many = tray.draw_icon(S({"state": "working", "queued": 250}))
    # The white badge sits bottom right; its digits differ.
    assert near(colour_at(one, (37, 46)), tray.WHITE, 20)
    assert one.tobytes() != many.tobytes()
    assert tray.icon_key(S({"state": "working", "queued": 250})) == ("working", 100, False)


def test_failed_badge_in_any_state() -> None:
    for base in ({"state": "idle"}, {"state": "working", "queued": 1},
                 {"state": "paused", "paused": True}):
        plain = tray.draw_icon(S(base))
        failed = tray.draw_icon(S({**base, "failed": 2}))
        assert near(colour_at(failed, (43, 14)), tray.FAILED, 25)
        assert not near(colour_at(plain, (43, 14)), tray.FAILED, 25)


def test_tooltip() -> None:
    text = tray.tooltip(S({"state": "working", "queued": 3, "running": 1, "pages_today": 42,
                         "failed": 1}))
    assert text == "ocrwatch: reading, 4 in queue, 42 pages today, 1 failed"
    assert tray.tooltip(S({"state": "paused", "paused": True})).startswith("ocrwatch: paused")
    assert "GPU asleep" in tray.tooltip(S({"state": "idle", "engine": {"state": "asleep"}}))


def test_status_lines() -> None:
    lines = tray.status_lines(S({"state": "working", "queued": 2, "running": 1,
                               "engine": {"name": "vllm", "state": "ready",
                                          "gpu_memory_mb": 14000.4, "pages_per_second": 2.5},
                               "pages_today": 9}))
    assert "Engine: vllm (ready)" in lines
    assert "GPU memory held: 14000 MB" in lines
    assert not any(line.startswith("Speed") for line in lines)  # one rate: the daemon's
    assert tray.status_lines(S({"engine": {"name": "tesseract", "state": "ready"}}))[2] == (
        "GPU memory held: none")


def test_files_read_with_doubts_show_in_the_tooltip_and_the_status_lines() -> None:
    """A file read with doubts (an empty answer on a page that is not blank) is never
    shown as plainly done: the tooltip counts it, the Status submenu names it and why."""
    status = S({"state": "idle", "done": 3, "doubted": 1, "doubts": [
        {"path": "/in/clipping.png", "reason": "the page may not have been read: the "
         "engine's answer was empty, though the page is not blank", "when": 1.0}]})
    assert tray.tooltip(status).endswith(", 1 read with doubts")
    lines = tray.status_lines(status)
    assert any("3 files done (1 read with doubts)" in line for line in lines), lines
    assert "Doubt: clipping.png: the page may not have been read: the engine's answer " \
        "was empty, though the page is not blank" in lines


# --------------------------------------------------------------------------- controller


def test_controller_actions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "runtime_dir", lambda: tmp_path)
    opened: list[str] = []
    daemon = StandInDaemon(inbox=["/in/a", "/in/b"], last_result="/in/a/x.md", failed=1,
                           recent_failures=[{"path": "/in/a/bad.pdf", "reason": "encrypted",
                                             "when": 1767261600.0}])
    c = tray.TrayController(daemon, opener=lambda p: opened.append(str(p)))
    c.refresh()
    c.toggle_pause()
    assert daemon.status().paused and c.status.paused and c.wake.is_set()
    c.toggle_pause()
    assert not daemon.status().paused
    c.open_inbox(1)
    c.open_last_result()
    c.show_failed()
    assert opened[:2] == ["/in/b", "/in/a/x.md"]
    report = Path(opened[2]).read_text()
    assert "/in/a/bad.pdf" in report and "encrypted" in report
    c.retry_failed()
    assert "retry None True" in daemon.calls
    c.quit()
    assert daemon.stop_requested.is_set() and c.quit_requested.is_set()


def test_notifies_only_new_failures() -> None:
    old = {"path": "/in/old.pdf", "reason": "corrupt", "when": 1.0}
    daemon = StandInDaemon(recent_failures=[old])
    notes: list[tuple[str, str]] = []
    c = tray.TrayController(daemon, notify=lambda m, t: notes.append((m, t)))
    c.refresh()
    assert notes == []  # failures from before the tray started are not news
    daemon.set(recent_failures=[old, {"path": "/in/new.jpg", "reason": "not an image",
                                      "when": 2.0}])
    c.refresh()
    c.refresh()
    assert notes == [("new.jpg: not an image", "ocrwatch could not read a file")]


def test_menu_key_follows_structure_not_numbers() -> None:
    daemon = StandInDaemon()
    c = tray.TrayController(daemon)
    c.refresh()
    k1 = c.menu_key()
    daemon.set(pages_today=50)
    c.refresh()
    assert c.menu_key() == k1
    daemon.set(failed=1)
    c.refresh()
    assert c.menu_key() != k1


# --------------------------------------------------------------------------- backends


def test_backend_candidates() -> None:
    assert tray.candidates(environ={}, platform="linux") == [
        "appindicator", "gtk", "sni", "xorg"]
    assert tray.candidates(environ={"PYSTRAY_BACKEND": "gtk"}, platform="linux") == ["gtk"]
    assert tray.candidates("xorg", environ={"PYSTRAY_BACKEND": "gtk"}) == ["xorg"]
    assert tray.candidates(environ={}, platform="darwin") == ["darwin"]
    assert tray.candidates(environ={}, platform="win32") == ["win32"]


def test_has_display() -> None:
    assert not tray.has_display({}, "linux")
    assert tray.has_display({"DISPLAY": ":0"}, "linux")
    assert tray.has_display({"WAYLAND_DISPLAY": "wayland-0"}, "linux")
    assert tray.has_display({}, "darwin")


def test_headless_returns_at_once_and_says_so_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(tray_app, "_said_headless", False)
    daemon = StandInDaemon()
    with caplog.at_level(logging.INFO, logger="ocrwatch.tray"):
        assert tray.run_tray(daemon, threading.Event()) is False
        assert tray.run_tray(daemon, threading.Event()) is False
    said = [r for r in caplog.records if "no display" in r.getMessage()]
    assert len(said) == 1
    assert said[0].getMessage() == "no display: running without a tray icon"
    assert daemon.calls == []


def test_refuses_other_threads() -> None:
    errors: list[BaseException] = []

    def call() -> None:
        try:
            tray.run_tray(StandInDaemon(), threading.Event())
        except Exception as exc:
            errors.append(exc)

    t = threading.Thread(target=call)
    t.start()
    t.join(10)
    assert errors and "main thread" in str(errors[0])
