"""The tray as a StatusNotifierItem with its menu over com.canonical.dbusmenu, as a plain
install (no PyGObject) runs it. Real parts: a private D-Bus session bus (dbus-daemon) for
the module; the test plays the panel exactly as a host does: it owns
org.kde.StatusNotifierWatcher, takes the item's registration, reads its properties, lays
out its menu and clicks in it. The tray runs in a process of its own around a stand-in
daemon (its state read back through the control socket), so it has the main thread it
needs and nothing of it is left in the test's process."""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import NotificationService, wait_for
from jeepney import (
    DBusAddress,
    HeaderFields,
    MatchRule,
    MessageType,
    Properties,
    new_method_call,
    new_method_return,
    new_signal,
)
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import DBusConnection, open_dbus_connection

from ocrwatch.control.client import request
from ocrwatch.tray import backends
from ocrwatch.tray.icon import COLOURS
from ocrwatch.tray.menu import TrayController, build_menu

ROOT = Path(__file__).resolve().parents[1]
WATCHER = "org.kde.StatusNotifierWatcher"
ITEM = "org.kde.StatusNotifierItem"
MENU = "com.canonical.dbusmenu"
TIMEOUT = 20.0

pytestmark = pytest.mark.timeout(120)

# A plain install: PyGObject cannot be imported, whatever this machine has.
TRAY = """
import logging, sys, threading
sys.modules["gi"] = None
logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
sys.path.insert(0, {tests!r})
from daemon_standin import StandInDaemon
from ocrwatch import tray
from ocrwatch.control.server import ControlServer

daemon = StandInDaemon()
stop = threading.Event()
ControlServer(sys.argv[1], daemon).start()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
print("tray shown:", tray.run_tray(daemon, stop), flush=True)
"""

CHOOSE = """
import logging, sys
sys.modules["gi"] = None
logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
from ocrwatch.tray.backends import choose_backend
chosen = choose_backend()
print("chosen:", chosen and chosen[0], flush=True)
"""


@pytest.fixture(scope="module")
def bus() -> Iterator[str]:
    """A session bus of this module's own, ended with it."""
    if shutil.which("dbus-daemon") is None:
        pytest.skip("dbus-daemon is not installed (apt install dbus-daemon)")
    work = Path(tempfile.mkdtemp(prefix="owsni-"))  # short: AF_UNIX socket paths
    proc = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--print-address=1",
                             f"--address=unix:path={work / 'bus'}"], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
        shutil.rmtree(work, ignore_errors=True)


class Watcher:
    """org.kde.StatusNotifierWatcher as a panel runs it: takes registrations, tells them
    in a property and a signal."""

    def __init__(self, address: str) -> None:
        self.items: list[str] = []
        self._conn = open_dbus_connection(bus=address)
        reply = self._conn.send_and_get_reply(message_bus.RequestName(WATCHER), timeout=5)
        assert reply.body == (1,)  # the primary owner
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="test-sni-watcher")
        self._thread.start()

    def _props(self) -> dict[str, tuple[str, Any]]:
        return {"RegisteredStatusNotifierItems": ("as", list(self.items)),
                "IsStatusNotifierHostRegistered": ("b", True),
                "ProtocolVersion": ("i", 0)}

    def _serve(self) -> None:
        here = DBusAddress("/StatusNotifierWatcher", interface=WATCHER)
        while not self._stop.is_set():
            try:
                msg = self._conn.receive(timeout=0.1)
            except TimeoutError:
                continue
            if msg.header.message_type is not MessageType.method_call:
                continue
            member = msg.header.fields.get(HeaderFields.member)
            if member == "RegisterStatusNotifierItem":
                (service,) = msg.body
                sender = msg.header.fields[HeaderFields.sender]
                # A path alone (libappindicator's way) means the sender's object.
                item = (f"{sender}{service}" if service.startswith("/")
                        else f"{service}/StatusNotifierItem")
                self.items.append(item)
                self._conn.send(new_method_return(msg))
                self._conn.send(new_signal(here, "StatusNotifierItemRegistered", "s",
                                           (item,)))
            elif member == "Get":
                self._conn.send(new_method_return(msg, "v", (self._props()[msg.body[1]],)))
            elif member == "GetAll":
                self._conn.send(new_method_return(msg, "a{sv}", (self._props(),)))
            else:
                self._conn.send(new_method_return(msg))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._conn.close()


class Host:
    """The panel's side: reads an item's properties, its menu, and clicks."""

    def __init__(self, address: str, item: str) -> None:
        name, _, path = item.partition("/")
        self.name = name
        self.item = DBusAddress(f"/{path}", bus_name=name, interface=ITEM)
        self.conn: DBusConnection = open_dbus_connection(bus=address)
        rule = MatchRule(type="signal", interface=MENU, member="LayoutUpdated")
        self.conn.send_and_get_reply(message_bus.AddMatch(rule), timeout=5)
        self.layouts: collections.deque[Any] = collections.deque()
        self._filter = self.conn.filter(rule, queue=self.layouts)
        self.menu = DBusAddress(self.props()["Menu"], bus_name=name, interface=MENU)

    def call(self, address: DBusAddress, method: str, signature: str | None = None,
             body: tuple[Any, ...] = ()) -> tuple[Any, ...]:
        reply = self.conn.send_and_get_reply(new_method_call(address, method, signature,
                                                             body), timeout=5)
        assert reply.header.message_type is MessageType.method_return, reply.body
        return tuple(reply.body)

    def props(self) -> dict[str, Any]:
        reply = self.conn.send_and_get_reply(Properties(self.item).get_all(), timeout=5)
        return {k: v for k, (_sig, v) in reply.body[0].items()}

    def layout(self) -> tuple[int, Any]:
        revision, root = self.call(self.menu, "GetLayout", "iias", (0, -1, []))
        return revision, root

    def click(self, ident: int) -> None:
        self.call(self.menu, "Event", "isvu", (ident, "clicked", ("i", 0), 0))

    def next_layout(self, after: int) -> int:
        """The revision of a LayoutUpdated signal newer than ``after``."""
        def newer() -> int:
            while self.layouts:
                revision: int = self.layouts.popleft().body[0]
                if revision > after:
                    return revision
            with contextlib.suppress(TimeoutError):
                revision = self.conn.recv_until_filtered(self.layouts, timeout=0.2).body[0]
                if revision > after:
                    return revision
            return 0

        return wait_for(newer, TIMEOUT, f"LayoutUpdated after revision {after}")

    def close(self) -> None:
        self._filter.close()
        self.conn.close()


def labels(node: Any) -> list[Any]:
    """A dbusmenu layout as the model's shape: labels, "-" for separators, submenus
    as lists after their label."""
    out: list[Any] = []
    for _sig, (_id, props, children) in node[2]:
        if props.get("type", ("s", "standard"))[1] == "separator":
            out.append("-")
            continue
        out.append(props["label"][1].replace("__", "_"))
        if children:
            out.append(labels((0, {}, children)))
    return out


def find(node: Any, label: str) -> tuple[int, dict[str, Any]]:
    for _sig, child in node[2]:
        ident, props, _children = child
        if props.get("label", ("s", ""))[1] == label:
            return ident, {k: v for k, (_s, v) in props.items()}
        with contextlib.suppress(LookupError):
            return find(child, label)
    raise LookupError(label)


def model_labels(menu: Any, separator: Any) -> list[Any]:
    out: list[Any] = []
    for item in menu:
        if item is separator:
            out.append("-")
            continue
        out.append(item.text)
        if item.submenu is not None:
            out.append(model_labels(item.submenu, separator))
    return out


def the_model() -> list[Any]:
    """The menu as the GTK backends get it: ``build_menu`` over the stand-in daemon."""
    from daemon_standin import StandInDaemon

    backends.load_backend("dummy")  # pystray, without it opening a display
    pystray = sys.modules["pystray"]
    controller = TrayController(StandInDaemon())
    controller.refresh()
    return model_labels(build_menu(pystray, controller, default_toggles=False),
                        pystray.Menu.SEPARATOR)


def pixel(pixmaps: list[tuple[int, int, bytes]], x: int, y: int) -> tuple[int, ...]:
    """(A, R, G, B) of the 64 px picture: ARGB32 in network byte order."""
    w, h, data = next(p for p in pixmaps if p[0] == 64)
    assert len(data) == w * h * 4
    i = (y * w + x) * 4
    return tuple(data[i:i + 4])


def near(a: tuple[int, ...], b: tuple[int, ...], tol: int = 12) -> bool:
    return all(abs(p - q) <= tol for p, q in zip(a, b, strict=True))


def child_env(bus: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("DISPLAY", None)
    env.pop("PYSTRAY_BACKEND", None)
    # The item speaks D-Bus only; run_tray asks just that a display be named.
    env.update(DBUS_SESSION_BUS_ADDRESS=bus, WAYLAND_DISPLAY="wayland-ocrwatch-test",
               PYTHONPATH=str(ROOT))
    return env


@pytest.fixture
def watcher(bus: str) -> Iterator[Watcher]:
    w = Watcher(bus)
    try:
        yield w
    finally:
        w.close()


def test_a_panel_shows_the_menu_and_clicks_in_it(bus: str, watcher: Watcher,
                                                tmp_path: Path) -> None:
    script = tmp_path / "tray.py"
    script.write_text(TRAY.format(tests=str(ROOT / "tests")))
    sock = Path(tempfile.mkdtemp(prefix="owsni-")) / "c.sock"
    log = tmp_path / "tray.log"
    notes = NotificationService(bus)
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, str(script), str(sock)], env=child_env(bus),
                                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT)
    assert proc.stdin is not None
    host: Host | None = None

    def paused() -> bool:
        return bool(request("status", socket_path=sock)["paused"])

    try:
        [item] = wait_for(lambda: watcher.items, TIMEOUT, "the item's registration")
        said = log.read_text()
        assert "tray: backend sni, a StatusNotifierItem over D-Bus, with its menu" in said
        assert "appindicator: PyGObject is not installed" in said
        host = Host(bus, item)

        # The item, as a panel reads it.
        props = host.props()
        assert props["Status"] == "Active" and props["Id"] == "ocrwatch"
        assert props["Title"].startswith("ocrwatch: watching the inbox")
        assert tuple(props["ToolTip"][2:]) == ("ocrwatch", props["Title"])
        assert props["ItemIsMenu"] is False
        assert near(pixel(props["IconPixmap"], 32, 4), (255, *COLOURS["idle"]))

        # The menu: the model's, item for item.
        revision, root = host.layout()
        assert labels(root) == the_model()
        assert labels(root)[:3] == ["Pause", "-", "Search…"]
        pause, pause_props = find(root, "Pause")
        assert pause_props["toggle-type"] == "checkmark" and pause_props["toggle-state"] == 0

        # A click on Pause in the menu pauses; the menu and the icon follow.
        host.click(pause)
        wait_for(paused, TIMEOUT, "a pause from the menu", ignore=(OSError,))
        revision = host.next_layout(revision)
        revision, root = host.layout()
        assert find(root, "Pause")[1]["toggle-state"] == 1
        assert any(str(label).startswith("State: paused") for label in labels(root)[-3])
        props = wait_for(lambda: (p := host.props())["Title"].startswith("ocrwatch: paused")
                         and p, TIMEOUT, "the paused title")
        assert near(pixel(props["IconPixmap"], 32, 4), (255, *COLOURS["paused"]))

        # A left click (Activate) resumes, and says so.
        host.call(host.item, "Activate", "ii", (0, 0))
        wait_for(lambda: not paused(), TIMEOUT, "a resume by a click", ignore=(OSError,))
        body = wait_for(lambda: [c[4] for c in notes.calls if c[3] == "ocrwatch reads again"],
                        TIMEOUT, "the resumed notification")[0]
        assert "Its menu (a right click) has the rest." in str(body)
        assert "no menu" not in str(body)
        revision = host.next_layout(revision)
        assert find(host.layout()[1], "Pause")[1]["toggle-state"] == 0

        # The panel restarts: the item registers again with the new watcher.
        watcher.close()
        again = Watcher(bus)
        try:
            assert wait_for(lambda: again.items, TIMEOUT, "a registration again") == [item]
        finally:
            again.close()

        # Quit from the menu ends the tray and takes the item off the bus.
        host.click(find(host.layout()[1], "Quit")[0])
        assert proc.wait(timeout=TIMEOUT) == 0
        assert "tray shown: True" in log.read_text()
        owned = host.conn.send_and_get_reply(message_bus.NameHasOwner(host.name), timeout=5)
        assert owned.body == (False,)
    finally:
        if host is not None:
            host.close()
        proc.stdin.close()
        try:
            proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        notes.close()
        shutil.rmtree(sock.parent, ignore_errors=True)


def _choose(bus: str, **env: str) -> str:
    out = subprocess.run([sys.executable, "-c", CHOOSE], env={**child_env(bus), **env},
                         capture_output=True, text=True, timeout=60, check=True)
    return out.stdout + out.stderr


def test_the_chooser_takes_the_item_when_a_watcher_is_on_the_bus(
        bus: str, watcher: Watcher) -> None:
    said = _choose(bus)
    assert "chosen: sni" in said
    assert "tray: backend sni, a StatusNotifierItem over D-Bus, with its menu" in said


@pytest.fixture
def xvfb() -> Iterator[str]:
    if shutil.which("Xvfb") is None or importlib.util.find_spec("Xlib") is None:
        pytest.skip("Xvfb or python-xlib is missing (see .ci/apt-packages.txt)")
    r, w = os.pipe()
    proc = subprocess.Popen(["Xvfb", "-displayfd", str(w), "-nolisten", "tcp"],
                            pass_fds=(w,), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    os.close(w)
    try:
        with os.fdopen(r) as f:
            number = f.readline().strip()
        assert number, "Xvfb did not report a display number"
        yield f":{number}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_without_a_watcher_the_chooser_falls_back_to_x_and_says_why(
        bus: str, xvfb: str) -> None:
    said = _choose(bus, DISPLAY=xvfb)
    assert "chosen: xorg" in said
    assert "sni: no StatusNotifierWatcher on the session bus" in said
    assert "tray: using pystray's plain X backend, which has no menu" in said


def test_without_a_watcher_or_a_display_there_is_no_tray_and_it_says_why(bus: str) -> None:
    said = _choose(bus)
    assert "chosen: None" in said
    assert "no tray backend could start" in said
    assert "sni: no StatusNotifierWatcher on the session bus" in said


def test_doctor_tells_which_tray_a_plain_install_gets(
        bus: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from ocrwatch.doctor import desktop

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name: None if name == "gi" else real_find_spec(name))
    env = {"DISPLAY": ":0", "DBUS_SESSION_BUS_ADDRESS": bus}
    (without,) = desktop.check_tray(env, "linux")
    assert not without.ok
    assert "no StatusNotifierWatcher" in without.detail and "no menu" in without.detail
    w = Watcher(bus)
    try:
        (with_,) = desktop.check_tray(env, "linux")
    finally:
        w.close()
    assert with_.ok and "tray backend sni" in with_.detail and "with its menu" in with_.detail
    (forced,) = desktop.check_tray({**env, "PYSTRAY_BACKEND": "xorg"}, "linux")
    assert forced.ok and "tray backend xorg" in forced.detail and "without a menu" in forced.detail
