"""The tray icon: what the daemon is doing at a glance, and a menu to steer it.

pystray runs on the main thread (macOS and GTK insist); the daemon's work runs in other
threads. The icon is redrawn from ``target.status()``, polled about once a second from
pystray's setup thread; menu actions run on the main thread and call the daemon directly.

Backends. pystray's plain X backend has no menus at all (``HAS_MENU = False``), so on
Linux the tray tries AppIndicator, then GTK (both need PyGObject and a D-Bus session
bus), then ``sni``, a StatusNotifierItem with its menu over D-Bus (``sni.py``, jeepney
only: no GTK), when the panel hosts such items, and only then falls back to the X
backend, with a warning and a click that toggles pause. ``PYSTRAY_BACKEND`` (or the
``backend`` argument) forces one backend.

Nothing here imports pystray or GTK at module import time: importing pystray picks a
backend and opens the display on the spot, which fails on a headless machine.
"""

from ocrwatch.tray.app import run_tray
from ocrwatch.tray.backends import candidates, choose_backend, has_display
from ocrwatch.tray.icon import COLOURS, FAILED, WHITE, draw_icon, icon_key, look
from ocrwatch.tray.menu import TrayController, open_path, status_lines, tooltip

__all__ = ["COLOURS", "FAILED", "WHITE", "TrayController", "candidates", "choose_backend",
           "draw_icon", "has_display", "icon_key", "look", "open_path", "run_tray",
           "status_lines", "tooltip"]
