"""Which pystray backend the tray runs on, and loading it without pystray picking its own.

On Linux: AppIndicator, then GTK (both need PyGObject), then ``sni``, ocrwatch's own
StatusNotifierItem over D-Bus (``ocrwatch.tray.sni``; needs a panel that hosts such items,
seen as a StatusNotifierWatcher on the session bus), then pystray's plain X backend, which
has no menu.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Mapping
from types import ModuleType

from ocrwatch.hooks.notify import session_bus

log = logging.getLogger(__name__)


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
    return ["appindicator", "gtk", "sni", "xorg"]


WHAT = {
    "appindicator": "AppIndicator through PyGObject, with its menu",
    "gtk": "a GTK status icon through PyGObject, with its menu",
    "sni": "a StatusNotifierItem over D-Bus, with its menu",
    "xorg": "pystray's plain X icon, without a menu",
}
WATCHER = "org.kde.StatusNotifierWatcher"
PANELS = ("KDE, GNOME with the AppIndicator extension, Xfce, Cinnamon, MATE, LXQt")


def sni_problem(environ: Mapping[str, str] | None = None, timeout: float = 2.0) -> str | None:
    """None when the session bus has a StatusNotifierWatcher (a panel that hosts
    StatusNotifierItems), else why the ``sni`` backend cannot show an icon."""
    address = session_bus(environ)
    if address is None:
        return "no D-Bus session bus"
    try:
        from jeepney.bus_messages import message_bus
        from jeepney.io.blocking import open_dbus_connection
    except ImportError:
        return "jeepney is not installed"
    try:
        with open_dbus_connection(bus=address) as conn:
            owned = conn.send_and_get_reply(message_bus.NameHasOwner(WATCHER),
                                            timeout=timeout).body[0]
            if not owned:
                return ("no StatusNotifierWatcher on the session bus (the panel does not "
                        "host StatusNotifierItems)")
    except Exception as exc:  # a refused connection, a timeout
        return f"the D-Bus session bus does not answer ({exc or exc.__class__.__name__})"
    return None


def _session_bus_ok() -> bool:
    """GTK backends talk to D-Bus (notifications); without a session bus they fail."""
    try:
        gi = importlib.import_module("gi")
    except ImportError as exc:
        raise ImportError("PyGObject is not installed") from exc
    try:
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
    if name == "sni":
        problem = sni_problem()
        if problem is not None:
            raise ImportError(problem)
        return importlib.import_module("ocrwatch.tray.sni")
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
                "icon to pause or resume. The menu comes on a panel that hosts "
                "StatusNotifierItems (%s), or with PyGObject: `ocrwatch doctor` names what "
                "to install.",
                "; ".join(errors), PANELS)
        else:
            log.info("tray: backend %s, %s%s", name, WHAT.get(name, "forced"),
                     f" ({'; '.join(errors)})" if errors else "")
        return name, module
    log.warning("no tray backend could start (%s): running without a tray icon",
                "; ".join(errors))
    return None
