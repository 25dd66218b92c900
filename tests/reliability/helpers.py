"""Shared pieces of the reliability tests: fixtures files, a real daemon process, checks."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from helpers import child_env, wait_for  # one HOME builder, one polling helper
from PIL import Image, ImageDraw, ImageFont

ROOT = Path(__file__).resolve().parents[2]


# -- files ------------------------------------------------------------------------------
def page_image(text: str, size: tuple[int, int] = (600, 400)) -> Image.Image:
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    draw.text((20, 20), text, fill="black", font=ImageFont.load_default(size=28))
    return image


def image_bytes(text: str, fmt: str = "PNG", size: tuple[int, int] = (600, 400)) -> bytes:
    buf = io.BytesIO()
    page_image(text, size).save(buf, format=fmt)
    return buf.getvalue()


def pdf_bytes(texts: list[str], size: tuple[int, int] = (300, 400)) -> bytes:
    """A PDF with one drawn page per text (Pillow's PDF writer)."""
    pages = [page_image(t, size) for t in texts]
    buf = io.BytesIO()
    pages[0].save(buf, format="PDF", save_all=True, append_images=pages[1:], resolution=72)
    return buf.getvalue()


def huge_png(width: int, height: int) -> bytes:
    """A valid 1-bit PNG of any size, built row by row (never held decoded in memory)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    row = b"\x00" + b"\xff" * ((width + 7) // 8)
    comp = zlib.compressobj(9)
    parts = [comp.compress(row) for _ in range(height)]
    parts.append(comp.flush())
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", b"".join(parts))
            + chunk(b"IEND", b""))


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def drop(path: Path, data: bytes) -> Path:
    """Put a finished file in place at once (written aside, then renamed)."""
    tmp = path.with_name(f".writing-{os.getpid()}-{time.monotonic_ns()}")
    write(tmp, data)
    os.replace(tmp, path)
    return path


# -- the database, read from outside ----------------------------------------------------
def connect_ro(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    conn.row_factory = sqlite3.Row
    return conn


def jobs(db: Path) -> dict[str, sqlite3.Row]:
    """Every job by its path, read-only (safe while the daemon writes)."""
    if not db.exists():
        return {}
    conn = connect_ro(db)
    try:
        rows = conn.execute("SELECT * FROM jobs").fetchall()
    except sqlite3.OperationalError:
        return {}  # not migrated yet
    finally:
        conn.close()
    return {os.fsdecode(r["path"]): r for r in rows}


def job(db: Path, path: Path) -> sqlite3.Row | None:
    return jobs(db).get(os.fsdecode(os.fsencode(path)))


def states(db: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in jobs(db).values():
        out[r["state"]] = out.get(r["state"], 0) + 1
    return out


def ended(db: Path, path: Path, state: str | None = None) -> sqlite3.Row | None:
    """The job of ``path`` once it is done or failed (or in ``state``), else None."""
    row = job(db, path)
    if row is None:
        return None
    if state is not None:
        return row if row["state"] == state else None
    return row if row["state"] in ("done", "failed") else None


# -- a real daemon process ----------------------------------------------------------------
@dataclass
class Home:
    """An isolated user: HOME, XDG folders, an inbox and a database path."""

    root: Path
    run: Path  # short: the control socket's path must fit in about 100 bytes
    inbox: Path
    database: Path
    extra_env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def make(cls, root: Path) -> Home:
        run = Path(tempfile.mkdtemp(prefix="owr-"))
        os.chmod(run, 0o700)
        home = cls(root, run, root / "inbox", root / "data" / "index.sqlite3")
        home.inbox.mkdir(parents=True, exist_ok=True)
        home.database.parent.mkdir(exist_ok=True)
        return home

    @property
    def state(self) -> Path:
        """The XDG state folder (logs, the private runtime fallback)."""
        return self.root / "home" / ".local" / "state"

    def env(self, **extra: str) -> dict[str, str]:
        return child_env(self.root / "home", {"OCRWATCH_SETTLE_SECONDS": "0.3",
                                              **self.extra_env, **extra}, run=self.run)

    def cleanup(self) -> None:
        shutil.rmtree(self.run, ignore_errors=True)


class DaemonProcess:
    """``ocrwatch run`` in a child process, killed for sure at teardown."""

    def __init__(self, home: Home, *args: str, engine: str = "fake", **env: str) -> None:
        self.home = home
        self.args = ["run", "--no-tray", "--engine", engine, "--inbox", str(home.inbox),
                     "--database", str(home.database), *args]
        self.env = home.env(**env)
        self.proc: subprocess.Popen[bytes] | None = None
        self.logs: list[Path] = []
        self.prefix: list[str] = []  # e.g. setpriv, to run without some capabilities

    def start(self, **env: str) -> DaemonProcess:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        log = self.home.root / f"daemon-{len(self.logs)}.log"
        self.logs.append(log)
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [*self.prefix, sys.executable, "-m", "ocrwatch", *self.args],
                cwd=self.home.root, env={**self.env, **env}, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout: float = 60) -> None:
        """Until the daemon says it is watching (it has scanned the inbox by then soon)."""
        def ready() -> bool:
            if not self.running:
                raise AssertionError(f"the daemon exited early:\n{self.output()[-3000:]}")
            return "watching" in self.logs[-1].read_text(errors="replace")
        wait_for(ready, timeout, "the daemon to start")

    def kill(self) -> None:
        """SIGKILL the daemon alone, as ``kill -9 PID`` would; then nothing it started may
        be left running (its process group, of its own, must be empty)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

        def group_gone() -> bool:
            try:
                os.killpg(self.proc.pid, 0)  # type: ignore[union-attr]
            except ProcessLookupError:
                return True
            return False
        wait_for(group_gone, 30, "the daemon's child processes to end with it")

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, wait for a clean exit; SIGKILL if it hangs (and fail then)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError("the daemon did not stop on SIGTERM") from None
        return self.proc.returncode

    def output(self) -> str:
        return "".join(p.read_text(errors="replace") for p in self.logs)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def ocrwatch_cli(home: Home, *args: str, timeout: float = 60,
                 **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ocrwatch", *args], env=home.env(**env),
                          cwd=home.root, capture_output=True, text=True, timeout=timeout)


# -- checks on the outcome ----------------------------------------------------------------
FAKE_LINE = re.compile(r"fake text of (?P<name>.+) page (?P<page>\d+) \((?P<w>\d+)x(?P<h>\d+)\)")


def sidecars(path: Path) -> tuple[Path, Path]:
    stem = path.with_suffix("")
    return stem.with_name(stem.name + ".md"), stem.with_name(stem.name + ".txt")


def check_fake_sidecars(path: Path, pages: int, names: set[str] | None = None) -> None:
    """``path``'s sidecars are whole: one fake line per page, in order, nothing else.

    ``names``: the files whose reading may have served this one (identical copies).
    """
    md, txt = sidecars(path)
    text = txt.read_text(encoding="utf-8")
    lines = [line for line in text.split("\n") if line.strip("\f")]
    assert len(lines) == pages, f"{txt.name}: {len(lines)} lines for {pages} pages: {text!r}"
    for n, line in enumerate(lines, 1):
        m = FAKE_LINE.fullmatch(line.strip("\f"))
        # Undecodable bytes of the name come back as "?": the text is always UTF-8.
        name = path.name.encode("utf-8", "replace").decode("utf-8")
        assert m and m["name"] in (names or {name}) and int(m["page"]) == n, \
            f"{txt.name}: {line!r}"
    assert text.endswith("\n")
    markdown = md.read_text(encoding="utf-8")
    assert markdown.count("# fake text of") == pages, f"{md.name}: {markdown!r}"
    assert markdown.endswith("\n")


def leftovers(folders: Iterable[Path]) -> list[Path]:
    """Temporary sidecar files left in the folders (there must be none)."""
    found: list[Path] = []
    for folder in folders:
        found += [p for p in folder.rglob(".ocrwatch-*") if p.is_file()]
    return found
