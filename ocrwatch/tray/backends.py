"""Which pystray backend the tray runs on, and loading it without pystray picking its own."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Mapping
from types import ModuleType

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
