"""``ocrwatch doctor`` on the desktop: the tray's display and backend, opening files, and
notifications.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import shutil
import sys
from collections.abc import Callable, Mapping
from typing import Any

from ocrwatch.doctor.check import NET_TIMEOUT, Check, _version
from ocrwatch.doctor.install import Install, apt_install, detect
from ocrwatch.hooks.notify import session_bus

TRAY_DEBIAN = ["gcc", "pkg-config", "python3-dev", "libgirepository1.0-dev", "libcairo2-dev",
               "gir1.2-gtk-3.0", "gir1.2-ayatanaappindicator3-0.1"]  # as the Makefile's


def tray_fix(install: Install) -> str:
    """What gives the tray its menu: the system packages PyGObject builds against (those
    not installed yet, where dpkg tells), then the tray extra, as this copy was installed."""
    apt = apt_install(TRAY_DEBIAN)
    extra = install.extra("tray")
    if install.kind == "checkout":
        extra += " again (it builds the tray extra, PyGObject)"
    if apt is None:
        return f"the system packages it builds against are installed: run {extra}"
    return f"{apt} (Fedora and Arch: see the README), then {extra}"


def check_tray(environ: Mapping[str, str] | None = None,
               platform: str | None = None, install: Install | None = None,
               sni: Callable[[Mapping[str, str]], str | None] | None = None) -> list[Check]:
    """The tray the daemon would show, in the order it tries them: AppIndicator or GTK
    (PyGObject), a StatusNotifierItem over D-Bus (``sni``: why not, or None), or the X
    fallback without a menu."""
    env = os.environ if environ is None else environ
    plat = sys.platform if platform is None else platform
    from ocrwatch.tray import has_display
    from ocrwatch.tray.backends import PANELS, WHAT, sni_problem

    if not has_display(env, plat):
        return [Check("display and tray", True,
                      "no display: the daemon runs without a tray icon (control it with "
                      "`ocrwatch status | pause | resume | stop`)")]
    if plat in ("darwin", "win32"):
        return [Check("display and tray", True, f"pystray's {plat} backend")]
    forced = env.get("PYSTRAY_BACKEND")
    apt = tray_fix(install or detect())
    gtk = _gtk_problem()
    bus = session_bus(env) is not None
    autolaunch = not bus and bool(env.get("DISPLAY")) and shutil.which("dbus-launch") is not None
    if forced == "xorg":
        return [Check("display and tray", True, "tray backend xorg (PYSTRAY_BACKEND): "
                      f"{WHAT['xorg']} (a click pauses or resumes)")]
    if isinstance(gtk, list) and forced != "sni":
        if not bus and not autolaunch:
            return [Check("display and tray", False,
                          "no D-Bus session bus: the GTK tray backends cannot start",
                          "start ocrwatch from inside your desktop session, or under "
                          "`dbus-run-session ocrwatch run`")]
        backend = forced or ("appindicator" if any("AppIndicator" in h for h in gtk)
                             else "gtk")
        note = "; no session bus yet: GLib will start one with dbus-launch" if autolaunch else ""
        return [Check("display and tray", True,
                      f"display {env.get('DISPLAY') or env.get('WAYLAND_DISPLAY')}, "
                      f"tray backend {backend} (PyGObject {_version('PyGObject') or '?'}), "
                      f"with its menu{note}")]
    why = (sni or sni_problem)(env)
    if why is None:
        unneeded = "" if isinstance(gtk, list) else f"; {gtk}, which is not needed here"
        return [Check("display and tray", True,
                      f"tray backend sni: {WHAT['sni']} (the panel hosts such items"
                      f"{unneeded})")]
    if isinstance(gtk, list):  # only where PYSTRAY_BACKEND asks for sni
        gtk = "PYSTRAY_BACKEND=sni"
    return [Check("display and tray", False,
                  f"{gtk}, and {why}: the tray falls back to the X backend, which has no "
                  "menu (a click pauses or resumes, and a notification says which)",
                  f"for the menu, use a panel that hosts StatusNotifierItems ({PANELS}), "
                  f"or, for the GTK backends: {apt}")]


def _gtk_problem() -> list[str] | str:
    """The GTK namespaces PyGObject offers (Gtk among them), or why it offers none."""
    if importlib.util.find_spec("gi") is None:
        return "PyGObject is missing"
    have = []
    try:
        gi: Any = importlib.import_module("gi")
        for ns, ver in (("Gtk", "3.0"), ("AyatanaAppIndicator3", "0.1"),
                        ("AppIndicator3", "0.1")):
            try:
                gi.require_version(ns, ver)
                have.append(ns)
            except ValueError:
                pass
    except Exception as exc:  # a broken PyGObject install
        return f"PyGObject does not load: {exc}"
    if "Gtk" not in have:
        return "GTK 3 introspection data is missing"
    return have


XDG_UTILS = ("Debian/Ubuntu: sudo apt install xdg-utils; Fedora: sudo dnf install xdg-utils; "
             "Arch: sudo pacman -S xdg-utils")
NOTIFY_SERVER = ("run a notification server in your session: desktops such as GNOME, KDE and "
                 "Xfce have one; elsewhere install and start dunst or mako (Debian/Ubuntu: "
                 "sudo apt install dunst; Fedora: sudo dnf install dunst; Arch: sudo pacman "
                 "-S dunst)")


def notification_server(timeout: float = NET_TIMEOUT) -> str | None:
    """None when the session bus has a notification server (running or activatable),
    else why not."""
    try:
        from jeepney import DBusAddress, new_method_call
        from jeepney.io.blocking import open_dbus_connection
    except ImportError:
        return "jeepney (which ocrwatch notifies with) is not installed"
    bus = DBusAddress("/org/freedesktop/DBus", bus_name="org.freedesktop.DBus",
                      interface="org.freedesktop.DBus")
    name = "org.freedesktop.Notifications"
    address = session_bus()
    if address is None:
        return ("no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is not set, and there is no "
                "$XDG_RUNTIME_DIR/bus)")
    try:
        with open_dbus_connection(bus=address) as conn:
            owned = conn.send_and_get_reply(new_method_call(bus, "NameHasOwner", "s", (name,)),
                                            timeout=timeout).body[0]
            activatable = conn.send_and_get_reply(
                new_method_call(bus, "ListActivatableNames"), timeout=timeout).body[0]
    except Exception as exc:  # a refused connection, a timeout
        return f"no D-Bus session bus ({exc or exc.__class__.__name__})"
    if owned or name in activatable:
        return None
    return "no notification server on the session bus"


def check_desktop(environ: Mapping[str, str] | None = None, platform: str | None = None,
                  notifications: Callable[[], str | None] = notification_server
                  ) -> list[Check]:
    """Whether failures can be shown as notifications, and files opened from the tray."""
    env = os.environ if environ is None else environ
    plat = sys.platform if platform is None else platform
    from ocrwatch.tray import has_display

    if plat in ("darwin", "win32"):
        return [Check("notifications", True, f"{plat}: the system's own")]
    if not has_display(env, plat):
        return [Check("notifications", True, "no display: failures are listed by "
                                             "`ocrwatch status` and in the log")]
    checks = []
    why = notifications()
    checks.append(Check("notifications", why is None,
                        "a notification server answers: failures pop up" if why is None
                        else f"{why}: failures are not shown as they happen (only in the "
                             "log, `ocrwatch status` and the tray)",
                        "" if why is None else NOTIFY_SERVER))
    opener = shutil.which("xdg-open", path=env.get("PATH"))
    checks.append(Check("open files", opener is not None,
                        f"xdg-open ({opener}) opens the inbox and results from the tray"
                        if opener else "xdg-open is missing: the tray's Open inbox, Open "
                                       "last result and Show failed files do nothing",
                        "" if opener else XDG_UTILS))
    return checks
