"""Desktop notifications over D-Bus (org.freedesktop.Notifications), through jeepney.

jeepney speaks D-Bus in pure Python: no GTK or PyGObject is needed, so the daemon can
notify from any thread, with or without a tray. Where there is no session bus (a server,
macOS) a notification is logged instead.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

APP_NAME = "ocrwatch"
TIMEOUT = 5.0


def send(title: str, body: str) -> bool:
    """Show a notification; False (and a log line) when no notification service answers."""
    try:
        from jeepney import DBusAddress, new_method_call
        from jeepney.io.blocking import open_dbus_connection
    except ImportError:
        log.info("notification not shown (jeepney is not installed): %s: %s", title, body)
        return False
    address = DBusAddress("/org/freedesktop/Notifications",
                          bus_name="org.freedesktop.Notifications",
                          interface="org.freedesktop.Notifications")
    message = new_method_call(address, "Notify", "susssasa{sv}i",
                              (APP_NAME, 0, "", title, body, [], {}, -1))
    try:
        with open_dbus_connection(bus="SESSION") as conn:
            reply = conn.send_and_get_reply(message, timeout=TIMEOUT)
    except Exception as exc:  # no bus, no server, a timeout: never the daemon's problem
        log.info("notification not shown (%s): %s: %s", exc or exc.__class__.__name__,
                 title, body)
        return False
    if reply.header.message_type.name == "error":
        log.info("notification refused (%s): %s: %s", reply.body, title, body)
        return False
    return True
