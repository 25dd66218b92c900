"""The tray icon: what the daemon is doing at a glance, and a menu to steer it.

pystray runs on the main thread (macOS and GTK insist); the daemon's work runs in other
threads. The icon is redrawn from ``target.status()``, polled about once a second from
pystray's setup thread; menu actions run on the main thread and call the daemon directly.

Backends. pystray's plain X backend has no menus at all (``HAS_MENU = False``), so on
Linux the tray tries AppIndicator, then GTK (both need PyGObject and a D-Bus session
bus), and only then falls back to the X backend, with a warning and a click that toggles
pause. ``PYSTRAY_BACKEND`` (or the ``backend`` argument) forces one backend.

Nothing here imports pystray or GTK at module import time: importing pystray picks a
backend and opens the display on the spot, which fails on a headless machine.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from ocrwatch import paths
from ocrwatch.control import Controllable
from ocrwatch.errors import OcrwatchError
from ocrwatch.status import Status

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
DOCK_RETRY_SECONDS = 3.0  # X fallback: how often to ask a tray host that ignored us
MENU_REFRESH_SECONDS = 5.0  # numbers-only menu changes (speed, counts) wait this long
SIZE = 64
_SCALE = 4  # drawn at 4x and scaled down, for smooth edges at tray sizes

# Colours: one background per state, so the state reads even at 16 px.
COLOURS = {
    "idle": (46, 125, 50),  # green: watching, nothing to do
    "working": (21, 101, 192),  # blue: reading pages
    "paused": (117, 117, 117),  # grey: paused by the user
    "asleep": (40, 53, 147),  # indigo: idle, GPU memory given back
    "stopping": (66, 66, 66),
}
FAILED = (211, 47, 47)
WHITE = (255, 255, 255)
PAPER = (250, 250, 250)
INK = (120, 144, 156)
MOON = (255, 236, 153)

_said_headless = False


# --------------------------------------------------------------------------- drawing


def look(status: Status) -> str:
    """The icon's main look: idle, working, paused, asleep or stopping."""
    if status.paused or status.state == "paused":
        return "paused"
    if status.state in ("working", "stopping"):
        return status.state
    if status.engine.state in ("asleep", "stopped"):
        return "asleep"
    return "idle"


def _font(px: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    try:
        return ImageFont.load_default(size=px)
    except (OSError, TypeError, ValueError):  # Pillow without FreeType
        return ImageFont.load_default()


def draw_icon(status: Status) -> Image.Image:
    """The tray icon for ``status``, 64x64 RGBA.

    A page on a rounded square whose colour tells the state: green idle, blue working
    (with the number of files in the queue), grey paused (two bars), indigo when the GPU
    is asleep (a moon); a red badge with "!" when failed files wait, in any state.
    """
    s = _SCALE
    big = Image.new("RGBA", (SIZE * s, SIZE * s), (0, 0, 0, 0))
    d = ImageDraw.Draw(big)
    kind = look(status)
    d.rounded_rectangle((2 * s, 2 * s, 62 * s, 62 * s), radius=12 * s, fill=COLOURS[kind])

    # The page, with a folded corner and lines of text.
    x0, y0, x1, y1 = 17 * s, 10 * s, 47 * s, 54 * s
    fold = 9 * s
    page = [(x0, y0), (x1 - fold, y0), (x1, y0 + fold), (x1, y1), (x0, y1)]
    d.polygon(page, fill=PAPER if kind != "paused" else (200, 200, 200))
    d.polygon([(x1 - fold, y0), (x1 - fold, y0 + fold), (x1, y0 + fold)], fill=(176, 190, 197))
    for i, width in enumerate((22, 18, 22, 14)):
        y = (22 + 7 * i) * s
        d.rounded_rectangle((21 * s, y, (21 + width) * s, y + 3 * s), radius=s, fill=INK)

    if kind == "paused":
        # Two bars over the page: the universal "paused".
        d.rounded_rectangle((20 * s, 18 * s, 29 * s, 48 * s), radius=2 * s, fill=(55, 55, 55))
        d.rounded_rectangle((35 * s, 18 * s, 44 * s, 48 * s), radius=2 * s, fill=(55, 55, 55))
    elif kind == "working":
        n = status.in_queue
        text = "99+" if n > 99 else str(max(n, 1))
        r = 15 * s if len(text) < 3 else 17 * s
        cx, cy = 47 * s, 46 * s
        d.ellipse((cx - r, cy - r, cx + r, cy + r), fill=WHITE, outline=COLOURS["working"],
                  width=2 * s)
        font = _font((20 if len(text) == 1 else 16 if len(text) == 2 else 12) * s)
        d.text((cx, cy), text, fill=COLOURS["working"], font=font, anchor="mm",
               stroke_width=s // 2, stroke_fill=COLOURS["working"])
    elif kind == "asleep":
        # A crescent: a disc with another disc bitten out of it, over the page.
        mask = Image.new("L", big.size, 0)
        m = ImageDraw.Draw(mask)
        cx, cy, r = 46 * s, 46 * s, 13 * s
        m.ellipse((cx - r, cy - r, cx + r, cy + r), fill=255)
        ox, oy = cx + 7 * s, cy - 6 * s
        m.ellipse((ox - r, oy - r, ox + r, oy + r), fill=0)
        big.paste(Image.new("RGBA", big.size, (*MOON, 255)), (0, 0), mask)

    if status.failed > 0:
        cx, cy, r = 50 * s, 14 * s, 12 * s
        d.ellipse((cx - r, cy - r, cx + r, cy + r), fill=FAILED, outline=WHITE, width=2 * s)
        d.rounded_rectangle((cx - 2 * s, cy - 8 * s, cx + 2 * s, cy + 3 * s), radius=s,
                            fill=WHITE)
        d.ellipse((cx - 2 * s, cy + 5 * s, cx + 2 * s, cy + 9 * s), fill=WHITE)

    return big.resize((SIZE, SIZE), Image.Resampling.LANCZOS)


def icon_key(status: Status) -> tuple[Any, ...]:
    """What the icon's pixels depend on; redraw only when it changes."""
    kind = look(status)
    count = min(status.in_queue, 100) if kind == "working" else 0
    return kind, count, status.failed > 0


def tooltip(status: Status) -> str:
    """One line for the icon's tooltip: the state, the queue and the pages done today."""
    kind = look(status)
    words = {
        "idle": "watching the inbox",
        "working": "reading",
        "paused": "paused",
        "asleep": "watching the inbox (GPU asleep)",
        "stopping": "stopping",
    }[kind]
    parts = [f"ocrwatch: {words}", f"{status.in_queue} in queue",
             f"{status.pages_today} pages today"]
    if status.failed:
        parts.append(f"{status.failed} failed")
    return ", ".join(parts)


def status_lines(status: Status) -> list[str]:
    """The lines of the menu's Status submenu."""
    engine = status.engine
    lines = [f"State: {status.state}, {status.queued} waiting, {status.running} running"]
    lines += [f"Reading: {r.text}" for r in status.reading[:3]]
    if status.pages_per_second is not None:
        lines.append(f"Rate: {status.pages_per_second:.2f} pages/s (last minute)")
    lines.append(f"Engine: {engine.name} ({engine.state})")
    if status.languages:
        lines.append(f"Languages: {', '.join(status.languages)}")
    mb = engine.gpu_memory_mb
    lines.append(f"GPU memory held: {mb:.0f} MB" if mb is not None else "GPU memory held: none")
    if engine.pages_per_second is not None:
        lines.append(f"Speed: {engine.pages_per_second:.2f} pages/s")
    lines.append(f"Today: {status.pages_today} pages, "
                 f"{status.done} files done, {status.failed} failed")
    return lines


# --------------------------------------------------------------------------- actions


def open_path(path: str | Path) -> None:
    """Open a file or folder with the desktop's default program, without waiting."""
    target = str(path)
    if sys.platform == "win32":
        os.startfile(target)  # type: ignore[attr-defined,unused-ignore]
        return
    cmd = ["open", target] if sys.platform == "darwin" else ["xdg-open", target]
    try:
        subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        fix = ("install xdg-utils (Debian/Ubuntu: sudo apt install xdg-utils; Fedora: "
               "sudo dnf install xdg-utils; Arch: sudo pacman -S xdg-utils)"
               if cmd[0] == "xdg-open" else "open it by hand")
        raise OcrwatchError(f"cannot open {target} with {cmd[0]} ({exc.strerror}): "
                            f"{fix}") from None


class TrayController:
    """The tray's behaviour, apart from pystray: state, menu actions, notifications.

    Tested directly; :func:`run_tray` binds it to a pystray icon.
    """

    def __init__(self, target: Controllable, *,
                 opener: Callable[[str | Path], None] = open_path,
                 notify: Callable[[str, str], None] | None = None) -> None:
        self.target = target
        self.opener = opener
        self.notify = notify
        self.quit_requested = threading.Event()
        self.wake = threading.Event()  # set by actions: redraw now, not at the next poll
        self._status = Status()
        self._seen_failures: set[tuple[str, float | None]] | None = None

    @property
    def status(self) -> Status:
        return self._status

    def open(self, target: str | Path) -> None:
        """Open ``target`` for the user; when that cannot work, say why where it is seen:
        a notification (a menu click has no other place to answer) and the log."""
        try:
            self.opener(target)
        except OcrwatchError as exc:
            log.warning("tray: %s", exc)
            if self.notify is not None:
                self.notify(str(exc), "ocrwatch cannot open it")

    def refresh(self) -> Status:
        """Poll the daemon; notify about failures that are new since the last poll."""
        st = self.target.status()
        self._status = st
        keys = {(f.path, f.when) for f in st.recent_failures}
        if self._seen_failures is not None and self.notify is not None:
            for f in st.recent_failures:
                if (f.path, f.when) not in self._seen_failures:
                    self.notify(f"{Path(f.path).name}: {f.reason}",
                                "ocrwatch could not read a file")
        # Failures from before the tray started are not news.
        self._seen_failures = (self._seen_failures or set()) | keys
        return st

    # Menu actions. Each one refreshes, so the menu and icon follow at once.

    def toggle_pause(self) -> None:
        if self._status.paused:
            log.info("resumed from the tray")
            self.target.resume()
        else:
            log.info("paused from the tray")
            self.target.pause()
        self.refresh()
        self.wake.set()

    def open_search(self) -> None:
        """The search page in the default browser (its server starts on first use)."""
        web_url = getattr(self.target, "web_url", None)
        if web_url is not None:
            self.open(str(web_url()))

    def open_inbox(self, index: int = 0) -> None:
        inbox = self._status.inbox or (str(paths.default_inbox()),)
        self.open(inbox[min(index, len(inbox) - 1)])

    def open_last_result(self) -> None:
        last = self._status.last_result
        if last:
            self.open(last)

    def open_log(self) -> None:
        if self._status.log_file:
            self.open(self._status.log_file)

    def failed_report(self) -> str:
        failures = self._status.recent_failures
        lines = ["Files ocrwatch could not read", ""]
        for f in failures:
            lines += [f.path, f"    {f.reason}", f"    {f.when_text}", ""]
        if not failures:
            lines.append(f"{self._status.failed} failed files, none recently.")
        lines.append("Fix or replace a file and drop it into the inbox again, or use "
                     "'Retry failed files' in the tray menu.")
        return "\n".join(lines) + "\n"

    def show_failed(self) -> None:
        report = paths.runtime_dir() / "failed-files.txt"
        report.write_text(self.failed_report(), encoding="utf-8")
        self.open(report)

    def retry_failed(self) -> None:
        n = self.target.retry(None, True)
        log.info("queued %d failed files again from the tray", n)
        self.refresh()
        self.wake.set()

    def quit(self) -> None:
        log.info("quit from the tray")
        self.quit_requested.set()
        self.wake.set()
        self.target.request_stop()

    def menu_key(self) -> tuple[Any, ...]:
        """What the menu's items (not its numbers) depend on."""
        st = self._status
        return st.paused, st.failed > 0, bool(st.last_result), st.inbox, look(st)


# --------------------------------------------------------------------------- backends


def has_display(environ: Mapping[str, str] | None = None, platform: str | None = None) -> bool:
    env = os.environ if environ is None else environ
    plat = sys.platform if platform is None else platform
    if plat in ("darwin", "win32"):
        return True
    return bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))


def candidates(backend: str | None = None, *, environ: Mapping[str, str] | None = None,
               platform: str | None = None) -> list[str]:
    """pystray backends to try, in order."""
    env = os.environ if environ is None else environ
    plat = sys.platform if platform is None else platform
    forced = backend or env.get("PYSTRAY_BACKEND")
    if forced:
        return [forced]
    if plat == "darwin":
        return ["darwin"]
    if plat == "win32":
        return ["win32"]
    return ["appindicator", "gtk", "xorg"]


def _session_bus_ok() -> bool:
    """GTK backends talk to D-Bus (notifications); without a session bus they fail."""
    try:
        gi = importlib.import_module("gi")
        gi.require_version("Gio", "2.0")
        gio = importlib.import_module("gi.repository.Gio")
        gio.bus_get_sync(gio.BusType.SESSION, None)
    except Exception as exc:
        log.debug("no D-Bus session bus: %s", exc)
        return False
    return True


def load_backend(name: str) -> ModuleType:
    """Import ``pystray._<name>`` without letting pystray pick (and open) another first."""
    if "pystray" not in sys.modules:
        saved = os.environ.get("PYSTRAY_BACKEND")
        # The package picks a backend at import time; 'dummy' always imports.
        os.environ["PYSTRAY_BACKEND"] = "dummy"
        try:
            importlib.import_module("pystray")
        finally:
            if saved is None:
                del os.environ["PYSTRAY_BACKEND"]
            else:
                os.environ["PYSTRAY_BACKEND"] = saved
    if name in ("gtk", "appindicator") and not _session_bus_ok():
        raise ImportError("no D-Bus session bus (start ocrwatch inside your desktop session, "
                          "or under dbus-run-session)")
    return importlib.import_module(f"pystray._{name}")


def choose_backend(backend: str | None = None) -> tuple[str, ModuleType] | None:
    """The first backend that loads, or None (logged) when none does."""
    errors: list[str] = []
    names = candidates(backend)
    for name in names:
        try:
            module = load_backend(name)
        except Exception as exc:  # ImportError, or Xlib failing to open the display
            errors.append(f"{name}: {exc}")
            continue
        if name == "xorg" and len(names) > 1:
            log.warning(
                "tray: using pystray's plain X backend, which has no menu (%s). Click the "
                "icon to pause or resume. For the full menu install the system packages named in "
                "the README (or by `ocrwatch doctor`), then `make run` again, which builds "
                "PyGObject.",
                "; ".join(errors))
        return name, module
    log.warning("no tray backend could start (%s): running without a tray icon",
                "; ".join(errors))
    return None


# --------------------------------------------------------------------------- running


def run_tray(target: Controllable, stop: threading.Event, *,
             backend: str | None = None, poll_seconds: float = POLL_SECONDS) -> bool:
    """Show the tray icon and run its loop on this (the main) thread.

    Returns when the user picks Quit (after calling ``target.request_stop()``), when
    ``stop`` is set, or when the loop is interrupted; True then. Returns False at once
    when there is no display or no tray backend can start: the daemon carries on
    without an icon. Call it on the main thread.
    """
    global _said_headless
    if threading.current_thread() is not threading.main_thread():
        raise OcrwatchError("run_tray must be called on the main thread (pystray needs it)")
    if not has_display():
        if not _said_headless:
            log.info("no display: running without a tray icon")
            _said_headless = True
        return False
    chosen = choose_backend(backend)
    if chosen is None:
        return False
    name, module = chosen
    pystray = sys.modules["pystray"]
    previous_sigint = signal.getsignal(signal.SIGINT)

    base: Any = module.Icon

    class Icon(base):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._last_dock = time.monotonic()
            self._embedded = False
            self._size = (24, 24)
            if name == "xorg":
                self._send_from_other_threads()
                # pystray's X window asks for exposure and structure events only, so a
                # click never reaches it (pystray issue #151); ask for button presses too.
                x = importlib.import_module("Xlib.X")
                self._window.change_attributes(
                    event_mask=x.ExposureMask | x.StructureNotifyMask | x.ButtonPressMask)
                self._display.flush()

        def dock_if_needed(self) -> None:
            """X fallback: ask the tray host again until it has taken the icon in.

            pystray asks once; a tray host that is not there yet (a login, a restarted
            panel) or not yet listening (seen with trayer under load) never shows the
            icon. Called from the polling thread; the X work itself runs on pystray's X
            thread (``_update_title`` is dispatched there), since Xlib calls from two
            threads can deadlock.
            """
            if name != "xorg" or self._embedded:
                return
            now = time.monotonic()
            if now - self._last_dock >= DOCK_RETRY_SECONDS:
                self._last_dock = now
                self._update_title()

        def _send_from_other_threads(self) -> None:
            """X fallback: hand work to pystray's X thread over a connection of our own.

            pystray's X backend runs icon and title changes on its X thread by sending
            that thread a message over the shared connection, from the calling thread.
            python-xlib then sometimes leaves the X thread waiting forever for its next
            reply (seen as a tray that froze under load). The message is sent over a
            second connection instead, so the shared one is only ever used by one thread.
            """
            xdisplay = importlib.import_module("Xlib.display")
            xlib = importlib.import_module("Xlib.X")
            self._sender = xdisplay.Display()
            self._sender_lock = threading.Lock()
            for method in ("_show", "_hide", "_update_icon", "_update_title", "_stop"):
                atom = self._display.intern_atom(f"_PYSTRAY_{method.upper()}")
                original = types.MethodType(getattr(Icon, method), self)
                setattr(self, method, self._dispatcher(original, atom, xdisplay, xlib))

        def _dispatcher(self, original: Any, atom: int, xdisplay: Any, xlib: Any) -> Any:
            def dispatch() -> None:
                deadline = time.monotonic() + 10
                while getattr(self, "_thread", None) is None and time.monotonic() < deadline:
                    time.sleep(0.01)  # the X thread is starting
                thread = getattr(self, "_thread", None)
                if thread is None or threading.current_thread().ident == thread.ident:
                    original()
                    return
                with self._sender_lock:
                    window = self._sender.create_resource_object("window", self._window.id)
                    window.send_event(xdisplay.event.ClientMessage(
                        window=self._window.id, client_type=atom,
                        data=(32, (xlib.CurrentTime, 0, 0, 0, 0))),
                        event_mask=xlib.NoEventMask)
                    self._sender.flush()
                    result = self._queue.get()
                if result is not True:
                    raise result[1].with_traceback(result[2])

            return dispatch

        def _on_expose(self, event: Any) -> None:
            # Remember the size the tray host gave the icon (ConfigureNotify carries it),
            # so that drawing needs no round trip to the X server.
            if event.window.id == self._window.id and hasattr(event, "width"):
                self._size = (max(1, event.width), max(1, event.height))
            super()._on_expose(event)

        def _draw(self) -> None:
            # pystray asks the server for the window's size on every redraw. When another
            # thread hands pystray a new icon or title at that moment, python-xlib can
            # wait for that reply forever (seen under load); draw at the size the host
            # last configured instead.
            if name != "xorg":
                super()._draw()
                return
            xerror = importlib.import_module("Xlib.error")
            try:
                self._assert_icon_data(*self._size)
                self._window.put_pil_image(self._gc, 0, 0, self._icon_data)
            except xerror.BadDrawable:
                pass  # the window is gone

        def _check_docked(self) -> None:
            """On the X thread: is the window embedded? If not, ask the host to dock it."""
            try:
                root = self._display.screen().root
                self._embedded = self._window.query_tree().parent.id != root.id
                if not self._embedded:
                    self._assert_docked()
                    log.info("tray: asked the tray host again to show the icon")
            except AssertionError:
                pass  # still no tray host; try again later
            except Exception as exc:
                log.debug("tray: docking failed: %s", exc)

        def _initialize(self) -> None:
            super()._initialize()
            # pystray's GTK code resets SIGINT to SIG_DFL, which would kill the daemon
            # without its clean-up; give the daemon's handler back.
            if previous_sigint is not None:
                signal.signal(signal.SIGINT, previous_sigint)

        def _finalize(self) -> None:
            # Without a notification server, pystray's GTK clean-up raises while closing
            # a notification that was never shown.
            try:
                super()._finalize()
            except Exception as exc:
                log.debug("tray clean-up: %s", exc)
            sender = getattr(self, "_sender", None)
            if sender is not None:
                with contextlib.suppress(Exception):
                    sender.close()

        def _on_status_icon_activate(self, status_icon: Any) -> None:
            # GTK backend: a left click opens the menu too (pystray would run the
            # default item, and there is none outside the X fallback).
            gtk = importlib.import_module("gi.repository.Gtk")
            self._on_status_icon_popup_menu(status_icon, 1, gtk.get_current_event_time())

        def _update_title(self) -> None:
            super()._update_title()
            if name == "xorg":
                self._check_docked()
            # pystray's GTK backend sets the StatusIcon's title, which no tray shows.
            status_icon = getattr(self, "_status_icon", None)
            if status_icon is not None:
                glib = importlib.import_module("gi.repository.GLib")
                glib.idle_add(lambda: status_icon.set_tooltip_text(self.title) and False)

    controller = TrayController(target)
    try:
        controller.refresh()
    except Exception:
        log.exception("tray: the daemon's status could not be read; drawing it idle")
    try:
        icon = Icon("ocrwatch", icon=draw_icon(controller.status),
                    title=tooltip(controller.status),
                    menu=_menu(pystray, controller, default_toggles=(name == "xorg")))
    except Exception as exc:  # the display went away, the tray host refused us...
        log.warning("the tray icon could not be created (%s): running without it", exc)
        return False
    if icon.HAS_NOTIFICATION:
        controller.notify = lambda message, title: icon.notify(message, title)
    done = threading.Event()

    def poll(icon_: Any) -> None:
        icon_.visible = True
        _update_title_now(icon_)
        last_icon, last_menu, last_menu_time = icon_key(controller.status), None, 0.0
        last_numbers: tuple[str, ...] = ()
        last_title = icon_.title
        try:
            while not (stop.is_set() or controller.quit_requested.is_set() or done.is_set()):
                try:
                    st = controller.refresh()
                except Exception:
                    log.exception("tray: the daemon's status could not be read")
                    st = controller.status
                icon_.dock_if_needed()
                key = icon_key(st)
                if key != last_icon:
                    icon_.icon = draw_icon(st)
                    last_icon = key
                title = tooltip(st)
                if title != last_title:
                    icon_.title = title
                    last_title = title
                # Rebuild the menu at once when its items change, and at most every few
                # seconds for numbers alone (some trays close an open menu on a rebuild).
                mkey, numbers = controller.menu_key(), tuple(status_lines(st))
                now = time.monotonic()
                if mkey != last_menu or (numbers != last_numbers
                                         and now - last_menu_time > MENU_REFRESH_SECONDS):
                    icon_.update_menu()
                    last_menu, last_numbers, last_menu_time = mkey, numbers, now
                controller.wake.wait(poll_seconds)
                controller.wake.clear()
        finally:
            icon_.stop()

    log.info("tray icon shown (pystray backend %s)", name)
    try:
        icon.run(setup=poll)
    finally:
        done.set()
        controller.wake.set()
        setup_thread = getattr(icon, "_setup_thread", None)
        if setup_thread is not None and setup_thread is not threading.current_thread():
            setup_thread.join(timeout=poll_seconds + 5)
        if not (stop.is_set() or controller.quit_requested.is_set()):
            # The loop ended by itself (Ctrl+C in a terminal, the display went away):
            # the daemon stops too rather than run on without its icon.
            log.info("tray loop ended; stopping the daemon")
            target.request_stop()
    return True


def _update_title_now(icon: Any) -> None:
    # The first title is set before the icon is visible, where pystray ignores it.
    with_title = icon.title
    icon._title = ""
    icon.title = with_title


def _menu(pystray: Any, c: TrayController, *, default_toggles: bool) -> Any:
    Menu, Item = pystray.Menu, pystray.MenuItem

    def guard(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except Exception:
                log.exception("tray: menu action failed")
        return run

    def inbox_items() -> Any:
        inbox = c.status.inbox
        if len(inbox) <= 1:
            return Item("Open inbox", guard(c.open_inbox))
        return Item("Open inbox", Menu(*[
            Item(str(folder), guard(lambda i=i: c.open_inbox(i)))  # type: ignore[misc]
            for i, folder in enumerate(inbox)]))

    def status_items() -> Any:
        lines = status_lines(c.status)
        items = [Item(line, None, enabled=False) for line in lines]
        items.append(Menu.SEPARATOR)
        items.append(Item("Open log file", guard(c.open_log),
                          enabled=lambda _item: bool(c.status.log_file)))
        return items

    def items() -> Any:
        failed = c.status.failed
        return [
            Item("Pause", guard(c.toggle_pause),
                 checked=lambda _item: c.status.paused,
                 default=default_toggles),
            Menu.SEPARATOR,
            Item("Search…", guard(c.open_search)),
            inbox_items(),
            Item("Open last result", guard(c.open_last_result),
                 enabled=bool(c.status.last_result)),
            Item(f"Show failed files ({failed})" if failed else "Show failed files",
                 guard(c.show_failed), enabled=failed > 0),
            Item("Retry failed files", guard(c.retry_failed), enabled=failed > 0),
            Item("Status", Menu(status_items)),
            Menu.SEPARATOR,
            Item("Quit", guard(c.quit)),
        ]

    return Menu(items)
