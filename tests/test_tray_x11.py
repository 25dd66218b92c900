"""The tray on a real X display: Xvfb, a real tray host (trayer), the GTK backend.

The real daemon (``ocrwatch run --engine fake``) starts with its tray; the test clicks
the icon with xdotool, opens the menu, toggles pause through it and checks through the
control socket and ``ocrwatch status`` that the daemon paused. A second test drives the
icon through every state with a stand-in daemon in a small script.

Screenshots are taken in every case (the pixel checks read them); with
``OCRWATCH_SCREENSHOTS=docs`` they are also saved as ``docs/tray-*.png``.

Needs (installed by .ci/run): Xvfb, trayer, xdotool, dbus-run-session, ImageMagick's
``import``, and PyGObject with GTK 3. Skipped, saying which is missing, without them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_for
from PIL import Image, ImageDraw

from ocrwatch import tray
from ocrwatch.control.client import request
from ocrwatch.core.errors import OcrwatchError

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("Xvfb", "trayer", "xdotool", "dbus-run-session", "import")
SCREEN = (640, 400)
BACKDROP = "#d5dbe0"

pytestmark = pytest.mark.timeout(240)


def _missing() -> str | None:
    absent = [t for t in TOOLS if shutil.which(t) is None]
    if absent:
        return f"missing programs: {', '.join(absent)} (see .ci/apt-packages.txt)"
    if importlib.util.find_spec("gi") is None:
        return "PyGObject is missing: `make tray-extra` builds it (see the README)"
    probe = subprocess.run(
        [sys.executable, "-c", "import gi; gi.require_version('Gtk', '3.0')"],
        capture_output=True, text=True, timeout=30, check=False)
    if probe.returncode != 0:
        return "GTK 3 introspection data is missing: apt install gir1.2-gtk-3.0"
    return None


# Each poll of the X server runs xdotool, a process: poll gently on a shared machine.
POLL = 0.1


@dataclass
class Geometry:
    x: int
    y: int
    w: int
    h: int

    @property
    def centre(self) -> tuple[int, int]:
        return self.x + self.w // 2, self.y + self.h // 2

    def union(self, other: Geometry) -> Geometry:
        x0, y0 = min(self.x, other.x), min(self.y, other.y)
        x1 = max(self.x + self.w, other.x + other.w)
        y1 = max(self.y + self.h, other.y + other.h)
        return Geometry(x0, y0, x1 - x0, y1 - y0)


class X:
    """One Xvfb display with a tray host, torn down with everything it started."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.display = ""
        self.shots: list[Path] = []
        self.trayer: subprocess.Popen[bytes]

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(DISPLAY=self.display, NO_AT_BRIDGE="1", GDK_BACKEND="x11")
        env.pop("WAYLAND_DISPLAY", None)
        env.pop("DBUS_SESSION_BUS_ADDRESS", None)
        return env

    def start(self, attempts: int = 3) -> None:
        # Another X server starting at the same moment (a parallel test run) can make the
        # first try fail; a fresh server on a fresh display number settles it.
        problems = []
        for _ in range(attempts):
            problem = self._try_start()
            if problem is None:
                return
            problems.append(problem)
            self.close()
            self.procs.clear()
        raise AssertionError("could not start Xvfb and trayer: " + "; ".join(problems))

    def _try_start(self) -> str | None:
        # -noreset: by default the server resets whenever its last client leaves, which
        # drops the backdrop and refuses clients that connect during the reset.
        r, w = os.pipe()
        xlog = self.workdir / "xvfb.log"
        with xlog.open("ab") as err:
            xvfb = subprocess.Popen(
                ["Xvfb", "-displayfd", str(w), "-screen", "0",
                 f"{SCREEN[0]}x{SCREEN[1]}x24", "-nolisten", "tcp", "-noreset"],
                pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        os.close(w)
        self.procs.append(xvfb)
        with os.fdopen(r) as f:
            number = f.readline().strip()
        if not number:
            return f"Xvfb did not report a display number ({xlog.read_text()[-500:]})"
        self.display = f":{number}"
        try:
            wait_for(lambda: self.xdotool("getdisplaygeometry"),
                     10, f"display {self.display}", ignore=(Exception,), interval=POLL)
        except AssertionError as exc:
            return f"{exc}; Xvfb exit status {xvfb.poll()}"
        backdrop = self.workdir / "backdrop.png"
        Image.new("RGB", (8, 8), BACKDROP).save(backdrop)
        # Sets the root window's background and exits (its exit status is not useful).
        subprocess.run(["display", "-window", "root", str(backdrop)], env=self.env,
                       timeout=30, check=False, capture_output=True)
        problem = self.start_tray_host()
        if problem is not None:
            return f"{problem} (Xvfb exit status {xvfb.poll()})"
        return None

    def start_tray_host(self) -> str | None:
        """Start trayer; None once its panel is up, else what went wrong."""
        tlog = self.workdir / "trayer.log"
        with tlog.open("ab") as err:
            self.trayer = trayer = self.spawn(
                ["trayer", "--edge", "top", "--align", "right", "--widthtype", "request",
                 "--height", "36", "--SetDockType", "true", "--transparent", "true",
                 "--alpha", "0", "--tint", "0xf0f0f0"], stdout=err, stderr=err)
        try:
            wait_for(lambda: trayer.poll() is not None
                     or self.xdotool("search", "--name", "^panel$"),
                     20, "the tray host", ignore=(Exception,), interval=POLL)
        except AssertionError as exc:
            return str(exc)
        if trayer.poll() is not None:
            return f"trayer ended on {self.display}: {tlog.read_text()[-500:]}"
        return None

    def stop_tray_host(self) -> None:
        self.trayer.terminate()
        self.trayer.wait(10)
        wait_for(lambda: not self.xdotool("search", "--name", "^panel$"),
                 20, "the tray host to go", ignore=(Exception,), interval=POLL)

    def spawn(self, cmd: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(cmd, env=kw.pop("env", self.env), start_new_session=True,
                                **kw)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in reversed(self.procs):
            # The whole session, even when its leader has ended: a dbus-run-session that
            # exited can leave its dbus-daemon behind in the same process group.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

    def xdotool(self, *args: str) -> str:
        out = subprocess.run(["xdotool", *args], env=self.env, capture_output=True,
                             text=True, timeout=20, check=False)
        return out.stdout.strip()

    def geometry(self, window: str) -> Geometry:
        vals = dict(line.split("=", 1) for line in
                    self.xdotool("getwindowgeometry", "--shell", window).splitlines())
        return Geometry(int(vals["X"]), int(vals["Y"]), int(vals["WIDTH"]), int(vals["HEIGHT"]))

    def tray_icon(self) -> Geometry:
        """The icon's window: its name is the tooltip, which starts with "ocrwatch:"."""
        win = wait_for(lambda: self.xdotool(
            "search", "--onlyvisible", "--name", "^ocrwatch: ").split()[:1],
            60, "the tray icon", ignore=(Exception,), interval=POLL)
        return self.geometry(win[0])

    def visible(self) -> set[str]:
        return set(self.xdotool("search", "--onlyvisible", "--name", "").split())

    def screenshot(self, name: str) -> Image.Image:
        path = self.workdir / f"{name}.png"
        subprocess.run(["import", "-window", "root", str(path)], env=self.env, timeout=30,
                       check=True, capture_output=True)
        self.shots.append(path)
        return Image.open(path).convert("RGB")

    def click(self, at: tuple[int, int], button: int = 1) -> None:
        self.xdotool("mousemove", str(at[0]), str(at[1]), "click", str(button))

    def open_menu(self, icon: Geometry) -> Geometry:
        before = self.visible()
        self.click(icon.centre, button=3)

        def menu() -> Geometry | None:
            for win in self.visible() - before:
                g = self.geometry(win)
                if g.w > 80 and g.h > 80:
                    return g
            return None

        found: Geometry = wait_for(menu, 20, "the tray menu", ignore=(Exception,), interval=POLL)
        return found

    def close_menu(self, menu: Geometry) -> None:
        if any(self.geometry(w) == menu for w in self.visible()):
            self.xdotool("key", "Escape")
        wait_for(lambda: all(
            self.geometry(w) != menu for w in self.visible()),
            20, "the menu to close", ignore=(Exception,), interval=POLL)


@pytest.fixture
def xsession() -> Iterator[X]:
    reason = _missing()
    if reason:
        print(f"tray X11 test skipped: {reason}", file=sys.stderr)
        pytest.skip(reason)
    # AF_UNIX socket paths are short: keep the work folder near the root.
    work = Path(tempfile.mkdtemp(prefix="owx-"))
    x = X(work)
    try:
        x.start()
        yield x
    finally:
        x.close()
        if not os.environ.get("OCRWATCH_KEEP_X11"):
            shutil.rmtree(work, ignore_errors=True)


def icon_colour(shot: Image.Image, icon: Geometry) -> tuple[int, int, int]:
    """The icon's background colour: a pixel at its left edge, halfway down."""
    size = min(icon.w, icon.h)
    left = icon.x + (icon.w - size) // 2
    top = icon.y + (icon.h - size) // 2
    px = shot.getpixel((left + max(2, size // 10), top + size // 2))
    assert isinstance(px, tuple)
    return px[0], px[1], px[2]


def close_to(a: tuple[int, int, int], b: tuple[int, int, int], tol: int = 40) -> bool:
    return all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


def wait_icon(x: X, look: str, shot_name: str) -> tuple[Image.Image, Geometry]:
    want = tray.COLOURS[look]

    def shown() -> tuple[Image.Image, Geometry] | None:
        icon = x.tray_icon()
        shot = x.screenshot(shot_name)
        return (shot, icon) if close_to(icon_colour(shot, icon), want) else None

    result: tuple[Image.Image, Geometry] = wait_for(shown,
                                                    20, f"the {look} icon",
                                                    ignore=(Exception,), interval=0.3)
    return result


def save_doc(shot: Image.Image, icon: Geometry, name: str,
             menu: Geometry | None = None) -> None:
    """With OCRWATCH_SCREENSHOTS set, save a crop of the tray (and menu) there."""
    out = os.environ.get("OCRWATCH_SCREENSHOTS")
    if not out:
        return
    folder = Path(out) if os.path.isabs(out) else ROOT / out
    folder.mkdir(parents=True, exist_ok=True)
    if menu is None:
        # The tray area around the icon, enlarged 3x (pixels kept sharp).
        box = (max(0, icon.x - 24), 0, SCREEN[0], icon.y + icon.h + 8)
        crop = shot.crop(box)
        crop = crop.resize((crop.width * 3, crop.height * 3), Image.Resampling.NEAREST)
    else:
        box = (max(0, menu.x - 16), 0, SCREEN[0], min(SCREEN[1], menu.y + menu.h + 16))
        crop = shot.crop(box)
        crop = crop.resize((crop.width * 2, crop.height * 2), Image.Resampling.NEAREST)
    crop.save(folder / f"tray-{name}.png", optimize=True)


def make_scans(folder: Path, names: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        img = Image.new("RGB", (600, 800), "white")
        ImageDraw.Draw(img).text((40, 40), f"scan {name}", fill="black")
        tmp = folder / f".{name}.part"
        img.save(tmp, format="PNG")
        tmp.rename(folder / name)  # appears whole, as a scanner's finished file would


# --------------------------------------------------------------------------- real daemon


OCRWATCH = [sys.executable, "-m", "ocrwatch"]


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes]
    env: dict[str, str]
    inbox: Path
    sock: Path
    log: Path

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = request("status", socket_path=self.sock, timeout=5)
        return result


def start_daemon(x: X) -> Daemon:
    """``ocrwatch run --engine fake`` with its tray, in a temporary HOME."""
    home = x.workdir / "home"
    run = x.workdir / "run"
    run.mkdir(mode=0o700)
    env = x.env
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(run), XDG_CONFIG_HOME=str(home / ".config"),
               XDG_DATA_HOME=str(home / ".local/share"),
               XDG_STATE_HOME=str(home / ".local/state"),
               PYSTRAY_BACKEND="gtk", OCRWATCH_FAKE_DELAY="1.5",
               OCRWATCH_SETTLE_SECONDS="0.3")
    inbox = home / "OCR-Inbox"
    log = x.workdir / "daemon.log"
    with log.open("wb") as out:
        proc = x.spawn(["dbus-run-session", "--", *OCRWATCH, "run", "--engine", "fake",
                        "--inbox", str(inbox)], env=env, stdout=out, stderr=subprocess.STDOUT)
    d = Daemon(proc, env, inbox, run / "ocrwatch" / "control.sock", log)
    wait_for(d.status, 60, "the daemon's control socket", ignore=(Exception,), interval=POLL)
    return d


def test_tray_pauses_the_real_daemon(xsession: X) -> None:
    x = xsession
    d = start_daemon(x)
    daemon, inbox, env, status, ocrwatch = d.proc, d.inbox, d.env, d.status, OCRWATCH
    try:
        shot, icon = wait_icon(x, "idle", "idle")
        save_doc(shot, icon, "idle")

        # Working: files in the queue, the count on the icon.
        make_scans(inbox, [f"page-{i}.png" for i in range(5)])
        wait_for(lambda: status()["state"] == "working"
                 and status()["queued"] + status()["running"] >= 3,
                 20, "the daemon to work", ignore=(Exception,), interval=POLL)
        shot, icon = wait_icon(x, "working", "working")
        save_doc(shot, icon, "working")

        # Pause through the menu: right click on the icon, click "Pause".
        menu = x.open_menu(icon)
        x.click((menu.x + 40, menu.y + 16))
        wait_for(lambda: status()["paused"] is True, 20, "the daemon to pause",
                 ignore=(Exception,), interval=POLL)
        shot, icon = wait_icon(x, "paused", "paused")
        save_doc(shot, icon, "paused")
        cli = subprocess.run([*ocrwatch, "status", "--json"], env=env, capture_output=True,
                             text=True, timeout=60, check=True)
        assert json.loads(cli.stdout)["paused"] is True

        # Resume through the menu (a left click opens it too), and let the queue drain.
        menu = x.open_menu(icon)
        x.click((menu.x + 40, menu.y + 16))
        wait_for(lambda: status()["paused"] is False,
                 20, "the daemon to resume", ignore=(Exception,), interval=POLL)
        wait_for(lambda: status()["done"] >= 5, 60, "the queue to drain",
                 ignore=(Exception,), interval=POLL)

        # A file that fails: the red badge, and "Show failed files (1)" in the menu.
        make_scans(inbox, ["receipt-fake-engine-fail.png"])
        wait_for(lambda: status()["failed"] >= 1, 30, "the failure",
                 ignore=(Exception,), interval=POLL)
        wait_for(lambda: status()["state"] == "idle",
                 20, "the daemon to go idle", ignore=(Exception,), interval=POLL)
        shot, icon = wait_icon(x, "idle", "failed")
        assert close_to(_badge_colour(shot, icon), tray.FAILED, 60)
        save_doc(shot, icon, "failed")

        # The menu with its Status submenu open (keys: Up twice to Status, Right opens it).
        menu = x.open_menu(icon)
        before = x.visible()
        x.xdotool("key", "Up", "Up", "Right")
        sub = wait_for(lambda: next(
            (g for g in map(x.geometry, x.visible() - before) if g.w > 80 and g.h > 40), None),
            20, "the Status submenu", ignore=(Exception,), interval=POLL)
        time.sleep(0.3)  # let the menu finish drawing: only the picture needs it
        shot = x.screenshot("menu")
        save_doc(shot, icon, "menu", menu=menu.union(sub))
        x.xdotool("key", "Escape", "Escape")
        x.close_menu(menu)

        # Quit from the menu ends the daemon.
        menu = x.open_menu(icon)
        x.click((menu.x + 40, menu.y + menu.h - 14))
        wait_for(lambda: daemon.poll() is not None, 60, "the daemon to exit",
                 ignore=(Exception,), interval=POLL)
        assert daemon.returncode == 0, d.log.read_text()
        with pytest.raises(OcrwatchError):
            status()
    finally:
        if daemon.poll() is None:
            print(d.log.read_text()[-4000:], file=sys.stderr)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_the_daemon_and_its_tray(xsession: X, sig: signal.Signals) -> None:
    """pystray's GTK code resets SIGINT; the daemon's own handler must still run."""
    x = xsession
    d = start_daemon(x)
    x.tray_icon()
    os.kill(int(d.status()["pid"]), sig)
    wait_for(lambda: d.proc.poll() is not None, 30, "the daemon to exit",
             ignore=(Exception,), interval=POLL)
    assert d.proc.returncode == 0, d.log.read_text()[-4000:]
    assert not d.sock.exists()
    assert "stopping" in d.log.read_text()


def _badge_colour(shot: Image.Image, icon: Geometry) -> tuple[int, int, int]:
    """The colour just left of the "!" in the failed badge (top right of the icon)."""
    size = min(icon.w, icon.h)
    left = icon.x + (icon.w - size) // 2
    top = icon.y + (icon.h - size) // 2
    px = shot.getpixel((left + round(size * 43 / 64), top + round(size * 14 / 64)))
    assert isinstance(px, tuple)
    return px[0], px[1], px[2]


# --------------------------------------------------------------------------- stand-in

STANDIN = """
import faulthandler, json, logging, signal, sys, threading
faulthandler.register(signal.SIGUSR1)  # the test asks for every thread's stack on a hang
logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
for name in ("ocrwatch.tray", "pystray"):  # docking's steps, for a failure to show
    logging.getLogger(name).setLevel(logging.DEBUG)
sys.path.insert(0, {tests!r})
from daemon_standin import StandInDaemon
from ocrwatch import tray

daemon = StandInDaemon()
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
if len(sys.argv) > 1:  # a control socket, for tests that check the stand-in's state
    from ocrwatch.control.server import ControlServer
    ControlServer(sys.argv[1], daemon).start()

def feed():
    for line in sys.stdin:  # each line: status changes, as JSON
        daemon.set(**json.loads(line))
    stop.set()

threading.Thread(target=feed, daemon=True).start()
print("tray shown:", tray.run_tray(daemon, stop), flush=True)
"""


def test_every_state_shows_in_the_tray(xsession: X) -> None:
    x = xsession
    script = x.workdir / "standin.py"
    script.write_text(STANDIN.format(tests=str(ROOT / "tests")))
    env = x.env
    env["PYSTRAY_BACKEND"] = "gtk"
    out = (x.workdir / "standin.log").open("wb")
    proc = x.spawn(["dbus-run-session", "--", sys.executable, str(script)], env=env,
                   stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT)
    assert proc.stdin is not None
    asleep = {"state": "idle", "engine": {"name": "vllm", "state": "asleep",
                                          "gpu_memory_mb": 900}}
    steps: list[tuple[str, str, dict[str, Any]]] = [
        ("idle", "idle", {}),
        ("working", "working", {"state": "working", "queued": 6, "running": 1}),
        ("paused", "paused", {"state": "paused", "paused": True}),
        ("asleep", "asleep", {**asleep, "paused": False, "queued": 0, "running": 0}),
        ("failed", "asleep", {"failed": 2}),
    ]
    try:
        for name, look, change in steps:
            proc.stdin.write((json.dumps(change) + "\n").encode())
            proc.stdin.flush()
            shot, icon = wait_icon(x, look, f"standin-{name}")
            if name == "asleep":
                save_doc(shot, icon, "asleep")
            if name == "failed":
                wait_for(lambda: close_to(_badge_colour(
                    x.screenshot("standin-failed"), x.tray_icon()), tray.FAILED, 60),
                    20, "the failed badge", ignore=(Exception,), interval=POLL)
        assert x.xdotool("search", "--name", "^ocrwatch: watching the inbox \\(GPU asleep\\)")
        proc.stdin.close()  # the script sets stop: the tray must end on its own
        wait_for(lambda: proc.poll() is not None, 30, "the tray to end",
                 ignore=(Exception,), interval=POLL)
        assert proc.returncode == 0
        assert "tray shown: True" in (x.workdir / "standin.log").read_text()
    finally:
        out.close()


def click_until(x: X, done: Callable[[], Any], what: str, tries: int = 4) -> None:
    """Click the icon until ``done``; a click that lands while the X backend is swapping
    the icon's picture under load can be lost, and a person would simply click again."""
    for _ in range(tries):
        x.click(x.tray_icon().centre)
        try:
            wait_for(done, 5, what, ignore=(Exception,), interval=POLL)
            return
        except AssertionError:
            continue
    raise AssertionError(f"{tries} clicks did not {what.split(' by ')[0]}")


def start_x_fallback(x: X) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """The stand-in's tray with no D-Bus session bus, so only the plain X backend starts.

    Returns the process, its control socket and its log.
    """
    script = x.workdir / "standin.py"
    script.write_text(STANDIN.format(tests=str(ROOT / "tests")))
    sock = x.workdir / "c.sock"
    env = x.env
    env.pop("PYSTRAY_BACKEND", None)
    env["DBUS_SESSION_BUS_ADDRESS"] = f"unix:path={x.workdir / 'no-bus'}"
    log = x.workdir / "standin.log"
    with log.open("wb") as out:
        proc = x.spawn([sys.executable, str(script), str(sock)], env=env,
                       stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT)
    assert proc.stdin is not None
    return proc, sock, log


def _x_windows(x: X) -> str:
    """The icon's windows, shown or not, and where they sit in the window tree."""
    lines = []
    for win in x.xdotool("search", "--name", "^ocrwatch").split():
        info = subprocess.run(["xwininfo", "-id", win, "-tree"], env=x.env, timeout=10,
                              capture_output=True, text=True)
        state = subprocess.run(["xwininfo", "-id", win], env=x.env, timeout=10,
                               capture_output=True, text=True)
        lines += [f"window {win}:", info.stdout.strip(),
                  *(line.strip() for line in state.stdout.splitlines()
                    if "Map State" in line or "geometry" in line)]
    return "\n".join(lines) or "no window named ocrwatch..."


@contextlib.contextmanager
def telling_why(x: X, proc: subprocess.Popen[bytes], log: Path) -> Iterator[None]:
    """On a failed wait, the stand-in's log (docking's steps), its threads' stacks and its
    windows in the message: the icon has, rarely, never shown here."""
    try:
        yield
    except AssertionError as exc:
        if proc.poll() is None:
            proc.send_signal(signal.SIGUSR1)
            with contextlib.suppress(AssertionError):  # the main thread's stack comes last
                wait_for(lambda: "Current thread 0x" in log.read_text(errors="replace"), 5,
                         "the stand-in's stacks", interval=POLL)
        try:
            windows = _x_windows(x)
        except Exception as why:  # the message must still say what it can
            windows = f"(the windows could not be listed: {why!r})"
        raise AssertionError(f"{exc}\nthe stand-in's windows:\n{windows}\nits log:\n"
                             f"{log.read_text(errors='replace')[-8000:]}") from exc


def test_x_fallback_without_menu_click_toggles_pause(xsession: X) -> None:
    """No D-Bus session bus: the GTK backends cannot start, the plain X backend does."""
    x = xsession
    proc, sock, log = start_x_fallback(x)
    assert proc.stdin is not None
    try:
        wait_for(lambda: request("status", socket_path=sock),
                 20, "the stand-in's socket", ignore=(Exception,), interval=POLL)
        with telling_why(x, proc, log):
            click_until(x, lambda: request("status", socket_path=sock)["paused"],
                        "pause by a click")
        wait_icon(x, "paused", "xorg-paused")
        click_until(x, lambda: not request("status", socket_path=sock)["paused"],
                    "resume by a click")
        text = log.read_text()
        assert "plain X backend, which has no menu" in text
        assert "Click the icon to pause or resume" in text
    finally:
        proc.stdin.close()
        wait_for(lambda: proc.poll() is not None, 30, "the tray to end",
                 ignore=(Exception,), interval=POLL)


def _parent(x: X, window: str) -> str:
    """The window holding ``window`` (a tray host's socket, or the root window)."""
    tree = subprocess.run(["xwininfo", "-id", window, "-tree"], env=x.env, timeout=10,
                          capture_output=True, text=True, check=True).stdout
    return next(line.split(":", 1)[1].split()[0] for line in tree.splitlines()
                if "Parent window id" in line)


@pytest.mark.skipif(shutil.which("xwininfo") is None, reason="needs xwininfo (x11-utils)")
def test_x_fallback_icon_keeps_its_place_in_the_tray_as_its_picture_changes(
        xsession: X) -> None:
    """pystray asks the tray host to dock the icon on every change of its picture, and
    twice as it is shown. trayer (GTK's egg tray manager) moves the icon into a new socket
    for each request, and now and then put it back on the root window, unmapped: an icon
    gone for good, about once in 50 starts. Asked only when it is not held, the icon stays
    in the socket it was docked in."""
    x = xsession
    proc, _sock, log = start_x_fallback(x)
    assert proc.stdin is not None
    try:
        with telling_why(x, proc, log):
            x.tray_icon()
            (window,) = x.xdotool("search", "--onlyvisible", "--name", "^ocrwatch: ").split()
            first = _parent(x, window)
            for change, title in (({"state": "working", "queued": 3, "running": 1}, "reading"),
                                  ({"state": "paused", "paused": True}, "paused"),
                                  ({"state": "idle", "paused": False, "queued": 0,
                                    "running": 0}, "watching")):
                proc.stdin.write((json.dumps(change) + "\n").encode())
                proc.stdin.flush()
                wait_for(lambda t=title: x.xdotool("search", "--name", f"^ocrwatch: {t}"),
                         20, f"the {title} icon", ignore=(Exception,), interval=POLL)
                assert _parent(x, window) == first, f"moved to another socket when {title}"
            assert x.xdotool("search", "--onlyvisible", "--name", "^ocrwatch: ").split() == [
                window]
    finally:
        proc.stdin.close()
        wait_for(lambda: proc.poll() is not None, 30, "the tray to end",
                 ignore=(Exception,), interval=POLL)


def test_x_fallback_icon_appears_when_the_tray_host_starts_later(xsession: X) -> None:
    """A daemon started before the panel (a login race) shows its icon once it is up."""
    x = xsession
    x.stop_tray_host()
    proc, sock, log = start_x_fallback(x)
    assert proc.stdin is not None
    try:
        wait_for(lambda: request("status", socket_path=sock),
                 20, "the stand-in's socket", ignore=(Exception,), interval=POLL)
        assert not x.xdotool("search", "--onlyvisible", "--name", "^ocrwatch: ")
        assert x.start_tray_host() is None
        with telling_why(x, proc, log):
            icon = x.tray_icon()  # docked on a later try, not at start
        assert icon.w >= 16 and icon.h >= 16
        click_until(x, lambda: request("status", socket_path=sock)["paused"], "pause by a click")
    finally:
        proc.stdin.close()
        wait_for(lambda: proc.poll() is not None, 30, "the tray to end",
                 ignore=(Exception,), interval=POLL)


def _read_screen(image: Image.Image) -> str:
    """The words on a screenshot, read with the Tesseract that ocrwatch ships with."""
    import tesserocr

    from ocrwatch.engines.tesseract import available_languages

    tessdata = available_languages(None)["eng"].parent
    big = image.resize((image.width * 2, image.height * 2), Image.Resampling.LANCZOS)
    return " ".join(tesserocr.image_to_text(big, path=str(tessdata) + os.sep).split())


def test_status_submenu_while_a_pdf_is_read(xsession: X) -> None:
    """The Status submenu names the file and page being read, the rate and the
    languages, while a 16-page PDF goes through (screenshot: docs/tray-status.png)."""
    from helpers import save_pdf

    x = xsession
    d = start_daemon(x)
    try:
        wait_icon(x, "idle", "idle-before-pdf")
        d.inbox.mkdir(parents=True, exist_ok=True)
        # 16 pages, read four at a time at 1.5 s a page: 24 s to look at the menu.
        save_pdf(x.workdir / "minutes.pdf", [[f"Minutes, page {n}"] for n in range(1, 17)])
        (x.workdir / "minutes.pdf").rename(d.inbox / "minutes.pdf")

        def later_page() -> bool:
            reading = d.status().get("reading") or []
            return bool(reading) and reading[0]["done"] >= 2 and \
                d.status()["progress"].get("pages_per_second") is not None
        wait_for(later_page, 60, "a later page of minutes.pdf", ignore=(Exception,), interval=POLL)
        _shot, icon = wait_icon(x, "working", "working-pdf")

        def submenu_shows_progress() -> tuple[Image.Image, Geometry, str] | None:
            # The tray rebuilds a menu for new numbers every few seconds: look until the
            # one that opens shows a later page and the rate.
            menu = x.open_menu(icon)
            before = x.visible()
            x.xdotool("key", "Up", "Up", "Right")
            sub = wait_for(lambda: next(
                (g for g in map(x.geometry, x.visible() - before)
                 if g.w > 80 and g.h > 40), None), 20, "the Status submenu",
                 ignore=(Exception,), interval=POLL)
            time.sleep(0.3)  # let the menu finish drawing: only the picture needs it
            shot = x.screenshot("status")
            words = _read_screen(shot.crop((sub.x, sub.y, sub.x + sub.w, sub.y + sub.h)))
            x.xdotool("key", "Escape", "Escape")
            x.close_menu(menu)
            later = re.search(r"minutes\.pdf, page ([2-9]|1[0-6]) of 16", words)
            rate = re.search(r"pages/(s|min)", words)
            return (shot, menu.union(sub), words) if later and rate else None

        shot, area, words = wait_for(submenu_shows_progress,
                                     60, "the submenu to show the PDF's progress",
                                     ignore=(Exception,), interval=1.0)
        save_doc(shot, icon, "status", menu=area)
        assert "Languages: eng" in words and "Engine: fake (ready)" in words, words
        assert "State: working" in words, words
    finally:
        if d.proc.poll() is None:
            subprocess.run([*OCRWATCH, "stop"], env=d.env, capture_output=True, timeout=90)
        if d.proc.poll() is None:
            d.proc.terminate()
        d.proc.wait(timeout=60)


def _terminal_picture(text: str) -> Image.Image:
    """``ocrwatch status``'s output as a terminal shows it (monospace, dark on light)."""
    from PIL import ImageFont

    font_path = next((p for p in ("/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf",
                                  "/usr/share/fonts/TTF/DejaVuSansMono.ttf") if Path(p).exists()),
                     None)
    font: Any = (ImageFont.truetype(font_path, 15) if font_path
                 else ImageFont.load_default())
    rows = ["$ ocrwatch status", *text.splitlines()]
    width = max(len(r) for r in rows) * 9 + 24
    img = Image.new("RGB", (width, len(rows) * 20 + 20), "#fdfdf8")
    draw = ImageDraw.Draw(img)
    for n, row in enumerate(rows):
        draw.text((12, 10 + n * 20), row, fill="#1d1f21", font=font)
    return img


def test_progress_with_an_eta_during_a_50_file_drop(xsession: X) -> None:
    """The Status submenu and `ocrwatch status` say pages done and left, the rate and when
    the drop will be read, while 50 scans go through (docs/tray-progress.png and
    docs/status-progress.png)."""
    x = xsession
    d = start_daemon(x)
    try:
        wait_icon(x, "idle", "idle-before-drop")
        make_scans(d.inbox, [f"drop-{n:02d}.png" for n in range(50)])

        def with_eta() -> bool:
            p = d.status().get("progress") or {}
            return bool(p.get("eta_seconds")) and p.get("pages_done", 0) >= 4
        wait_for(with_eta, 90, "an ETA for the drop", ignore=(Exception,), interval=POLL)
        _shot, icon = wait_icon(x, "working", "working-drop")

        def submenu_shows_eta() -> tuple[Image.Image, Geometry, str] | None:
            menu = x.open_menu(icon)
            before = x.visible()
            x.xdotool("key", "Up", "Up", "Right")
            sub = wait_for(lambda: next(
                (g for g in map(x.geometry, x.visible() - before)
                 if g.w > 80 and g.h > 40), None), 20, "the Status submenu",
                 ignore=(Exception,), interval=POLL)
            time.sleep(0.3)  # let the menu finish drawing: only the picture needs it
            shot = x.screenshot("progress")
            words = _read_screen(shot.crop((sub.x, sub.y, sub.x + sub.w, sub.y + sub.h)))
            x.xdotool("key", "Escape", "Escape")
            x.close_menu(menu)
            shown = re.search(r"Pages: \d+ done, \d+ left", words) and "Done in: about" in words
            return (shot, menu.union(sub), words) if shown else None

        shot, area, words = wait_for(submenu_shows_eta, 60, "the submenu to show the ETA",
                                     ignore=(Exception,), interval=1.0)
        save_doc(shot, icon, "progress", menu=area)
        assert re.search(r"Rate: [\d.]+ pages/(s|min) while reading", words), words
        assert re.search(r"\d+ in hand \(\d+ being read\)", words), words
        cli = subprocess.run([*OCRWATCH, "status"], env=d.env, capture_output=True, text=True,
                             timeout=60)
        assert cli.returncode == 0, cli.stderr
        # Files not counted within status's time budget are estimated, and it says so.
        assert re.search(r"pages: +\d+ done, \d+ left( \(of which \d+ estimated\))?, "
                         r"in \d+ files", cli.stdout), cli.stdout
        assert re.search(r"eta: +about .+ \(done at \d\d:\d\d\)", cli.stdout), cli.stdout
        assert len(re.findall(r"pages/(s|min)", cli.stdout)) == 1, cli.stdout  # one rate
        out = os.environ.get("OCRWATCH_SCREENSHOTS")
        if out:
            folder = Path(out) if os.path.isabs(out) else ROOT / out
            # Paths of the throwaway home are shortened to ~ in the picture.
            shown_text = cli.stdout.replace(str(x.workdir / "home"), "~")
            _terminal_picture(shown_text).save(folder / "status-progress.png", optimize=True)
    finally:
        if d.proc.poll() is None:
            subprocess.run([*OCRWATCH, "stop"], env=d.env, capture_output=True, timeout=90)
        if d.proc.poll() is None:
            d.proc.terminate()
        d.proc.wait(timeout=60)
