"""A click on the tray icon of pystray's plain X backend (which has no menu) pauses or
resumes, and says so in a desktop notification, with what a click does: never a silent
pause. Real parts: Xvfb, a real tray host (trayer), xdotool's click, a D-Bus session bus
of the test's own with a notification service on it. No GTK needed: the X backend is
python-xlib, the notification goes through jeepney."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import NotificationService, wait_for
from test_tray_x11 import POLL, ROOT, STANDIN, X, click_until

from ocrwatch.control.client import request

pytestmark = pytest.mark.timeout(240)
TOOLS = ("Xvfb", "trayer", "xdotool", "display")


@pytest.fixture
def plain_x() -> Iterator[X]:
    absent = [t for t in TOOLS if shutil.which(t) is None]
    if absent:
        pytest.skip(f"missing programs: {', '.join(absent)} (see .ci/apt-packages.txt)")
    if importlib.util.find_spec("Xlib") is None:
        pytest.skip("python-xlib is missing (pystray's dependency on Linux)")
    work = Path(tempfile.mkdtemp(prefix="owc-"))  # short: AF_UNIX socket paths
    x = X(work)
    try:
        x.start()
        yield x
    finally:
        x.close()
        shutil.rmtree(work, ignore_errors=True)


def test_a_click_without_a_menu_pauses_and_says_so(plain_x: X, session_bus: str) -> None:
    x = plain_x
    script = x.workdir / "standin.py"
    script.write_text(STANDIN.format(tests=str(ROOT / "tests")))
    sock = x.workdir / "c.sock"
    env = {**x.env, "PYSTRAY_BACKEND": "xorg", "DBUS_SESSION_BUS_ADDRESS": session_bus}
    log = x.workdir / "standin.log"
    service = NotificationService(session_bus)
    with log.open("wb") as out:
        proc = x.spawn([sys.executable, str(script), str(sock)], env=env,
                       stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT)
    assert proc.stdin is not None

    def said(title: str) -> list[str]:
        return [str(c[4]) for c in service.calls if c[3] == title]

    try:
        wait_for(lambda: request("status", socket_path=sock), 20, "the stand-in's socket",
                 ignore=(Exception,), interval=POLL)
        click_until(x, lambda: request("status", socket_path=sock)["paused"],
                    "pause by a click")
        [body] = wait_for(lambda: said("ocrwatch paused"), 20, "the paused notification",
                          interval=POLL)
        assert "Click the icon again to resume" in body
        assert "This tray has no menu: `ocrwatch doctor` names the packages" in body
        click_until(x, lambda: not request("status", socket_path=sock)["paused"],
                    "resume by a click")
        [body] = wait_for(lambda: said("ocrwatch reads again"), 20,
                          "the resumed notification", interval=POLL)
        assert "A click on the icon pauses it" in body
        assert all(c[0] == "ocrwatch" for c in service.calls)
    finally:
        proc.stdin.close()
        wait_for(lambda: proc.poll() is not None, 30, "the tray to end",
                 ignore=(Exception,), interval=POLL)
        service.close()
