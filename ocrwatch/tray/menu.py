"""What the tray shows and does, apart from pystray: tooltip, status lines, menu actions.

:class:`TrayController` holds the state and the actions and is tested directly;
:func:`build_menu` binds it to pystray's menu items.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ocrwatch.control.protocol import Controllable
from ocrwatch.core import events as ev
from ocrwatch.core.errors import MachineError, OcrwatchError
from ocrwatch.core.progress import eta_text, rate_text, short
from ocrwatch.core.status import Status, in_hand
from ocrwatch.fs import paths
from ocrwatch.tray.icon import look

log = logging.getLogger(__name__)


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
    parts = [f"ocrwatch: {words}", f"{status.in_queue} in queue"]
    progress = short(status.progress)
    parts.append(progress if progress else f"{status.pages_today} pages today")
    if status.failed:
        parts.append(f"{status.failed} failed")
    if status.doubted:
        parts.append(f"{status.doubted} read with doubts")
    return ", ".join(parts)


def status_lines(status: Status) -> list[str]:
    """The lines of the menu's Status submenu."""
    engine = status.engine
    lines = [f"State: {status.state}, {status.queued} waiting, {in_hand(status)}"]
    lines += [f"Reading: {r.text}" for r in status.reading[:3]]
    progress = status.progress
    if progress.pages_left or progress.pages_done:
        lines.append(f"Pages: {progress.pages_done} done, {progress.pages_left} left")
        lines.append(f"Done in: {eta_text(progress)}")
    if progress.pages_per_second is not None:
        lines.append(f"Rate: {rate_text(progress.pages_per_second)} while reading")
    lines += [f"Waiting: {w.files} {w.what} ({w.why})" for w in progress.waiting]
    lines.append(f"Engine: {engine.name} ({engine.state})")
    if engine.facts.get("waiting_reason"):
        lines.append(f"Waiting: {engine.facts['waiting_reason']}")
    if status.languages:
        lines.append(f"Languages: {', '.join(status.languages)}")
    mb = engine.gpu_memory_mb
    lines.append(f"GPU memory held: {mb:.0f} MB" if mb is not None else "GPU memory held: none")
    lines.append(f"Today: {status.pages_today} pages, "
                 f"{status.done} files done"
                 + (f" ({status.doubted} read with doubts)" if status.doubted else "")
                 + f", {status.failed} failed")
    # A file read with doubts keeps its original: the user should look at its text.
    lines += [f"Doubt: {Path(d.path).name}: {d.reason}" for d in status.doubts[:3]]
    return lines




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
        raise MachineError(f"cannot open {target} with {cmd[0]} ({exc.strerror}): "
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

    def listen(self, events: ev.Events) -> Callable[[], None]:
        """Follow a daemon's event stream (a tray in the daemon's own process): a file
        queued, done, failed or retired redraws the icon, the menu and the failure notice
        at once instead of at the next poll. Returns what stops it."""
        stops = [events.subscribe(kind, lambda _e: self.wake.set())
                 for kind in (ev.FileQueued, ev.FileDone, ev.FileFailed, ev.OriginalRetired)]

        def stop() -> None:
            for unsubscribe in stops:
                unsubscribe()

        return stop

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

    def click(self, *, has_menu: bool = False) -> None:
        """A click on the icon (pystray's plain X backend, which has no menu, or a left
        click on a StatusNotifierItem): pause or resume, and say so with what a click
        does, since nothing else on screen does."""
        self.toggle_pause()
        if self._status.paused:
            title = "ocrwatch paused"
            body = ("New files wait in the queue and are not read. Click the icon again "
                    "to resume.")
        else:
            title = "ocrwatch reads again"
            body = "Queued and new files are read. A click on the icon pauses it."
        if has_menu:
            body += " Its menu (a right click) has the rest."
        else:
            body += (" This tray has no menu: `ocrwatch doctor` names the packages that "
                     "give it one.")
        log.info("tray: %s (a click on the icon%s)", title,
                 "" if has_menu else ", which has no menu")
        if self.notify is not None:
            # Off the tray's event thread: a notification server may take seconds.
            threading.Thread(target=self.notify, args=(body, title), daemon=True,
                             name="ocrwatch-tray-notify").start()

    def open_search(self) -> None:
        """The search page in the default browser (its server starts on first use)."""
        # Never the token on the browser's command line: a one-time code in a 0600 file.
        launch = getattr(self.target, "web_launch", None) or getattr(self.target, "web_url",
                                                                    None)
        if launch is not None:
            self.open(str(launch()))

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


def build_menu(pystray: Any, c: TrayController, *, default_toggles: bool) -> Any:
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
            # Without a menu (the X fallback), the default item is what a click does:
            # pause or resume, said in a notification.
            Item("Pause", guard(c.click if default_toggles else c.toggle_pause),
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
