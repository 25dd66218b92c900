"""Desktop notifications over D-Bus (org.freedesktop.Notifications), through jeepney.

jeepney speaks D-Bus in pure Python: no GTK or PyGObject is needed, so the daemon can
notify from any thread, with or without a tray. Where there is no session bus (a server,
macOS) a notification is logged instead.

:class:`BatchNotice` is the one notification the daemon sends by itself: when a batch of
files is over, how many were read and which failed. It follows the daemon's events.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ocrwatch.config import Config
from ocrwatch.core import events as ev

log = logging.getLogger(__name__)

APP_NAME = "ocrwatch"
TIMEOUT = 5.0


def session_bus(environ: Mapping[str, str] | None = None) -> str | None:
    """The session bus's address as D-Bus libraries find it: DBUS_SESSION_BUS_ADDRESS,
    else the socket a systemd user session opens at $XDG_RUNTIME_DIR/bus (jeepney's own
    "SESSION" reads the variable only); None: no session bus."""
    env = os.environ if environ is None else environ
    if env.get("DBUS_SESSION_BUS_ADDRESS"):
        return env["DBUS_SESSION_BUS_ADDRESS"]
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and os.path.exists(os.path.join(runtime, "bus")):
        return f"unix:path={os.path.join(runtime, 'bus')}"
    return None


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
    bus = session_bus()
    if bus is None:
        log.info("notification not shown (no D-Bus session bus): %s: %s", title, body)
        return False
    try:
        with open_dbus_connection(bus=bus) as conn:
            reply = conn.send_and_get_reply(message, timeout=TIMEOUT)
    except Exception as exc:  # no bus, no server, a timeout: never the daemon's problem
        log.info("notification not shown (%s): %s: %s", exc or exc.__class__.__name__,
                 title, body)
        return False
    if reply.header.message_type.name == "error":
        log.info("notification refused (%s): %s: %s", reply.body, title, body)
        return False
    return True


@dataclass
class _Batch:
    done: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)


class BatchNotice:
    """Files done and failed since the last notice, counted from the daemon's events, and
    the notice once the daemon is idle and no outcome is being recorded (``notify_batch``).

    :meth:`check` is called by the hook runner's thread when it has nothing queued, so the
    notice comes after the batch's hooks have started.
    """

    def __init__(self, config: Config, is_idle: Callable[[], bool],
                 notify: Callable[[str, str], object] | None = None) -> None:
        self.config = config
        self.is_idle = is_idle
        self.notify = notify or send
        self._lock = threading.Lock()
        self._batch = _Batch()
        self._held = 0  # outcomes being recorded: their files are not in the batch yet

    def listen(self, events: ev.Events) -> Callable[[], None]:
        """Count what the stream tells; returns what stops it."""
        stops = [
            events.subscribe(ev.OutcomeStarted, lambda _e: self._hold(1)),
            events.subscribe(ev.OutcomeEnded, lambda _e: self._hold(-1)),
            events.subscribe(ev.FileDone, lambda _e: self._count(done=True)),
            events.subscribe(ev.FileFailed, lambda e: self._count(failed=(e.path.name,
                                                                          e.reason))),
        ]

        def stop() -> None:
            for unsubscribe in stops:
                unsubscribe()

        return stop

    def _hold(self, step: int) -> None:
        with self._lock:
            self._held += step

    def _count(self, done: bool = False, failed: tuple[str, str] | None = None) -> None:
        if not self.config.notify_batch:
            return
        with self._lock:
            if done:
                self._batch.done += 1
            if failed is not None:
                self._batch.failed.append(failed)

    def check(self) -> None:
        """Send the notice when the batch is over: files counted, none being recorded,
        the daemon idle."""
        with self._lock:
            batch = self._batch
            if not self.config.notify_batch or not (batch.done or batch.failed) \
                    or self._held:
                return
        if not self.is_idle():
            return
        with self._lock:
            batch, self._batch = self._batch, _Batch()
        total = batch.done + len(batch.failed)
        title = f"ocrwatch: {total} file{'s' if total != 1 else ''} read"
        if batch.failed:
            lines = [f"{batch.done} done, {len(batch.failed)} failed:"]
            lines += [f"{name}: {reason}" for name, reason in batch.failed[:5]]
            if len(batch.failed) > 5:
                lines.append(f"and {len(batch.failed) - 5} more (ocrwatch status)")
            body = "\n".join(lines)
        else:
            body = f"{batch.done} done, none failed"
        self.notify(title, body)
