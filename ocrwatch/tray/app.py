"""Running the tray: pystray's icon, subclassed for the fixes each backend needs, and the
loop that redraws it from the daemon's status."""

from __future__ import annotations

import contextlib
import importlib
import logging
import signal
import sys
import threading
import time
import types
from typing import Any

from ocrwatch.control.protocol import Controllable
from ocrwatch.core.errors import StateError
from ocrwatch.core.events import Events
from ocrwatch.tray.backends import choose_backend, has_display
from ocrwatch.tray.icon import draw_icon, icon_key
from ocrwatch.tray.menu import TrayController, build_menu, status_lines, tooltip

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
DOCK_RETRY_SECONDS = 3.0  # X fallback: how often to ask a tray host that ignored us
MENU_REFRESH_SECONDS = 5.0  # numbers-only menu changes (speed, counts) wait this long

_said_headless = False


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
        raise StateError("run_tray must be called on the main thread (pystray needs it)")
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
            self._asked = -DOCK_RETRY_SECONDS  # when the tray host was last asked to dock
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
            """X fallback: ask the tray host again whenever the icon is not in it.

            pystray asks once; a tray host that is not there yet (a login, a restarted
            panel) or not yet listening (seen with trayer under load) never shows the
            icon, and one that let the icon go (see ``_assert_docked``) leaves it on the
            root window, unmapped. Called from the polling thread; the X work itself runs
            on pystray's X thread (``_update_title`` is dispatched there), since Xlib
            calls from two threads can deadlock.
            """
            if name != "xorg":
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

        def _in_tray_host(self) -> bool:
            """On the X thread: whether a tray host holds the window (its parent)."""
            root = self._display.screen().root
            return bool(self._window.query_tree().parent.id != root.id)

        def _assert_docked(self) -> None:
            """X fallback, on the X thread: pystray's, but the tray host is asked to dock
            the icon only when it does not hold it, and not twice within
            ``DOCK_RETRY_SECONDS``.

            pystray asks on every change of the picture, and twice as the icon is shown.
            A tray host built on GTK's egg tray manager (trayer, older panels) makes a
            new socket for each request and moves the icon into it; when the old socket
            goes, it can put the icon back on the root window, unmapped: an icon gone
            for good (seen in the tests about once in 50 starts).
            """
            if self._systray_manager is None:  # (only pystray's X backend calls this)
                super()._assert_docked()  # finds the tray host; raises when there is none
                self._asked = time.monotonic()
                return
            if (time.monotonic() - self._asked < DOCK_RETRY_SECONDS
                    or self._in_tray_host()):
                return
            super()._assert_docked()
            self._asked = time.monotonic()
            log.info("tray: asked the tray host again to show the icon")

        def _check_docked(self) -> None:
            """On the X thread: ask the tray host to dock the icon if it does not hold it."""
            try:
                self._assert_docked()
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
                    menu=build_menu(pystray, controller, default_toggles=(name == "xorg")))
    except Exception as exc:  # the display went away, the tray host refused us...
        log.warning("the tray icon could not be created (%s): running without it", exc)
        return False
    if name == "sni":  # a left click: what a click does on the X fallback, said the same way
        icon.activate = lambda: controller.click(has_menu=True)
    if icon.HAS_NOTIFICATION:
        controller.notify = lambda message, title: icon.notify(message, title)
    else:
        # The plain X backend cannot notify: D-Bus through jeepney can, without GTK.
        from ocrwatch.hooks import notify

        def by_dbus(message: str, title: str) -> None:
            notify.send(title, message)

        controller.notify = by_dbus
    done = threading.Event()
    # In the daemon's own process the tray follows its events; a tray of another process
    # (or a target without them) polls alone.
    events = getattr(target, "events", None)
    stop_listening = controller.listen(events) if isinstance(events, Events) else None

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
        if stop_listening is not None:
            stop_listening()
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
